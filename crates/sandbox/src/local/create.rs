//! Create: a fresh upper from the store over the spec's base, then bringing
//! a sandbox up on an upper (shared with fork): the record first, the
//! overlay, the workdir and control directories, the cgroups with their
//! limits, the anchor started inside them, and a wait until it answers.
//! Whatever fails half-way is torn down again.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use rollpoint_proto::anchor::{ANCHOR_SOCKET, AnchorRequest, LAUNCHES_DIR};
use rollpoint_snapshot::UpperDirs;

use super::cgroups::SandboxCgroups;
use super::record::{self, SandboxRecord};
use super::{Live, LocalBackend, REPLY_MARGIN, anchor, destroy, mounts, spawn};
use crate::{Error, SPEC_VERSION, SandboxInfo, SandboxSpec, sandbox_relative};

pub(super) fn create(
    backend: &LocalBackend,
    id: &str,
    spec: &SandboxSpec,
) -> Result<SandboxInfo, Error> {
    if backend.lock().contains_key(id) || backend.sandbox_dir(id).exists() {
        return Err(Error::SandboxExists {
            sandbox: id.to_owned(),
        });
    }
    // Resolve the base before making anything that would need undoing.
    backend
        .bases
        .lower(id, &spec.base, &backend.dir.join("bases"))?;
    let store_err = |source| Error::Store {
        sandbox: id.to_owned(),
        source,
    };
    let dirs = backend.store.create_upper(id).map_err(store_err)?;
    if let Err(e) = mounts::private_tmp(id, &dirs.upper) {
        let _ = backend.store.destroy_upper(id);
        return Err(e);
    }
    start(backend, id, spec, &dirs, None)
}

/// Brings up a sandbox on an upper the store has just made.
pub(super) fn start(
    backend: &LocalBackend,
    id: &str,
    spec: &SandboxSpec,
    dirs: &UpperDirs,
    forked_from: Option<String>,
) -> Result<SandboxInfo, Error> {
    let lower = backend
        .bases
        .lower(id, &spec.base, &backend.dir.join("bases"))?;
    let sbdir = backend.sandbox_dir(id);
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
        owner_pid: backend.owner.0,
        owner_start: backend.owner.1,
        anchor_pid: 0,
    };
    let record_path = sbdir.join("sandbox.json");
    record::write(&record_path, &rec)?;

    let root = sbdir.join("root");
    let control = sbdir.join("control");
    let cgroups = SandboxCgroups::locate(&backend.cgroup_name(id));
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
                supervisor: &backend.options.supervisor,
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
            destroy::teardown(backend, id, None, &cgroups, &root);
            return Err(e);
        }
    };
    if let Err(e) = wait_ready(backend, id, &control, &mut anchor, &sbdir) {
        destroy::teardown(backend, id, Some(anchor), &cgroups, &root);
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
    backend.lock().insert(
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
    backend: &LocalBackend,
    id: &str,
    control: &Path,
    anchor: &mut Child,
    sbdir: &Path,
) -> Result<(), Error> {
    let socket = control.join(ANCHOR_SOCKET);
    let deadline = Instant::now() + backend.options.start_timeout;
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
                        backend.options.start_timeout
                    ),
                },
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
