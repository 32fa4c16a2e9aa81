//! The copy store: works on any filesystem. Uppers are plain directories; a
//! snapshot is one GNU tar archive of the upper, a fork extracts it into a
//! new upper. Cost grows with the files in the upper.
//!
//! An archive, not a copied tree: a snapshot then writes one file
//! sequentially instead of creating every file, directory and link again,
//! which is what made a copied snapshot 1.4x to 57x slower than `tar -c`.
//! Only the fork, which must produce a live tree, creates files.
//!
//! GNU tar as root, with the options below, keeps everything overlayfs
//! stores in an upper: whiteouts (0:0 character devices), the
//! `trusted.overlay.*` xattrs that mark opaque directories, hard links
//! within the tree, symlinks, numeric owners, modes, mtimes, user xattrs,
//! and holes in sparse files. Writing that archive by hand would mean
//! reimplementing tar's hard-link map, xattr records and sparse maps.
//!
//! Layout, version [`COPY_STORE_VERSION`] (recorded in `layout`):
//! `uppers/<id>/{upper,work}` and `snapshots/<id>.tar`. Entries are built
//! under a `.partial-` name, made durable, and renamed into place, so a
//! crash never leaves a half entry under a valid id; open removes
//! leftovers.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use atomic_write_file::AtomicWriteFile;
use nix::fcntl::Flock;

use crate::command::{run, run_into};
use crate::errors::{Error, Held};
use crate::fsutil::OverlayMounts;
use crate::ids::PARTIAL_PREFIX;
use crate::{
    Listing, SnapshotContent, SnapshotInfo, SnapshotStore, StoreKind, UpperDirs, fsutil, ids,
};

/// Version of the copy store's on-disk layout: 1 is one tar archive per
/// snapshot. Stores recording another version are refused.
pub const COPY_STORE_VERSION: u32 = 1;

/// Name of the file recording the layout version in the store directory.
const LAYOUT_FILE: &str = "layout";

/// How often a snapshot flushes its archive while tar is still writing.
const EARLY_FLUSH_PERIOD: Duration = Duration::from_millis(10);

/// Suffix of a snapshot archive after its id.
const ARCHIVE_SUFFIX: &str = ".tar";

/// tar options that keep an overlay upper exactly, on both sides: all
/// xattrs (tar restores only `user.*` unless told), numeric owners.
const TAR_FIDELITY: [&str; 3] = ["--xattrs", "--xattrs-include=*", "--numeric-owner"];

#[derive(Debug)]
pub struct CopyStore {
    root: PathBuf,
    closed: bool,
    _lock: Flock<File>,
}

impl CopyStore {
    /// Opens a store in `dir`, created if missing, checks its layout
    /// version, and removes entries left half-built by an interrupted run.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        fsutil::create_dir_all(dir)?;
        let root = std::fs::canonicalize(dir).map_err(Error::io("resolve", dir))?;
        let lock = fsutil::lock_store(&root)?;
        check_layout(&root)?;
        for sub in ["uppers", "snapshots"] {
            let sub = root.join(sub);
            fsutil::create_dir_all(&sub)?;
            for partial in fsutil::list_partials(&sub)? {
                fsutil::remove_entry(&partial)?;
            }
        }
        Ok(Self {
            root,
            closed: false,
            _lock: lock,
        })
    }

    /// The directory holding `uppers/` and `snapshots/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn live(&self) -> Result<&Path, Error> {
        if self.closed {
            return Err(Error::Closed {
                path: self.root.clone(),
            });
        }
        Ok(&self.root)
    }

    /// An upper's area and the partial name it is built under.
    fn upper_area(&self, sandbox: &str) -> Result<(PathBuf, PathBuf), Error> {
        ids::check("sandbox", sandbox)?;
        let dir = self.live()?.join("uppers");
        Ok((
            dir.join(sandbox),
            dir.join(format!("{PARTIAL_PREFIX}{sandbox}")),
        ))
    }

    /// A snapshot's archive and the partial name it is written under.
    fn archive(&self, snapshot: &str) -> Result<(PathBuf, PathBuf), Error> {
        ids::check("snapshot", snapshot)?;
        let dir = self.live()?.join("snapshots");
        Ok((
            dir.join(format!("{snapshot}{ARCHIVE_SUFFIX}")),
            dir.join(format!("{PARTIAL_PREFIX}{snapshot}{ARCHIVE_SUFFIX}")),
        ))
    }
}

/// Reads the store's layout version, or records the current one in a new
/// (or never versioned) store.
fn check_layout(root: &Path) -> Result<(), Error> {
    let path = root.join(LAYOUT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found = text.trim();
            if found == COPY_STORE_VERSION.to_string() {
                Ok(())
            } else {
                Err(Error::StoreVersion {
                    path,
                    found: found.to_owned(),
                    supported: COPY_STORE_VERSION,
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // atomic-write-file: temp file, fsync, rename, fsync of the directory.
            AtomicWriteFile::open(&path)
                .and_then(|mut file| {
                    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
                    writeln!(file, "{COPY_STORE_VERSION}")?;
                    file.commit()
                })
                .map_err(Error::io("write", &path))
        }
        Err(e) => Err(Error::io("read", &path)(e)),
    }
}

/// Writes `upper`'s content as a tar archive at `archive` (mode 0600) and
/// fsyncs it.
fn write_archive(upper: &Path, archive: &Path) -> Result<(), Error> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(archive)
        .map_err(Error::io("create", archive))?;
    let out = file.try_clone().map_err(Error::io("duplicate", archive))?;
    let mut args: Vec<&OsStr> = vec!["--create".as_ref(), "--sparse".as_ref()];
    args.extend(TAR_FIDELITY.map(OsStr::new));
    args.extend([
        "--file=-".as_ref(),
        "--directory".as_ref(),
        upper.as_os_str(),
        ".".as_ref(),
    ]);
    // A snapshot must survive a host crash like a btrfs one, whose
    // snapshot commits a transaction. Flushing while tar still writes
    // overlaps the disk writes with tar's reading, so the final fsync has
    // little left (figures in docs/benchmarks.md).
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let early = std::thread::scope(|scope| {
        let file = &file;
        let flusher = scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(EARLY_FLUSH_PERIOD) {
                file.sync_data()?;
            }
            Ok(())
        });
        let ran = run_into("tar", args, out);
        drop(stop);
        let flushed = flusher
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("early flush thread panicked")));
        ran.map(|()| flushed)
    })?;
    // An error seen by an early flush is not reported again by a later
    // fsync of the same open file, so it fails the snapshot here.
    early
        .and_then(|()| file.sync_all())
        .map_err(Error::io("fsync", archive))
}

/// Extracts `archive` into the existing empty directory `upper`.
fn extract_archive(archive: &Path, upper: &Path) -> Result<(), Error> {
    let mut args: Vec<&OsStr> = vec![
        "--extract".as_ref(),
        "--preserve-permissions".as_ref(),
        "--same-owner".as_ref(),
    ];
    args.extend(TAR_FIDELITY.map(OsStr::new));
    args.extend([
        "--file".as_ref(),
        archive.as_os_str(),
        "--directory".as_ref(),
        upper.as_os_str(),
    ]);
    run("tar", args).map(drop)
}

/// Renames a finished partial entry into place and makes the rename durable.
fn publish(partial: &Path, target: &Path) -> Result<(), Error> {
    std::fs::rename(partial, target).map_err(Error::io("rename", partial))?;
    if let Some(parent) = target.parent() {
        fsutil::fsync_dir(parent)?;
    }
    Ok(())
}

impl SnapshotStore for CopyStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Copy
    }

    fn create_upper(&self, sandbox: &str) -> Result<UpperDirs, Error> {
        let (area, _) = self.upper_area(sandbox)?;
        match std::fs::create_dir(&area) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::UpperExists {
                    sandbox: sandbox.to_owned(),
                    path: area,
                });
            }
            other => other.map_err(Error::io("create directory", &area))?,
        }
        let dirs = UpperDirs {
            upper: area.join("upper"),
            work: area.join("work"),
        };
        fsutil::create_dir(&dirs.upper)?;
        fsutil::create_dir(&dirs.work)?;
        Ok(dirs)
    }

    fn snapshot(&self, sandbox: &str, snapshot: &str) -> Result<SnapshotInfo, Error> {
        let (source, _) = self.upper_area(sandbox)?;
        let (target, partial) = self.archive(snapshot)?;
        Held::Upper(sandbox).check(&source, true)?;
        Held::Snapshot(snapshot).check(&target, false)?;
        crate::retry_once(
            sandbox,
            snapshot,
            || {
                write_archive(&source.join("upper"), &partial)?;
                publish(&partial, &target)
            },
            || {
                let _ = fsutil::remove_entry(&partial);
            },
        )?;
        Ok(SnapshotInfo {
            id: snapshot.to_owned(),
            sandbox: sandbox.to_owned(),
            content: SnapshotContent::Archive(target),
        })
    }

    fn fork(&self, snapshot: &str, new_sandbox: &str) -> Result<UpperDirs, Error> {
        let (source, _) = self.archive(snapshot)?;
        let (target, partial) = self.upper_area(new_sandbox)?;
        Held::Snapshot(snapshot).check(&source, true)?;
        Held::Upper(new_sandbox).check(&target, false)?;
        let built = fsutil::create_dir(&partial)
            .and_then(|()| fsutil::create_dir(&partial.join("upper")))
            .and_then(|()| extract_archive(&source, &partial.join("upper")))
            .and_then(|()| fsutil::create_dir(&partial.join("work")))
            .and_then(|()| publish(&partial, &target));
        if let Err(e) = built {
            let _ = fsutil::remove_entry(&partial);
            return Err(e);
        }
        Ok(UpperDirs {
            upper: target.join("upper"),
            work: target.join("work"),
        })
    }

    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        let (archive, _) = self.archive(snapshot)?;
        Held::Snapshot(snapshot).check(&archive, true)?;
        // One unlink: atomic, so no partial name is needed.
        std::fs::remove_file(&archive).map_err(Error::io("remove", &archive))?;
        if let Some(parent) = archive.parent() {
            fsutil::fsync_dir(parent)?;
        }
        Ok(())
    }

    fn destroy_upper_seen(&self, sandbox: &str, mounts: &OverlayMounts) -> Result<(), Error> {
        let (area, partial) = self.upper_area(sandbox)?;
        Held::Upper(sandbox).check(&area, true)?;
        if mounts.uses(&area) {
            return Err(Error::UpperMounted {
                sandbox: sandbox.to_owned(),
                path: area,
            });
        }
        // Moved aside first, so a crash mid-removal leaves only a leftover
        // that open clears.
        std::fs::rename(&area, &partial).map_err(Error::io("rename", &area))?;
        fsutil::remove_entry(&partial)
    }

    fn send(&self, snapshot: &str, parent: Option<&str>, out: &Path) -> Result<(), Error> {
        if parent.is_some() {
            return Err(Error::Transport {
                snapshot: snapshot.to_owned(),
                message: "the copy store sends whole archives only".to_owned(),
            });
        }
        let (archive, _) = self.archive(snapshot)?;
        Held::Snapshot(snapshot).check(&archive, true)?;
        std::fs::copy(&archive, out)
            .map(drop)
            .map_err(Error::io("copy", &archive))
    }

    fn receive(&self, snapshot: &str, stream: &Path) -> Result<(), Error> {
        let (target, partial) = self.archive(snapshot)?;
        Held::Snapshot(snapshot).check(&target, false)?;
        let copied = std::fs::copy(stream, &partial)
            .map_err(Error::io("copy", stream))
            .and_then(|_| {
                std::fs::File::open(&partial)
                    .and_then(|f| f.sync_all())
                    .map_err(Error::io("fsync", &partial))
            })
            .and_then(|()| publish(&partial, &target));
        if copied.is_err() {
            let _ = fsutil::remove_entry(&partial);
        }
        copied
    }

    fn list(&self) -> Result<Listing, Error> {
        let root = self.live()?;
        let mut snapshots: Vec<String> = fsutil::list_names(&root.join("snapshots"))?
            .into_iter()
            .filter_map(|name| {
                name.strip_suffix(ARCHIVE_SUFFIX)
                    .filter(|id| ids::is_valid(id))
                    .map(str::to_owned)
            })
            .collect();
        snapshots.sort();
        Ok(Listing {
            uppers: fsutil::list_ids(&root.join("uppers"))?,
            snapshots,
        })
    }

    fn close(&mut self) -> Result<(), Error> {
        // Nothing mounted; closing only stops further use.
        self.closed = true;
        Ok(())
    }
}
