//! Snapshot and delete a snapshot: the sandbox frozen through its cgroup,
//! its filesystem synced and the store's snapshot taken, then thawed; the
//! snapshot's record (what a fork is made from) and the index entry naming
//! it for its checkpoint written after. A checkpoint's sandboxes go as one
//! batch: each step for all of them before the next, one sync where each
//! would have synced, so its cost per sandbox stays flat. So a record never exists before
//! its snapshot, and the index never names a snapshot before its record;
//! a crash in between leaves a snapshot that no retained checkpoint names,
//! which the sweep (listing the store) deletes. Deleting goes the other
//! way: the store's snapshot first, then its record, so what a crash
//! leaves is a record without a snapshot, which the sweep (listing the
//! records) removes.

use std::time::Instant;

use super::backend::{LocalBackend, store_error};
use super::batch::{Phases, SNAPSHOT_WORKERS, parallel_on};
use super::cgroups::SandboxCgroups;
use super::crash;
use super::record::{self, SnapshotRecord};
use crate::{SPEC_VERSION, SandboxInfo, SnapshotRef, errors::Error};

impl LocalBackend {
    pub(super) fn snapshot(
        &self,
        id: &str,
        snapshot: &str,
        checkpoint: &str,
    ) -> Result<SnapshotRef, Error> {
        let mut taken = self.snapshot_all(&[(id.to_owned(), snapshot.to_owned())], checkpoint)?;
        taken.pop().ok_or_else(|| Error::UnknownSandbox {
            sandbox: id.to_owned(),
        })
    }

    /// Snapshots every `(sandbox, snapshot)` of one checkpoint as one batch:
    /// all sandboxes frozen (and confirmed), one `syncfs` (every upper of a
    /// backend is in its one store's filesystem), the store's snapshots taken,
    /// all thawed; then every record written with one sync and the index once.
    /// All or nothing: when any step fails for any sandbox, every snapshot of
    /// the batch is removed again and the error names that sandbox.
    pub(super) fn snapshot_all(
        &self,
        items: &[(String, String)],
        checkpoint: &str,
    ) -> Result<Vec<SnapshotRef>, Error> {
        let started = Instant::now();
        let _working = self.working();
        let live: Vec<(SandboxInfo, SandboxCgroups, &str)> = {
            let live = self.lock();
            items
                .iter()
                .map(|(id, snapshot)| {
                    let l = live.get(id).ok_or_else(|| Error::UnknownSandbox {
                        sandbox: id.to_owned(),
                    })?;
                    Ok((l.info.clone(), l.cgroups.clone(), snapshot.as_str()))
                })
                .collect::<Result<_, Error>>()?
        };
        let Some((first, ..)) = live.first() else {
            return Ok(Vec::new());
        };
        let mut phases = Phases::new();
        let sandboxes: Vec<(&str, &SandboxCgroups)> = live
            .iter()
            .map(|(info, cgroups, _)| (info.id.as_str(), cgroups))
            .collect();
        let frozen = SandboxCgroups::freeze_all(&sandboxes);
        phases.mark("freeze");
        let thaw = |which: &[bool]| {
            let thawed = SandboxCgroups::thaw_all_of(&sandboxes);
            first_error(
                thawed
                    .into_iter()
                    .zip(which)
                    .filter(|(_, was)| **was)
                    .map(|(r, _)| r)
                    .collect(),
            )
        };
        let was_frozen: Vec<bool> = frozen.iter().map(Result::is_ok).collect();
        if let Err(e) = first_error(frozen) {
            let _ = thaw(&was_frozen);
            return Err(e);
        }
        crash::point("snapshot: frozen");
        let synced = rollpoint_snapshot::syncfs(&first.root).map_err(|source| Error::Store {
            sandbox: first.id.clone(),
            source,
        });
        phases.mark("syncfs");
        let taken = match synced {
            Ok(()) => parallel_on(SNAPSHOT_WORKERS, &live, |(info, _, snapshot)| {
                self.store
                    .snapshot(&info.id, snapshot)
                    .map(|s| match &s.content {
                        rollpoint_snapshot::SnapshotContent::Archive(path) => {
                            std::fs::metadata(path).ok().map(|m| m.len())
                        }
                        rollpoint_snapshot::SnapshotContent::Tree(_) => None,
                    })
                    .map_err(|source| Error::Store {
                        sandbox: info.id.clone(),
                        source,
                    })
            }),
            Err(e) => vec![Err(e)],
        };
        phases.mark("snapshot");
        let made: Vec<bool> = taken.iter().map(Result::is_ok).collect();
        let undo = |made: &[bool]| {
            for ((_, _, snapshot), made) in live.iter().zip(made) {
                if *made {
                    let _ = self.remove_snapshot(snapshot);
                }
            }
        };
        let bytes = match first_error(taken) {
            Ok(bytes) => bytes,
            Err(e) => {
                let _ = thaw(&was_frozen);
                undo(&made);
                return Err(e);
            }
        };
        crash::point("snapshot: taken");
        let records: Vec<(std::path::PathBuf, SnapshotRecord)> = live
            .iter()
            .map(|(info, _, snapshot)| {
                (
                    self.snapshot_record(snapshot),
                    SnapshotRecord {
                        v: SPEC_VERSION,
                        id: (*snapshot).to_owned(),
                        sandbox: info.id.clone(),
                        spec: info.spec.clone(),
                        received: false,
                    },
                )
            })
            .collect();
        // The records need the snapshots taken, not the sandboxes frozen: they
        // are written while the sandboxes thaw.
        let (thawed, recorded) = std::thread::scope(|scope| {
            let thawing = scope.spawn(|| thaw(&was_frozen));
            let borrowed: Vec<_> = records.iter().map(|(p, r)| (p.clone(), r)).collect();
            let recorded = record::write_new(&borrowed).and_then(|()| {
                records
                    .iter()
                    .try_for_each(|(path, rec)| self.bases.pin(path, &rec.spec.base))
            });
            let thawed = thawing
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (thawed, recorded)
        });
        if let Err(e) = thawed.and(recorded) {
            // Nothing names the snapshots yet.
            undo(&made);
            return Err(e);
        }
        crash::point("snapshot: thawed");
        phases.mark("thaw and records");
        crash::point("snapshot: recorded");
        // A failure here may still have named them (a rename that landed before
        // its directory's fsync failed): the sweep decides, from the index.
        let names: Vec<&str> = live.iter().map(|(_, _, s)| *s).collect();
        self.retain(checkpoint, &names)?;
        phases.mark("index");
        tracing::debug!(
            checkpoint,
            sandboxes = names.len(),
            phases = %phases,
            "snapshots taken"
        );
        let duration_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(live
            .into_iter()
            .zip(bytes)
            .map(|((info, _, snapshot), bytes)| SnapshotRef {
                id: snapshot.to_owned(),
                sandbox: info.id,
                spec: info.spec,
                duration_ms,
                bytes,
            })
            .collect())
    }

    /// Records that `checkpoint` names `snapshots` too, so sweeps keep them
    /// while the checkpoint is retained.
    fn retain(&self, checkpoint: &str, snapshots: &[&str]) -> Result<(), Error> {
        self.with_index(|index| index.add_all(checkpoint, snapshots).map_err(store_error))
    }

    pub(super) fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        let _working = self.working();
        self.store.delete_snapshot(snapshot).map_err(store_error)?;
        crash::point("delete: snapshot deleted");
        self.remove_snapshot_record(snapshot)
    }

    /// The store's snapshot, then its record (the order a crash may split,
    /// which the sweep finishes). A snapshot already gone is no error.
    pub(super) fn remove_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        match self.store.delete_snapshot(snapshot) {
            Ok(()) | Err(rollpoint_snapshot::Error::NoSnapshot { .. }) => {}
            Err(source) => return Err(store_error(source)),
        }
        crash::point("remove: snapshot deleted");
        self.remove_snapshot_record(snapshot)
    }
}

/// The first error of `results`, if any.
fn first_error<T>(results: Vec<Result<T, Error>>) -> Result<Vec<T>, Error> {
    results.into_iter().collect()
}
