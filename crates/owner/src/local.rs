//! The in-process owner over a sandbox [`Backend`]. Sessions live in memory;
//! what must outlive a crash is the session record a checkpoint stores.
//! Backend calls block, so each runs on a blocking thread.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};
use rollpoint_sandbox::{Backend, SandboxInfo};

use crate::errors::OwnerError;
use crate::owner::{Access, Launched, Owner, OwnerResult, SessionInfo};
use crate::record::{RECORD_VERSION, SNAPSHOT_SEPARATOR, SessionRecord, snapshot_id};
use crate::task::{OwnerTask, check_id, check_sandbox_path, resolve};
use crate::verdict::{Verdict, grade, tail};

/// Bytes kept of each stream of a setup or verify command.
const OUTPUT_LIMIT: u64 = 1 << 20;
/// Bytes of a failed setup command's stderr carried in the error.
const SETUP_TAIL: usize = 2048;
/// Longest session, checkpoint or snapshot id accepted from a caller.
use rollpoint_proto::limits::MAX_OPAQUE_ID as MAX_ID;
/// Mode of the files a task uploads at seed.
const TASK_FILE_MODE: u32 = 0o644;

#[derive(Debug)]
struct Session {
    task: Arc<OwnerTask>,
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
}

/// A live session as the checkpoint's resources participant sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveSession {
    pub session: String,
    /// The task id, which names the attempt the session serves.
    pub task: String,
    pub capturable: bool,
}

impl LocalOwner {
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

    /// Every live session, sorted by id.
    pub fn live_sessions(&self) -> Vec<LiveSession> {
        let mut out: Vec<LiveSession> = self
            .sessions()
            .iter()
            .map(|(id, s)| LiveSession {
                session: id.clone(),
                task: s.task.id.clone(),
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
            .map_err(|e| OwnerError::Join {
                session: session.to_owned(),
                call,
                message: e.to_string(),
            })?
            .map_err(|source| OwnerError::Backend {
                session: session.to_owned(),
                sandbox: sandbox.to_owned(),
                source: Box::new(source),
            })
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

    async fn create_session_impl(&self, task: OwnerTask) -> OwnerResult<SessionInfo> {
        task.validate()?;
        let _seed = self.admit_seed().await;
        let session = format!("{}-{}", task.id, self.nonce());
        let sandbox = format!("{session}.{}", self.nonce());
        let task = Arc::new(task);
        let info = {
            let (name, sandbox, task) = (session.clone(), sandbox.clone(), Arc::clone(&task));
            let backend = Arc::clone(&self.backend);
            tokio::task::spawn_blocking(move || seed(backend.as_ref(), &name, &sandbox, &task))
                .await
                .map_err(|e| OwnerError::Join {
                    session: session.clone(),
                    call: "seed",
                    message: e.to_string(),
                })??
        };
        let out = SessionInfo {
            session: session.clone(),
            sandbox: info.id.clone(),
            workdir: info.spec.workdir.clone(),
            capturable: task.capture,
        };
        self.sessions().insert(
            session,
            Session {
                task,
                sandbox: info,
                records: HashMap::new(),
            },
        );
        Ok(out)
    }

    async fn exec_impl(&self, session: &str, mut req: ExecRequest) -> OwnerResult<ExecOutput> {
        let (sandbox, _) = self.current(session)?;
        if req.argv.first().is_none_or(String::is_empty) {
            return Err(OwnerError::bad("argv", "argv is empty"));
        }
        req.cwd = resolve(&sandbox.spec.workdir, &req.cwd);
        let id = sandbox.id.clone();
        self.on_backend(session, &sandbox.id, "exec", move |b| b.exec(&id, &req))
            .await
    }

    async fn upload_impl(
        &self,
        session: &str,
        path: &str,
        bytes: Vec<u8>,
        mode: u32,
    ) -> OwnerResult<()> {
        let (sandbox, _) = self.current(session)?;
        check_sandbox_path("path", path)?;
        if mode > 0o7777 {
            return Err(OwnerError::bad(
                "mode",
                format!("{mode:o} is not a file mode"),
            ));
        }
        let path = resolve(&sandbox.spec.workdir, path);
        let id = sandbox.id.clone();
        self.on_backend(session, &sandbox.id, "upload", move |b| {
            b.upload(&id, Path::new(&path), &bytes, mode)
        })
        .await
    }

    async fn download_impl(&self, session: &str, path: &str, limit: u64) -> OwnerResult<Vec<u8>> {
        let (sandbox, _) = self.current(session)?;
        check_sandbox_path("path", path)?;
        let path = resolve(&sandbox.spec.workdir, path);
        let id = sandbox.id.clone();
        self.on_backend(session, &sandbox.id, "download", move |b| {
            b.download(&id, Path::new(&path), limit)
        })
        .await
    }

    async fn launch_impl(&self, session: &str, mut req: LaunchRequest) -> OwnerResult<Launched> {
        let (sandbox, _) = self.current(session)?;
        check_id("launch_id", &req.launch_id, MAX_ID)?;
        if req.argv.first().is_none_or(String::is_empty) {
            return Err(OwnerError::bad("argv", "argv is empty"));
        }
        req.cwd = resolve(&sandbox.spec.workdir, &req.cwd);
        let id = sandbox.id.clone();
        let handle = self
            .on_backend(session, &sandbox.id, "launch", move |b| b.launch(&id, &req))
            .await?;
        Ok(Launched {
            launch_id: handle.launch_id,
            session_dir: handle.session,
        })
    }

    async fn verify_impl(&self, session: &str) -> OwnerResult<Verdict> {
        let (sandbox, task) = self.current(session)?;
        let req = ExecRequest {
            argv: task.verify.command.clone(),
            env: Default::default(),
            cwd: sandbox.spec.workdir.clone(),
            timeout_ms: task.verify.timeout_s.saturating_mul(1000),
            output_limit: OUTPUT_LIMIT,
            stdin: None,
        };
        let id = sandbox.id.clone();
        let out = self
            .on_backend(session, &sandbox.id, "verify", move |b| b.exec(&id, &req))
            .await?;
        let mut verdict = grade(task.verify.reward, &out);
        // The graded session is over: forget it and destroy its sandbox,
        // unless a restore has replaced the sandbox meanwhile.
        let ended = {
            let mut sessions = self.sessions();
            if sessions
                .get(session)
                .is_some_and(|s| s.sandbox.id == sandbox.id)
            {
                sessions.remove(session);
                true
            } else {
                false
            }
        };
        if ended && let Err(e) = self.destroy(session, &sandbox.id).await {
            verdict.cleanup_error = Some(e.to_string());
        }
        Ok(verdict)
    }

    async fn close_impl(&self, session: &str) -> OwnerResult<()> {
        let (sandbox, _) = self.current(session)?;
        self.destroy(session, &sandbox.id).await?;
        let mut sessions = self.sessions();
        if sessions
            .get(session)
            .is_some_and(|s| s.sandbox.id == sandbox.id)
        {
            sessions.remove(session);
        }
        Ok(())
    }

    async fn snapshot_impl(&self, session: &str, checkpoint: &str) -> OwnerResult<SessionRecord> {
        check_id("checkpoint", checkpoint, MAX_ID)?;
        if checkpoint.contains(SNAPSHOT_SEPARATOR) {
            return Err(OwnerError::bad(
                "checkpoint",
                format!("{checkpoint:?} contains {SNAPSHOT_SEPARATOR:?}"),
            ));
        }
        let (sandbox, task) = {
            let sessions = self.sessions();
            let s = sessions.get(session).ok_or_else(|| OwnerError::NotFound {
                session: session.to_owned(),
            })?;
            if !s.task.capture {
                return Err(OwnerError::NotCapturable {
                    session: session.to_owned(),
                });
            }
            if let Some(record) = s.records.get(checkpoint) {
                return Ok(record.clone());
            }
            (s.sandbox.clone(), Arc::clone(&s.task))
        };
        let snap = snapshot_id(checkpoint, session);
        let (id, name, ck) = (sandbox.id.clone(), snap.clone(), checkpoint.to_owned());
        let taken = self
            .on_backend(session, &sandbox.id, "snapshot", move |b| {
                b.snapshot(&id, &name, &ck)
            })
            .await?;
        let record = SessionRecord {
            v: RECORD_VERSION,
            session: session.to_owned(),
            task: OwnerTask::clone(&task),
            snapshot: taken.id,
            sandbox: sandbox.id.clone(),
            spec: taken.spec,
            workdir: sandbox.spec.workdir.clone(),
            checkpoint: checkpoint.to_owned(),
        };
        if let Some(s) = self.sessions().get_mut(session)
            && s.sandbox.id == sandbox.id
        {
            s.records.insert(checkpoint.to_owned(), record.clone());
        }
        Ok(record)
    }

    async fn restore_impl(&self, record: SessionRecord) -> OwnerResult<Access> {
        check_restorable(&record)?;
        let session = record.session.clone();
        let new_id = format!("{session}.{}", self.nonce());
        let (snap, id) = (record.snapshot.clone(), new_id.clone());
        let info = self
            .on_backend(&session, &new_id, "fork", move |b| b.fork(&snap, &id))
            .await?;
        let access = Access {
            session: session.clone(),
            sandbox: info.id.clone(),
            workdir: record.workdir.clone(),
            root: info.root.clone(),
            control: info.control.clone(),
        };
        let replaced = self.sessions().insert(
            session.clone(),
            Session {
                task: Arc::new(record.task),
                sandbox: info,
                records: HashMap::new(),
            },
        );
        if let Some(old) = replaced
            && old.sandbox.id != access.sandbox
        {
            self.destroy(&session, &old.sandbox.id).await?;
        }
        Ok(access)
    }

    async fn delete_snapshot_impl(&self, snapshot: &str) -> OwnerResult<()> {
        check_id("snapshot", snapshot, 2 * MAX_ID)?;
        let name = snapshot.to_owned();
        let backend = Arc::clone(&self.backend);
        tokio::task::spawn_blocking(move || backend.delete_snapshot(&name))
            .await
            .map_err(|e| OwnerError::Join {
                session: String::new(),
                call: "delete_snapshot",
                message: e.to_string(),
            })?
            .map_err(|source| OwnerError::SnapshotBackend {
                snapshot: snapshot.to_owned(),
                source: Box::new(source),
            })?;
        for s in self.sessions().values_mut() {
            s.records.retain(|_, r| r.snapshot != snapshot);
        }
        Ok(())
    }
}

/// Counts a seed in flight while alive.
struct SeedGuard<'a>(&'a AtomicU64);

impl Drop for SeedGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a record must hold before a fork is made from it.
fn check_restorable(record: &SessionRecord) -> OwnerResult<()> {
    check_id("session", &record.session, MAX_ID)?;
    check_id("snapshot", &record.snapshot, 2 * MAX_ID)?;
    check_id("checkpoint", &record.checkpoint, MAX_ID)?;
    record.task.validate()?;
    if !record.workdir.starts_with('/') {
        return Err(OwnerError::bad("workdir", "is not an absolute path"));
    }
    Ok(())
}

/// Creates the sandbox, uploads the task's files and runs its setup; on any
/// failure the sandbox is destroyed before the error is returned.
fn seed(
    backend: &dyn Backend,
    session: &str,
    sandbox: &str,
    task: &OwnerTask,
) -> OwnerResult<SandboxInfo> {
    let backend_err = |source| OwnerError::Backend {
        session: session.to_owned(),
        sandbox: sandbox.to_owned(),
        source: Box::new(source),
    };
    let info = backend
        .create(sandbox, &task.sandbox)
        .map_err(backend_err)?;
    let prepared = prepare(backend, session, &info, task);
    if prepared.is_err() {
        // The seed error is what the caller needs; a failed destroy leaves
        // the sandbox to the sweep, which lists what the backend holds.
        let _ignored = backend.destroy(sandbox);
    }
    prepared.map(|()| info)
}

fn prepare(
    backend: &dyn Backend,
    session: &str,
    info: &SandboxInfo,
    task: &OwnerTask,
) -> OwnerResult<()> {
    let backend_err = |source| OwnerError::Backend {
        session: session.to_owned(),
        sandbox: info.id.clone(),
        source: Box::new(source),
    };
    for (path, content) in &task.files {
        let path = task.resolve(path);
        backend
            .upload(
                &info.id,
                Path::new(&path),
                content.as_bytes(),
                TASK_FILE_MODE,
            )
            .map_err(backend_err)?;
    }
    for (index, argv) in task.setup.iter().enumerate() {
        let req = ExecRequest {
            argv: argv.clone(),
            env: Default::default(),
            cwd: info.spec.workdir.clone(),
            timeout_ms: task.setup_timeout_s.saturating_mul(1000),
            output_limit: OUTPUT_LIMIT,
            stdin: None,
        };
        let out = backend.exec(&info.id, &req).map_err(backend_err)?;
        if out.exit_code != Some(0) || out.timed_out {
            let status = match (out.timed_out, out.exit_code, out.signal) {
                (true, ..) => format!("a timeout after {} s", task.setup_timeout_s),
                (false, Some(code), _) => format!("exit code {code}"),
                (false, None, Some(sig)) => format!("signal {sig}"),
                (false, None, None) => "no exit status".to_owned(),
            };
            return Err(OwnerError::Setup {
                session: session.to_owned(),
                index,
                argv: argv.join(" "),
                status,
                stderr_tail: tail(&out.stderr, SETUP_TAIL).to_owned(),
            });
        }
    }
    Ok(())
}

impl Owner for LocalOwner {
    fn create_session(&self, task: OwnerTask) -> BoxFuture<'_, OwnerResult<SessionInfo>> {
        self.create_session_impl(task).boxed()
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
