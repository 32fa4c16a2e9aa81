//! Snapshots as portable streams, for a checkpoint store that outlives this node: the store
//! sends a snapshot (whole, or against one it descends from), and receives one another node
//! sent, with its record and index entry written after it as a snapshot taken here would be,
//! so forks, sweeps and retention treat a received snapshot exactly like a local one.

use std::path::Path;

use super::backend::{LocalBackend, store_error};
use super::record::{self, SnapshotRecord};
use crate::{SPEC_VERSION, SandboxSpec, errors::Error};

impl LocalBackend {
    /// The format a sent snapshot's stream is in: the store's kind.
    pub(super) fn snapshot_format(&self) -> Option<&'static str> {
        Some(match self.store.kind() {
            rollpoint_snapshot::StoreKind::Btrfs | rollpoint_snapshot::StoreKind::BtrfsImage => {
                "btrfs"
            }
            rollpoint_snapshot::StoreKind::Copy => "copy",
        })
    }

    /// Writes `snapshot` to `out` (against `parent`, when given); returns the
    /// sandbox it was taken of and that sandbox's spec.
    pub(super) fn send_snapshot(
        &self,
        snapshot: &str,
        parent: Option<&str>,
        out: &Path,
    ) -> Result<(String, SandboxSpec), Error> {
        let _working = self.working();
        let rec: SnapshotRecord = record::read("snapshot record", &self.snapshot_record(snapshot))?;
        self.store
            .send(snapshot, parent, out)
            .map_err(|source| Error::Store {
                sandbox: rec.sandbox.clone(),
                source,
            })?;
        Ok((rec.sandbox, rec.spec))
    }

    pub(super) fn receive_snapshot(
        &self,
        snapshot: &str,
        sandbox: &str,
        spec: &SandboxSpec,
        checkpoint: &str,
        stream: &Path,
    ) -> Result<(), Error> {
        let _working = self.working();
        self.store
            .receive(snapshot, stream)
            .map_err(|source| Error::Store {
                sandbox: sandbox.to_owned(),
                source,
            })?;
        let path = self.snapshot_record(snapshot);
        let rec = SnapshotRecord {
            v: SPEC_VERSION,
            id: snapshot.to_owned(),
            sandbox: sandbox.to_owned(),
            spec: spec.clone(),
            received: true,
        };
        let recorded = record::write_new(&[(path.clone(), &rec)])
            .and_then(|()| self.bases.pin(&path, &rec.spec.base))
            .and_then(|()| {
                self.with_index(|index| index.add_all(checkpoint, &[snapshot]).map_err(store_error))
            });
        if let Err(e) = recorded {
            // Nothing names it yet, or the sweep decides from the index.
            let _ = self.store.delete_snapshot(snapshot);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(())
    }

    pub(super) fn has_snapshot(&self, snapshot: &str) -> bool {
        self.snapshot_record(snapshot).is_file()
            && self
                .store
                .list()
                .is_ok_and(|l| l.snapshots.iter().any(|s| s == snapshot))
    }
}
