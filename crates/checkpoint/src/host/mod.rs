//! The control plane of a participant in this process: the phase machine
//! put to work over the participant's hooks, with the per-call deadlines,
//! the lease and the storage writes. Served over HTTP by
//! [`crate::router`]; driven directly by the coordinator in the embedded
//! default.
//!
//! One verb per file, each an `impl Inner` block whose method is the verb
//! (`prepare`, `commit`, `restore`, `resume` and the abort it shares with
//! the lease, `retire` and forget, `fleet`); the verbs that spawn their work
//! or start the lease take `self: Arc<Self>`. Beside them: `inner` (the
//! shared state's accessors and the status), `lease` (renewal and the
//! watcher that aborts an abandoned checkpoint), `call` (a call's deadline).
//! This file holds the types and the trait impl that delegates to the verbs.

mod call;
mod commit;
mod fleet;
mod inner;
mod lease;
mod prepare;
mod restore;
mod resume;
mod retire;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::{CallResult, ParticipantApi};
use crate::id::check_name;
use crate::participant::{Kind, Participant};
use crate::phase::Machine;
use crate::wire::{
    CommitReply, CommitRequest, FleetReply, FleetRequest, KeysReply, KeysRequest, KeysVerb,
    PrepareReply, PrepareRequest, RestoreReply, RestoreRequest, ResumeReply, ResumeRequest, Status,
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

impl ParticipantApi for ParticipantHost {
    fn status(&self) -> BoxFuture<'_, CallResult<Status>> {
        async move { Ok(self.inner.status().await) }.boxed()
    }

    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, CallResult<PrepareReply>> {
        self.inner.clone().prepare(req).boxed()
    }

    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, CallResult<CommitReply>> {
        self.inner.clone().commit(req).boxed()
    }

    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, CallResult<RestoreReply>> {
        self.inner.clone().restore(req).boxed()
    }

    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, CallResult<ResumeReply>> {
        self.inner.resume(req).boxed()
    }

    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>> {
        self.inner.retire(req, KeysVerb::Retire).boxed()
    }

    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>> {
        self.inner.retire(req, KeysVerb::Forget).boxed()
    }

    fn fleet(&self, req: FleetRequest) -> BoxFuture<'_, CallResult<FleetReply>> {
        self.inner.fleet(req).boxed()
    }
}
