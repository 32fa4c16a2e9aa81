//! The in-process owner over a sandbox [`Backend`]. Sessions live in memory;
//! what must outlive a crash is the session record a checkpoint stores.
//! Backend calls block, so each runs on a blocking thread.
//!
//! This file holds the owner, its sessions and admission, and the [`Owner`]
//! impl; each verb is a file: `create` (seed), `exec` (exec and launch),
//! `transfer` (upload and download), `verify`, `close`, `snapshot` (and
//! delete), `restore`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

mod close;
mod create;
mod exec;
mod pause;
mod restore;
mod snapshot;
mod transfer;
mod verify;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};
use rollpoint_proto::key::AttemptKey;
use rollpoint_sandbox::{Backend, SandboxInfo};

use crate::errors::OwnerError;
use crate::owner::{Access, Launched, Owner, OwnerResult, SessionInfo};
use crate::record::SessionRecord;
use crate::task::OwnerTask;
use crate::verdict::Verdict;

/// Bytes kept of each stream of a setup or verify command.
const OUTPUT_LIMIT: u64 = 1 << 20;
/// Bytes of a failed setup command's stderr carried in the error.
const SETUP_TAIL: usize = 2048;
/// Mode of the files a task uploads at seed.
const TASK_FILE_MODE: u32 = 0o644;
/// Sandboxes a [`LocalOwner`] makes at once.
const STARTS_AT_ONCE: usize = 16;

#[derive(Debug)]
struct Session {
    task: Arc<OwnerTask>,
    /// The attempt the session serves ([`OwnerTask::attempt`]).
    attempt: AttemptKey,
    sandbox: SandboxInfo,
    /// Records taken of the current sandbox, by checkpoint id.
    records: HashMap<String, SessionRecord>,
}

impl Session {
    fn access(&self, session: &str) -> Access {
        Access {
            session: session.to_owned(),
            sandbox: self.sandbox.id.clone(),
            workdir: self.sandbox.spec.workdir.clone(),
            root: self.sandbox.root.clone(),
            control: self.sandbox.control.clone(),
        }
    }
}

/// The owner in this process.
#[derive(Debug)]
pub struct LocalOwner {
    backend: Arc<dyn Backend>,
    sessions: Mutex<HashMap<String, Session>>,
    /// Start time of this owner (ns since the epoch, hex) and a counter:
    /// together they keep new ids distinct from any an earlier owner made.
    epoch: String,
    counter: AtomicU64,
    /// Whether new sessions are admitted (closed during a checkpoint).
    admission: tokio::sync::watch::Sender<bool>,
    /// Seeds admitted and not yet finished.
    seeding: AtomicU64,
    /// Sandboxes being made (created or forked) at once: a thousand starts
    /// together contend for the same kernel locks and the cores, and all
    /// finish late (32 at once measured no faster than 16).
    starts: Arc<tokio::sync::Semaphore>,
    /// Snapshots taken, their bytes where known, and the time their sandboxes were frozen.
    snapshots: Mutex<SnapshotTotals>,
}

/// Totals over the snapshots an owner took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SnapshotTotals {
    pub taken: u64,
    pub bytes: u64,
    pub seconds: f64,
}

/// A live session as the checkpoint's resources participant sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveSession {
    pub session: String,
    /// The attempt the session serves.
    pub attempt: AttemptKey,
    pub capturable: bool,
}

impl LocalOwner {
    /// The backend this owner lends from.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    pub fn new(backend: Arc<dyn Backend>) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            backend,
            sessions: Mutex::new(HashMap::new()),
            epoch: format!("{nanos:x}"),
            counter: AtomicU64::new(0),
            admission: tokio::sync::watch::Sender::new(true),
            seeding: AtomicU64::new(0),
            starts: Arc::new(tokio::sync::Semaphore::new(STARTS_AT_ONCE)),
            snapshots: Mutex::new(SnapshotTotals::default()),
        }
    }

    /// Holds new sessions back (they wait, they are not refused) until
    /// [`LocalOwner::open_admission`]; seeds already running finish.
    pub fn close_admission(&self) {
        self.admission.send_replace(false);
    }

    pub fn open_admission(&self) {
        self.admission.send_replace(true);
    }

    /// Seeds admitted and still running.
    pub fn seeds_in_flight(&self) -> u64 {
        self.seeding.load(Ordering::SeqCst)
    }

    pub(crate) fn snapshot_totals(&self) -> SnapshotTotals {
        *self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn count_snapshot(&self, bytes: Option<u64>, duration_ms: f64) {
        let mut t = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        t.taken += 1;
        t.bytes += bytes.unwrap_or(0);
        t.seconds += duration_ms / 1000.0;
    }

    /// Every live session, sorted by id.
    pub fn live_sessions(&self) -> Vec<LiveSession> {
        let mut out: Vec<LiveSession> = self
            .sessions()
            .iter()
            .map(|(id, s)| LiveSession {
                session: id.clone(),
                attempt: s.attempt.clone(),
                capturable: s.task.capture,
            })
            .collect();
        out.sort_by(|a, b| a.session.cmp(&b.session));
        out
    }

    /// Waits for admission, then counts this seed as in flight.
    async fn admit_seed(&self) -> SeedGuard<'_> {
        let mut rx = self.admission.subscribe();
        loop {
            if *rx.borrow_and_update() {
                self.seeding.fetch_add(1, Ordering::SeqCst);
                // Closed between the check and the count: step back and wait.
                if *self.admission.borrow() {
                    return SeedGuard(&self.seeding);
                }
                self.seeding.fetch_sub(1, Ordering::SeqCst);
            }
            if rx.changed().await.is_err() {
                self.seeding.fetch_add(1, Ordering::SeqCst);
                return SeedGuard(&self.seeding);
            }
        }
    }

    /// A turn to make a sandbox (see `starts`); the semaphore is never
    /// closed, so this always returns a permit.
    async fn start_turn(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.starts).acquire_owned().await.ok()
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn nonce(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.epoch)
    }

    /// The session's current sandbox and task.
    fn current(&self, session: &str) -> OwnerResult<(SandboxInfo, Arc<OwnerTask>)> {
        self.sessions()
            .get(session)
            .map(|s| (s.sandbox.clone(), Arc::clone(&s.task)))
            .ok_or_else(|| OwnerError::NotFound {
                session: session.to_owned(),
            })
    }

    /// Runs `f` on the backend on a blocking thread, mapping its error to
    /// one naming the session and sandbox.
    async fn on_backend<T, F>(
        &self,
        session: &str,
        sandbox: &str,
        call: &'static str,
        f: F,
    ) -> OwnerResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Backend) -> Result<T, rollpoint_sandbox::Error> + Send + 'static,
    {
        let backend = Arc::clone(&self.backend);
        tokio::task::spawn_blocking(move || f(backend.as_ref()))
            .await
            .map_err(|source| OwnerError::Join {
                session: session.to_owned(),
                call,
                source,
            })?
            .map_err(|source| OwnerError::backend(session, sandbox, source))
    }

    /// Destroys a sandbox; one already gone counts as destroyed.
    async fn destroy(&self, session: &str, sandbox: &str) -> OwnerResult<()> {
        let id = sandbox.to_owned();
        match self
            .on_backend(session, sandbox, "destroy", move |b| b.destroy(&id))
            .await
        {
            Err(OwnerError::Backend { source, .. })
                if matches!(*source, rollpoint_sandbox::Error::UnknownSandbox { .. }) =>
            {
                Ok(())
            }
            other => other,
        }
    }
}

/// Counts a seed in flight while alive.
struct SeedGuard<'a>(&'a AtomicU64);

impl Drop for SeedGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Owner for LocalOwner {
    fn counts(&self) -> crate::owner::OwnerCounts {
        crate::owner::OwnerCounts {
            sessions: u64::try_from(self.live_sessions().len()).unwrap_or(u64::MAX),
            seeding: self.seeds_in_flight(),
            snapshots: self.snapshot_totals().taken,
            snapshot_bytes: self.snapshot_totals().bytes,
            snapshot_seconds: self.snapshot_totals().seconds,
        }
    }

    fn create_session(&self, task: OwnerTask) -> BoxFuture<'_, OwnerResult<SessionInfo>> {
        self.create_session_impl(task).boxed()
    }

    fn pause_launches<'a>(
        &'a self,
        launches: &'a [crate::owner::SessionLaunch],
    ) -> BoxFuture<'a, OwnerResult<Vec<Option<rollpoint_proto::receipt::Receipt>>>> {
        self.pause_launches_impl(launches).boxed()
    }

    fn continue_launches<'a>(
        &'a self,
        launches: &'a [crate::owner::SessionLaunch],
    ) -> BoxFuture<'a, OwnerResult<Vec<rollpoint_proto::receipt::Receipt>>> {
        self.continue_launches_impl(launches).boxed()
    }

    fn access<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<Access>> {
        let found = self
            .sessions()
            .get(session)
            .map(|s| s.access(session))
            .ok_or_else(|| OwnerError::NotFound {
                session: session.to_owned(),
            });
        futures_util::future::ready(found).boxed()
    }

    fn exec<'a>(
        &'a self,
        session: &'a str,
        req: ExecRequest,
    ) -> BoxFuture<'a, OwnerResult<ExecOutput>> {
        self.exec_impl(session, req).boxed()
    }

    fn upload<'a>(
        &'a self,
        session: &'a str,
        path: &'a str,
        bytes: Vec<u8>,
        mode: u32,
    ) -> BoxFuture<'a, OwnerResult<()>> {
        self.upload_impl(session, path, bytes, mode).boxed()
    }

    fn download<'a>(
        &'a self,
        session: &'a str,
        path: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, OwnerResult<Vec<u8>>> {
        self.download_impl(session, path, limit).boxed()
    }

    fn launch<'a>(
        &'a self,
        session: &'a str,
        req: LaunchRequest,
    ) -> BoxFuture<'a, OwnerResult<Launched>> {
        self.launch_impl(session, req).boxed()
    }

    fn usage<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, OwnerResult<rollpoint_sandbox::ResourceUsage>> {
        async move {
            let (sandbox, _) = self.current(session)?;
            let id = sandbox.id.clone();
            self.on_backend(session, &sandbox.id, "usage", move |b| b.usage(&id))
                .await
        }
        .boxed()
    }

    fn verify<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<Verdict>> {
        self.verify_impl(session).boxed()
    }

    fn close<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<()>> {
        self.close_impl(session).boxed()
    }

    fn snapshot<'a>(
        &'a self,
        session: &'a str,
        checkpoint: &'a str,
    ) -> BoxFuture<'a, OwnerResult<SessionRecord>> {
        self.snapshot_impl(session, checkpoint).boxed()
    }

    fn restore(&self, record: SessionRecord) -> BoxFuture<'_, OwnerResult<Access>> {
        self.restore_impl(record).boxed()
    }

    fn delete_snapshot<'a>(&'a self, snapshot: &'a str) -> BoxFuture<'a, OwnerResult<()>> {
        self.delete_snapshot_impl(snapshot).boxed()
    }
}
