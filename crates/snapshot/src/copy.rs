//! The copy store: works on any filesystem. A snapshot is a copy of the
//! upper, a fork a copy back; cost grows with the files in the upper.
//!
//! Copies go through `cp -a --reflink=auto` (GNU coreutils): as root it
//! keeps everything overlayfs stores in an upper (whiteouts as 0:0 character
//! devices, `trusted.overlay.*` xattrs marking opaque directories, hard links
//! within the tree, symlinks, owners, modes, times, user xattrs) and shares
//! extents where the filesystem can reflink. Redoing that by hand would
//! mean reimplementing cp's hard-link map and xattr handling.
//!
//! Entries are built under a `.partial-` name and renamed into place, so a
//! crash never leaves a half copy under a valid id; open removes leftovers.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::fcntl::Flock;

use crate::command::run;
use crate::errors::{Error, Held};
use crate::ids::PARTIAL_PREFIX;
use crate::{Listing, SnapshotInfo, SnapshotStore, StoreKind, UpperDirs, fsutil, ids};

#[derive(Debug)]
pub struct CopyStore {
    root: PathBuf,
    closed: bool,
    _lock: Flock<File>,
}

impl CopyStore {
    /// Opens a store in `dir`, created if missing, and removes entries left
    /// half-built by an interrupted run.
    pub fn open(dir: &Path) -> Result<Self, Error> {
        fsutil::create_dir_all(dir)?;
        let root = std::fs::canonicalize(dir).map_err(Error::io("resolve", dir))?;
        let lock = fsutil::lock_store(&root)?;
        for sub in ["uppers", "snapshots"] {
            let sub = root.join(sub);
            fsutil::create_dir_all(&sub)?;
            for partial in fsutil::list_partials(&sub)? {
                fsutil::remove_tree(&partial)?;
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

    fn area(&self, sub: &str, what: &'static str, id: &str) -> Result<(PathBuf, PathBuf), Error> {
        ids::check(what, id)?;
        let dir = self.live()?.join(sub);
        Ok((dir.join(id), dir.join(format!("{PARTIAL_PREFIX}{id}"))))
    }

    /// Moves `area` aside under its partial name, then removes it, so a
    /// crash mid-removal leaves only a leftover that open cleans.
    fn remove_area(area: &Path, partial: &Path) -> Result<(), Error> {
        std::fs::rename(area, partial).map_err(Error::io("rename", area))?;
        fsutil::remove_tree(partial)
    }
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), Error> {
    run(
        "cp",
        [
            "-a".as_ref(),
            "--reflink=auto".as_ref(),
            "--no-target-directory".as_ref(),
            from.as_os_str(),
            to.as_os_str(),
        ],
    )
    .map(drop)
}

/// Renames a finished partial entry into place and makes the rename durable.
fn publish(partial: &Path, area: &Path) -> Result<(), Error> {
    std::fs::rename(partial, area).map_err(Error::io("rename", partial))?;
    if let Some(parent) = area.parent() {
        fsutil::fsync_dir(parent)?;
    }
    Ok(())
}

impl SnapshotStore for CopyStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Copy
    }

    fn create_upper(&self, sandbox: &str) -> Result<UpperDirs, Error> {
        let (area, _) = self.area("uppers", "sandbox", sandbox)?;
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
        let (source, _) = self.area("uppers", "sandbox", sandbox)?;
        let (target, partial) = self.area("snapshots", "snapshot", snapshot)?;
        Held::Upper(sandbox).check(&source, true)?;
        Held::Snapshot(snapshot).check(&target, false)?;
        crate::retry_once(
            sandbox,
            snapshot,
            || {
                fsutil::create_dir(&partial)?;
                copy_tree(&source.join("upper"), &partial.join("upper"))?;
                // A snapshot must survive a host crash like a btrfs one,
                // whose snapshot commits a transaction.
                fsutil::syncfs(&partial)?;
                publish(&partial, &target)
            },
            || {
                let _ = fsutil::remove_tree(&partial);
            },
        )?;
        Ok(SnapshotInfo {
            id: snapshot.to_owned(),
            sandbox: sandbox.to_owned(),
            upper: target.join("upper"),
        })
    }

    fn fork(&self, snapshot: &str, new_sandbox: &str) -> Result<UpperDirs, Error> {
        let (source, _) = self.area("snapshots", "snapshot", snapshot)?;
        let (target, partial) = self.area("uppers", "sandbox", new_sandbox)?;
        Held::Snapshot(snapshot).check(&source, true)?;
        Held::Upper(new_sandbox).check(&target, false)?;
        let built = fsutil::create_dir(&partial)
            .and_then(|()| copy_tree(&source.join("upper"), &partial.join("upper")))
            .and_then(|()| fsutil::create_dir(&partial.join("work")))
            .and_then(|()| publish(&partial, &target));
        if let Err(e) = built {
            let _ = fsutil::remove_tree(&partial);
            return Err(e);
        }
        Ok(UpperDirs {
            upper: target.join("upper"),
            work: target.join("work"),
        })
    }

    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        let (area, partial) = self.area("snapshots", "snapshot", snapshot)?;
        Held::Snapshot(snapshot).check(&area, true)?;
        Self::remove_area(&area, &partial)
    }

    fn destroy_upper(&self, sandbox: &str) -> Result<(), Error> {
        let (area, partial) = self.area("uppers", "sandbox", sandbox)?;
        Held::Upper(sandbox).check(&area, true)?;
        if fsutil::overlay_uses(&area)? {
            return Err(Error::UpperMounted {
                sandbox: sandbox.to_owned(),
                path: area,
            });
        }
        Self::remove_area(&area, &partial)
    }

    fn list(&self) -> Result<Listing, Error> {
        let root = self.live()?;
        Ok(Listing {
            uppers: fsutil::list_ids(&root.join("uppers"))?,
            snapshots: fsutil::list_ids(&root.join("snapshots"))?,
        })
    }

    fn close(&mut self) -> Result<(), Error> {
        // Nothing mounted; closing only stops further use.
        self.closed = true;
        Ok(())
    }
}
