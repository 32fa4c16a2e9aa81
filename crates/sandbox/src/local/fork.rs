//! Fork: a new sandbox on the store's fork of a snapshot, with the spec the
//! snapshot was taken with, so every in-sandbox path is the same.

use super::record::{self, SnapshotRecord};
use super::{LocalBackend, create};
use crate::{Error, SandboxInfo};

pub(super) fn fork(
    backend: &LocalBackend,
    snapshot: &str,
    new_id: &str,
) -> Result<SandboxInfo, Error> {
    if backend.lock().contains_key(new_id) || backend.sandbox_dir(new_id).exists() {
        return Err(Error::SandboxExists {
            sandbox: new_id.to_owned(),
        });
    }
    let rec: SnapshotRecord = record::read("snapshot record", &backend.snapshot_record(snapshot))?;
    let dirs = backend
        .store
        .fork(snapshot, new_id)
        .map_err(|source| Error::Store {
            sandbox: new_id.to_owned(),
            source,
        })?;
    create::start(backend, new_id, &rec.spec, &dirs, Some(snapshot.to_owned()))
}
