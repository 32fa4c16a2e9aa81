//! The session record: what a checkpoint stores to bring a session back in
//! a fork after a crash. Versioned; a reader rejects any other version by
//! name.

use rollpoint_sandbox::SandboxSpec;
use serde::{Deserialize, Serialize};

use crate::errors::OwnerError;
use crate::task::OwnerTask;

/// Version of [`SessionRecord`].
pub const RECORD_VERSION: u32 = 1;

/// A snapshotted session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionRecord {
    pub v: u32,
    pub session: String,
    pub task: OwnerTask,
    /// The snapshot a restore forks from.
    pub snapshot: String,
    /// The sandbox the snapshot was taken of.
    pub sandbox: String,
    pub spec: SandboxSpec,
    pub workdir: String,
    pub checkpoint: String,
}

impl SessionRecord {
    /// Reads a record, checking its version before any other field; errors
    /// name the field path.
    pub fn decode(bytes: &[u8]) -> Result<Self, OwnerError> {
        rollpoint_proto::decode("session record", RECORD_VERSION, bytes).map_err(|e| {
            use rollpoint_proto::FormatError as F;
            match e {
                F::Field { path, source, .. } => OwnerError::bad(
                    crate::decode::field_path("", &path, &source),
                    source.to_string(),
                ),
                F::MissingVersion { .. } | F::UnknownVersion { .. } => {
                    OwnerError::bad("v", e.to_string())
                }
                F::Json { .. } => OwnerError::bad(".", e.to_string()),
            }
        })
    }
}

/// The snapshot id of `session` at `checkpoint`: one per pair, so a repeated
/// snapshot call for the same checkpoint names the same snapshot.
pub fn snapshot_id(checkpoint: &str, session: &str) -> String {
    format!("{checkpoint}--{session}")
}
