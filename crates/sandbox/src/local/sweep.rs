//! Sweeps: what a crashed run left. Each lists every place a leftover can
//! be, not only the records a finished step writes, so a crash between any
//! two steps is found:
//!
//! - sandboxes: every sandbox directory whose owner process is gone, every
//!   upper in the store and every cgroup of this directory that no sandbox
//!   directory names (torn down as a sandbox is: processes, mount, cgroups,
//!   upper, directory);
//! - snapshots: every snapshot in the store that no retained checkpoint
//!   names, every record whose snapshot is gone, and torn temporary files
//!   of the records and the index.

use std::collections::BTreeSet;
use std::path::Path;

use super::backend::{LocalBackend, store_error};
use super::cgroups::SandboxCgroups;
use super::crash;
use super::record::{self, SandboxRecord};
use crate::errors::Error;

impl LocalBackend {
    /// Deletes every snapshot no checkpoint in `retained` names, and every
    /// snapshot record whose snapshot is gone. Returns the ids of the
    /// snapshots removed (their store snapshot, their record, or both).
    pub fn sweep_snapshots(&self, retained: &[&str]) -> Result<Vec<String>, Error> {
        let _sweeping = self.sweeping();
        self.with_index(|index| {
            // The index is written first, so an interrupted sweep is finished
            // by the next one.
            index.forget_all_but(retained).map_err(store_error)?;
            crash::point("sweep: index written");
            let listed = self.store.list().map_err(store_error)?.snapshots;
            let mut removed = Vec::new();
            for id in &listed {
                if !index.names(retained, id) {
                    self.remove_snapshot(id)?;
                    removed.push(id.clone());
                }
            }
            // A record outlives its snapshot only when a crash came between
            // their deletions (or the snapshot was lost): it names nothing.
            let present: BTreeSet<&String> = listed
                .iter()
                .filter(|id| index.names(retained, id))
                .collect();
            for id in self.records()? {
                if !present.contains(&id) {
                    self.remove_snapshot_record(&id)?;
                    crash::point("sweep: record removed");
                    removed.push(id);
                }
            }
            self.remove_torn()?;
            removed.sort();
            removed.dedup();
            Ok(removed)
        })
    }

    /// Ids of the snapshot records in `snapshots/`.
    fn records(&self) -> Result<Vec<String>, Error> {
        Ok(names(&self.dir.join("snapshots"))?
            .into_iter()
            .filter(|name| !name.starts_with('.'))
            .filter_map(|name| name.strip_suffix(".json").map(str::to_owned))
            .collect())
    }

    /// Removes what a write killed half-way left: the temporary files
    /// (`.<name>.<random>`) of the snapshot records, the index and the store
    /// record. (A sandbox record's goes with its sandbox's directory.)
    fn remove_torn(&self) -> Result<(), Error> {
        remove_temporaries(&self.dir.join("snapshots"), |name| name.ends_with(".json"))?;
        remove_temporaries(&self.dir, |name| {
            name == "index.json" || name == "store.json"
        })
    }

    /// Destroys every sandbox whose owner process is gone (a crashed run's),
    /// and every upper or cgroup of this directory that no sandbox
    /// directory names (a crash's leftovers). Returns their ids.
    pub fn sweep_orphans(&self) -> Result<Vec<String>, Error> {
        let _sweeping = self.sweeping();
        let directories = self.list()?.sandboxes;
        // Uppers and cgroups are made after their sandbox's directory and
        // removed before it: one without a directory is a crash's leftover.
        let uppers = self.store.list().map_err(store_error)?.uppers;
        let cgroups = SandboxCgroups::names_after(&self.cgroup_name(""));
        let directories: BTreeSet<String> = directories.into_iter().collect();
        let mut candidates = directories.clone();
        candidates.extend(uppers);
        candidates.extend(cgroups);
        let started = std::time::Instant::now();
        let stale: Vec<String> = candidates
            .into_iter()
            .filter(|id| !self.lock().contains_key(id))
            .filter(|id| !(directories.contains(id) && self.owner_alive(id)))
            .collect();
        self.teardown_stale_all(&stale)?;
        if !stale.is_empty() {
            tracing::debug!(
                sandboxes = stale.len(),
                ms = started.elapsed().as_millis(),
                "swept a crashed owner's sandboxes"
            );
        }
        Ok(stale)
    }

    /// Whether the sandbox's record names an owner process other than this one
    /// that still runs.
    fn owner_alive(&self, id: &str) -> bool {
        let path = self.sandbox_dir(id).join("sandbox.json");
        match record::read::<SandboxRecord>("sandbox record", &path) {
            Ok(r) => {
                rollpoint_proctree::scan::read_stat(r.owner_pid)
                    .is_some_and(|s| s.start_time == r.owner_start)
                    && (r.owner_pid, r.owner_start) != self.owner
            }
            Err(_) => false,
        }
    }
}

/// Removes every `.<name>.<random>` in `dir` whose `<name>` `of` accepts.
fn remove_temporaries(dir: &Path, of: impl Fn(&str) -> bool) -> Result<(), Error> {
    for entry in names(dir)? {
        let torn = entry
            .strip_prefix('.')
            .and_then(|rest| rest.rsplit_once('.'))
            .is_some_and(|(name, _random)| of(name));
        if !torn {
            continue;
        }
        let path = dir.join(&entry);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::Setup {
                    sandbox: "-".into(),
                    what: format!("remove {}", path.display()),
                    source: e,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

fn names(dir: &Path) -> Result<Vec<String>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Setup {
        sandbox: "-".into(),
        what: format!("list {}", dir.display()),
        source,
    })?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn only_the_temporaries_of_the_named_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let all = [
            ".index.json.Xa81kq",
            ".ck1--a.json.p0Qz",
            "ck1--a.json",
            ".keep",
            ".notes.txt.1",
            "index.json",
        ];
        for name in all {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        remove_temporaries(dir.path(), |name| {
            name.ends_with(".json") && name != "index.json"
        })
        .unwrap();
        let mut left = names(dir.path()).unwrap();
        left.sort();
        assert_eq!(
            left,
            [
                ".index.json.Xa81kq",
                ".keep",
                ".notes.txt.1",
                "ck1--a.json",
                "index.json"
            ]
        );
        remove_temporaries(dir.path(), |name| name == "index.json").unwrap();
        let mut left = names(dir.path()).unwrap();
        left.sort();
        assert_eq!(left, [".keep", ".notes.txt.1", "ck1--a.json", "index.json"]);
    }
}
