//! Sweeps: snapshots no retained checkpoint names, and sandboxes whose owner
//! process is gone (a crashed run's).

use super::record::{self, SandboxRecord};
use super::{LocalBackend, destroy, list};
use crate::Error;

pub(super) fn sweep_snapshots(
    backend: &LocalBackend,
    retained: &[&str],
) -> Result<Vec<String>, Error> {
    let deleted = backend
        .with_index(|index| rollpoint_snapshot::sweep(index, backend.store.as_ref(), retained))?;
    for snapshot in &deleted {
        let _ = std::fs::remove_file(backend.snapshot_record(snapshot));
    }
    Ok(deleted)
}

pub(super) fn sweep_orphans(backend: &LocalBackend) -> Result<Vec<String>, Error> {
    let mut swept = Vec::new();
    for id in list::list(backend)?.sandboxes {
        if backend.lock().contains_key(&id) {
            continue;
        }
        let path = backend.sandbox_dir(&id).join("sandbox.json");
        let alive = match record::read::<SandboxRecord>("sandbox record", &path) {
            Ok(r) => {
                rollpoint_proctree::scan::read_stat(r.owner_pid)
                    .is_some_and(|s| s.start_time == r.owner_start)
                    && (r.owner_pid, r.owner_start) != backend.owner
            }
            Err(_) => false,
        };
        if !alive {
            destroy::teardown_stale(backend, &id)?;
            swept.push(id);
        }
    }
    Ok(swept)
}
