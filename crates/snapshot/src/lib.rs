//! Snapshot stores: where a sandbox's overlay upper and work directories live,
//! and how they are snapshotted (while the sandbox is frozen) and forked into a
//! new sandbox. Two stores share one trait:
//!
//! - [`BtrfsStore`]: one subvolume per sandbox; snapshot and fork are
//!   subvolume snapshots, constant time whatever the file count. When the
//!   store directory is not on btrfs it loop-mounts a sparse btrfs image it
//!   owns and removes on close.
//! - [`CopyStore`]: any filesystem; a snapshot is one pax archive of the
//!   upper and a fork restores it, both walked by descriptor whatever the
//!   depth, keeping what the btrfs store keeps: whiteouts, opaque
//!   directories, hard links, sparse files, every xattr, owners, modes
//!   and nanosecond times.
//!
//! [`SnapshotIndex`] records which checkpoint names which snapshots, so a
//! sweep can delete every snapshot no retained checkpoint needs.
//!
//! | module | what it is for |
//! |---|---|
//! | `btrfs`, `image` | the btrfs store and the loop-mounted image it may own |
//! | `copy` | the copy store (`copy/mod.rs` maps its files) |
//! | `choose` | picking a store |
//! | `index` | the snapshot index |
//! | `subvol` | btrfs subvolume ioctls (the one module with `unsafe`) |
//! | `command`, `fsutil`, `ids` | external tools, filesystem chores, id checks |
//! | `errors` | errors naming the path or id |

#![deny(unsafe_code)]

mod btrfs;
mod choose;
mod command;
mod copy;
mod errors;
mod fsutil;
mod ids;
mod image;
mod index;
mod subvol;

use std::path::{Path, PathBuf};

pub use btrfs::{BtrfsStore, ImageOptions};
pub use choose::{Opened, StoreChoice, StoreOptions, open};
pub use copy::{COPY_STORE_VERSION, CopyStore};
pub use errors::{ArchiveError, ArchiveFault, Error};
pub use fsutil::{OverlayMounts, is_btrfs, is_mount_point, syncfs};
pub use index::{INDEX_VERSION, SnapshotIndex, plan_sweep, sweep};

/// The writable area of one sandbox: pass `upper` as overlayfs `upperdir`
/// and `work` as `workdir`. Both are on the same filesystem, as overlayfs
/// requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpperDirs {
    pub upper: PathBuf,
    pub work: PathBuf,
}

/// A snapshot taken of one sandbox's upper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub id: String,
    pub sandbox: String,
    /// Where the frozen upper is kept. Read it, never write it.
    pub content: SnapshotContent,
}

/// How a store keeps a snapshot's frozen upper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotContent {
    /// A read-only directory tree (the btrfs store's snapshot subvolume).
    Tree(PathBuf),
    /// One pax archive of the upper's content (the copy store); GNU tar
    /// lists it, but only the store restores it faithfully whatever the
    /// depth (see [`CopyStore`]).
    Archive(PathBuf),
}

/// What a store holds, for sweeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub uppers: Vec<String>,
    pub snapshots: Vec<String>,
}

/// Which store implementation is behind a `dyn SnapshotStore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// btrfs subvolumes on a filesystem the store did not mount.
    Btrfs,
    /// btrfs subvolumes in a loop-mounted image the store owns.
    BtrfsImage,
    Copy,
}

impl StoreKind {
    /// The store's name in configs and messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Btrfs => "btrfs",
            Self::BtrfsImage => "btrfs (image)",
            Self::Copy => "copy",
        }
    }
}

/// Storage for sandbox uppers and their snapshots.
///
/// Ids are ASCII letters, digits, `-`, `_`, `.` and `~`, not starting with `.` or
/// `-`, at most 128 bytes. Methods take `&self`; the store serialises nothing
/// itself, so two calls about the same sandbox or snapshot must not race.
pub trait SnapshotStore: Send + Sync + std::fmt::Debug {
    fn kind(&self) -> StoreKind;

    /// Creates an empty upper and work directory for `sandbox`.
    fn create_upper(&self, sandbox: &str) -> Result<UpperDirs, Error>;

    /// A directory on the store's own filesystem, beside its uppers, for
    /// overlay layers its sandboxes share (made by the caller; `None`: the
    /// store has no filesystem of its own). A layer there can sit on top of
    /// the host's `/` as a lower, which overlayfs refuses for a directory
    /// of the host's root filesystem.
    fn layers_dir(&self) -> Option<PathBuf> {
        None
    }

    /// Limits the bytes `sandbox`'s upper may take; past it writes fail
    /// with `EDQUOT`. The btrfs store only (a qgroup limit, set again on
    /// each fork); another store refuses by name.
    fn limit_upper(&self, sandbox: &str, bytes: u64) -> Result<(), Error> {
        let _ = bytes;
        Err(Error::Unsupported {
            what: format!("a disk limit on sandbox {sandbox}'s upper"),
            store: self.kind().name(),
        })
    }

    /// Snapshots `sandbox`'s upper as `snapshot`. Call only while the
    /// sandbox's processes are frozen and after syncfs on its overlay. A
    /// failed attempt is cleaned up and retried once before the error is
    /// returned.
    fn snapshot(&self, sandbox: &str, snapshot: &str) -> Result<SnapshotInfo, Error>;

    /// Creates the upper of a new sandbox holding exactly `snapshot`'s
    /// content, with a fresh empty work directory.
    fn fork(&self, snapshot: &str, new_sandbox: &str) -> Result<UpperDirs, Error>;

    /// Deletes a snapshot; a missing one is an error naming it.
    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error>;

    /// Deletes a sandbox's upper and work directories. Unmount its overlay
    /// first: an overlay on it in the caller's mount namespace is refused
    /// (one in another namespace cannot be seen from here).
    fn destroy_upper(&self, sandbox: &str) -> Result<(), Error> {
        self.destroy_upper_seen(sandbox, &OverlayMounts::read()?)
    }

    /// [`SnapshotStore::destroy_upper`], checked against overlay mounts the
    /// caller read once for a batch: valid while nothing mounts a new
    /// overlay in between (a sweep, which excludes starts).
    fn destroy_upper_seen(&self, sandbox: &str, mounts: &OverlayMounts) -> Result<(), Error>;

    /// Every upper and snapshot in the store, sorted by id.
    fn list(&self) -> Result<Listing, Error>;

    /// Writes `snapshot` as a stream file at `out` that [`SnapshotStore::receive`] reads
    /// back on any node: for the btrfs store a `btrfs send` stream holding only what changed
    /// since `parent` when one is given (a snapshot here that `snapshot` descends from), for
    /// the copy store its archive (which takes no parent).
    fn send(&self, snapshot: &str, parent: Option<&str>, out: &Path) -> Result<(), Error>;

    /// Makes snapshot `snapshot` from a stream file [`SnapshotStore::send`] wrote; the
    /// snapshot it was sent against must be here. All or nothing: a failed receive leaves
    /// no snapshot.
    fn receive(&self, snapshot: &str, stream: &Path) -> Result<(), Error>;

    /// Undoes whatever the store itself mounted (the btrfs image). Data in
    /// a store the caller provided stays. Idempotent; `Drop` calls it too.
    fn close(&mut self) -> Result<(), Error>;
}

/// Runs `attempt`; on failure runs `cleanup` and tries once more.
pub(crate) fn retry_once<T>(
    sandbox: &str,
    snapshot: &str,
    mut attempt: impl FnMut() -> Result<T, Error>,
    cleanup: impl Fn(),
) -> Result<T, Error> {
    match attempt() {
        Ok(value) => Ok(value),
        Err(first) => {
            cleanup();
            attempt().map_err(|last| {
                cleanup();
                Error::SnapshotRetried {
                    sandbox: sandbox.to_owned(),
                    snapshot: snapshot.to_owned(),
                    first: Box::new(first),
                    last: Box::new(last),
                }
            })
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn failure(n: u32) -> Error {
        Error::Closed {
            path: PathBuf::from(format!("/attempt{n}")),
        }
    }

    #[test]
    fn retry_once_cleans_up_and_tries_exactly_once_more() {
        let calls = Cell::new(0);
        let cleanups = Cell::new(0);
        let attempt = || {
            calls.set(calls.get() + 1);
            if calls.get() == 1 {
                Err(failure(1))
            } else {
                Ok(calls.get())
            }
        };
        let value = retry_once("sb", "snap", attempt, || cleanups.set(cleanups.get() + 1));
        assert_eq!(value.unwrap(), 2);
        assert_eq!(cleanups.get(), 1);

        calls.set(0);
        cleanups.set(0);
        let err = retry_once::<()>(
            "sb",
            "snap",
            || {
                calls.set(calls.get() + 1);
                Err(failure(calls.get()))
            },
            || cleanups.set(cleanups.get() + 1),
        )
        .unwrap_err();
        assert_eq!(calls.get(), 2);
        assert_eq!(cleanups.get(), 2);
        let text = err.to_string();
        assert!(
            text.contains("snapshot snap of sandbox sb failed twice"),
            "{text}"
        );
        assert!(
            text.contains("/attempt1") && text.contains("/attempt2"),
            "{text}"
        );
    }
}
