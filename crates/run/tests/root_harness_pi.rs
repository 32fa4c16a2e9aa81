//! Pi end to end through `rollpoint run` (root, btrfs sandboxes, the
//! scripted model): a crash after a checkpoint, taken mid-tool or while it
//! waits on the model, continues the saved session with no message added
//! and no answered model call sent again; a session with no model response
//! starts over and says why; two held checkpoints, waiting on the model and
//! mid-tool, freeze its files, its session file and its CPU time, and the same
//! process finishes.

mod common;
#[path = "common/harness_opencode_pi.rs"]
mod harness;

#[test]
fn root_pi_crash_after_a_checkpoint_continues_the_saved_session() {
    harness::crash_after_checkpoint("pi", 'p');
}

#[test]
fn root_pi_crash_while_waiting_on_the_model_continues_the_saved_session() {
    harness::crash_while_waiting_on_the_model("pi", 'p');
}

#[test]
fn root_pi_session_without_a_response_starts_over_and_says_why() {
    harness::start_over_without_a_response("pi", 'p');
}

#[test]
fn root_pi_paused_waiting_on_the_model_and_mid_tool_changes_nothing() {
    harness::paused_twice_in_place("pi", 'p');
}
