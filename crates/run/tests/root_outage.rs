//! The model as trainers serve it, through `rollpoint run` (root, btrfs sandboxes): two
//! replicas that answer 429 and 503, cut a stream, and are killed for longer than the retry
//! budget while a tool runs. The native worker and OpenCode each see none of it: the rollout
//! is paused in place while the model is away, continues in the same processes when a replica
//! is back, verifies, and no answered call went upstream twice. The scenario is in
//! `common/harness.rs`.

mod common;
#[path = "common/harness.rs"]
mod harness;

#[test]
fn root_native_waits_out_a_model_outage_paused_in_place() {
    harness::outage_waited_out_in_place(harness::NATIVE);
}

#[test]
fn root_opencode_waits_out_a_model_outage_paused_in_place() {
    harness::outage_waited_out_in_place(harness::OPENCODE);
}
