//! Claude Code end to end through `rollpoint run` (root, the pinned harness
//! from `scripts/install-harnesses`, the scripted model, the btrfs store):
//! a crash after a checkpoint resumes the saved session with the one
//! documented continue turn (with Claude Code's own repair of the
//! interrupted turn) and repeats nothing; a session with no model
//! response starts over and says why; two held checkpoints freeze it in
//! place.

mod common;
#[path = "common/harness_cc.rs"]
mod harness;

use harness::Harness;
use rollpoint_driver::RecoveryTier;
use rollpoint_driver::adapter::claude_code::RESUME_USER_TURNS;

const CLAUDE_CODE: Harness = Harness {
    kind: "claude-code",
    tier: RecoveryTier::ContinueTurn,
    continue_turns: &RESUME_USER_TURNS,
};

#[test]
fn root_claude_code_crash_after_a_checkpoint_continues_the_saved_session() {
    harness::crash_after_checkpoint(CLAUDE_CODE);
}

#[test]
fn root_claude_code_a_session_without_a_model_response_starts_over() {
    harness::crash_before_first_response(CLAUDE_CODE);
}

#[test]
fn root_claude_code_held_waiting_on_the_model_and_mid_tool_nothing_moves() {
    harness::paused_twice(CLAUDE_CODE);
}
