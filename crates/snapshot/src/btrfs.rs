//! The btrfs store: each sandbox's area (`upper/` and `work/`) is a
//! subvolume, a snapshot is a read-only snapshot of it and a fork a writable
//! snapshot of the snapshot, so both cost the same whatever the file count.
//!
//! Subvolumes are made, snapshotted and deleted with the kernel's ioctls
//! (`subvol`): a `btrfs` process per call was most of a checkpoint's commit
//! at a thousand sandboxes. btrfs-progs is still what formats the image.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::fcntl::Flock;

use crate::errors::{Error, Held};
use crate::fsutil::OverlayMounts;
use crate::image::Image;
use crate::{
    Listing, SnapshotContent, SnapshotInfo, SnapshotStore, StoreKind, UpperDirs, fsutil, ids,
    subvol,
};

/// Size of the sparse image used when the store directory is not on btrfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageOptions {
    /// Apparent size in bytes; blocks are allocated only as data is written.
    pub size_bytes: u64,
}

impl Default for ImageOptions {
    fn default() -> Self {
        Self {
            size_bytes: 8 << 30,
        }
    }
}

#[derive(Debug)]
pub struct BtrfsStore {
    /// Where `uppers/` and `snapshots/` live: the store directory itself, or
    /// the image's mount point.
    root: PathBuf,
    image: Option<Image>,
    closed: bool,
    _lock: Flock<File>,
}

impl BtrfsStore {
    /// Opens a store in `dir`, which is created if missing. On btrfs the
    /// subvolumes go straight into `dir`; elsewhere into a sparse image of
    /// `image.size_bytes` mounted at `dir/btrfs`.
    pub fn open(dir: &Path, image: &ImageOptions) -> Result<Self, Error> {
        fsutil::create_dir_all(dir)?;
        let dir = std::fs::canonicalize(dir).map_err(Error::io("resolve", dir))?;
        let lock = fsutil::lock_store(&dir)?;
        let (root, image) = if fsutil::is_btrfs(&dir)? {
            (dir, None)
        } else {
            let image =
                Image::open(&dir, image.size_bytes).map_err(|e| Error::BtrfsUnavailable {
                    path: dir.clone(),
                    reason: e.to_string(),
                })?;
            (image.mount.clone(), Some(image))
        };
        let mut store = Self {
            root,
            image,
            closed: false,
            _lock: lock,
        };
        if let Err(e) = store.make_layout() {
            let _ = store.close();
            return Err(e);
        }
        Ok(store)
    }

    fn make_layout(&self) -> Result<(), Error> {
        for dir in ["uppers", "snapshots"] {
            let dir = self.root.join(dir);
            fsutil::create_dir_all(&dir)?;
            // What a crash left staged: never named, so never used.
            for name in fsutil::list_names(&dir)? {
                if name.starts_with(STAGING) {
                    remove_area(&dir.join(name))?;
                }
            }
        }
        Ok(())
    }

    /// The directory holding `uppers/` and `snapshots/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The image file, when the store made one.
    pub fn image_file(&self) -> Option<&Path> {
        self.image.as_ref().map(|i| i.file.as_path())
    }

    fn live(&self) -> Result<&Path, Error> {
        if self.closed {
            return Err(Error::Closed {
                path: self.root.clone(),
            });
        }
        Ok(&self.root)
    }

    fn upper_area(&self, sandbox: &str) -> Result<PathBuf, Error> {
        ids::check("sandbox", sandbox)?;
        Ok(self.live()?.join("uppers").join(sandbox))
    }

    fn snapshot_area(&self, snapshot: &str) -> Result<PathBuf, Error> {
        ids::check("snapshot", snapshot)?;
        Ok(self.live()?.join("snapshots").join(snapshot))
    }
}

fn dirs_of(area: &Path) -> UpperDirs {
    UpperDirs {
        upper: area.join("upper"),
        work: area.join("work"),
    }
}

fn subvolume_delete(path: &Path) -> Result<(), Error> {
    subvol::delete(path)
}

/// Prefix of a staging directory (not a valid id, so never listed).
const STAGING: &str = ".new-";

/// The read-only subvolume in a snapshot's directory. btrfs makes the
/// snapshots of one directory one at a time, under that directory's lock,
/// each with its own transaction commit, so each snapshot is made in a
/// directory of its own (`snapshots/<id>/ro`) and the snapshots of a batch
/// share commits. (A read-only subvolume cannot be moved, so it is made
/// where it stays; its directory is what is renamed into place.)
const SNAPSHOT_SUBVOLUME: &str = "ro";

/// The subvolume of a snapshot area: `<area>/ro`, or the area itself in a
/// store made before snapshots had directories of their own.
fn snapshot_subvolume(area: &Path) -> PathBuf {
    let inner = area.join(SNAPSHOT_SUBVOLUME);
    if inner.is_dir() {
        inner
    } else {
        area.to_owned()
    }
}

/// A fork's subvolume while it is staged.
const FORK_SUBVOLUME: &str = "s";

/// Removes a snapshot area or a staging directory with the subvolume it
/// holds (an area of the older layout is itself the subvolume).
fn remove_area(area: &Path) -> Result<(), Error> {
    let inner: Vec<PathBuf> = [SNAPSHOT_SUBVOLUME, FORK_SUBVOLUME]
        .iter()
        .map(|n| area.join(n))
        .filter(|p| p.exists())
        .collect();
    if inner.is_empty() && area.join("upper").exists() {
        return subvolume_delete(area);
    }
    for subvolume in &inner {
        subvolume_delete(subvolume)?;
    }
    std::fs::remove_dir(area).map_err(Error::io("remove", area))
}

/// Makes `<parent>/.new-<name>` (cleared of what a crash left) and returns it.
fn staging_for(target: &Path) -> Result<PathBuf, Error> {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let staging = target.with_file_name(format!("{STAGING}{name}"));
    if staging.exists() {
        remove_area(&staging)?;
    }
    fsutil::create_dir(&staging)?;
    Ok(staging)
}

impl SnapshotStore for BtrfsStore {
    fn layers_dir(&self) -> Option<PathBuf> {
        Some(self.root.join("layers"))
    }

    fn kind(&self) -> StoreKind {
        if self.image.is_some() {
            StoreKind::BtrfsImage
        } else {
            StoreKind::Btrfs
        }
    }

    fn create_upper(&self, sandbox: &str) -> Result<UpperDirs, Error> {
        let area = self.upper_area(sandbox)?;
        Held::Upper(sandbox).check(&area, false)?;
        subvol::create(&area)?;
        let dirs = dirs_of(&area);
        let made = fsutil::create_dir(&dirs.upper).and_then(|()| fsutil::create_dir(&dirs.work));
        if let Err(e) = made {
            let _ = subvolume_delete(&area);
            return Err(e);
        }
        Ok(dirs)
    }

    fn limit_upper(&self, sandbox: &str, bytes: u64) -> Result<(), Error> {
        let area = self.upper_area(sandbox)?;
        Held::Upper(sandbox).check(&area, true)?;
        subvol::limit(&area, bytes)
    }

    fn snapshot(&self, sandbox: &str, snapshot: &str) -> Result<SnapshotInfo, Error> {
        let source = self.upper_area(sandbox)?;
        let target = self.snapshot_area(snapshot)?;
        Held::Upper(sandbox).check(&source, true)?;
        Held::Snapshot(snapshot).check(&target, false)?;
        crate::retry_once(
            sandbox,
            snapshot,
            || {
                let staging = staging_for(&target)?;
                subvol::snapshot(&source, &staging.join(SNAPSHOT_SUBVOLUME), true)
                    .and_then(|()| {
                        std::fs::rename(&staging, &target)
                            .map_err(Error::io("rename into place", &staging))
                    })
                    .inspect_err(|_| {
                        let _ = remove_area(&staging);
                    })
            },
            || {
                if target.exists() {
                    let _ = remove_area(&target);
                }
            },
        )?;
        Ok(SnapshotInfo {
            id: snapshot.to_owned(),
            sandbox: sandbox.to_owned(),
            content: SnapshotContent::Tree(target.join(SNAPSHOT_SUBVOLUME).join("upper")),
        })
    }

    fn fork(&self, snapshot: &str, new_sandbox: &str) -> Result<UpperDirs, Error> {
        let source = self.snapshot_area(snapshot)?;
        let target = self.upper_area(new_sandbox)?;
        Held::Snapshot(snapshot).check(&source, true)?;
        Held::Upper(new_sandbox).check(&target, false)?;
        // Writable, so it can be made in a directory of its own (see
        // SNAPSHOT_SUBVOLUME) and moved into place.
        let staging = staging_for(&target)?;
        let staged = staging.join(FORK_SUBVOLUME);
        subvol::snapshot(&snapshot_subvolume(&source), &staged, false)
            .and_then(|()| {
                std::fs::rename(&staged, &target).map_err(Error::io("rename into place", &staged))
            })
            .inspect_err(|_| {
                let _ = remove_area(&staging);
            })?;
        std::fs::remove_dir(&staging).map_err(Error::io("remove", &staging))?;
        let dirs = dirs_of(&target);
        // The snapshot carries the old mount's work dir; overlayfs needs an
        // empty one.
        let fresh = fsutil::remove_tree(&dirs.work).and_then(|()| fsutil::create_dir(&dirs.work));
        if let Err(e) = fresh {
            let _ = subvolume_delete(&target);
            return Err(e);
        }
        Ok(dirs)
    }

    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        let area = self.snapshot_area(snapshot)?;
        Held::Snapshot(snapshot).check(&area, true)?;
        remove_area(&area)
    }

    fn destroy_upper_seen(&self, sandbox: &str, mounts: &OverlayMounts) -> Result<(), Error> {
        let area = self.upper_area(sandbox)?;
        Held::Upper(sandbox).check(&area, true)?;
        if mounts.uses(&area) {
            return Err(Error::UpperMounted {
                sandbox: sandbox.to_owned(),
                path: area,
            });
        }
        subvolume_delete(&area)
    }

    fn list(&self) -> Result<Listing, Error> {
        let root = self.live()?;
        Ok(Listing {
            uppers: fsutil::list_ids(&root.join("uppers"))?,
            snapshots: fsutil::list_ids(&root.join("snapshots"))?,
        })
    }

    fn send(&self, snapshot: &str, parent: Option<&str>, out: &Path) -> Result<(), Error> {
        let subvolume = |id: &str| -> Result<PathBuf, Error> {
            let area = self.snapshot_area(id)?;
            Held::Snapshot(id).check(&area, true)?;
            let inner = area.join(SNAPSHOT_SUBVOLUME);
            if !inner.is_dir() {
                // A snapshot of the older layout is named after itself: a receive could
                // not put it where this store looks.
                return Err(Error::Transport {
                    snapshot: id.to_owned(),
                    message: "made by an older layout; it cannot be sent".to_owned(),
                });
            }
            Ok(inner)
        };
        let source = subvolume(snapshot)?;
        let mut args: Vec<std::ffi::OsString> = vec!["send".into(), "-q".into(), "-f".into()];
        args.push(out.into());
        if let Some(parent) = parent {
            args.push("-p".into());
            args.push(subvolume(parent)?.into());
        }
        args.push(source.into());
        crate::command::run("btrfs", &args).map(drop)
    }

    fn receive(&self, snapshot: &str, stream: &Path) -> Result<(), Error> {
        let target = self.snapshot_area(snapshot)?;
        Held::Snapshot(snapshot).check(&target, false)?;
        let staging = staging_for(&target)?;
        let received = crate::command::run(
            "btrfs",
            [
                "receive".as_ref(),
                "-q".as_ref(),
                "-f".as_ref(),
                stream.as_os_str(),
                staging.as_os_str(),
            ],
        )
        .and_then(|_| {
            if staging.join(SNAPSHOT_SUBVOLUME).is_dir() {
                Ok(())
            } else {
                Err(Error::Transport {
                    snapshot: snapshot.to_owned(),
                    message: format!(
                        "the stream {} holds no snapshot subvolume named {SNAPSHOT_SUBVOLUME}",
                        stream.display()
                    ),
                })
            }
        })
        .and_then(|()| {
            std::fs::rename(&staging, &target).map_err(Error::io("rename into place", &staging))
        })
        .and_then(|()| fsutil::fsync_dir(target.parent().unwrap_or(&target)));
        if received.is_err() {
            let _ = remove_area(&staging);
        }
        received
    }

    fn close(&mut self) -> Result<(), Error> {
        if self.closed {
            return Ok(());
        }
        if let Some(image) = &self.image {
            // Snapshots a retained checkpoint may need outlive this process:
            // the image file goes only when it holds nothing.
            let empty = self
                .list()
                .is_ok_and(|l| l.uppers.is_empty() && l.snapshots.is_empty());
            image.remove(empty)?;
        }
        self.closed = true;
        Ok(())
    }
}

impl Drop for BtrfsStore {
    fn drop(&mut self) {
        // Errors cannot surface from Drop; callers wanting them call close.
        let _ = self.close();
    }
}
