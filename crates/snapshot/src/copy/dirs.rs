//! Directories held by descriptor while a walk or a restore goes down a
//! tree, never by a path longer than one name: a sandbox can make a chain
//! of directories far deeper than PATH_MAX. At most [`MAX_OPEN_DIRS`] of
//! the stack hold an open descriptor whatever the depth; going back up to
//! a directory whose descriptor was let go reopens it through `..` of its
//! child and checks it is the same directory (device and inode).

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, fstat};

use crate::errors::Error;

/// Directory descriptors a stack keeps open at most.
pub(super) const MAX_OPEN_DIRS: usize = 32;

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Opens `name` in `dir` with `flags`, without updating its access time
/// where the kernel allows it (`O_NOATIME` needs the file's owner or
/// CAP_FOWNER).
pub(super) fn open_at(dir: &File, name: &[u8], flags: OFlag) -> nix::Result<File> {
    match openat(dir, name, flags | OFlag::O_NOATIME, Mode::empty()) {
        Err(Errno::EPERM) => openat(dir, name, flags, Mode::empty()),
        other => other,
    }
    .map(File::from)
}

/// Opens the directory `name` in `dir`; a symlink there is refused.
pub(super) fn open_dir_at(dir: &File, name: &[u8]) -> nix::Result<File> {
    open_at(dir, name, DIR_FLAGS)
}

/// A path naming `name` in the directory open as `dir` without walking
/// more than one name: for the xattr calls on nodes that cannot be opened
/// (symlinks, devices, FIFOs, sockets), which have no `*at` form.
pub(super) fn proc_path(dir: &File, name: &[u8]) -> PathBuf {
    let mut path = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    path.extend_from_slice(name);
    PathBuf::from(OsStr::from_bytes(&path))
}

/// The names in an open directory, sorted.
pub(super) fn list(dir: &File, shown: &Path) -> Result<Vec<Vec<u8>>, Error> {
    let walk = |source| Error::Walk {
        op: "list",
        path: shown.to_owned(),
        source,
    };
    let dup = dir.try_clone().map_err(Error::io("duplicate", shown))?;
    let mut stream = Dir::from_fd(OwnedFd::from(dup)).map_err(walk)?;
    let mut names = Vec::new();
    for item in stream.iter() {
        let name = item.map_err(walk)?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    names.sort_unstable();
    Ok(names)
}

/// `base` joined with a relative path of raw bytes, for messages.
pub(super) fn shown(base: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() || rel == b"." {
        base.to_owned()
    } else {
        base.join(OsStr::from_bytes(rel))
    }
}

struct Frame<T> {
    fd: Option<File>,
    dev: u64,
    ino: u64,
    /// Length of the stack's path up to this directory.
    path_len: usize,
    data: T,
}

/// The directories from the root of a walk down to the current one, each
/// with what the walk keeps about it (`T`).
pub(super) struct DirStack<T> {
    base: PathBuf,
    frames: Vec<Frame<T>>,
    /// Frames below this index hold no descriptor.
    first_open: usize,
    path: Vec<u8>,
}

impl<T> DirStack<T> {
    /// An empty stack for a tree at `base` (named in errors).
    pub(super) fn new(base: &Path) -> Self {
        Self {
            base: base.to_owned(),
            frames: Vec::new(),
            first_open: 0,
            path: Vec::new(),
        }
    }

    /// The current directory's path below the root (empty at the root).
    pub(super) fn path(&self) -> &[u8] {
        &self.path
    }

    /// The path of `name` in the current directory.
    pub(super) fn child_path(&self, name: &[u8]) -> Vec<u8> {
        if self.path.is_empty() {
            name.to_vec()
        } else {
            [self.path.as_slice(), b"/", name].concat()
        }
    }

    /// Where `rel` is, for messages.
    pub(super) fn shown(&self, rel: &[u8]) -> PathBuf {
        shown(&self.base, rel)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Enters the directory `name` (empty for the root), open as `fd`.
    pub(super) fn push(&mut self, name: &[u8], fd: File, data: T) -> Result<(), Error> {
        let stat = fstat(&fd).map_err(|source| Error::Walk {
            op: "stat",
            path: self.shown(&self.child_path(name)),
            source,
        })?;
        if !name.is_empty() {
            self.path = self.child_path(name);
        }
        self.frames.push(Frame {
            fd: Some(fd),
            dev: stat.st_dev,
            ino: stat.st_ino,
            path_len: self.path.len(),
            data,
        });
        if self.frames.len() - self.first_open > MAX_OPEN_DIRS {
            self.frames[self.first_open].fd = None;
            self.first_open += 1;
        }
        Ok(())
    }

    /// The current directory's descriptor (always held).
    pub(super) fn top_fd(&self) -> Option<&File> {
        self.frames.last().and_then(|f| f.fd.as_ref())
    }

    pub(super) fn top_mut(&mut self) -> Option<&mut T> {
        self.frames.last_mut().map(|f| &mut f.data)
    }

    /// Leaves the current directory, returning its descriptor, path and
    /// data; reopens the parent through `..` when its descriptor was let
    /// go.
    pub(super) fn pop(&mut self) -> Result<Option<(File, Vec<u8>, T)>, Error> {
        let Some(frame) = self.frames.pop() else {
            return Ok(None);
        };
        let path = self.path.clone();
        let parent_len = self.frames.last().map_or(0, |p| p.path_len);
        self.path.truncate(parent_len);
        let fd = frame
            .fd
            .ok_or_else(|| Error::io("reopen", self.shown(&path))(Errno::EBADF.into()))?;
        if let Some(parent) = self.frames.last_mut()
            && parent.fd.is_none()
        {
            let reopened = open_at(&fd, b"..", DIR_FLAGS).map_err(|source| Error::Walk {
                op: "reopen",
                path: shown(&self.base, &self.path),
                source,
            })?;
            let stat = fstat(&reopened).map_err(|source| Error::Walk {
                op: "stat",
                path: shown(&self.base, &self.path),
                source,
            })?;
            if (stat.st_dev, stat.st_ino) != (parent.dev, parent.ino) {
                return Err(Error::Changed {
                    path: shown(&self.base, &self.path),
                    what: "its directory moved",
                });
            }
            parent.fd = Some(reopened);
            self.first_open = self.frames.len() - 1;
        }
        Ok(Some((fd, path, frame.data)))
    }
}
