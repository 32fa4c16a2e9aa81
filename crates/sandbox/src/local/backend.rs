//! The local backend's state and the helpers every verb shares. The verbs
//! live one per file beside it, each an `impl LocalBackend` block, and
//! `mod.rs` holds the trait impl that delegates to them, so no verb file
//! imports the file that calls it.

use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use rollpoint_image::{ImageCache, RegistryOptions};
use rollpoint_proto::anchor::{ANCHOR_SOCKET, AnchorRequest};
use rollpoint_snapshot::{SnapshotStore, StoreOptions};
use sha2::{Digest, Sha256};

use super::base::Bases;
use super::cgroups::{self, SandboxCgroups};
use super::{anchor, ids, mounts, record, user};
use crate::{SandboxInfo, SandboxSpec, errors::Error};

/// Where the supervisor is lent inside a sandbox not on the host's root.
pub(super) const SUPERVISOR_TOOL: &str = "bin/rollpoint-supervisor";

/// Under the backend's directory: the launch output logs of destroyed sandboxes,
/// `output/<sandbox>/<launch>.log`.
pub const OUTPUT_DIR: &str = "output";

/// How the local backend is set up.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// The `rollpoint-supervisor` binary (static, so it runs in any base).
    pub supervisor: PathBuf,
    pub store: StoreOptions,
    /// How long a new sandbox's anchor has to answer.
    pub start_timeout: Duration,
    /// The image cache; `None`: `images/` in the backend's directory.
    pub image_cache: Option<PathBuf>,
    pub registry: RegistryOptions,
    /// Host files and directories mounted read-only under `/.rollpoint`
    /// in every sandbox whose base is not the host's root (a strict one on
    /// the host's root is lent them at their own paths).
    pub tools: Vec<Tool>,
    /// Where the id ranges of strict sandboxes are claimed, node-wide.
    pub id_claims: PathBuf,
}

/// A host file or directory a sandbox not on the host's root gets at
/// `/.rollpoint/<at>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    /// Relative, e.g. `bin/rollpoint-worker`.
    pub at: String,
    pub host: PathBuf,
}

impl LocalOptions {
    pub fn new(supervisor: PathBuf) -> Self {
        Self {
            supervisor,
            store: StoreOptions::default(),
            start_timeout: Duration::from_secs(20),
            image_cache: None,
            registry: RegistryOptions::default(),
            tools: Vec::new(),
            id_claims: PathBuf::from(ids::DEFAULT_CLAIMS_DIR),
        }
    }
}

/// Extra time an anchor gets beyond a command's own timeout to reply.
pub(super) const REPLY_MARGIN: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(super) struct Live {
    pub(super) info: SandboxInfo,
    pub(super) anchor: Child,
    pub(super) cgroups: SandboxCgroups,
    /// What `spec.user` resolved to when the anchor started.
    pub(super) identity: user::Identity,
    /// The owner's own mount of the sandbox's overlay (attached nowhere,
    /// without what the sandbox mounts on it; the anchor's namespace alone
    /// has the overlay attached). The owner reaches its files through this.
    pub(super) root: std::os::fd::OwnedFd,
}

/// Sandboxes on this machine.
#[derive(Debug)]
pub struct LocalBackend {
    pub(super) dir: PathBuf,
    /// Distinguishes this directory's cgroups from another run's.
    pub(super) key: String,
    pub(super) options: LocalOptions,
    pub(super) store: Box<dyn SnapshotStore>,
    pub(super) bases: Bases,
    pub(super) live: Mutex<HashMap<String, Live>>,
    /// Serialises read-modify-write of the snapshot index: snapshots of
    /// several sandboxes for one checkpoint run concurrently.
    pub(super) index: Mutex<()>,
    /// Held shared by every verb that makes or removes something (create,
    /// fork, snapshot, delete, destroy) and exclusively by the sweeps, so
    /// a sweep never takes another thread's half-made sandbox or snapshot
    /// for a crash's leftover.
    pub(super) sweeps: RwLock<()>,
    pub(super) owner: (u32, u64),
    /// The host ids of this directory's strict sandboxes (`ids`).
    pub(super) ids: rollpoint_proctree::isolate::IdRange,
    /// A user namespace mapped by `ids`, made at the first strict sandbox:
    /// the idmapped mounts of layers use it, and every strict sandbox's
    /// anchor takes a copy (`--owner-userns-fd`) instead of making one.
    pub(super) ids_userns: std::sync::OnceLock<std::os::fd::OwnedFd>,
    /// Held while [`Self::ids_userns`] or [`Self::host_mask`] is made:
    /// one of each, not one per racing thread.
    pub(super) made_once: Mutex<()>,
    /// What strict sandboxes on the host's root hide, read at the first.
    pub(super) host_view: std::sync::OnceLock<mounts::HostView>,
    /// The layer that hides it ([`mounts::HostView::layer`]), made at the
    /// first strict sandbox on the host's root.
    pub(super) host_mask: std::sync::OnceLock<Option<PathBuf>>,
    /// The gateway as the host reaches it, which a sandbox's relay dials
    /// (`network = "gateway"` or `"allow"`); set by whoever runs the gateway.
    pub(super) gateway: RwLock<Option<std::net::SocketAddrV4>>,
    /// The attach socket of a gateway on this node: sandboxes made from now
    /// on hand it their gateway listener instead of relaying to `gateway`.
    pub(super) gateway_attach: RwLock<Option<PathBuf>>,
    /// Network namespaces made ahead for the sandboxes that take them.
    pub(super) netns: super::netns::NetnsPool,
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
        // One descriptor per live sandbox: its root's mount.
        if let Err(e) = rollpoint_proctree::limits::raise_open_files() {
            tracing::warn!(error = %e, "cannot raise the open-descriptor limit; sandboxes past it will not start");
        }
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
        let image_dir = options
            .image_cache
            .clone()
            .unwrap_or_else(|| dir.join("images"));
        let images = ImageCache::open(&image_dir).map_err(|e| Error::Invalid {
            sandbox: "-".into(),
            message: e.to_string(),
        })?;
        let mut tools = Vec::with_capacity(options.tools.len() + 1);
        tools.push(Tool {
            at: SUPERVISOR_TOOL.into(),
            host: options.supervisor.clone(),
        });
        for tool in &options.tools {
            tools.push(checked_tool(tool)?);
        }
        options.tools = tools;
        let bases = Bases::new(
            images,
            options.registry.clone(),
            interpreter(&options.supervisor),
        );
        // The path alone does not tell runs apart on a host: containers see different
        // directories at one path. The directory's device and inode do.
        let meta = std::fs::metadata(&dir).map_err(|source| Error::Setup {
            sandbox: "-".into(),
            what: format!("read {}", dir.display()),
            source,
        })?;
        let mut hasher = Sha256::new();
        hasher.update(dir.as_os_str().as_encoded_bytes());
        hasher.update(std::os::unix::fs::MetadataExt::dev(&meta).to_le_bytes());
        hasher.update(std::os::unix::fs::MetadataExt::ino(&meta).to_le_bytes());
        let key = format!("{:x}", hasher.finalize())[..12].to_owned();
        let ids = ids::range_of(&dir, &options.id_claims)?;
        Ok(Self {
            dir,
            key,
            options,
            store: opened.store,
            bases,
            live: Mutex::new(HashMap::new()),
            index: Mutex::new(()),
            sweeps: RwLock::new(()),
            owner: owner_identity(),
            ids,
            ids_userns: std::sync::OnceLock::new(),
            made_once: Mutex::new(()),
            host_view: std::sync::OnceLock::new(),
            host_mask: std::sync::OnceLock::new(),
            gateway: RwLock::new(None),
            gateway_attach: RwLock::new(None),
            netns: super::netns::NetnsPool::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The host ids of this backend's strict sandboxes: root inside is
    /// `ids().host` on the host.
    pub fn ids(&self) -> rollpoint_proctree::isolate::IdRange {
        self.ids
    }

    /// Where sandboxes made from now on reach the gateway: their relay
    /// dials `addr` on the host for `127.0.0.1:<its port>` inside.
    pub fn route_to_gateway(&self, addr: std::net::SocketAddrV4) {
        *self.gateway.write().unwrap_or_else(PoisonError::into_inner) = Some(addr);
    }

    /// The gateway is on this node and takes listeners at `socket`: each
    /// sandbox made from now on hands it the listener it makes at
    /// `127.0.0.1:<gateway port>` in its network namespace, and its model
    /// calls take no relay (`rollpoint gateway --attach-socket`). `None`:
    /// sandboxes made from now on relay to the gateway again.
    pub fn attach_to_gateway(&self, socket: Option<PathBuf>) {
        *self
            .gateway_attach
            .write()
            .unwrap_or_else(PoisonError::into_inner) = socket;
    }

    /// The gateway's attach socket, if one is set.
    pub(super) fn gateway_attach(&self) -> Option<PathBuf> {
        self.gateway_attach
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The gateway sandboxes reach, if one is set.
    pub fn gateway(&self) -> Option<std::net::SocketAddrV4> {
        *self.gateway.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The user namespace of [`Self::ids`], made once.
    pub(super) fn ids_userns(&self, sandbox: &str) -> Result<&std::os::fd::OwnedFd, Error> {
        if let Some(ns) = self.ids_userns.get() {
            return Ok(ns);
        }
        let _making = self
            .made_once
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(ns) = self.ids_userns.get() {
            return Ok(ns);
        }
        let ns = rollpoint_proctree::isolate::userns::create(self.ids).map_err(|source| {
            Error::Setup {
                sandbox: sandbox.to_owned(),
                what: format!("make a user namespace for the ids {}", self.ids),
                source,
            }
        })?;
        Ok(self.ids_userns.get_or_init(|| ns))
    }

    /// [`mounts::HostView`], read once (two threads that race both read
    /// the same host; one answer is kept).
    pub(super) fn host_view(&self, sandbox: &str) -> Result<&mounts::HostView, Error> {
        if let Some(view) = self.host_view.get() {
            return Ok(view);
        }
        let view = mounts::HostView::read().map_err(|source| Error::Setup {
            sandbox: sandbox.to_owned(),
            what: "read the host's / and /etc to hide them".to_owned(),
            source,
        })?;
        Ok(self.host_view.get_or_init(|| view))
    }

    /// The layer below a strict sandbox's upper on the host's root that
    /// hides the host ([`mounts::HostView::layer`]), made once in the
    /// store's layers directory; `None` where the store has none or
    /// overlayfs will not stack it (each upper then hides the host itself).
    pub(super) fn host_mask(&self, sandbox: &str) -> Result<Option<&Path>, Error> {
        if let Some(at) = self.host_mask.get() {
            return Ok(at.as_deref());
        }
        let _made = self
            .made_once
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = self.host_mask.get() {
            return Ok(at.as_deref());
        }
        let at = match self.store.layers_dir() {
            Some(dir) => {
                let owner = (self.ids.host, self.ids.host);
                let layer = self.host_view(sandbox)?.layer(sandbox, &dir, owner)?;
                let scratch = dir.join(format!(".probe.{}", std::process::id()));
                mounts::HostView::stacks_on_host_root(sandbox, &layer, &scratch).then_some(layer)
            }
            None => None,
        };
        if at.is_none() {
            tracing::debug!(
                sandbox,
                "no layer to hide the host in: each strict sandbox's upper hides it"
            );
        }
        Ok(self.host_mask.get_or_init(|| at).as_deref())
    }

    /// The id range of this backend's strict sandboxes, `None` for a
    /// trusted spec.
    pub(super) fn range_for(
        &self,
        spec: &SandboxSpec,
    ) -> Option<rollpoint_proctree::isolate::IdRange> {
        spec.isolation.is_strict().then_some(self.ids)
    }

    /// The image cache sandboxes of this backend use.
    pub fn images(&self) -> &ImageCache {
        self.bases.images()
    }

    pub fn store_kind(&self) -> rollpoint_snapshot::StoreKind {
        self.store.kind()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<String, Live>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.dir.join("sandboxes").join(id)
    }

    /// Where a destroyed sandbox's launch output logs are kept (`OUTPUT_DIR/<sandbox>`).
    pub(super) fn output_dir(&self, id: &str) -> PathBuf {
        self.dir.join(OUTPUT_DIR).join(id)
    }

    pub(super) fn snapshot_record(&self, snapshot: &str) -> PathBuf {
        self.dir.join("snapshots").join(format!("{snapshot}.json"))
    }

    pub(super) fn index_path(&self) -> PathBuf {
        self.dir.join("index.json")
    }

    /// Runs `f` on the snapshot index, one read-modify-write at a time.
    pub(super) fn with_index<T>(
        &self,
        f: impl FnOnce(&mut rollpoint_snapshot::SnapshotIndex) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let _serial = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        let mut index =
            rollpoint_snapshot::SnapshotIndex::open(&self.index_path()).map_err(store_error)?;
        f(&mut index)
    }

    /// Taken by a verb that makes or removes sandboxes or snapshots.
    pub(super) fn working(&self) -> RwLockReadGuard<'_, ()> {
        self.sweeps.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Taken by a sweep: no verb is half-way.
    pub(super) fn sweeping(&self) -> RwLockWriteGuard<'_, ()> {
        self.sweeps.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn cgroup_name(&self, id: &str) -> String {
        format!("sandbox-{}-{id}", self.key)
    }

    /// Removes a snapshot's record; one already gone is no error.
    pub(super) fn remove_snapshot_record(&self, snapshot: &str) -> Result<(), Error> {
        match std::fs::remove_file(self.snapshot_record(snapshot)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Setup {
                sandbox: "-".into(),
                what: format!("remove the record of snapshot {snapshot}"),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    pub(super) fn info(&self, id: &str) -> Result<SandboxInfo, Error> {
        self.live(id, |l| l.info.clone())
    }

    pub(super) fn live<T>(&self, id: &str, f: impl FnOnce(&Live) -> T) -> Result<T, Error> {
        self.lock()
            .get(id)
            .map(f)
            .ok_or_else(|| Error::UnknownSandbox {
                sandbox: id.to_owned(),
            })
    }

    /// A live sandbox's root, for the owner to reach its files confined
    /// beneath it.
    pub(super) fn root(&self, id: &str) -> Result<crate::confine::SandboxRoot, Error> {
        let live = self.lock();
        let l = live.get(id).ok_or_else(|| Error::UnknownSandbox {
            sandbox: id.to_owned(),
        })?;
        crate::confine::SandboxRoot::from_fd(&l.info.root, &l.root)
    }

    /// A live sandbox's control directory and cgroups.
    pub(super) fn control_and_cgroups(
        &self,
        id: &str,
    ) -> Result<(PathBuf, cgroups::SandboxCgroups), Error> {
        let live = self.lock();
        let l = live.get(id).ok_or_else(|| Error::UnknownSandbox {
            sandbox: id.to_owned(),
        })?;
        Ok((l.info.control.clone(), l.cgroups.clone()))
    }

    /// Asks the sandbox's anchor. When the kernel's OOM killer ended a
    /// process of the sandbox meanwhile, an error says so and names the
    /// memory limit, and a reply comes with that note.
    pub(super) fn ask(
        &self,
        id: &str,
        request: &AnchorRequest,
        timeout: Duration,
    ) -> Result<(rollpoint_proto::anchor::AnchorReply, Option<String>), Error> {
        let (control, cgroups) = self.control_and_cgroups(id)?;
        let before = cgroups.oom_kills();
        match anchor::ask(id, &control.join(ANCHOR_SOCKET), request, timeout) {
            Ok(reply) => Ok((reply, cgroups.oom_note(before))),
            Err(Error::Anchor {
                sandbox,
                socket,
                message,
            }) => Err(Error::Anchor {
                sandbox,
                socket,
                message: match cgroups.oom_note(before) {
                    Some(note) => format!("{message} (a process of the sandbox was {note})"),
                    None => message,
                },
            }),
            Err(e) => Err(e),
        }
    }
}
/// linked. Read by hand: 64-bit little-endian program headers are all that
/// is looked at, and no crate is needed for that.
fn interpreter(binary: &Path) -> Option<String> {
    let bytes = std::fs::read(binary).ok()?;
    let u16_at = |o: usize| Some(u16::from_le_bytes(bytes.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(bytes.get(o..o + 8)?.try_into().ok()?));
    if bytes.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let (size, count) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    (0..count).find_map(|i| {
        let ph = phoff + i * size;
        let kind = u32::from_le_bytes(bytes.get(ph..ph + 4)?.try_into().ok()?);
        (kind == 3).then(|| {
            let off = usize::try_from(u64_at(ph + 8)?).ok()?;
            let len = usize::try_from(u64_at(ph + 32)?).ok()?;
            let raw = bytes.get(off..off + len)?;
            Some(
                String::from_utf8_lossy(raw)
                    .trim_end_matches('\0')
                    .to_owned(),
            )
        })?
    })
}

/// A tool with its host path resolved and its place checked: relative,
/// with no `..`.
fn checked_tool(tool: &Tool) -> Result<Tool, Error> {
    let invalid = |message: String| Error::Invalid {
        sandbox: "-".into(),
        message: format!("tool {}: {message}", tool.at),
    };
    let rel = std::path::Path::new(&tool.at);
    if tool.at.is_empty()
        || !rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err(invalid(
            "its place must be a relative path without `..`".into(),
        ));
    }
    let host = std::fs::canonicalize(&tool.host)
        .map_err(|e| invalid(format!("{}: {e}", tool.host.display())))?;
    Ok(Tool {
        at: tool.at.clone(),
        host,
    })
}

/// A store error not about one sandbox.
pub(super) fn store_error(source: rollpoint_snapshot::Error) -> Error {
    Error::Store {
        sandbox: "-".into(),
        source,
    }
}
