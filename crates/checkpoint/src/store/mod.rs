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
//! is invisible to a reader and removed by [`prune`]. A published checkpoint
//! found damaged keeps its files and gains `<id>/DAMAGED` ([`mark_damaged`]):
//! a resume falls back past it ([`published`] lists the candidates) and
//! retention leaves it alone.

pub mod claim;
mod fsio;
mod numbered;
mod published;
mod records;
pub mod remote;
mod retention;
mod versioned;

use std::path::{Path, PathBuf};

pub use published::{
    CHECKPOINT_FILE, CHECKPOINT_VERSION, CheckpointDoc, DAMAGED_FILE, LATEST_FILE, Member,
    Published, Unforkable, damaged, latest, mark_damaged, point_latest, publish, published,
    read_checkpoint, verify, write_doc,
};
pub use records::{
    MANIFEST_FILE, MANIFEST_VERSION, Manifest, participant_dir, read, read_manifest, write,
};
pub use retention::{DEFAULT_KEEP, local_ids, prune};

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

impl StoreError {
    /// Whether this says what was read is damaged or missing, rather than
    /// that it could not be read just now (an I/O error other than a missing
    /// file) or that an export was refused.
    pub fn is_damage(&self) -> bool {
        match self {
            Self::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Self::Json { .. }
            | Self::Version { .. }
            | Self::Mismatch { .. }
            | Self::Digest { .. }
            | Self::Count { .. }
            | Self::Record { .. }
            | Self::Invalid { .. }
            | Self::Name { .. } => true,
            Self::Export { .. } | Self::Remote(_) | Self::Fenced { .. } | Self::Claimed { .. } => {
                false
            }
        }
    }
}
