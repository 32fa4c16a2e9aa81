//! The host ids of a backend's strict sandboxes: one range of 65,536 per
//! backend directory (a run), recorded in `ids.json` and claimed in a
//! node-wide directory so two live runs never share one.
//!
//! One range per run rather than per sandbox: every sandbox of the run keeps
//! its files in the upper under the range's ids, so a snapshot, a fork and a
//! resume in a new process find their files owned right without a chown of
//! the whole tree (a btrfs fork stays constant-time). Sandboxes of one run
//! still cannot touch each other: separate pid, mount and ipc namespaces,
//! and nothing shared on disk. A snapshot sent to another node carries the
//! ids it has and is shifted there (`travel`).
//!
//! Claims: `<claims>/<slot>.json` holds the backend directory's path. A claim is
//! stale, and is taken over, when that directory is gone or no longer
//! records the slot's range: a deleted run frees its range (the sweep of
//! ranges). Allocation holds an exclusive `flock` on the claims directory.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rollpoint_proctree::isolate::IdRange;
use serde::{Deserialize, Serialize};

use super::record;
use crate::{SPEC_VERSION, errors::Error};

/// Where ranges are claimed unless the options name another directory.
pub const DEFAULT_CLAIMS_DIR: &str = "/var/lib/rollpoint/id-ranges";

/// The first host id handed out: above the ranges `/etc/subuid` tools
/// usually allocate (100,000 onwards, in 65,536 steps).
const FIRST_HOST_ID: u32 = 1 << 30;

/// Ids per sandbox user namespace: what an image's users expect (`nobody`
/// is 65,534).
pub const RANGE_SIZE: u32 = 65_536;

/// Slots between [`FIRST_HOST_ID`] and the last valid id.
const SLOTS: u32 = (u32::MAX - FIRST_HOST_ID) / RANGE_SIZE - 1;

const IDS_FILE: &str = "ids.json";

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdsRecord {
    v: u32,
    host: u32,
    count: u32,
}

fn invalid(message: String) -> Error {
    Error::Invalid {
        sandbox: "-".into(),
        message,
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_owned();
    move |source| Error::Io {
        what,
        root: path.parent().map(Path::to_owned).unwrap_or_default(),
        path,
        source,
    }
}

/// The range `dir` recorded, if any.
fn recorded(dir: &Path) -> Result<Option<IdRange>, Error> {
    let path = dir.join(IDS_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let rec: IdsRecord = record::read("id range record", &path)?;
    let range = IdRange {
        host: rec.host,
        count: rec.count,
    };
    let fine = rec.count == RANGE_SIZE
        && rec.host >= FIRST_HOST_ID
        && (rec.host - FIRST_HOST_ID).is_multiple_of(RANGE_SIZE)
        && rec.host.checked_add(rec.count).is_some();
    if !fine {
        return Err(invalid(format!(
            "{}: fields `host` and `count`: {range} is not a range rollpoint hands out \
             ({RANGE_SIZE} ids from {FIRST_HOST_ID} on, in steps of {RANGE_SIZE})",
            path.display()
        )));
    }
    Ok(Some(range))
}

fn slot_range(slot: u32) -> IdRange {
    IdRange {
        host: FIRST_HOST_ID + slot * RANGE_SIZE,
        count: RANGE_SIZE,
    }
}

/// The range of backend directory `dir` (canonical): the recorded one, or
/// a free slot claimed in `claims` and recorded.
pub(crate) fn range_of(dir: &Path, claims: &Path) -> Result<IdRange, Error> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(claims)
        .map_err(io("create", claims))?;
    let dir_file = std::fs::File::open(claims).map_err(io("open", claims))?;
    // Released when `_lock` drops.
    let _lock = nix::fcntl::Flock::lock(dir_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| io("lock", claims)(e.into()))?;
    if let Some(range) = recorded(dir)? {
        let slot = (range.host - FIRST_HOST_ID) / RANGE_SIZE;
        // Claimed again if a claims directory was cleared meanwhile.
        if claimant(claims, slot).as_deref() != Some(dir) {
            claim(claims, slot, dir)?;
        }
        return Ok(range);
    }
    let slot = (0..SLOTS)
        .find(|&slot| match claimant(claims, slot) {
            None => true,
            Some(other) => !matches!(recorded(&other), Ok(Some(r)) if r == slot_range(slot)),
        })
        .ok_or_else(|| {
            invalid(format!(
                "no free id range: all {SLOTS} claims in {} belong to live run directories",
                claims.display()
            ))
        })?;
    claim(claims, slot, dir)?;
    let range = slot_range(slot);
    record::write(
        &dir.join(IDS_FILE),
        &IdsRecord {
            v: SPEC_VERSION,
            host: range.host,
            count: range.count,
        },
    )?;
    Ok(range)
}

/// The id `id` of another range, as the same id of `range`; an id below
/// the ranges (a host id, unmapped inside) stays.
fn shifted(id: u32, range: IdRange) -> u32 {
    if id >= FIRST_HOST_ID {
        range.host + (id - FIRST_HOST_ID) % RANGE_SIZE
    } else {
        id
    }
}

/// Gives every entry of the tree `root` owned in another rollpoint range
/// the same ids in `range` (symlinks not followed; setuid and setgid bits,
/// which a chown clears, put back). Returns how many entries changed.
pub(crate) fn shift_into(root: &Path, range: IdRange) -> std::io::Result<u64> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut changed = 0;
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        let (uid, gid) = (shifted(meta.uid(), range), shifted(meta.gid(), range));
        if (uid, gid) != (meta.uid(), meta.gid()) {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
            let special = meta.mode() & 0o6000;
            if special != 0 && meta.is_file() {
                std::fs::set_permissions(
                    &path,
                    std::fs::Permissions::from_mode(meta.mode() & 0o7777),
                )?;
            }
            changed += 1;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(changed)
}

/// A claim: which backend directory holds a slot.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Claim {
    v: u32,
    dir: PathBuf,
}

/// The directory claiming `slot`; a missing or unreadable claim is none.
fn claimant(claims: &Path, slot: u32) -> Option<PathBuf> {
    let path = claims.join(format!("{slot}.json"));
    if !path.exists() {
        return None;
    }
    record::read::<Claim>("id range claim", &path)
        .ok()
        .map(|c| c.dir)
}

fn claim(claims: &Path, slot: u32, dir: &Path) -> Result<(), Error> {
    record::write(
        &claims.join(format!("{slot}.json")),
        &Claim {
            v: SPEC_VERSION,
            dir: dir.to_owned(),
        },
    )
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn runs_get_distinct_ranges_and_keep_theirs_and_a_deleted_run_frees_its_own() {
        let tmp = tempfile::tempdir().unwrap();
        let claims = tmp.path().join("claims");
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let ra = range_of(&a, &claims).unwrap();
        let rb = range_of(&b, &claims).unwrap();
        assert_ne!(ra, rb);
        assert_eq!(ra.count, RANGE_SIZE);
        assert_eq!(range_of(&a, &claims).unwrap(), ra, "recorded, kept");
        std::fs::remove_dir_all(&a).unwrap();
        let c = tmp.path().join("c");
        std::fs::create_dir(&c).unwrap();
        assert_eq!(
            range_of(&c, &claims).unwrap(),
            ra,
            "a's range is free again"
        );
    }

    #[test]
    fn root_a_tree_of_another_range_is_shifted_into_ours() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("upper");
        std::fs::create_dir_all(root.join("d")).unwrap();
        let (ours, theirs) = (slot_range(3), slot_range(7));
        std::fs::write(root.join("d/f"), "x").unwrap();
        std::fs::write(root.join("suid"), "x").unwrap();
        std::os::unix::fs::symlink("d/f", root.join("link")).unwrap();
        for p in ["", "d", "d/f", "suid"] {
            let p = root.join(p);
            std::os::unix::fs::lchown(&p, Some(theirs.host + 1000), Some(theirs.host)).unwrap();
        }
        std::os::unix::fs::lchown(root.join("link"), Some(0), Some(0)).unwrap();
        std::fs::set_permissions(root.join("suid"), std::fs::Permissions::from_mode(0o4755))
            .unwrap();
        assert_eq!(shift_into(&root, ours).unwrap(), 4);
        let meta = std::fs::metadata(root.join("d/f")).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (ours.host + 1000, ours.host));
        let suid = std::fs::metadata(root.join("suid")).unwrap();
        assert_eq!(suid.mode() & 0o7777, 0o4755, "setuid kept");
        let link = std::fs::symlink_metadata(root.join("link")).unwrap();
        assert_eq!(link.uid(), 0, "a host id stays");
        assert_eq!(shift_into(&root, ours).unwrap(), 0, "nothing left to shift");
    }

    #[test]
    fn a_damaged_record_is_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        for (text, names) in [
            (
                r#"{"v":1,"host":5,"count":65536}"#,
                "fields `host` and `count`",
            ),
            (r#"{"v":9,"host":1073741824,"count":65536}"#, "9"),
        ] {
            std::fs::write(tmp.path().join(IDS_FILE), text).unwrap();
            let err = range_of(tmp.path(), &tmp.path().join("claims"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(names), "{text}: {err}");
        }
    }
}
