//! Snapshot and delete a snapshot: the sandbox frozen through its cgroup,
//! its filesystem synced and the store's snapshot taken, then thawed; the
//! snapshot's record (what a fork is made from) and the index entry naming
//! it for its checkpoint written after.

use std::time::Instant;

use super::LocalBackend;
use super::record::{self, SnapshotRecord};
use crate::{Error, SPEC_VERSION, SnapshotRef};

pub(super) fn snapshot(
    backend: &LocalBackend,
    id: &str,
    snapshot: &str,
    checkpoint: &str,
) -> Result<SnapshotRef, Error> {
    let started = Instant::now();
    let (info, cgroups) = {
        let live = backend.lock();
        let l = live.get(id).ok_or_else(|| Error::UnknownSandbox {
            sandbox: id.to_owned(),
        })?;
        (l.info.clone(), l.cgroups.clone())
    };
    cgroups.freeze(id)?;
    let taken = rollpoint_snapshot::syncfs(&info.root)
        .and_then(|()| backend.store.snapshot(id, snapshot))
        .map_err(|source| Error::Store {
            sandbox: id.to_owned(),
            source,
        });
    let thawed = cgroups.thaw(id);
    taken?;
    thawed?;
    record::write(
        &backend.snapshot_record(snapshot),
        &SnapshotRecord {
            v: SPEC_VERSION,
            id: snapshot.to_owned(),
            sandbox: id.to_owned(),
            spec: info.spec.clone(),
        },
    )?;
    retain(backend, checkpoint, snapshot)?;
    Ok(SnapshotRef {
        id: snapshot.to_owned(),
        sandbox: id.to_owned(),
        spec: info.spec,
        duration_ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

/// Records that `checkpoint` names `snapshot` too, so sweeps keep it while
/// the checkpoint is retained.
fn retain(backend: &LocalBackend, checkpoint: &str, snapshot: &str) -> Result<(), Error> {
    backend.with_index(|index| index.add(checkpoint, snapshot))
}

pub(super) fn delete_snapshot(backend: &LocalBackend, snapshot: &str) -> Result<(), Error> {
    backend
        .store
        .delete_snapshot(snapshot)
        .map_err(|source| Error::Store {
            sandbox: "-".into(),
            source,
        })?;
    match std::fs::remove_file(backend.snapshot_record(snapshot)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Setup {
            sandbox: "-".into(),
            what: format!("remove the record of snapshot {snapshot}"),
            source: e,
        }),
        _ => Ok(()),
    }
}
