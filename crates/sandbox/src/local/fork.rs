//! Fork: a new sandbox on the store's fork of a snapshot, with the spec the
//! snapshot was taken with, so every in-sandbox path is the same. As in
//! create, the sandbox's directory is claimed before the store makes its
//! upper, so a crash in between leaves nothing a sweep cannot find.

use super::backend::LocalBackend;
use super::batch::Phases;
use super::record::{self, SnapshotRecord};
use super::{crash, create, destroy};
use crate::{SandboxInfo, errors::Error};

pub(super) fn fork(
    backend: &LocalBackend,
    snapshot: &str,
    new_id: &str,
) -> Result<SandboxInfo, Error> {
    let _working = backend.working();
    let mut phases = Phases::new();
    let path = backend.snapshot_record(snapshot);
    let rec: SnapshotRecord = match record::read("snapshot record", &path) {
        // No record: no such snapshot here.
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Store {
                sandbox: new_id.to_owned(),
                source: rollpoint_snapshot::Error::NoSnapshot {
                    snapshot: snapshot.to_owned(),
                    path,
                },
            });
        }
        read => read?,
    };
    create::claim(backend, new_id)?;
    phases.mark("claim");
    crash::point("fork: claimed");
    let forked = backend.store.fork(snapshot, new_id);
    let dirs = match forked {
        Ok(dirs) => dirs,
        Err(source) => {
            let _ = destroy::teardown_stale(backend, new_id);
            return Err(Error::Store {
                sandbox: new_id.to_owned(),
                source,
            });
        }
    };
    crash::point("fork: upper made");
    phases.mark("fork upper");
    // A snapshot another node took holds its files under that node's
    // range: they become this backend's sandbox's.
    if rec.received && rec.spec.isolation.is_strict() {
        let shifted =
            super::ids::shift_into(&dirs.upper, backend.ids).map_err(|source| Error::Setup {
                sandbox: new_id.to_owned(),
                what: format!(
                    "shift the ids of {} into {}",
                    dirs.upper.display(),
                    backend.ids
                ),
                source,
            });
        if let Err(e) = shifted {
            let _ = destroy::teardown_stale(backend, new_id);
            return Err(e);
        }
        phases.mark("ids shifted");
    }
    create::start(
        backend,
        new_id,
        &rec.spec,
        &dirs,
        Some(snapshot.to_owned()),
        phases,
    )
}
