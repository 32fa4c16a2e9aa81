//! `RUN_DIR/run.json`: what a resume needs to continue a run. The tasks file
//! (path and digest), the configuration, the gateway's port (harnesses in
//! sandboxes hold it) and the attempt each unfinished rollout was last
//! dispatched as. Written atomically and versioned.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::RunConfig;
use crate::errors::RunError;

/// Version of [`RunState`].
pub const RUN_STATE_VERSION: u32 = 1;

/// The file name under the run directory.
pub const RUN_STATE_FILE: &str = "run.json";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunState {
    pub v: u32,
    pub tasks_path: PathBuf,
    pub tasks_sha256: String,
    pub config: RunConfig,
    /// The gateway's port on 127.0.0.1 (0: no gateway).
    pub gateway_port: u16,
    /// The attempt each rollout was last dispatched as.
    pub attempts: BTreeMap<String, u32>,
    /// Rollouts made by forking a checkpointed rollout, by id (`<rollout>~<n>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub forks: BTreeMap<String, ForkRecord>,
    /// For `[branch]`: checkpoints that saved each rollout of the tasks file not yet forked
    /// by the rule, and those it forked.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub saved_by: BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub branched: std::collections::BTreeSet<String>,
    /// Rollouts whose task asked for a trusted sandbox (`sandbox.isolation =
    /// "trusted"`): their code runs as the host's root, with the host's files
    /// in view. Kept so `status` and the report say so.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub trusted: std::collections::BTreeSet<String>,
    /// Attempts the infrastructure ended that `retry_infra` started again,
    /// by rollout, oldest first.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub infra_retries: BTreeMap<String, Vec<rollpoint_driver::InfraClass>>,
}

/// The rollouts of `tasks` whose sandbox is trusted, logged loudly: a
/// trusted sandbox holds nothing against the code it runs.
pub fn trusted_rollouts(
    tasks: &[rollpoint_driver::RolloutTask],
) -> std::collections::BTreeSet<String> {
    let trusted: std::collections::BTreeSet<String> = tasks
        .iter()
        .filter(|t| !t.task.sandbox.isolation.is_strict())
        .map(|t| t.rollout().to_owned())
        .collect();
    if !trusted.is_empty() {
        tracing::warn!(
            rollouts = trusted.len(),
            first = trusted
                .iter()
                .next()
                .map(String::as_str)
                .unwrap_or_default(),
            "TRUSTED SANDBOXES: these rollouts run their code as the host's root with every \
             capability, no seccomp filter and the host's files in view \
             (sandbox.isolation = \"trusted\"); run only code you wrote this way"
        );
    }
    trusted
}

/// A branch of a forked rollout: its task (renamed) and where it was forked from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRecord {
    pub task: rollpoint_driver::RolloutTask,
    /// The attempt it was made from.
    pub from: rollpoint_proto::key::AttemptKey,
    /// The checkpoint that saved it.
    pub checkpoint: String,
    /// The last model call the source had made there (the branch point).
    #[serde(default)]
    pub call: Option<String>,
}

impl RunState {
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join(RUN_STATE_FILE)
    }

    /// Reads `run.json`, rejecting an unknown version by name.
    pub fn load(run_dir: &Path) -> Result<Self, RunError> {
        let path = Self::path(run_dir);
        let bytes = std::fs::read(&path).map_err(|e| RunError::io(&path, e))?;
        let state: Self = rollpoint_proto::decode("run state", RUN_STATE_VERSION, &bytes)
            .map_err(|e| RunError::state(path.clone(), e))?;
        // The config it holds is checked as a config file would be, so a
        // value out of range is refused by name rather than acted on.
        state.config.validate(&path)?;
        Ok(state)
    }

    /// Writes `run.json` atomically (temp file, fsync, rename, fsync of the
    /// directory), mode 0600.
    pub fn save(&self, run_dir: &Path) -> Result<(), RunError> {
        let path = Self::path(run_dir);
        let bytes =
            serde_json::to_vec_pretty(self).map_err(|e| RunError::state(path.clone(), e))?;
        write_atomic(&path, &bytes)
    }
}

/// Writes `bytes` to `path` atomically, mode 0600.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    let io = |e| RunError::io(path, e);
    let mut file = atomic_write_file::AtomicWriteFile::open(path).map_err(io)?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.commit().map_err(io)
}

/// Makes `dir` and its parents, mode 0700: a run directory holds its tokens and claims.
pub(crate) fn create_dir(dir: &Path) -> Result<(), RunError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| RunError::io(dir, e))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_an_unknown_version() {
        let dir = tempfile::tempdir().unwrap();
        let state = RunState {
            v: RUN_STATE_VERSION,
            tasks_path: "/t.jsonl".into(),
            tasks_sha256: "00".into(),
            config: RunConfig::default(),
            gateway_port: 4000,
            attempts: BTreeMap::from([("a".to_owned(), 1)]),
            forks: BTreeMap::new(),
            saved_by: BTreeMap::new(),
            branched: std::collections::BTreeSet::new(),
            trusted: std::collections::BTreeSet::new(),
            infra_retries: BTreeMap::new(),
        };
        state.save(dir.path()).unwrap();
        assert_eq!(RunState::load(dir.path()).unwrap(), state);
        let mode = std::fs::metadata(RunState::path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(RunState::path(dir.path())).unwrap()).unwrap();
        v["v"] = 7.into();
        std::fs::write(RunState::path(dir.path()), v.to_string()).unwrap();
        let e = RunState::load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("run.json") && e.contains("unknown version 7"),
            "{e}"
        );
        // A config out of range in run.json is refused by name, not acted on.
        v["v"] = RUN_STATE_VERSION.into();
        v["config"]["concurrency"] = u64::MAX.into();
        std::fs::write(RunState::path(dir.path()), v.to_string()).unwrap();
        let e = RunState::load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("run.json") && e.contains("field `concurrency`"),
            "{e}"
        );
    }
}
