//! The local backend: sandboxes on this machine with no container engine.
//!
//! Each sandbox is an overlay of its own upper (kept by a snapshot store)
//! over a read-only base, entered by `rollpoint-supervisor anchor` in fresh
//! mount, uts, ipc and pid namespaces and a cgroup of its own. The overlay
//! is mounted in the owner's namespace at `sandboxes/<id>/root`, so the
//! owner moves files and takes snapshots on exactly what the sandbox sees,
//! and every in-sandbox path is the same in a fork. Layout of the directory:
//!
//! ```text
//! sandboxes/<id>/sandbox.json   record (spec, layers, owner), written first
//! sandboxes/<id>/root/          the overlay mount
//! sandboxes/<id>/control/       /run/rollpoint inside: anchor.sock, launches/
//! sandboxes/<id>/anchor.log     the anchor's own output
//! snapshots/<snapshot>.json     what a fork of that snapshot is made from
//! store/                        the snapshot store (uppers and snapshots)
//! bases/<sha256>/               rootfs tarballs, unpacked once
//! index.json                    which checkpoint names which snapshots
//! ```

mod anchor;
mod base;
mod cgroups;
mod mounts;
mod record;
mod spawn;

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rollpoint_proto::anchor::{
    ANCHOR_SOCKET, AnchorRequest, ExecOutput, ExecRequest, LAUNCHES_DIR, LaunchRequest,
};
use rollpoint_snapshot::{SnapshotIndex, SnapshotStore, StoreOptions, UpperDirs};
use sha2::{Digest, Sha256};

use crate::{
    Backend, BackendListing, Error, LaunchHandle, SPEC_VERSION, SandboxInfo, SandboxRoot,
    SandboxSpec, SnapshotRef, sandbox_relative,
};
use base::Bases;
use cgroups::SandboxCgroups;
pub use record::{SandboxRecord, SnapshotRecord};

/// How the local backend is set up.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// The `rollpoint-supervisor` binary (static, so it runs in any base).
    pub supervisor: PathBuf,
    pub store: StoreOptions,
    /// How long a new sandbox's anchor has to answer.
    pub start_timeout: Duration,
}

impl LocalOptions {
    pub fn new(supervisor: PathBuf) -> Self {
        Self {
            supervisor,
            store: StoreOptions::default(),
            start_timeout: Duration::from_secs(20),
        }
    }
}

/// Extra time an anchor gets beyond a command's own timeout to reply.
const REPLY_MARGIN: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Live {
    info: SandboxInfo,
    anchor: Child,
    cgroups: SandboxCgroups,
}

/// Sandboxes on this machine.
#[derive(Debug)]
pub struct LocalBackend {
    dir: PathBuf,
    /// Distinguishes this directory's cgroups from another run's.
    key: String,
    options: LocalOptions,
    store: Box<dyn SnapshotStore>,
    bases: Bases,
    live: Mutex<HashMap<String, Live>>,
    /// Serialises read-modify-write of the snapshot index: snapshots of
    /// several sandboxes for one checkpoint run concurrently.
    index: Mutex<()>,
    owner: (u32, u64),
}

fn owner_identity() -> (u32, u64) {
    let pid = std::process::id();
    let start = rollpoint_proctree::scan::read_stat(pid).map_or(0, |s| s.start_time);
    (pid, start)
}

impl LocalBackend {
    /// Opens (creating) the backend's directory and its snapshot store.
    pub fn open(dir: &Path, options: LocalOptions) -> Result<Self, Error> {
        let setup = |what: &str, source| Error::Setup {
            sandbox: "-".into(),
            what: format!("{what} {}", dir.display()),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| setup("create", e))?;
        let dir = std::fs::canonicalize(dir).map_err(|e| setup("resolve", e))?;
        for sub in ["sandboxes", "snapshots", "bases"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(|e| setup("create", e))?;
        }
        // The anchor starts with `/` as its working directory.
        let mut options = options;
        options.supervisor =
            std::fs::canonicalize(&options.supervisor).map_err(|source| Error::Setup {
                sandbox: "-".into(),
                what: format!("find the supervisor {}", options.supervisor.display()),
                source,
            })?;
        let store_options = record::store_choice(&dir, options.store)?;
        let opened =
            rollpoint_snapshot::open(&dir.join("store"), &store_options).map_err(|source| {
                Error::Store {
                    sandbox: "-".into(),
                    source,
                }
            })?;
        record::remember_store(&dir, opened.store.kind())?;
        let digest = Sha256::digest(dir.as_os_str().as_encoded_bytes());
        let key = format!("{digest:x}")[..12].to_owned();
        Ok(Self {
            dir,
            key,
            options,
            store: opened.store,
            bases: Bases::default(),
            live: Mutex::new(HashMap::new()),
            index: Mutex::new(()),
            owner: owner_identity(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn store_kind(&self) -> rollpoint_snapshot::StoreKind {
        self.store.kind()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Live>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.dir.join("sandboxes").join(id)
    }

    fn snapshot_record(&self, snapshot: &str) -> PathBuf {
        self.dir.join("snapshots").join(format!("{snapshot}.json"))
    }

    fn index_path(&self) -> PathBuf {
        self.dir.join("index.json")
    }

    fn cgroup_name(&self, id: &str) -> String {
        format!("sandbox-{}-{id}", self.key)
    }

    fn info(&self, id: &str) -> Result<SandboxInfo, Error> {
        self.lock()
            .get(id)
            .map(|l| l.info.clone())
            .ok_or_else(|| Error::UnknownSandbox {
                sandbox: id.to_owned(),
            })
    }

    /// Records that `checkpoint` names `snapshot` too, so sweeps keep it while
    /// the checkpoint is retained.
    fn retain(&self, checkpoint: &str, snapshot: &str) -> Result<(), Error> {
        let store_err = |source| Error::Store {
            sandbox: "-".into(),
            source,
        };
        let _serial = self
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        SnapshotIndex::open(&self.index_path())
            .and_then(|mut index| index.add(checkpoint, snapshot))
            .map_err(store_err)
    }

    /// Deletes every snapshot no checkpoint in `retained` names. Returns the
    /// snapshot ids deleted.
    pub fn sweep_snapshots(&self, retained: &[&str]) -> Result<Vec<String>, Error> {
        let store_err = |source| Error::Store {
            sandbox: "-".into(),
            source,
        };
        let _serial = self
            .index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut index = SnapshotIndex::open(&self.index_path()).map_err(store_err)?;
        let deleted = rollpoint_snapshot::sweep(&mut index, self.store.as_ref(), retained)
            .map_err(store_err)?;
        for snapshot in &deleted {
            let _ = std::fs::remove_file(self.snapshot_record(snapshot));
        }
        Ok(deleted)
    }

    /// Destroys every sandbox whose owner process is gone (a crashed run's).
    /// Returns their ids.
    pub fn sweep_orphans(&self) -> Result<Vec<String>, Error> {
        let mut swept = Vec::new();
        for id in self.list()?.sandboxes {
            if self.lock().contains_key(&id) {
                continue;
            }
            let path = self.sandbox_dir(&id).join("sandbox.json");
            let alive = match record::read::<SandboxRecord>("sandbox record", &path) {
                Ok(r) => {
                    rollpoint_proctree::scan::read_stat(r.owner_pid)
                        .is_some_and(|s| s.start_time == r.owner_start)
                        && (r.owner_pid, r.owner_start) != self.owner
                }
                Err(_) => false,
            };
            if !alive {
                self.teardown_stale(&id)?;
                swept.push(id);
            }
        }
        Ok(swept)
    }

    /// Destroys every sandbox this backend started. For shutdown.
    pub fn destroy_all(&self) -> Result<(), Error> {
        let ids: Vec<String> = self.lock().keys().cloned().collect();
        for id in ids {
            self.destroy(&id)?;
        }
        Ok(())
    }

    /// Brings up a sandbox on an upper the store has just made.
    fn start(
        &self,
        id: &str,
        spec: &SandboxSpec,
        dirs: &UpperDirs,
        forked_from: Option<String>,
    ) -> Result<SandboxInfo, Error> {
        let lower = self.bases.lower(id, &spec.base, &self.dir.join("bases"))?;
        let sbdir = self.sandbox_dir(id);
        let setup = |what: String| {
            move |source| Error::Setup {
                sandbox: id.to_owned(),
                what,
                source,
            }
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&sbdir)
            .map_err(setup(format!("create {}", sbdir.display())))?;
        let mut rec = SandboxRecord {
            v: SPEC_VERSION,
            id: id.to_owned(),
            spec: spec.clone(),
            forked_from: forked_from.clone(),
            lower: lower.clone(),
            upper: dirs.upper.clone(),
            work: dirs.work.clone(),
            owner_pid: self.owner.0,
            owner_start: self.owner.1,
            anchor_pid: 0,
        };
        let record_path = sbdir.join("sandbox.json");
        record::write(&record_path, &rec)?;

        let root = sbdir.join("root");
        let control = sbdir.join("control");
        let cgroups = SandboxCgroups::locate(&self.cgroup_name(id));
        let started = (|| {
            mounts::mount_overlay(id, &lower, &dirs.upper, &dirs.work, &root)?;
            let workdir = root.join(sandbox_relative(Path::new(&spec.workdir))?);
            std::fs::create_dir_all(&workdir)
                .map_err(setup(format!("create workdir {}", spec.workdir)))?;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(control.join(LAUNCHES_DIR).as_path())
                .or_else(|_| {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(control.join(LAUNCHES_DIR))
                })
                .map_err(setup(format!("create {}", control.display())))?;
            cgroups.create(id, &spec.limits)?;
            let log_path = sbdir.join("anchor.log");
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&log_path)
                .map_err(setup(format!("open {}", log_path.display())))?;
            let anchor = spawn::spawn_anchor(
                id,
                spawn::AnchorArgs {
                    supervisor: &self.options.supervisor,
                    root: &root,
                    control: &control,
                    hostname: &spec.hostname,
                    cgroup_v2: cgroups.v2.as_deref(),
                    cgroup_freezer: cgroups.freezer.as_deref(),
                    network: spec.network,
                    log,
                    join: cgroups.procs_files(id)?,
                },
            )?;
            Ok::<_, Error>(anchor)
        })();
        let mut anchor = match started {
            Ok(anchor) => anchor,
            Err(e) => {
                self.teardown(id, None, &cgroups, &root);
                return Err(e);
            }
        };
        if let Err(e) = self.wait_ready(id, &control, &mut anchor, &sbdir) {
            self.teardown(id, Some(anchor), &cgroups, &root);
            return Err(e);
        }
        rec.anchor_pid = anchor.id();
        record::write(&record_path, &rec)?;
        let info = SandboxInfo {
            id: id.to_owned(),
            root,
            control,
            anchor_pid: anchor.id(),
            spec: spec.clone(),
            forked_from,
        };
        self.lock().insert(
            id.to_owned(),
            Live {
                info: info.clone(),
                anchor,
                cgroups,
            },
        );
        Ok(info)
    }

    fn wait_ready(
        &self,
        id: &str,
        control: &Path,
        anchor: &mut Child,
        sbdir: &Path,
    ) -> Result<(), Error> {
        let socket = control.join(ANCHOR_SOCKET);
        let deadline = Instant::now() + self.options.start_timeout;
        let mut pause = Duration::from_micros(200);
        loop {
            if socket.exists()
                && anchor::ask(id, &socket, &AnchorRequest::status(), REPLY_MARGIN).is_ok()
            {
                return Ok(());
            }
            let exited = anchor.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() >= deadline {
                let log = std::fs::read_to_string(sbdir.join("anchor.log")).unwrap_or_default();
                let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join(" | ");
                return Err(Error::Anchor {
                    sandbox: id.to_owned(),
                    socket,
                    message: match exited {
                        Some(status) => {
                            format!("anchor exited ({status}) before answering: {tail}")
                        }
                        None => format!(
                            "anchor did not answer within {:?}: {tail}",
                            self.options.start_timeout
                        ),
                    },
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Best-effort removal of everything `start` may have made, used when
    /// start fails half-way and by destroy.
    fn teardown(&self, id: &str, anchor: Option<Child>, cgroups: &SandboxCgroups, root: &Path) {
        let _ = self.teardown_checked(id, anchor, cgroups, root);
    }

    fn teardown_checked(
        &self,
        id: &str,
        anchor: Option<Child>,
        cgroups: &SandboxCgroups,
        root: &Path,
    ) -> Result<(), Error> {
        let killed = cgroups.kill(id);
        if let Some(mut anchor) = anchor {
            if killed.is_err() {
                let _ = anchor.kill();
            }
            let _ = anchor.wait();
        }
        killed?;
        mounts::unmount(id, root)?;
        cgroups.remove(id)?;
        match self.store.destroy_upper(id) {
            Ok(()) => {}
            Err(rollpoint_snapshot::Error::NoUpper { .. }) => {}
            Err(source) => {
                return Err(Error::Store {
                    sandbox: id.to_owned(),
                    source,
                });
            }
        }
        let sbdir = self.sandbox_dir(id);
        match std::fs::remove_dir_all(&sbdir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Setup {
                sandbox: id.to_owned(),
                what: format!("remove {}", sbdir.display()),
                source,
            }),
        }
    }

    /// Tears down a sandbox this process did not start (from its record).
    fn teardown_stale(&self, id: &str) -> Result<(), Error> {
        let cgroups = SandboxCgroups::locate(&self.cgroup_name(id));
        let root = self.sandbox_dir(id).join("root");
        self.teardown_checked(id, None, &cgroups, &root)
    }

    fn ask(
        &self,
        id: &str,
        request: &AnchorRequest,
        timeout: Duration,
    ) -> Result<rollpoint_proto::anchor::AnchorReply, Error> {
        let info = self.info(id)?;
        anchor::ask(id, &info.control.join(ANCHOR_SOCKET), request, timeout)
    }
}

impl Backend for LocalBackend {
    fn create(&self, id: &str, spec: &SandboxSpec) -> Result<SandboxInfo, Error> {
        if self.lock().contains_key(id) || self.sandbox_dir(id).exists() {
            return Err(Error::SandboxExists {
                sandbox: id.to_owned(),
            });
        }
        // Resolve the base before making anything that would need undoing.
        self.bases.lower(id, &spec.base, &self.dir.join("bases"))?;
        let store_err = |source| Error::Store {
            sandbox: id.to_owned(),
            source,
        };
        let dirs = self.store.create_upper(id).map_err(store_err)?;
        if let Err(e) = mounts::private_tmp(id, &dirs.upper) {
            let _ = self.store.destroy_upper(id);
            return Err(e);
        }
        self.start(id, spec, &dirs, None)
    }

    fn exec(&self, id: &str, req: &ExecRequest) -> Result<ExecOutput, Error> {
        let info = self.info(id)?;
        let mut env = info.spec.full_env();
        env.extend(req.env.clone());
        let cwd = if req.cwd.is_empty() {
            info.spec.workdir.clone()
        } else {
            req.cwd.clone()
        };
        let request = AnchorRequest::exec(ExecRequest {
            env,
            cwd,
            ..req.clone()
        });
        let timeout = Duration::from_millis(req.timeout_ms) + REPLY_MARGIN;
        let reply = self.ask(id, &request, timeout)?;
        reply.exec.ok_or_else(|| Error::Anchor {
            sandbox: id.to_owned(),
            socket: info.control.join(ANCHOR_SOCKET),
            message: "exec reply without output".into(),
        })
    }

    fn launch(&self, id: &str, req: &LaunchRequest) -> Result<LaunchHandle, Error> {
        let info = self.info(id)?;
        let mut env = info.spec.full_env();
        env.extend(req.env.clone());
        let cwd = if req.cwd.is_empty() {
            info.spec.workdir.clone()
        } else {
            req.cwd.clone()
        };
        let request = AnchorRequest::launch(LaunchRequest {
            env,
            cwd,
            ..req.clone()
        });
        self.ask(id, &request, REPLY_MARGIN)?;
        Ok(LaunchHandle {
            launch_id: req.launch_id.clone(),
            session: info.control.join(LAUNCHES_DIR).join(&req.launch_id),
        })
    }

    fn upload(&self, id: &str, path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
        let info = self.info(id)?;
        SandboxRoot::open(&info.root)?.upload(path, bytes, mode)
    }

    fn download(&self, id: &str, path: &Path, limit: u64) -> Result<Vec<u8>, Error> {
        let info = self.info(id)?;
        SandboxRoot::open(&info.root)?.download(path, limit)
    }

    fn snapshot(&self, id: &str, snapshot: &str, checkpoint: &str) -> Result<SnapshotRef, Error> {
        let started = Instant::now();
        let (info, cgroups) = {
            let live = self.lock();
            let l = live.get(id).ok_or_else(|| Error::UnknownSandbox {
                sandbox: id.to_owned(),
            })?;
            (l.info.clone(), l.cgroups.clone())
        };
        cgroups.freeze(id)?;
        let taken = rollpoint_snapshot::syncfs(&info.root)
            .and_then(|()| self.store.snapshot(id, snapshot))
            .map_err(|source| Error::Store {
                sandbox: id.to_owned(),
                source,
            });
        let thawed = cgroups.thaw(id);
        taken?;
        thawed?;
        record::write(
            &self.snapshot_record(snapshot),
            &SnapshotRecord {
                v: SPEC_VERSION,
                id: snapshot.to_owned(),
                sandbox: id.to_owned(),
                spec: info.spec.clone(),
            },
        )?;
        self.retain(checkpoint, snapshot)?;
        Ok(SnapshotRef {
            id: snapshot.to_owned(),
            sandbox: id.to_owned(),
            spec: info.spec,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }

    fn fork(&self, snapshot: &str, new_id: &str) -> Result<SandboxInfo, Error> {
        if self.lock().contains_key(new_id) || self.sandbox_dir(new_id).exists() {
            return Err(Error::SandboxExists {
                sandbox: new_id.to_owned(),
            });
        }
        let rec: SnapshotRecord = record::read("snapshot record", &self.snapshot_record(snapshot))?;
        let dirs = self
            .store
            .fork(snapshot, new_id)
            .map_err(|source| Error::Store {
                sandbox: new_id.to_owned(),
                source,
            })?;
        self.start(new_id, &rec.spec, &dirs, Some(snapshot.to_owned()))
    }

    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        self.store
            .delete_snapshot(snapshot)
            .map_err(|source| Error::Store {
                sandbox: "-".into(),
                source,
            })?;
        match std::fs::remove_file(self.snapshot_record(snapshot)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Setup {
                sandbox: "-".into(),
                what: format!("remove the record of snapshot {snapshot}"),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    fn destroy(&self, id: &str) -> Result<(), Error> {
        let live = self.lock().remove(id);
        match live {
            Some(l) => {
                let root = l.info.root.clone();
                self.teardown_checked(id, Some(l.anchor), &l.cgroups, &root)
            }
            None if self.sandbox_dir(id).exists() => self.teardown_stale(id),
            None => Err(Error::UnknownSandbox {
                sandbox: id.to_owned(),
            }),
        }
    }

    fn list(&self) -> Result<BackendListing, Error> {
        let dir = self.dir.join("sandboxes");
        let mut sandboxes: Vec<String> = std::fs::read_dir(&dir)
            .map_err(|source| Error::Setup {
                sandbox: "-".into(),
                what: format!("list {}", dir.display()),
                source,
            })?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        sandboxes.sort();
        let snapshots = self
            .store
            .list()
            .map_err(|source| Error::Store {
                sandbox: "-".into(),
                source,
            })?
            .snapshots;
        Ok(BackendListing {
            sandboxes,
            snapshots,
        })
    }
}
