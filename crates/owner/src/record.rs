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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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

/// Separates the checkpoint from the session in a snapshot id; checkpoint
/// ids may not contain it, so the first one splits the id.
pub const SNAPSHOT_SEPARATOR: &str = "--";

/// The snapshot id of `session` at `checkpoint`: one per pair, so a repeated
/// snapshot call for the same checkpoint names the same snapshot, and a
/// sweep can tell which checkpoint a snapshot belongs to.
pub fn snapshot_id(checkpoint: &str, session: &str) -> String {
    format!("{checkpoint}{SNAPSHOT_SEPARATOR}{session}")
}

/// The session branch `branch` (`<rollout>~<n>`) of a forked rollout continues in, made
/// from `session`'s snapshot: `<session>.b<n>`. The resources and the drivers name it alike,
/// so a branch's bookmark finds its sandbox.
pub fn branch_session(
    session: &str,
    branch: &rollpoint_proto::key::RolloutId,
) -> Result<String, crate::errors::OwnerError> {
    let (_, n) = branch.branch_of().ok_or_else(|| {
        crate::errors::OwnerError::bad("branch", format!("{branch} is not named <rollout>~<n>"))
    })?;
    Ok(format!("{session}.b{n}"))
}

/// A checkpoint id: a name (`rollpoint_proto::limits::name_problem`), as
/// the checkpoint store takes it, so a snapshot id made from it fits too.
/// It may not hold `--`, which separates it from the session in a snapshot id.
pub fn check_checkpoint(id: &str) -> Result<(), OwnerError> {
    if let Some(problem) = rollpoint_proto::limits::name_problem(id) {
        return Err(OwnerError::bad("checkpoint", format!("{id:?} {problem}")));
    }
    if id.contains(SNAPSHOT_SEPARATOR) {
        return Err(OwnerError::bad(
            "checkpoint",
            format!("{id:?} contains {:?}", SNAPSHOT_SEPARATOR),
        ));
    }
    Ok(())
}

/// The checkpoint and session a snapshot id names, for sweeps.
pub fn parse_snapshot_id(id: &str) -> Option<(&str, &str)> {
    id.split_once(SNAPSHOT_SEPARATOR)
        .filter(|(c, s)| !c.is_empty() && !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_ids_split_back_into_checkpoint_and_session() {
        let id = snapshot_id("ck-7", "task--x-18a-0");
        assert_eq!(parse_snapshot_id(&id), Some(("ck-7", "task--x-18a-0")));
        assert_eq!(parse_snapshot_id("no-separator"), None);
        assert_eq!(parse_snapshot_id("--s"), None);
    }

    #[test]
    fn unknown_versions_are_named() {
        let err = SessionRecord::decode(br#"{"v":9}"#).expect_err("v9");
        assert_eq!(
            err.to_string(),
            "bad request: field `v`: session record: unknown version 9 (this build reads version 1)"
        );
        let err = SessionRecord::decode(br#"{"session":"s"}"#).expect_err("no v");
        assert!(err.to_string().contains("field `v`"), "{err}");
    }
}
