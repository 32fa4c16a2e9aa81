//! Create: the sandbox's directory claimed first (what a sweep finds it by),
//! then a fresh upper from the store over the spec's base, then bringing a
//! sandbox up on an upper (shared with fork): the record, the overlay, the
//! workdir and control directories, the cgroups with their limits, the
//! anchor started inside them, and a wait until it answers. Whatever fails
//! half-way is torn down again; whatever a crash leaves half-way is in the
//! claimed directory's name, so the sweep tears it down.

use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use rollpoint_proto::anchor::{ANCHOR_SOCKET, AnchorRequest, LAUNCHES_DIR};
use rollpoint_snapshot::UpperDirs;

use super::backend::{Live, LocalBackend, REPLY_MARGIN, SUPERVISOR_TOOL};
use super::batch::Phases;
use super::cgroups::SandboxCgroups;
use super::record::{self, SandboxRecord};
use super::user::{self, Identity};
use super::{anchor, crash, mounts, network, spawn};
use crate::{
    SANDBOX_STATE_DIR, SPEC_VERSION, SandboxInfo, SandboxSpec, confine::SandboxRoot, errors::Error,
};

impl LocalBackend {
    pub(super) fn create(&self, id: &str, spec: &SandboxSpec) -> Result<SandboxInfo, Error> {
        let _working = self.working();
        let mut phases = Phases::new();
        check_isolation(id, spec)?;
        if !spec.isolation.is_strict() {
            tracing::warn!(
                sandbox = id,
                "sandbox is TRUSTED: its code runs as the host's root, unconfined"
            );
        }
        if spec.network.is_host() {
            tracing::warn!(
                sandbox = id,
                "sandbox network is HOST: its code reaches everything the host reaches, the \
             host's loopback services and every rollout's gateway route"
            );
        }
        // Resolve the base (an image pulled, its config applied) before making
        // anything that would need undoing.
        let spec = &self.bases.resolve(id, spec)?;
        self.bases.lower(id, &spec.base, &self.dir.join("bases"))?;
        phases.mark("base");
        self.claim(id)?;
        phases.mark("claim");
        crash::point("create: claimed");
        let made = self
            .store
            .create_upper(id)
            .map_err(|source| Error::Store {
                sandbox: id.to_owned(),
                source,
            })
            .and_then(|dirs| {
                crash::point("create: upper made");
                // A strict sandbox's root owns its `/` and `/tmp`.
                let owner = self.range_for(spec).map(|r| (r.host, r.host));
                mounts::prepare_upper(id, &dirs.upper, owner).map(|()| dirs)
            });
        phases.mark("upper");
        match made {
            Ok(dirs) => self.start(id, spec, &dirs, None, phases),
            Err(e) => {
                let _ = self.teardown_stale(id);
                Err(e)
            }
        }
    }

    /// Makes `sandboxes/<id>/`, refusing an id in use. Everything a sandbox
    /// has is made after its directory and removed before it, so a sweep that
    /// lists these directories finds whatever a crash left of a sandbox.
    pub(super) fn claim(&self, id: &str) -> Result<(), Error> {
        let exists = || Error::SandboxExists {
            sandbox: id.to_owned(),
        };
        if self.lock().contains_key(id) {
            return Err(exists());
        }
        let sbdir = self.sandbox_dir(id);
        match std::fs::DirBuilder::new().mode(0o700).create(&sbdir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(exists()),
            Err(source) => Err(Error::Setup {
                sandbox: id.to_owned(),
                what: format!("create {}", sbdir.display()),
                source,
            }),
        }
    }

    /// Brings up a sandbox on an upper the store has just made, in the
    /// directory [`Self::claim`] made.
    pub(super) fn start(
        &self,
        id: &str,
        spec: &SandboxSpec,
        dirs: &UpperDirs,
        forked_from: Option<String>,
        mut phases: Phases,
    ) -> Result<SandboxInfo, Error> {
        let sbdir = self.sandbox_dir(id);
        let root = sbdir.join("root");
        let control = sbdir.join("control");
        let cgroups = SandboxCgroups::locate(&self.cgroup_name(id));
        let started = self.bring_up(
            id,
            spec,
            dirs,
            forked_from.as_deref(),
            &cgroups,
            &mut phases,
        );
        let Started {
            mut anchor,
            mut rec,
            identity,
            netns: _netns,
            overlay: _overlay,
            view,
        } = match started {
            Ok(up) => up,
            Err(e) => {
                self.teardown(id, None, &cgroups, &root);
                return Err(e);
            }
        };
        let waited = wait_ready(
            id,
            self.options.start_timeout,
            &control,
            &mut anchor,
            &sbdir,
            &cgroups,
        );
        if let Err(e) = waited {
            self.teardown(id, Some(anchor), &cgroups, &root);
            return Err(e);
        }
        phases.mark("anchor ready");
        crash::point("start: anchor ready");
        rec.anchor_pid = anchor.id();
        let record_path = sbdir.join("sandbox.json");
        if let Err(e) = record::write(&record_path, &rec) {
            self.teardown(id, Some(anchor), &cgroups, &root);
            return Err(e);
        }
        let info = SandboxInfo {
            id: id.to_owned(),
            root: PathBuf::from(format!("/proc/{}/root", anchor.id())),
            control,
            anchor_pid: anchor.id(),
            spec: spec.clone(),
            forked_from,
        };
        phases.mark("record");
        tracing::debug!(sandbox = id, phases = %phases, "sandbox started");
        self.lock().insert(
            id.to_owned(),
            Live {
                info: info.clone(),
                anchor,
                cgroups,
                identity,
                root: view,
            },
        );
        Ok(info)
    }

    /// The steps of [`Self::start`] up to a started anchor: the record, the overlay,
    /// the user resolved in it, the directories, the cgroups and the anchor in
    /// them.
    fn bring_up(
        &self,
        id: &str,
        spec: &SandboxSpec,
        dirs: &UpperDirs,
        forked_from: Option<&str>,
        cgroups: &SandboxCgroups,
        phases: &mut Phases,
    ) -> Result<Started, Error> {
        let mut lower = self.bases.lower(id, &spec.base, &self.dir.join("bases"))?;
        let range = self.range_for(spec);
        // A strict sandbox on the host's root sees it through the layer that
        // hides the rest of the host, or where there is none, its upper (fresh
        // or forked) hides it.
        if spec.base == crate::Base::HostRoot
            && let Some(range) = range
        {
            match self.host_mask(id)? {
                Some(mask) => lower.insert(0, mask.to_owned()),
                None => self
                    .host_view(id)?
                    .hide(id, &dirs.upper, (range.host, range.host))?,
            }
        }
        let sbdir = self.sandbox_dir(id);
        let setup = |what: String| {
            move |source| Error::Setup {
                sandbox: id.to_owned(),
                what,
                source,
            }
        };
        let rec = SandboxRecord {
            v: SPEC_VERSION,
            id: id.to_owned(),
            spec: spec.clone(),
            forked_from: forked_from.map(str::to_owned),
            lower: lower.clone(),
            upper: dirs.upper.clone(),
            work: dirs.work.clone(),
            owner_pid: self.owner.0,
            owner_start: self.owner.1,
            anchor_pid: 0,
        };
        let record_path = sbdir.join("sandbox.json");
        record::write(&record_path, &rec)?;
        self.bases.pin(&record_path, &spec.base)?;
        phases.mark("first record");
        crash::point("start: recorded");

        let root = sbdir.join("root");
        let control = sbdir.join("control");
        // The run's namespace of `range`: the idmapped overlay's, and the one
        // the anchor confines in.
        let userns = range.map(|_| self.ids_userns(id)).transpose()?;
        // Idmapped layers for a strict sandbox on a rootfs, a tarball or an
        // image; on the host's root the anchor confines instead.
        let idmap = userns.filter(|_| spec.base != crate::Base::HostRoot);
        let overlay = mounts::make_overlay(id, &lower, &dirs.upper, &dirs.work, &root, idmap)?;
        let (overlay, view) = rollpoint_proctree::isolate::overlay::split(overlay, &root).map_err(
            setup(format!("clone the overlay of {}", dirs.upper.display())),
        )?;
        phases.mark("overlay");
        crash::point("start: mounted");
        let sandbox_root = SandboxRoot::from_fd(&root, &view)?;
        let identity = user::resolve(id, &sandbox_root, &spec.user, range)?;
        // The workdir and rollpoint's state directory are the user's: the task
        // and the harness write there.
        for dir in [spec.workdir.as_str(), SANDBOX_STATE_DIR] {
            sandbox_root.make_dir(Path::new(dir), identity.owner())?;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(control.join(LAUNCHES_DIR))
            .map_err(setup(format!("create {}", control.display())))?;
        phases.mark("dirs");
        cgroups.create(id, &spec.limits, &dirs.upper)?;
        if let Some(bytes) = spec.limits.disk_bytes {
            self.store
                .limit_upper(id, bytes)
                .map_err(|e| Error::Unsupported {
                    sandbox: id.to_owned(),
                    field: "sandbox.limits.disk_bytes".to_owned(),
                    message: e.to_string(),
                })?;
        }
        phases.mark("cgroups");
        crash::point("start: cgroups made");
        let log_path = sbdir.join("anchor.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(setup(format!("open {}", log_path.display())))?;
        let netns = (!spec.network.is_host())
            .then(|| self.netns.take())
            .flatten();
        let anchor = spawn::spawn_anchor(
            id,
            spawn::AnchorArgs {
                supervisor: &self.options.supervisor,
                root: &root,
                root_fd: std::os::fd::AsFd::as_fd(&overlay),
                control: &control,
                hostname: &spec.hostname,
                cgroup_v2: cgroups.v2.as_deref(),
                cgroup_freezer: cgroups.freezer.as_deref(),
                network: network::anchor_args(
                    id,
                    &spec.network,
                    self.gateway(),
                    self.gateway_attach().as_deref(),
                )?,
                log,
                join: cgroups.all().cloned().collect(),
                identity: &identity,
                // On the host's root the tools are lent at their own paths instead.
                tools: if spec.base == crate::Base::HostRoot {
                    &[]
                } else {
                    &self.options.tools
                },
                userns: range,
                userns_fd: userns.map(std::os::fd::AsFd::as_fd),
                netns_fd: netns.as_ref().map(std::os::fd::AsFd::as_fd),
                lend: &lent(spec, &self.options.tools),
                drop_capabilities: &spec.drop_capabilities,
                no_new_privs: spec.no_new_privs,
            },
        )?;
        phases.mark("anchor spawn");
        crash::point("start: anchor started");
        Ok(Started {
            anchor,
            rec,
            identity,
            netns,
            overlay,
            view,
        })
    }
}

/// Refuses what strict isolation cannot honour, by field, before anything
/// is made: a capability it does not keep, a lent path that is not an
/// absolute path without `.` or `..`.
fn check_isolation(id: &str, spec: &SandboxSpec) -> Result<(), Error> {
    network::check(id, &spec.network)?;
    let invalid = |field: String, message: String| Error::Spec {
        sandbox: id.to_owned(),
        field,
        message,
    };
    spec.limits
        .check()
        .map_err(|e| invalid(format!("sandbox.limits.{}", e.field), e.message))?;
    let host = &spec.hostname;
    if host.len() > rollpoint_proto::limits::MAX_HOSTNAME
        || !rollpoint_proto::net::is_host_name(host)
        || host.starts_with(['-', '.'])
    {
        return Err(invalid(
            "sandbox.hostname".to_owned(),
            format!(
                "{host:?}: must be 1 to {} letters, digits, `-` and `.`, not starting with `-` \
                 or `.`",
                rollpoint_proto::limits::MAX_HOSTNAME
            ),
        ));
    }
    if !spec.drop_capabilities.is_empty() {
        if !spec.isolation.is_strict() {
            return Err(invalid(
                "sandbox.drop_capabilities".to_owned(),
                "needs sandbox.isolation = \"strict\" (a trusted sandbox keeps the host's \
                 root's capabilities)"
                    .to_owned(),
            ));
        }
        rollpoint_proctree::isolate::drop_mask(&spec.drop_capabilities)
            .map_err(|e| invalid("sandbox.drop_capabilities".to_owned(), e.to_string()))?;
    }
    if spec.no_new_privs && !spec.isolation.is_strict() {
        return Err(invalid(
            "sandbox.no_new_privs".to_owned(),
            "needs sandbox.isolation = \"strict\" (a trusted sandbox is not confined)".to_owned(),
        ));
    }
    for (i, path) in spec.host_paths.iter().enumerate() {
        let text = path.to_string_lossy();
        let fine = path.is_absolute()
            && !path.components().any(|c| {
                matches!(
                    c,
                    std::path::Component::ParentDir | std::path::Component::CurDir
                )
            })
            && !text.contains([',', '\0']);
        if !fine {
            return Err(invalid(
                format!("sandbox.host_paths[{i}]"),
                format!("{text:?}: must be an absolute path without `.`, `..`, `,` or NUL"),
            ));
        }
        if !path.exists() {
            return Err(Error::Unsupported {
                sandbox: id.to_owned(),
                field: format!("sandbox.host_paths[{i}]"),
                message: format!("{text:?}: no such file or directory on the host"),
            });
        }
    }
    Ok(())
}

/// A started anchor, with what [`LocalBackend::start`] keeps of its bring-up.
struct Started {
    anchor: Child,
    rec: SandboxRecord,
    identity: Identity,
    /// The namespace made ahead, open until the anchor has taken it.
    netns: Option<OwnedFd>,
    /// The sandbox's root, attached nowhere on the host, open until the
    /// anchor has taken it.
    overlay: OwnedFd,
    /// The owner's own mount of it, without what the sandbox mounts on it:
    /// the owner's handle on its files.
    view: OwnedFd,
}

/// The host paths a sandbox sees at their own place: the task's
/// `host_paths`, and in a strict sandbox on the host's root the tools'
/// host paths outside the system directories it sees anyway (the harness
/// install, the worker, this program), which harness commands name by
/// those paths; not the supervisor, which launches run as
/// `/proc/self/exe`. A trusted sandbox on the host's root sees the whole
/// host already. Each costs the anchor two mounts.
fn lent(spec: &SandboxSpec, tools: &[super::backend::Tool]) -> Vec<std::path::PathBuf> {
    let mut paths = spec.host_paths.clone();
    if spec.base == crate::Base::HostRoot && spec.isolation.is_strict() {
        paths.extend(
            tools
                .iter()
                .filter(|t| t.at != SUPERVISOR_TOOL)
                .map(|t| t.host.clone())
                .filter(|p| !mounts::in_host_system_dir(p)),
        );
    }
    paths
}

/// Waits until the anchor answers on its socket; names why it did not (its
/// exit status, its memory limit when the OOM killer ended it, the tail of
/// its log).
fn wait_ready(
    id: &str,
    start_timeout: Duration,
    control: &Path,
    anchor: &mut Child,
    sbdir: &Path,
    cgroups: &SandboxCgroups,
) -> Result<(), Error> {
    let socket = control.join(ANCHOR_SOCKET);
    let deadline = Instant::now() + start_timeout;
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
                    // The sandbox is new: every kill its cgroup counted is
                    // one of its start.
                    Some(status) => match cgroups.oom_note(0) {
                        Some(note) => {
                            format!("anchor exited ({status}) before answering, {note}: {tail}")
                        }
                        None => format!("anchor exited ({status}) before answering: {tail}"),
                    },
                    None => format!("anchor did not answer within {start_timeout:?}: {tail}"),
                },
            });
        }
        std::thread::sleep(pause);
        // Short: a ready anchor not yet seen holds one of the owner's few
        // start slots; a look before the socket exists costs one `stat`.
        pause = (pause * 2).min(READY_POLL_MAX);
    }
}

/// The longest pause between two looks for a starting anchor's socket.
const READY_POLL_MAX: Duration = Duration::from_millis(2);

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    /// An anchor that dies by SIGKILL before answering, in a sandbox whose
    /// memory cgroup counted an OOM kill.
    #[test]
    fn an_anchor_killed_by_the_memory_limit_at_start_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let memory = dir.path().join("memory");
        std::fs::create_dir(&memory).unwrap();
        std::fs::write(dir.path().join("anchor.log"), "starting\n").unwrap();
        let cgroups = SandboxCgroups {
            memory: Some(memory.clone()),
            ..SandboxCgroups::default()
        };
        let start = |cgroups: &SandboxCgroups| {
            let mut anchor = std::process::Command::new("/bin/sh")
                .args(["-c", "kill -9 $$"])
                .spawn()
                .unwrap();
            let control = dir.path().join("control");
            let err = wait_ready(
                "sb",
                Duration::from_secs(10),
                &control,
                &mut anchor,
                dir.path(),
                cgroups,
            )
            .unwrap_err();
            err.to_string()
        };
        let plain = start(&cgroups);
        assert!(plain.contains("anchor exited (signal: 9"), "{plain}");
        assert!(plain.ends_with("before answering: starting"), "{plain}");

        std::fs::write(
            memory.join("memory.oom_control"),
            "oom_kill_disable 0\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(memory.join("memory.limit_in_bytes"), "16777216\n").unwrap();
        let oom = start(&cgroups);
        assert!(
            oom.contains(
                "before answering, killed by its memory limit of 16 MiB \
                 (memory.limit_in_bytes; 1 OOM kill): starting"
            ),
            "{oom}"
        );
    }
}
