//! Trajectories: what a trainer trains on, built from a rollout's ledger records. Per
//! rollout, the calls its final answer came from in lineage order, each with the prompt and
//! completion ids and logprobs the gateway captured, and a merged view for multi-turn
//! training: token sequences with a loss mask (1 on generated tokens, 0 on what the harness
//! added), split at token breaks and never silently joined. A rollout whose chain does not
//! resolve is marked not trainable with the reason.
//!
//! - [`format`]: the versioned trajectory document.
//! - [`build`]: the chain, the merge and the checks (pure).
//! - [`jsonl`]: one document per line, as `rollpoint export` writes it.
//! - [`parquet`]: one row per segment (`rollpoint export --format parquet`).
#![forbid(unsafe_code)]

pub mod build;
pub mod format;
pub mod jsonl;
pub mod parquet;

pub use build::{Grouped, Outcome, build};
pub use format::{
    BreakPolicy, Breaks, Metrics, NotTrainable, Reason, Segment, TRAJECTORY_VERSION, TokenBreak,
    Trajectory, TrajectoryCall, VersionPolicy,
};
