//! Fork: a new sandbox on the store's fork of a snapshot, with the spec the
//! snapshot was taken with, so every in-sandbox path is the same. As in
//! create, the sandbox's directory is claimed before the store makes its
//! upper, so a crash in between leaves nothing a sweep cannot find.

use super::backend::LocalBackend;
use super::batch::Phases;
use super::crash;
use super::record::{self, SnapshotRecord};
use crate::{SandboxInfo, errors::Error};

impl LocalBackend {
    pub(super) fn fork(&self, snapshot: &str, new_id: &str) -> Result<SandboxInfo, Error> {
        let _working = self.working();
        let mut phases = Phases::new();
        let path = self.snapshot_record(snapshot);
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
        self.claim(new_id)?;
        phases.mark("claim");
        crash::point("fork: claimed");
        let forked = self.store.fork(snapshot, new_id);
        let dirs = match forked {
            Ok(dirs) => dirs,
            Err(source) => {
                let _ = self.teardown_stale(new_id);
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
                super::ids::shift_into(&dirs.upper, self.ids).map_err(|source| Error::Setup {
                    sandbox: new_id.to_owned(),
                    what: format!(
                        "shift the ids of {} into {}",
                        dirs.upper.display(),
                        self.ids
                    ),
                    source,
                });
            if let Err(e) = shifted {
                let _ = self.teardown_stale(new_id);
                return Err(e);
            }
            phases.mark("ids shifted");
        }
        self.start(new_id, &rec.spec, &dirs, Some(snapshot.to_owned()), phases)
    }
}
