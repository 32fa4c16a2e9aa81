//! Destroy: kill everything in the sandbox's cgroups, wait for its anchor,
//! unmount the overlay, remove the cgroups, the upper and the sandbox's
//! directory. The same teardown undoes a start that failed half-way and
//! removes what a crashed owner left (from its record).

use std::path::Path;
use std::process::Child;

use super::LocalBackend;
use super::cgroups::SandboxCgroups;
use super::mounts;
use crate::Error;

pub(super) fn destroy(backend: &LocalBackend, id: &str) -> Result<(), Error> {
    let live = backend.lock().remove(id);
    match live {
        Some(l) => {
            let root = l.info.root.clone();
            teardown_checked(backend, id, Some(l.anchor), &l.cgroups, &root)
        }
        None if backend.sandbox_dir(id).exists() => teardown_stale(backend, id),
        None => Err(Error::UnknownSandbox {
            sandbox: id.to_owned(),
        }),
    }
}

/// Destroys every sandbox this backend started.
pub(super) fn destroy_all(backend: &LocalBackend) -> Result<(), Error> {
    let ids: Vec<String> = backend.lock().keys().cloned().collect();
    for id in ids {
        destroy(backend, &id)?;
    }
    Ok(())
}

/// Best-effort removal of everything `start` may have made, used when
/// start fails half-way.
pub(super) fn teardown(
    backend: &LocalBackend,
    id: &str,
    anchor: Option<Child>,
    cgroups: &SandboxCgroups,
    root: &Path,
) {
    let _ = teardown_checked(backend, id, anchor, cgroups, root);
}

fn teardown_checked(
    backend: &LocalBackend,
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
    match backend.store.destroy_upper(id) {
        Ok(()) => {}
        Err(rollpoint_snapshot::Error::NoUpper { .. }) => {}
        Err(source) => {
            return Err(Error::Store {
                sandbox: id.to_owned(),
                source,
            });
        }
    }
    let sbdir = backend.sandbox_dir(id);
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
pub(super) fn teardown_stale(backend: &LocalBackend, id: &str) -> Result<(), Error> {
    let cgroups = SandboxCgroups::locate(&backend.cgroup_name(id));
    let root = backend.sandbox_dir(id).join("root");
    teardown_checked(backend, id, None, &cgroups, &root)
}
