//! The local backend's records on disk: one per sandbox (so a sweep after a
//! crash knows what to tear down) and one per snapshot (so a fork in a new
//! process gets the spec the snapshot was taken with). Versioned, atomic,
//! mode 0600.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use atomic_write_file::AtomicWriteFile;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use rollpoint_snapshot::{StoreChoice, StoreKind, StoreOptions};

use crate::{SPEC_VERSION, SandboxSpec, errors::Error};

/// A sandbox as its owner made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRecord {
    pub v: u32,
    pub id: String,
    pub spec: SandboxSpec,
    pub forked_from: Option<String>,
    /// The overlay's lower layers, as mounted, top first (one path in
    /// records made before images).
    #[serde(deserialize_with = "one_or_many")]
    pub lower: Vec<PathBuf>,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// The process that owns the sandbox: pid and its start time in clock
    /// ticks, so a sweep can tell a live owner from a reused pid.
    pub owner_pid: u32,
    pub owner_start: u64,
    /// Host pid of the anchor's outer process (0 until it is started).
    pub anchor_pid: u32,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Lower {
        One(PathBuf),
        Many(Vec<PathBuf>),
    }
    Ok(match Lower::deserialize(d)? {
        Lower::One(p) => vec![p],
        Lower::Many(v) => v,
    })
}

/// What a fork needs to know about a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRecord {
    pub v: u32,
    pub id: String,
    pub sandbox: String,
    pub spec: SandboxSpec,
    /// Sent by another node: its files may carry that node's id range,
    /// shifted into this backend's at each fork (`ids::shift_into`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub received: bool,
}

/// Which store a backend directory uses, fixed by its first open: a later
/// open (a resume, a sweep) must find the same snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreRecord {
    pub v: u32,
    /// `btrfs` or `copy`.
    pub store: String,
}

const STORE_FILE: &str = "store.json";

/// The store options to open `dir` with: a recorded store wins over `auto`;
/// an explicit choice that contradicts the record is refused.
pub(crate) fn store_choice(dir: &Path, mut options: StoreOptions) -> Result<StoreOptions, Error> {
    let path = dir.join(STORE_FILE);
    if !path.exists() {
        return Ok(options);
    }
    let rec: StoreRecord = read("store record", &path)?;
    let recorded = match rec.store.as_str() {
        "btrfs" => StoreChoice::Btrfs,
        "copy" => StoreChoice::Copy,
        other => {
            return Err(Error::Invalid {
                sandbox: "-".into(),
                message: format!("{}: field `store`: unknown store {other:?}", path.display()),
            });
        }
    };
    if options.choice != StoreChoice::Auto && options.choice != recorded {
        return Err(Error::Invalid {
            sandbox: "-".into(),
            message: format!(
                "{} already uses the {} store; it cannot be reopened with another",
                dir.display(),
                rec.store
            ),
        });
    }
    options.choice = recorded;
    Ok(options)
}

pub(crate) fn remember_store(dir: &Path, kind: StoreKind) -> Result<(), Error> {
    let path = dir.join(STORE_FILE);
    if path.exists() {
        return Ok(());
    }
    let store = match kind {
        StoreKind::Btrfs | StoreKind::BtrfsImage => "btrfs",
        StoreKind::Copy => "copy",
    };
    write(
        &path,
        &StoreRecord {
            v: SPEC_VERSION,
            store: store.into(),
        },
    )
}

pub(crate) fn write<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let io = |source| Error::Io {
        what: "write record",
        root: path.parent().map(Path::to_owned).unwrap_or_default(),
        path: path.to_owned(),
        source,
    };
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| io(e.into()))?;
    bytes.push(b'\n');
    let mut file = AtomicWriteFile::open(path).map_err(io)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io)?;
    file.write_all(&bytes).map_err(io)?;
    super::crash::point("record: written, not committed");
    file.commit().map_err(io)
}

/// Writes many new records (of snapshots just taken, which nothing names
/// yet) with one sync for all and no temporary files: each written at its
/// own name (created, never replacing one), one `syncfs`, then one fsync of
/// each directory. The batch commits when the index names its snapshots,
/// after this returns: a crash before that leaves records, whole or cut
/// short, of snapshots no retained checkpoint names, which the sweep removes
/// with them unread. On an error every record this call created is removed.
/// (A temporary file and a rename per record cost a new inode and a
/// directory entry each, twice: half the records' time at a thousand.)
pub(crate) fn write_new<T: Serialize>(records: &[(PathBuf, &T)]) -> Result<(), Error> {
    let io = |path: &Path, source| Error::Io {
        what: "write record",
        root: path.parent().map(Path::to_owned).unwrap_or_default(),
        path: path.to_owned(),
        source,
    };
    let cleanup = |made: &[&PathBuf]| {
        for path in made {
            let _ = std::fs::remove_file(path);
        }
    };
    let mut made: Vec<&PathBuf> = Vec::with_capacity(records.len());
    let mut dirs = std::collections::BTreeSet::new();
    for (path, value) in records {
        let written = serde_json::to_vec_pretty(value)
            .map_err(std::io::Error::from)
            .and_then(|mut bytes| {
                bytes.push(b'\n');
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)?;
                made.push(path);
                file.write_all(&bytes)
            })
            .map_err(|e| io(path, e));
        dirs.insert(path.parent().map(Path::to_owned).unwrap_or_default());
        if let Err(e) = written {
            cleanup(&made);
            return Err(e);
        }
    }
    super::crash::point("record: written, not committed");
    for dir in &dirs {
        let synced = rollpoint_snapshot::syncfs(dir)
            .map_err(|e| Error::Store {
                sandbox: "-".into(),
                source: e,
            })
            .and_then(|()| {
                std::fs::File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| io(dir, e))
            });
        if let Err(e) = synced {
            cleanup(&made);
            return Err(e);
        }
    }
    Ok(())
}

pub(crate) fn read<T: DeserializeOwned>(what: &'static str, path: &Path) -> Result<T, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        what: "read record",
        root: path.parent().map(Path::to_owned).unwrap_or_default(),
        path: path.to_owned(),
        source,
    })?;
    rollpoint_proto::decode(what, SPEC_VERSION, &bytes).map_err(|source| Error::Record {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_unknown_versions_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snap.json");
        let record = SnapshotRecord {
            v: SPEC_VERSION,
            id: "ck1-s".into(),
            sandbox: "s".into(),
            spec: SandboxSpec::default(),
            received: false,
        };
        write(&path, &record).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let back: SnapshotRecord = read("snapshot record", &path).unwrap();
        assert_eq!(back, record);

        std::fs::write(&path, br#"{"v":9,"id":"x"}"#).unwrap();
        let err = read::<SnapshotRecord>("snapshot record", &path)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown version 9") && err.contains("snap.json"),
            "{err}"
        );

        std::fs::write(
            &path,
            br#"{"v":1,"id":"x","sandbox":"s","spec":{"hostname":3}}"#,
        )
        .unwrap();
        let err = read::<SnapshotRecord>("snapshot record", &path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("spec.hostname"), "{err}");
    }
}
