//! Snapshot and delete a snapshot: the sandbox frozen through its cgroup,
//! its filesystem synced and the store's snapshot taken, then thawed; the
//! snapshot's record (what a fork is made from) and the index entry naming
//! it for its checkpoint written after. So a record never exists before
//! its snapshot, and the index never names a snapshot before its record;
//! a crash in between leaves a snapshot that no retained checkpoint names,
//! which the sweep (listing the store) deletes. Deleting goes the other
//! way: the store's snapshot first, then its record, so what a crash
//! leaves is a record without a snapshot, which the sweep (listing the
//! records) removes.

use std::time::Instant;

use super::record::{self, SnapshotRecord};
use super::{LocalBackend, crash, store_error};
use crate::{Error, SPEC_VERSION, SnapshotRef};

pub(super) fn snapshot(
    backend: &LocalBackend,
    id: &str,
    snapshot: &str,
    checkpoint: &str,
) -> Result<SnapshotRef, Error> {
    let started = Instant::now();
    let _working = backend.working();
    let (info, cgroups) = {
        let live = backend.lock();
        let l = live.get(id).ok_or_else(|| Error::UnknownSandbox {
            sandbox: id.to_owned(),
        })?;
        (l.info.clone(), l.cgroups.clone())
    };
    cgroups.freeze(id)?;
    crash::point("snapshot: frozen");
    let taken = rollpoint_snapshot::syncfs(&info.root)
        .and_then(|()| backend.store.snapshot(id, snapshot))
        .map(|s| match &s.content {
            rollpoint_snapshot::SnapshotContent::Archive(path) => {
                std::fs::metadata(path).ok().map(|m| m.len())
            }
            rollpoint_snapshot::SnapshotContent::Tree(_) => None,
        })
        .inspect(|_| crash::point("snapshot: taken"))
        .map_err(|source| Error::Store {
            sandbox: id.to_owned(),
            source,
        });
    let thawed = cgroups.thaw(id);
    let bytes = taken?;
    thawed?;
    crash::point("snapshot: thawed");
    let recorded = record::write(
        &backend.snapshot_record(snapshot),
        &SnapshotRecord {
            v: SPEC_VERSION,
            id: snapshot.to_owned(),
            sandbox: id.to_owned(),
            spec: info.spec.clone(),
        },
    )
    .and_then(|()| {
        backend
            .bases
            .pin(&backend.snapshot_record(snapshot), &info.spec.base)
    });
    if let Err(e) = recorded {
        // Nothing names the snapshot yet.
        let _ = remove(backend, snapshot);
        return Err(e);
    }
    crash::point("snapshot: recorded");
    // A failure here may still have named it (a rename that landed before
    // its directory's fsync failed): the sweep decides, from the index.
    retain(backend, checkpoint, snapshot)?;
    Ok(SnapshotRef {
        id: snapshot.to_owned(),
        sandbox: id.to_owned(),
        spec: info.spec,
        duration_ms: started.elapsed().as_secs_f64() * 1e3,
        bytes,
    })
}

/// Records that `checkpoint` names `snapshot` too, so sweeps keep it while
/// the checkpoint is retained.
fn retain(backend: &LocalBackend, checkpoint: &str, snapshot: &str) -> Result<(), Error> {
    backend.with_index(|index| index.add(checkpoint, snapshot).map_err(store_error))
}

pub(super) fn delete_snapshot(backend: &LocalBackend, snapshot: &str) -> Result<(), Error> {
    let _working = backend.working();
    backend
        .store
        .delete_snapshot(snapshot)
        .map_err(store_error)?;
    crash::point("delete: snapshot deleted");
    backend.remove_snapshot_record(snapshot)
}

/// The store's snapshot, then its record (the order a crash may split,
/// which the sweep finishes). A snapshot already gone is no error.
pub(super) fn remove(backend: &LocalBackend, snapshot: &str) -> Result<(), Error> {
    match backend.store.delete_snapshot(snapshot) {
        Ok(()) | Err(rollpoint_snapshot::Error::NoSnapshot { .. }) => {}
        Err(source) => return Err(store_error(source)),
    }
    crash::point("remove: snapshot deleted");
    backend.remove_snapshot_record(snapshot)
}
