//! Codex CLI end to end through `rollpoint run` (root, btrfs sandboxes, the
//! scripted model; tier `exact`): a crash after a checkpoint, taken mid-tool
//! or while it waits on the model, continues the saved session with no user
//! message added and no answered model call sent again; a session with no
//! model response starts over and says why; two held checkpoints, waiting on
//! the model and mid-tool, freeze it in place. Forked 8 ways from a
//! mid-tool checkpoint, every branch continues the saved session. The scenarios are in
//! `common/harness.rs`. With token capture on, two pauses in place, a crash and a resume
//! export a trajectory with no token break, as an untouched run of the task does.

mod common;
#[path = "common/harness.rs"]
mod harness;

use harness::CODEX;

#[test]
fn root_codex_crash_after_a_mid_tool_checkpoint_continues_the_saved_session() {
    harness::crash_after_mid_tool_checkpoint(CODEX);
}

#[test]
fn root_codex_crash_while_waiting_on_the_model_continues_the_saved_session() {
    harness::crash_after_waiting_checkpoint(CODEX);
}

#[test]
fn root_codex_session_without_a_response_starts_over_and_says_why() {
    harness::start_over_without_a_response(CODEX);
}

#[test]
fn root_codex_held_waiting_on_the_model_and_mid_tool_nothing_moves() {
    harness::paused_twice_in_place(CODEX);
}

#[test]
fn root_codex_forked_eight_ways_mid_tool_every_branch_continues_the_saved_session() {
    harness::fork_mid_rollout(CODEX);
}

#[test]
fn root_codex_trajectory_through_pauses_and_a_crash_is_that_of_an_untouched_run() {
    harness::trajectory_through_pauses_and_a_crash(CODEX);
}
