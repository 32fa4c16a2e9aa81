//! Checkpoint storage under `RUN_DIR/checkpoints/`:
//!
//! ```text
//! <id>/<kind>/<instance>/records-<sha256>.jsonl   a participant's records
//! <id>/<kind>/<instance>/manifest.json            published last, never replaced
//! <id>/checkpoint.json                            the controller's record of <id>
//! LATEST                                          the publish point
//! ```
//!
//! A checkpoint exists once `LATEST` names it; everything before that step
//! is invisible to a reader and removed by [`prune`].

mod fsio;
mod published;
mod records;
mod retention;
mod versioned;

use std::path::{Path, PathBuf};

pub use published::{
    CHECKPOINT_FILE, CHECKPOINT_VERSION, CheckpointDoc, LATEST_FILE, Member, latest, publish,
    read_checkpoint, verify,
};
pub use records::{
    MANIFEST_FILE, MANIFEST_VERSION, Manifest, participant_dir, read, read_manifest, write,
};
pub use retention::{DEFAULT_KEEP, prune};

use crate::errors::StoreError;
use crate::id::name_problem;

/// `run_dir/checkpoints`.
pub fn checkpoints_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("checkpoints")
}

/// `run_dir/checkpoints/<id>`.
pub fn checkpoint_dir(run_dir: &Path, id: &str) -> PathBuf {
    checkpoints_dir(run_dir).join(id)
}

fn check_component(what: &'static str, value: &str) -> Result<(), StoreError> {
    match name_problem(value) {
        Some(message) => Err(StoreError::Name {
            what,
            value: value.to_owned(),
            message,
        }),
        None => Ok(()),
    }
}
