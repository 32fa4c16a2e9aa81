//! Small filesystem facts and chores the stores share: which filesystem a path
//! is on, whether something is mounted at it, syncfs, durable directory
//! creation and removal.

use std::fs::File;
use std::path::{Path, PathBuf};

use std::os::unix::fs::OpenOptionsExt;

use nix::fcntl::{Flock, FlockArg};
use nix::sys::statfs::{BTRFS_SUPER_MAGIC, statfs};

use crate::errors::Error;

/// True when `path` lives on a btrfs filesystem (statfs f_type).
pub fn is_btrfs(path: &Path) -> Result<bool, Error> {
    let fs = statfs(path).map_err(|source| Error::Statfs {
        path: path.to_owned(),
        source,
    })?;
    Ok(fs.filesystem_type() == BTRFS_SUPER_MAGIC)
}

/// Flushes the filesystem holding `path` (syncfs(2)). Callers run this on a
/// sandbox's merged overlay directory before asking for a snapshot.
pub fn syncfs(path: &Path) -> Result<(), Error> {
    let file = File::open(path).map_err(Error::io("open", path))?;
    nix::unistd::syncfs(&file).map_err(|errno| Error::Io {
        op: "syncfs",
        path: path.to_owned(),
        source: errno.into(),
    })
}

/// This mount namespace's `/proc/self/mounts`.
fn read_mounts() -> Result<String, Error> {
    let path = Path::new("/proc/self/mounts");
    std::fs::read_to_string(path).map_err(Error::io("read", path))
}

/// Mount points listed in /proc/self/mounts, unescaped.
pub fn mount_points() -> Result<Vec<PathBuf>, Error> {
    Ok(read_mounts()?
        .lines()
        .filter_map(|line| line.split(' ').nth(1))
        .map(|field| PathBuf::from(unescape_mount_field(field)))
        .collect())
}

/// The upper and work directories of every overlay mount visible in this
/// mount namespace, read once: `/proc/self/mounts` formats every mount of
/// the namespace, and a host with a thousand sandboxes has a thousand
/// overlays, so a batch of deletions reads it once rather than once each.
#[derive(Debug, Clone, Default)]
pub struct OverlayMounts {
    dirs: Vec<PathBuf>,
}

impl OverlayMounts {
    pub fn read() -> Result<Self, Error> {
        Ok(Self::parse(&read_mounts()?))
    }

    fn parse(text: &str) -> Self {
        let dirs = text
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                (fields.len() > 3 && fields[2] == "overlay").then(|| fields[3])
            })
            .flat_map(|options| options.split(','))
            .filter_map(|option| {
                option
                    .strip_prefix("upperdir=")
                    .or_else(|| option.strip_prefix("workdir="))
            })
            .map(|dir| PathBuf::from(unescape_mount_field(dir)))
            .collect();
        Self { dirs }
    }

    /// True when an overlay uses a directory inside `area` as its upperdir
    /// or workdir.
    pub fn uses(&self, area: &Path) -> bool {
        self.dirs.iter().any(|dir| dir.starts_with(area))
    }
}

/// True when something is mounted exactly at `path`.
pub fn is_mount_point(path: &Path) -> Result<bool, Error> {
    Ok(mount_points()?.iter().any(|m| m == path))
}

/// /proc/mounts writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let octal = &field[i + 1..i + 4];
            if let Ok(value) = u8::from_str_radix(octal, 8) {
                out.push(value);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Takes the store directory's lock (`dir/.lock`, flock, exclusive), held
/// for the store's life so two stores never manage one directory.
pub(crate) fn lock_store(dir: &Path) -> Result<Flock<File>, Error> {
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(Error::io("open lock", &path))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        if errno == nix::errno::Errno::EWOULDBLOCK {
            Error::InUse { path }
        } else {
            Error::Io {
                op: "lock",
                path,
                source: errno.into(),
            }
        }
    })
}

/// Fsyncs a directory so entries created or renamed in it survive a crash.
pub(crate) fn fsync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(Error::io("fsync directory", dir))
}

pub(crate) fn create_dir(path: &Path) -> Result<(), Error> {
    std::fs::create_dir(path).map_err(Error::io("create directory", path))
}

pub(crate) fn create_dir_all(path: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(path).map_err(Error::io("create directory", path))
}

/// Removes a directory tree; a missing tree is not an error.
pub(crate) fn remove_tree(path: &Path) -> Result<(), Error> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path)(e)),
        _ => Ok(()),
    }
}

/// Names in `dir` that are valid ids, sorted; a missing dir lists nothing.
pub(crate) fn list_ids(dir: &Path) -> Result<Vec<String>, Error> {
    let mut ids: Vec<String> = list_names(dir)?
        .into_iter()
        .filter(|name| crate::ids::is_valid(name))
        .collect();
    ids.sort();
    Ok(ids)
}

/// UTF-8 names in `dir`, unsorted; a missing dir lists nothing.
pub(crate) fn list_names(dir: &Path) -> Result<Vec<String>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir)(e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(Error::io("list", dir))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

/// Names in `dir` left behind by an interrupted operation.
pub(crate) fn list_partials(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(Error::io("list", dir))?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(crate::ids::PARTIAL_PREFIX))
        {
            out.push(entry.path());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_mounts_name_their_upper_and_work_dirs() {
        let text = "\
/dev/loop0 /store btrfs rw,relatime 0 0
overlay /sb/a/root overlay rw,lowerdir=/,upperdir=/store/uppers/a/upper,workdir=/store/uppers/a/work 0 0
overlay /sb/b\\040c/root overlay rw,lowerdir=/,upperdir=/store/uppers/b\\040c/upper,workdir=/store/uppers/b\\040c/work 0 0
";
        let mounts = OverlayMounts::parse(text);
        assert!(mounts.uses(Path::new("/store/uppers/a")));
        assert!(mounts.uses(Path::new("/store/uppers/b c")));
        assert!(!mounts.uses(Path::new("/store/uppers/ab")));
        assert!(!mounts.uses(Path::new("/store/snapshots")));
    }

    #[test]
    fn unescapes_proc_mounts_fields() {
        assert_eq!(unescape_mount_field("/a\\040b"), "/a b");
        assert_eq!(unescape_mount_field("/plain"), "/plain");
        assert_eq!(unescape_mount_field("/tail\\"), "/tail\\");
    }
}
