//! Snapshots as portable streams, for a checkpoint store that outlives this node: the store
//! sends a snapshot (whole, or against one it descends from), and receives one another node
//! sent, with its record and index entry written after it as a snapshot taken here would be,
//! so forks, sweeps and retention treat a received snapshot exactly like a local one.

use std::path::Path;

use super::backend::{LocalBackend, store_error};
use super::record::{self, SnapshotRecord};
use crate::{SPEC_VERSION, SandboxSpec, errors::Error};

pub(super) fn send(
    backend: &LocalBackend,
    snapshot: &str,
    parent: Option<&str>,
    out: &Path,
) -> Result<SnapshotRecord, Error> {
    let _working = backend.working();
    let rec: SnapshotRecord = record::read("snapshot record", &backend.snapshot_record(snapshot))?;
    backend
        .store
        .send(snapshot, parent, out)
        .map_err(|source| Error::Store {
            sandbox: rec.sandbox.clone(),
            source,
        })?;
    Ok(rec)
}

pub(super) fn receive(
    backend: &LocalBackend,
    snapshot: &str,
    sandbox: &str,
    spec: &SandboxSpec,
    checkpoint: &str,
    stream: &Path,
) -> Result<(), Error> {
    let _working = backend.working();
    backend
        .store
        .receive(snapshot, stream)
        .map_err(|source| Error::Store {
            sandbox: sandbox.to_owned(),
            source,
        })?;
    let path = backend.snapshot_record(snapshot);
    let rec = SnapshotRecord {
        v: SPEC_VERSION,
        id: snapshot.to_owned(),
        sandbox: sandbox.to_owned(),
        spec: spec.clone(),
        received: true,
    };
    let recorded = record::write_new(&[(path.clone(), &rec)])
        .and_then(|()| backend.bases.pin(&path, &rec.spec.base))
        .and_then(|()| {
            backend.with_index(|index| index.add_all(checkpoint, &[snapshot]).map_err(store_error))
        });
    if let Err(e) = recorded {
        // Nothing names it yet, or the sweep decides from the index.
        let _ = backend.store.delete_snapshot(snapshot);
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(())
}

pub(super) fn has(backend: &LocalBackend, snapshot: &str) -> bool {
    backend.snapshot_record(snapshot).is_file()
        && backend
            .store
            .list()
            .is_ok_and(|l| l.snapshots.iter().any(|s| s == snapshot))
}
