//! Codex CLI end to end through `rollpoint run` (root, the pinned harness
//! from `scripts/install-harnesses`, the scripted model, the btrfs store):
//! a crash after a checkpoint continues the saved session with no user
//! message added (tier `exact`) and repeats nothing; a session with no model response starts over
//! and says why; two held checkpoints freeze it in place.

mod common;
#[path = "common/harness_cc.rs"]
mod harness;

use harness::Harness;
use rollpoint_driver::RecoveryTier;

const CODEX: Harness = Harness {
    kind: "codex",
    tier: RecoveryTier::Exact,
    continue_turns: &[],
};

#[test]
fn root_codex_crash_after_a_checkpoint_continues_the_saved_session() {
    harness::crash_after_checkpoint(CODEX);
}

#[test]
fn root_codex_a_session_without_a_model_response_starts_over() {
    harness::crash_before_first_response(CODEX);
}

#[test]
fn root_codex_held_waiting_on_the_model_and_mid_tool_nothing_moves() {
    harness::paused_twice(CODEX);
}
