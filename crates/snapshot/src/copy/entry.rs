//! One entry of a snapshot archive as both sides see it: what the walk of
//! an upper records and what a fork restores. Names and link targets are
//! raw bytes, never UTF-8 strings: an upper may hold any name a process
//! could create.

/// A time as the kernel keeps it: seconds since the epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Time {
    pub(super) sec: i64,
    pub(super) nsec: u32,
}

/// What an entry is, with what only that kind carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    /// A regular file of `size` bytes; `extents` are its (offset, length)
    /// data runs when it has holes, `None` when it is all data.
    File {
        size: u64,
        extents: Option<Vec<(u64, u64)>>,
    },
    /// A symlink and its target, never followed.
    Symlink(Vec<u8>),
    /// A further name of an inode archived earlier under this path.
    HardLink(Vec<u8>),
    /// A character device (overlayfs whiteouts are 0:0 ones).
    Char(u64, u64),
    Block(u64, u64),
    Fifo,
    /// A socket node, kept as a node (no one listens on it after a fork).
    Socket,
}

/// One archived name and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// `.` for the upper itself, else names joined by `/` below it.
    pub(super) path: Vec<u8>,
    pub(super) kind: Kind,
    /// Permission bits with setuid, setgid and sticky (`0o7777`).
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) atime: Time,
    pub(super) mtime: Time,
    /// Every xattr, `trusted.*` and `security.*` included, in listing order.
    pub(super) xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The xattr a fork sets last: `chown` and writes clear it.
pub(super) const CAPABILITY_XATTR: &[u8] = b"security.capability";

impl Entry {
    /// The bytes of file data the archive carries for this entry.
    pub(super) fn data_len(&self) -> u64 {
        match &self.kind {
            Kind::File {
                extents: Some(extents),
                ..
            } => extents.iter().map(|(_, len)| len).sum(),
            Kind::File { size, .. } => *size,
            _ => 0,
        }
    }

    /// The path for messages (lossy: names may not be UTF-8).
    pub(super) fn shown(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }
}
