//! OpenCode end to end through `rollpoint run` (root, btrfs sandboxes, the
//! scripted model; tier `exact`): a crash after a checkpoint, taken mid-tool
//! or while it waits on the model, continues the saved session with no
//! message added and no answered model call sent again; a session with no
//! model response starts over and says why; two held checkpoints, waiting on
//! the model and mid-tool, freeze its files, its database and its CPU time,
//! and the same processes finish. Forked 8 ways from a
//! mid-tool checkpoint, every branch continues the saved session. The scenarios are in `common/harness.rs`.

mod common;
#[path = "common/harness.rs"]
mod harness;

use harness::OPENCODE;

#[test]
fn root_opencode_crash_after_a_mid_tool_checkpoint_continues_the_saved_session() {
    harness::crash_after_mid_tool_checkpoint(OPENCODE);
}

#[test]
fn root_opencode_crash_while_waiting_on_the_model_continues_the_saved_session() {
    harness::crash_after_waiting_checkpoint(OPENCODE);
}

#[test]
fn root_opencode_session_without_a_response_starts_over_and_says_why() {
    harness::start_over_without_a_response(OPENCODE);
}

#[test]
fn root_opencode_held_waiting_on_the_model_and_mid_tool_nothing_moves() {
    harness::paused_twice_in_place(OPENCODE);
}

#[test]
fn root_opencode_forked_eight_ways_mid_tool_every_branch_continues_the_saved_session() {
    harness::fork_mid_rollout(OPENCODE);
}

#[test]
fn root_opencode_trajectory_through_pauses_and_a_crash_is_that_of_an_untouched_run() {
    harness::trajectory_through_pauses_and_a_crash(OPENCODE);
}
