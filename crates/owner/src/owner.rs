//! The owner contract: one trait, served in process by [`crate::LocalOwner`]
//! and over HTTP by [`crate::HttpOwner`], so a driver works a sandbox the
//! same way whether the owner runs beside it or on another machine.

use std::path::PathBuf;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};
use rollpoint_proto::receipt::{Op, Outcome, Receipt};
use serde::{Deserialize, Serialize};

use crate::errors::OwnerError;
use crate::record::SessionRecord;
use crate::task::OwnerTask;
use crate::verdict::Verdict;

/// A seeded session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionInfo {
    pub session: String,
    pub sandbox: String,
    pub workdir: String,
    /// Whether checkpoints can snapshot this session. When false the
    /// rollout is a restart.
    pub capturable: bool,
}

/// Which sandbox is current for a session, and where it lives on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Access {
    pub session: String,
    pub sandbox: String,
    pub workdir: String,
    /// The sandbox's root as the host reaches it while the sandbox lives
    /// (through its anchor, `/proc/<pid>/root`).
    #[schema(value_type = String)]
    pub root: PathBuf,
    /// Host path of the sandbox's control directory (the anchor socket and
    /// launch session directories).
    #[schema(value_type = String)]
    pub control: PathBuf,
}

/// A launch started through the owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Launched {
    pub launch_id: String,
    /// Host path of the launch's session directory.
    #[schema(value_type = String)]
    pub session_dir: PathBuf,
}

/// A launch of a session, as a batch of pauses names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionLaunch {
    pub session: String,
    pub launch_id: String,
}

/// Result of an owner call.
pub type OwnerResult<T> = Result<T, OwnerError>;

/// What an owner holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OwnerCounts {
    /// Sessions open (seeded and not closed).
    pub sessions: u64,
    /// Sessions being seeded.
    pub seeding: u64,
    /// Snapshots taken since the owner started.
    pub snapshots: u64,
    /// Their bytes, where the store knows them (the copy store's archives).
    pub snapshot_bytes: u64,
    /// Time their sandboxes were frozen for them, summed.
    pub snapshot_seconds: f64,
}

impl OwnerCounts {
    /// The snapshot totals, for metrics.
    #[must_use]
    pub fn snapshot_totals(&self) -> rollpoint_api::metrics::SnapshotTotals {
        rollpoint_api::metrics::SnapshotTotals {
            taken: self.snapshots,
            bytes: self.snapshot_bytes,
            seconds: self.snapshot_seconds,
        }
    }
}

/// Lends sandboxes to rollouts, grades them, and is the only one that
/// snapshots and forks them. Usable as `Arc<dyn Owner>`.
pub trait Owner: Send + Sync + std::fmt::Debug {
    /// Seeds a session: a sandbox from the task's spec, its files, its setup.
    fn create_session(&self, task: OwnerTask) -> BoxFuture<'_, OwnerResult<SessionInfo>>;

    /// The session's current sandbox (after a restore, a fork).
    fn access<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<Access>>;

    fn exec<'a>(
        &'a self,
        session: &'a str,
        req: ExecRequest,
    ) -> BoxFuture<'a, OwnerResult<ExecOutput>>;

    /// Writes a file; a relative path is under the workdir.
    fn upload<'a>(
        &'a self,
        session: &'a str,
        path: &'a str,
        bytes: Vec<u8>,
        mode: u32,
    ) -> BoxFuture<'a, OwnerResult<()>>;

    /// Reads at most `limit` bytes of a file; a relative path is under the
    /// workdir.
    fn download<'a>(
        &'a self,
        session: &'a str,
        path: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, OwnerResult<Vec<u8>>>;

    fn launch<'a>(
        &'a self,
        session: &'a str,
        req: LaunchRequest,
    ) -> BoxFuture<'a, OwnerResult<Launched>>;

    /// What the session's current sandbox has used so far (CPU, memory,
    /// disk, network) and the limits that stopped something in it.
    fn usage<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, OwnerResult<rollpoint_sandbox::ResourceUsage>>;

    /// Grades the session with the task's verify command, then ends it (the
    /// sandbox is destroyed). On an error the session is kept, so the caller
    /// can try again or close it.
    fn verify<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<Verdict>>;

    /// Destroys the session's sandbox and forgets the session.
    fn close<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<()>>;

    /// Snapshots the session's current sandbox for `checkpoint`. Repeating
    /// the call for the same checkpoint returns the same record.
    fn snapshot<'a>(
        &'a self,
        session: &'a str,
        checkpoint: &'a str,
    ) -> BoxFuture<'a, OwnerResult<SessionRecord>>;

    /// Forks a new sandbox from the record's snapshot and makes it the
    /// session's current one (destroying the one it replaces, if any).
    fn restore(&self, record: SessionRecord) -> BoxFuture<'_, OwnerResult<Access>>;

    fn delete_snapshot<'a>(&'a self, snapshot: &'a str) -> BoxFuture<'a, OwnerResult<()>>;

    /// Pauses the launches of many sessions as one step, as a checkpoint's
    /// prepare asks of every rollout at once: per launch its receipt
    /// (confirmed, or failed and undone), or `None` for one left to its
    /// supervisor. An owner that does not batch (this default) leaves them all.
    fn pause_launches<'a>(
        &'a self,
        launches: &'a [SessionLaunch],
    ) -> BoxFuture<'a, OwnerResult<Vec<Option<Receipt>>>> {
        futures_util::future::ready(Ok(vec![None; launches.len()])).boxed()
    }

    /// Continues launches [`Owner::pause_launches`] paused, as one step; a
    /// receipt per launch, in order.
    fn continue_launches<'a>(
        &'a self,
        launches: &'a [SessionLaunch],
    ) -> BoxFuture<'a, OwnerResult<Vec<Receipt>>> {
        let receipts = launches
            .iter()
            .map(|l| Receipt::no_action(Op::Continue, &l.launch_id, Outcome::NotRunning, None))
            .collect();
        futures_util::future::ready(Ok(receipts)).boxed()
    }

    /// Sessions open and seeds starting now, for metrics (an owner that does not count
    /// says none).
    fn counts(&self) -> OwnerCounts {
        OwnerCounts::default()
    }
}
