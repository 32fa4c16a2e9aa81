//! The snapshot index: which checkpoint names which snapshots. A versioned
//! JSON file, rewritten atomically on every change, so a sweep after a crash
//! knows what must stay. [`plan_sweep`] is the pure decision; [`sweep`]
//! performs it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use atomic_write_file::AtomicWriteFile;
use serde::{Deserialize, Serialize};

use crate::errors::Error;
use crate::{SnapshotStore, ids};

/// The index format version this build reads and writes.
pub const INDEX_VERSION: u64 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OnDisk {
    v: u64,
    checkpoints: BTreeMap<String, BTreeSet<String>>,
}

/// Only the version, read first so a newer format is rejected by name
/// rather than by whichever field it added.
#[derive(Deserialize)]
struct VersionOnly {
    v: Option<u64>,
}

#[derive(Debug)]
pub struct SnapshotIndex {
    path: PathBuf,
    checkpoints: BTreeMap<String, BTreeSet<String>>,
}

impl SnapshotIndex {
    /// Reads the index at `path`; a missing file is an empty index.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self {
                    path: path.to_owned(),
                    checkpoints: BTreeMap::new(),
                });
            }
            Err(e) => return Err(Error::io("read", path)(e)),
        };
        let format = |field: String, message: String| Error::IndexFormat {
            path: path.to_owned(),
            field,
            message,
        };
        let version: VersionOnly =
            serde_json::from_slice(&bytes).map_err(|e| format("v".to_owned(), e.to_string()))?;
        match version.v {
            None => return Err(format("v".to_owned(), "missing".to_owned())),
            Some(INDEX_VERSION) => {}
            Some(found) => {
                return Err(Error::IndexVersion {
                    path: path.to_owned(),
                    found,
                    supported: INDEX_VERSION,
                });
            }
        }
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        let disk: OnDisk = serde_path_to_error::deserialize(de)
            .map_err(|e| format(e.path().to_string(), e.inner().to_string()))?;
        for (checkpoint, snapshots) in &disk.checkpoints {
            ids::check("checkpoint", checkpoint)?;
            for snapshot in snapshots {
                ids::check("snapshot", snapshot)?;
            }
        }
        Ok(Self {
            path: path.to_owned(),
            checkpoints: disk.checkpoints,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checkpoint id to the snapshot ids it names.
    pub fn checkpoints(&self) -> &BTreeMap<String, BTreeSet<String>> {
        &self.checkpoints
    }

    /// Records that `checkpoint` names exactly `snapshots`, replacing what it
    /// named before, and writes the index.
    pub fn retain(&mut self, checkpoint: &str, snapshots: &[&str]) -> Result<(), Error> {
        ids::check("checkpoint", checkpoint)?;
        for snapshot in snapshots {
            ids::check("snapshot", snapshot)?;
        }
        let set = snapshots.iter().map(|s| (*s).to_owned()).collect();
        self.checkpoints.insert(checkpoint.to_owned(), set);
        self.write()
    }

    /// Records that `checkpoint` also names `snapshot` (one sandbox's share
    /// of a checkpoint that snapshots several), and writes the index.
    pub fn add(&mut self, checkpoint: &str, snapshot: &str) -> Result<(), Error> {
        self.add_all(checkpoint, &[snapshot])
    }

    /// [`Self::add`] for many snapshots, with one write of the index.
    pub fn add_all(&mut self, checkpoint: &str, snapshots: &[&str]) -> Result<(), Error> {
        ids::check("checkpoint", checkpoint)?;
        for snapshot in snapshots {
            ids::check("snapshot", snapshot)?;
        }
        let set = self.checkpoints.entry(checkpoint.to_owned()).or_default();
        let before = set.len();
        set.extend(snapshots.iter().map(|s| (*s).to_owned()));
        if set.len() == before {
            return Ok(());
        }
        self.write()
    }

    /// Forgets `checkpoint`; returns whether it was recorded. Its snapshots
    /// go at the next sweep unless another checkpoint names them.
    pub fn release(&mut self, checkpoint: &str) -> Result<bool, Error> {
        let known = self.checkpoints.remove(checkpoint).is_some();
        if known {
            self.write()?;
        }
        Ok(known)
    }

    /// Forgets every checkpoint not in `retained` and writes the index when
    /// that changed it; returns the checkpoints forgotten.
    pub fn forget_all_but(&mut self, retained: &[&str]) -> Result<Vec<String>, Error> {
        let forgotten: Vec<String> = self
            .checkpoints
            .keys()
            .filter(|c| !retained.contains(&c.as_str()))
            .cloned()
            .collect();
        if forgotten.is_empty() {
            return Ok(forgotten);
        }
        for checkpoint in &forgotten {
            self.checkpoints.remove(checkpoint);
        }
        self.write()?;
        Ok(forgotten)
    }

    /// Whether a checkpoint in `retained` names `snapshot`.
    pub fn names(&self, retained: &[&str], snapshot: &str) -> bool {
        retained
            .iter()
            .filter_map(|c| self.checkpoints.get(*c))
            .any(|set| set.contains(snapshot))
    }

    fn write(&self) -> Result<(), Error> {
        let disk = OnDisk {
            v: INDEX_VERSION,
            checkpoints: self.checkpoints.clone(),
        };
        let mut bytes = serde_json::to_vec_pretty(&disk).map_err(|source| Error::IndexEncode {
            path: self.path.clone(),
            source,
        })?;
        bytes.push(b'\n');
        let io = Error::io("write", &self.path);
        // atomic-write-file: temp file, fsync, rename, fsync of the directory.
        let written = AtomicWriteFile::open(&self.path).and_then(|mut file| {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            file.write_all(&bytes)?;
            file.commit()
        });
        written.map_err(io)
    }
}

/// Snapshots in `listed` that no checkpoint in `retained` names, according
/// to `checkpoints`. Checkpoints the index does not know name nothing.
pub fn plan_sweep(
    checkpoints: &BTreeMap<String, BTreeSet<String>>,
    listed: &[String],
    retained: &[&str],
) -> Vec<String> {
    let kept: BTreeSet<&str> = retained
        .iter()
        .filter_map(|c| checkpoints.get(*c))
        .flatten()
        .map(String::as_str)
        .collect();
    listed
        .iter()
        .filter(|s| !kept.contains(s.as_str()))
        .cloned()
        .collect()
}

/// Releases every indexed checkpoint not in `retained`, then deletes every
/// snapshot in `store` that no retained checkpoint names. Returns the
/// deleted snapshot ids. The index is written before anything is deleted,
/// so an interrupted sweep is finished by the next one.
pub fn sweep(
    index: &mut SnapshotIndex,
    store: &dyn SnapshotStore,
    retained: &[&str],
) -> Result<Vec<String>, Error> {
    index.forget_all_but(retained)?;
    let listed = store.list()?.snapshots;
    let doomed = plan_sweep(&index.checkpoints, &listed, retained);
    for snapshot in &doomed {
        store.delete_snapshot(snapshot)?;
    }
    Ok(doomed)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        pairs
            .iter()
            .map(|(c, s)| ((*c).to_owned(), s.iter().map(|x| (*x).to_owned()).collect()))
            .collect()
    }

    #[test]
    fn plan_keeps_only_what_retained_checkpoints_name() {
        let index = map(&[
            ("ck1", &["s1", "s2"]),
            ("ck2", &["s2", "s3"]),
            ("ck3", &["s4"]),
        ]);
        let listed: Vec<String> = ["s1", "s2", "s3", "s4", "s5"].map(String::from).to_vec();
        assert_eq!(plan_sweep(&index, &listed, &["ck2"]), ["s1", "s4", "s5"]);
        assert_eq!(plan_sweep(&index, &listed, &["ck1", "ck3"]), ["s3", "s5"]);
        assert_eq!(plan_sweep(&index, &listed, &["unknown"]), listed);
    }

    #[test]
    fn forget_all_but_writes_only_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.json");
        let mut index = SnapshotIndex::open(&path).unwrap();
        assert!(index.forget_all_but(&[]).unwrap().is_empty());
        assert!(!path.exists(), "nothing to forget writes nothing");
        index.retain("ck1", &["s1"]).unwrap();
        index.retain("ck2", &["s2", "s3"]).unwrap();
        index.retain("ck3", &["s3"]).unwrap();
        assert_eq!(
            index.forget_all_but(&["ck2", "gone"]).unwrap(),
            ["ck1", "ck3"]
        );
        let again = SnapshotIndex::open(&path).unwrap();
        assert_eq!(again.checkpoints(), &map(&[("ck2", &["s2", "s3"])]));
        assert!(again.names(&["ck2"], "s3"));
        assert!(!again.names(&["ck2"], "s1"));
        assert!(!again.names(&["ck1"], "s1"));
    }

    #[test]
    fn add_grows_a_checkpoint_one_snapshot_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.json");
        let mut index = SnapshotIndex::open(&path).unwrap();
        index.add("ck1", "s1").unwrap();
        index.add("ck1", "s2").unwrap();
        index.add("ck1", "s2").unwrap();
        index.add("ck2", "s3").unwrap();
        let again = SnapshotIndex::open(&path).unwrap();
        assert_eq!(
            again.checkpoints(),
            &map(&[("ck1", &["s1", "s2"]), ("ck2", &["s3"])])
        );
        let err = index.add("ck1", "../x").unwrap_err();
        assert!(err.to_string().contains("../x"), "{err}");
    }

    #[test]
    fn round_trips_with_mode_0600_and_rejects_other_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.json");
        let mut index = SnapshotIndex::open(&path).unwrap();
        index.retain("ck1", &["s1", "s2"]).unwrap();
        index.retain("ck2", &["s2"]).unwrap();
        assert!(index.release("ck2").unwrap());
        assert!(!index.release("ck2").unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = SnapshotIndex::open(&path).unwrap();
        assert_eq!(again.checkpoints(), &map(&[("ck1", &["s1", "s2"])]));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"v\": 1"), "{text}");

        std::fs::write(&path, r#"{"v":2,"checkpoints":{},"extra":true}"#).unwrap();
        let err = SnapshotIndex::open(&path).unwrap_err();
        assert!(matches!(err, Error::IndexVersion { found: 2, .. }), "{err}");
        assert!(err.to_string().contains("unsupported version 2"), "{err}");

        std::fs::write(&path, r#"{"checkpoints":{}}"#).unwrap();
        let err = SnapshotIndex::open(&path).unwrap_err();
        assert!(err.to_string().contains("field v: missing"), "{err}");

        std::fs::write(&path, r#"{"v":1,"checkpoints":{"ck":[7]}}"#).unwrap();
        let err = SnapshotIndex::open(&path).unwrap_err();
        assert!(err.to_string().contains("field checkpoints.ck[0]"), "{err}");

        std::fs::write(&path, r#"{"v":1,"checkpoints":{},"extra":1}"#).unwrap();
        let err = SnapshotIndex::open(&path).unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");

        std::fs::write(&path, r#"{"v":1,"checkpoints":{"../x":[]}}"#).unwrap();
        let err = SnapshotIndex::open(&path).unwrap_err();
        assert!(err.to_string().contains("checkpoint id \"../x\""), "{err}");
    }
}
