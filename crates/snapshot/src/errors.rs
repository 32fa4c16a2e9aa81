//! Errors of the snapshot stores and the snapshot index. Every variant names
//! the path, sandbox or snapshot it is about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid {what} id {id:?}: {reason}")]
    InvalidId {
        what: &'static str,
        id: String,
        reason: &'static str,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("statfs {path}: {source}")]
    Statfs { path: PathBuf, source: nix::Error },
    #[error("sandbox {sandbox} already has an upper at {path}")]
    UpperExists { sandbox: String, path: PathBuf },
    #[error("sandbox {sandbox}: an overlay still uses its upper at {path}; unmount it first")]
    UpperMounted { sandbox: String, path: PathBuf },
    #[error("sandbox {sandbox} has no upper at {path}")]
    NoUpper { sandbox: String, path: PathBuf },
    #[error("snapshot {snapshot} already exists at {path}")]
    SnapshotExists { snapshot: String, path: PathBuf },
    #[error("snapshot {snapshot} not found at {path}")]
    NoSnapshot { snapshot: String, path: PathBuf },
    #[error("snapshot {snapshot} of sandbox {sandbox} failed twice; first: {first}; then: {last}")]
    SnapshotRetried {
        sandbox: String,
        snapshot: String,
        first: Box<Error>,
        last: Box<Error>,
    },
    #[error("btrfs: {what} {path}: {reason}")]
    Btrfs {
        what: String,
        path: PathBuf,
        reason: String,
    },
    #[error("snapshot {snapshot}: {message}")]
    Transport { snapshot: String, message: String },
    #[error("{what} needs the btrfs snapshot store (this one is {store})")]
    Unsupported { what: String, store: &'static str },
    #[error("btrfs store unavailable for {path}: {reason}")]
    BtrfsUnavailable { path: PathBuf, reason: String },
    #[error(
        "snapshot index {path}: unsupported version {found} (this build reads version {supported})"
    )]
    IndexVersion {
        path: PathBuf,
        found: u64,
        supported: u64,
    },
    #[error("snapshot index {path}: field {field}: {message}")]
    IndexFormat {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("snapshot index {path}: encode: {source}")]
    IndexEncode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "copy store {path}: unsupported layout version {found:?} (this build reads version {supported})"
    )]
    StoreVersion {
        path: PathBuf,
        found: String,
        supported: u32,
    },
    /// A copy-store archive a fork cannot restore (boxed: errors of this
    /// crate travel inside other crates' errors).
    #[error(transparent)]
    Archive(Box<ArchiveError>),
    #[error("{op} {path}: {source}")]
    Walk {
        op: &'static str,
        path: PathBuf,
        source: nix::Error,
    },
    #[error("{path} changed while it was read: {what}")]
    Changed { path: PathBuf, what: &'static str },
    #[error("unknown snapshot store {value:?}: expected auto, btrfs or copy")]
    UnknownStore { value: String },
    #[error("store lock {path} is held by another store")]
    InUse { path: PathBuf },
    #[error("store at {path} is closed")]
    Closed { path: PathBuf },
}

/// A copy-store archive that cannot be restored, where and why.
#[derive(Debug, thiserror::Error)]
#[error("snapshot {snapshot}: archive {path} at byte {offset} (entry {entry}): {source}")]
pub struct ArchiveError {
    pub snapshot: String,
    pub path: PathBuf,
    pub offset: u64,
    pub entry: String,
    pub source: ArchiveFault,
}

/// What is wrong with a copy-store archive, at the offset the error names.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveFault {
    #[error("not a copy store archive of version {supported} (found {found:?})")]
    Version {
        found: String,
        supported: &'static str,
    },
    #[error("the archive ends early (truncated)")]
    Truncated,
    #[error("the archive ends without its closing checksum record (truncated)")]
    NoClosing,
    #[error("header checksum mismatch (damaged)")]
    HeaderChecksum,
    #[error("field {field} is not a valid number (damaged)")]
    Field { field: &'static str },
    #[error("malformed extended header record (damaged)")]
    Record,
    #[error("unknown entry type {0:?} (damaged)")]
    UnknownType(u8),
    #[error("entry path is not a relative path of plain names (damaged or hostile)")]
    Path,
    #[error("entry comes outside the directory being restored (damaged)")]
    OutOfOrder,
    #[error("content checksum mismatch: recorded {recorded:08x}, read {read:08x} (damaged)")]
    Crc { recorded: u32, read: u32 },
    #[error("read: {0}")]
    Read(#[source] std::io::Error),
}

impl Error {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { op, path, source }
    }
}

/// What a path of the store holds, for the existence checks every store
/// makes before it copies or removes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Held<'a> {
    /// A sandbox's upper area, by sandbox id.
    Upper(&'a str),
    /// A snapshot, by snapshot id.
    Snapshot(&'a str),
}

impl Held<'_> {
    /// `Ok` when `path` exists exactly as `wanted` says; else the error that
    /// names the sandbox or snapshot and the path.
    pub(crate) fn check(self, path: &std::path::Path, wanted: bool) -> Result<(), Error> {
        if path.exists() == wanted {
            return Ok(());
        }
        let path = path.to_owned();
        Err(match (self, wanted) {
            (Self::Upper(s), true) => Error::NoUpper {
                sandbox: s.to_owned(),
                path,
            },
            (Self::Upper(s), false) => Error::UpperExists {
                sandbox: s.to_owned(),
                path,
            },
            (Self::Snapshot(s), true) => Error::NoSnapshot {
                snapshot: s.to_owned(),
                path,
            },
            (Self::Snapshot(s), false) => Error::SnapshotExists {
                snapshot: s.to_owned(),
                path,
            },
        })
    }
}
