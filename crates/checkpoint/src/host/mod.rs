//! The control plane of a participant in this process: the phase machine
//! put to work over the participant's hooks, with the per-call deadlines,
//! the lease and the storage writes. Served over HTTP by
//! [`crate::router`]; driven directly by the coordinator in the embedded
//! default. One verb per file.

mod commit;
mod fleet;
mod prepare;
mod restore;
mod resume;
mod retire;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::{CallResult, ParticipantApi};
use crate::errors::{CallError, Code};
use crate::id::check_name;
use crate::participant::{Kind, Participant};
use crate::phase::Machine;
use crate::wire::{
    CommitReply, CommitRequest, FleetReply, FleetRequest, KeysReply, KeysRequest, PrepareReply,
    PrepareRequest, RestoreReply, RestoreRequest, ResumeReply, ResumeRequest, Status,
};

/// How long past a call's deadline a participant waits for the next call
/// before it resumes by itself, by default.
pub const DEFAULT_LEASE_GRACE: Duration = Duration::from_secs(600);

/// Where a participant writes and how patient it is.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The run directory; checkpoints go under `run_dir/checkpoints/`.
    pub run_dir: PathBuf,
    /// The lease: a checkpoint left open this long past the last call's
    /// deadline is aborted (admission reopens).
    pub lease_grace: Duration,
    /// The object store each commit's share is uploaded to (and a restore
    /// fetches from when the files are not here).
    pub remote: Option<rollpoint_remote::RemoteStore>,
}

impl HostConfig {
    pub fn new(run_dir: impl Into<PathBuf>) -> Self {
        Self {
            run_dir: run_dir.into(),
            lease_grace: DEFAULT_LEASE_GRACE,
            remote: None,
        }
    }
}

/// A participant's control plane, in process. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ParticipantHost {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    participant: Arc<dyn Participant>,
    kind: Kind,
    instance: String,
    config: HostConfig,
    machine: Mutex<Machine>,
    /// Serializes every transition that calls a hook. Prepare's readiness
    /// wait runs outside it so a resume can abort it.
    ops: Arc<tokio::sync::Mutex<()>>,
    /// When the open checkpoint is aborted if no call comes.
    lease: Mutex<Option<Instant>>,
    /// Bumped by every resume and lease expiry: waits and exports watch it
    /// and give up.
    aborts: watch::Sender<u64>,
}

impl ParticipantHost {
    /// The control plane of `participant`. Fails if its instance name is
    /// not a path component.
    pub fn new(participant: Arc<dyn Participant>, config: HostConfig) -> CallResult<Self> {
        let instance = participant.instance();
        check_name("instance", &instance)?;
        Ok(Self {
            inner: Arc::new(Inner {
                kind: participant.kind(),
                instance,
                participant,
                config,
                machine: Mutex::new(Machine::new()),
                ops: Arc::new(tokio::sync::Mutex::new(())),
                lease: Mutex::new(None),
                aborts: watch::Sender::new(0),
            }),
        })
    }

    pub fn kind(&self) -> Kind {
        self.inner.kind
    }

    pub fn instance(&self) -> &str {
        &self.inner.instance
    }
}

impl Inner {
    fn machine(&self) -> MutexGuard<'_, Machine> {
        // The machine is plain data changed in single steps: a panic
        // elsewhere cannot leave it half-changed, so a poisoned lock is used.
        self.machine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lease(&self) -> MutexGuard<'_, Option<Instant>> {
        self.lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Extends the lease of an open checkpoint to cover a call lasting up
    /// to `timeout`, plus the grace.
    fn renew(&self, timeout: Duration) {
        if self.machine().active().is_none() {
            return;
        }
        let until = Instant::now() + timeout + self.config.lease_grace;
        let mut lease = self.lease();
        *lease = Some(lease.map_or(until, |l| l.max(until)));
    }

    /// Starts the lease of the checkpoint just opened (epoch `epoch`) and
    /// the watcher that aborts it when the lease runs out.
    fn start_lease(self: &Arc<Self>, epoch: u64, timeout: Duration) {
        *self.lease() = Some(Instant::now() + timeout + self.config.lease_grace);
        let weak = Arc::downgrade(self);
        tokio::spawn(watch_lease(weak, epoch));
    }

    fn lease_remaining(&self) -> Option<u64> {
        self.machine().active()?;
        let lease = (*self.lease())?;
        let left = lease.saturating_duration_since(Instant::now());
        Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
    }

    fn abort_generation(&self) -> u64 {
        *self.aborts.borrow()
    }

    /// Resolves once a resume or lease expiry happens after generation
    /// `seen`.
    async fn aborted(&self, seen: u64) {
        let mut rx = self.aborts.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ended = rx.wait_for(|g| *g != seen).await;
    }

    async fn status(&self) -> Status {
        self.renew(Duration::ZERO);
        let (phase, checkpoint) = {
            let m = self.machine();
            (m.phase(), m.active().map(str::to_owned))
        };
        Status {
            kind: self.kind,
            instance: self.instance.clone(),
            phase,
            checkpoint,
            lease_remaining_ms: self.lease_remaining(),
            readiness: self.participant.readiness().await.capped(),
        }
    }
}

/// Waits out the lease of checkpoint epoch `epoch`; aborts the checkpoint
/// if the lease runs out while it is still open. Retries a failed abort.
async fn watch_lease(weak: Weak<Inner>, epoch: u64) {
    loop {
        let deadline = {
            let Some(inner) = weak.upgrade() else { return };
            if inner.machine().expired(epoch).is_none() {
                return;
            }
            let Some(deadline) = *inner.lease() else {
                return;
            };
            deadline
        };
        if Instant::now() < deadline {
            tokio::time::sleep_until(deadline).await;
            continue;
        }
        let Some(inner) = weak.upgrade() else { return };
        let Some(id) = inner.machine().expired(epoch).map(str::to_owned) else {
            return;
        };
        let lease_now = *inner.lease();
        if lease_now.is_some_and(|l| l > Instant::now()) {
            continue;
        }
        if resume::abort(&inner, &id, inner.config.lease_grace)
            .await
            .is_ok()
        {
            return;
        }
        drop(inner);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Runs `fut` until `timeout`, else fails with `deadline_exceeded`.
async fn within<T>(
    action: &str,
    subject: &str,
    timeout: Duration,
    fut: impl Future<Output = CallResult<T>>,
) -> CallResult<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result,
        Err(_) => Err(CallError::deadline(
            action,
            subject,
            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        )),
    }
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn join_error(action: &str, e: &tokio::task::JoinError) -> CallError {
    CallError::new(Code::HookFailed, format!("{action}: task failed: {e}"))
}

impl ParticipantApi for ParticipantHost {
    fn status(&self) -> BoxFuture<'_, CallResult<Status>> {
        async move { Ok(self.inner.status().await) }.boxed()
    }

    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, CallResult<PrepareReply>> {
        prepare::run(self.inner.clone(), req).boxed()
    }

    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, CallResult<CommitReply>> {
        commit::run(self.inner.clone(), req).boxed()
    }

    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, CallResult<RestoreReply>> {
        restore::run(self.inner.clone(), req).boxed()
    }

    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, CallResult<ResumeReply>> {
        resume::run(self.inner.clone(), req).boxed()
    }

    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>> {
        retire::run(self.inner.clone(), req, crate::wire::KeysVerb::Retire).boxed()
    }

    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>> {
        retire::run(self.inner.clone(), req, crate::wire::KeysVerb::Forget).boxed()
    }

    fn fleet(&self, req: FleetRequest) -> BoxFuture<'_, CallResult<FleetReply>> {
        fleet::run(self.inner.clone(), req).boxed()
    }
}
