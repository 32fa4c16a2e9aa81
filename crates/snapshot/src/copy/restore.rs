//! The fork side: reads an archive and rebuilds the upper by descriptor
//! (`mkdirat`, `openat`, `mknodat`, `symlinkat`, `linkat`, `fchownat`,
//! `utimensat` relative to the directory being filled, `O_NOFOLLOW`
//! throughout, at most [`super::dirs::MAX_OPEN_DIRS`] directories open).
//!
//! Order keeps what later steps would destroy: data is written first
//! (a write drops file capabilities), then the owner (`chown` clears
//! setuid and capabilities), then xattrs with `security.capability` last,
//! then the mode, then the times; a directory's metadata waits until its
//! last entry is in, since each entry made in it changes its times.
//!
//! Every path in the archive must be plain names below the root: an
//! archive cannot reach outside the tree it restores. A damaged or
//! truncated archive fails with the byte offset and entry; the caller
//! removes the half-built tree.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{
    FchmodatFlags, Mode, SFlag, UtimensatFlags, fchmod, fchmodat, futimens, makedev, mkdirat,
    mknodat, utimensat,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid, fchown, fchownat, ftruncate, linkat, symlinkat};
use xattr::FileExt as _;

use crate::errors::{ArchiveError, ArchiveFault, Error};

use super::dirs::{DirStack, open_dir_at, proc_path, shown};
use super::entry::{CAPABILITY_XATTR, Entry, Kind, Time};
use super::pax;

/// Bytes copied at a time.
const CHUNK: usize = 1 << 18;
/// The largest extended header accepted (names, link targets, xattrs).
const MAX_RECORDS: u64 = 16 << 20;

/// The archive being read, with the offset and running CRC-32C.
struct Source {
    inner: BufReader<File>,
    offset: u64,
    crc: u32,
}

impl Source {
    fn read(&mut self, buf: &mut [u8]) -> Result<(), ArchiveFault> {
        self.inner.read_exact(buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                ArchiveFault::Truncated
            } else {
                ArchiveFault::Read(e)
            }
        })?;
        self.crc = crc32c::crc32c_append(self.crc, buf);
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn block(&mut self) -> Result<[u8; pax::BLOCK], ArchiveFault> {
        let mut block = [0; pax::BLOCK];
        self.read(&mut block)?;
        Ok(block)
    }

    fn skip_padding(&mut self, len: u64) -> Result<(), ArchiveFault> {
        let mut pad = [0; pax::BLOCK];
        self.read(&mut pad[..pax::padding(len)])
    }

    /// Reads the data of an extended header and splits its records.
    fn records(&mut self, size: u64) -> Result<pax::Records, ArchiveFault> {
        if size > MAX_RECORDS {
            return Err(ArchiveFault::Field { field: "size" });
        }
        let mut data = vec![0; usize::try_from(size).unwrap_or(0)];
        self.read(&mut data)?;
        self.skip_padding(size)?;
        pax::decode_records(&data)
    }
}

/// The names of a relative archive path, or `None` when it is not plain
/// names (empty, `.`, `..`, a NUL).
fn components(path: &[u8]) -> Option<Vec<&[u8]>> {
    let names: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    let plain = names
        .iter()
        .all(|n| !n.is_empty() && *n != b"." && *n != b".." && !n.contains(&0));
    plain.then_some(names)
}

/// True when `parent` is `dir` or below it.
fn within(dir: &[u8], parent: &[u8]) -> bool {
    dir.is_empty()
        || parent == dir
        || parent.len() > dir.len() && parent.starts_with(dir) && parent[dir.len()] == b'/'
}

fn timespec(t: Time) -> TimeSpec {
    TimeSpec::new(t.sec, i64::from(t.nsec))
}

/// Xattrs in the order a restore sets them: capabilities last.
fn xattr_order(entry: &Entry) -> impl Iterator<Item = &(Vec<u8>, Vec<u8>)> {
    let (caps, rest): (Vec<_>, Vec<_>) = entry
        .xattrs
        .iter()
        .partition(|(name, _)| name == CAPABILITY_XATTR);
    rest.into_iter().chain(caps)
}

/// Rebuilds one upper from one archive.
pub(super) struct Restorer<'a> {
    snapshot: &'a str,
    archive: &'a Path,
    upper: &'a Path,
    src: Source,
    /// The upper's root, always open: hard links resolve from it.
    root: File,
    /// Where the entry being read started, and its path, for errors.
    at: u64,
    current: String,
    chunk: Vec<u8>,
}

impl<'a> Restorer<'a> {
    /// Restores `archive` (of `snapshot`) into the empty directory `upper`.
    pub(super) fn restore(
        snapshot: &'a str,
        archive: &'a Path,
        upper: &'a Path,
    ) -> Result<(), Error> {
        let file = File::open(archive).map_err(Error::io("open", archive))?;
        let root = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits())
            .open(upper)
            .map_err(Error::io("open", upper))?;
        let mut this = Self {
            snapshot,
            archive,
            upper,
            src: Source {
                inner: BufReader::with_capacity(1 << 20, file),
                offset: 0,
                crc: 0,
            },
            root,
            at: 0,
            current: "opening header".to_owned(),
            chunk: vec![0; CHUNK],
        };
        this.opening()?;
        let top = this
            .root
            .try_clone()
            .map_err(Error::io("duplicate", upper))?;
        let mut stack: DirStack<Option<Entry>> = DirStack::new(upper);
        stack.push(b"", top, None)?;
        this.entries(&mut stack)?;
        while !stack.is_empty() {
            this.finish_dir(&mut stack)?;
        }
        Ok(())
    }

    fn fault(&self, source: ArchiveFault) -> Error {
        Error::Archive(Box::new(ArchiveError {
            snapshot: self.snapshot.to_owned(),
            path: self.archive.to_owned(),
            offset: self.at,
            entry: self.current.clone(),
            source,
        }))
    }

    fn io(&self, op: &'static str, rel: &[u8]) -> impl FnOnce(nix::Error) -> Error {
        let path = shown(self.upper, rel);
        move |source| Error::Walk { op, path, source }
    }

    /// Checks the opening header names this version.
    fn opening(&mut self) -> Result<(), Error> {
        let version = |found: &str| ArchiveFault::Version {
            found: found.to_owned(),
            supported: pax::ARCHIVE_VERSION,
        };
        let block = self.src.block().map_err(|f| self.fault(f))?;
        let header =
            pax::decode_header(&block).map_err(|_| self.fault(version("no pax header")))?;
        if header.typeflag != pax::TYPE_GLOBAL {
            return Err(self.fault(version("no version record")));
        }
        let records = self.src.records(header.size).map_err(|f| self.fault(f))?;
        let global = pax::decode_global(&records).map_err(|f| self.fault(f))?;
        match global.version {
            Some(v) if v == pax::ARCHIVE_VERSION.as_bytes() => Ok(()),
            Some(v) => Err(self.fault(version(&String::from_utf8_lossy(&v)))),
            None => Err(self.fault(version("no version record"))),
        }
    }

    /// Reads and restores entries up to the closing header, then checks
    /// the archive's checksum.
    fn entries(&mut self, stack: &mut DirStack<Option<Entry>>) -> Result<(), Error> {
        let mut records = Vec::new();
        loop {
            self.at = self.src.offset;
            let crc_before = self.src.crc;
            let block = self.src.block().map_err(|f| self.fault(f))?;
            if pax::is_zero(&block) {
                return Err(self.fault(ArchiveFault::NoClosing));
            }
            let header = pax::decode_header(&block).map_err(|f| self.fault(f))?;
            match header.typeflag {
                pax::TYPE_PAX => {
                    let more = self.src.records(header.size).map_err(|f| self.fault(f))?;
                    records.extend(more);
                }
                pax::TYPE_GLOBAL => {
                    self.current = "closing header".to_owned();
                    let more = self.src.records(header.size).map_err(|f| self.fault(f))?;
                    let global = pax::decode_global(&more).map_err(|f| self.fault(f))?;
                    if let Some(recorded) = global.crc {
                        if recorded != crc_before {
                            return Err(self.fault(ArchiveFault::Crc {
                                recorded,
                                read: crc_before,
                            }));
                        }
                        let end = self.src.block().map_err(|f| self.fault(f))?;
                        if !pax::is_zero(&end) {
                            return Err(self.fault(ArchiveFault::OutOfOrder));
                        }
                        return Ok(());
                    }
                }
                _ => {
                    let decoded = pax::decode_entry(header, &records).map_err(|f| self.fault(f))?;
                    records.clear();
                    self.current = decoded.entry.shown();
                    self.entry(stack, decoded)?;
                }
            }
        }
    }

    /// Leaves the current directory and sets its metadata.
    fn finish_dir(&mut self, stack: &mut DirStack<Option<Entry>>) -> Result<(), Error> {
        if let Some((fd, path, Some(entry))) = stack.pop()? {
            self.apply_fd(&fd, &entry, &path)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        stack: &mut DirStack<Option<Entry>>,
        decoded: pax::Decoded,
    ) -> Result<(), Error> {
        let pax::Decoded {
            entry,
            stored,
            sparse,
        } = decoded;
        if entry.path == b"." {
            if !stack.path().is_empty() || !matches!(entry.kind, Kind::Dir) {
                return Err(self.fault(ArchiveFault::OutOfOrder));
            }
            if let Some(root) = stack.top_mut() {
                *root = Some(entry);
            }
            return self.skip(stored);
        }
        let Some(names) = components(&entry.path) else {
            return Err(self.fault(ArchiveFault::Path));
        };
        let (name, parents) = names
            .split_last()
            .ok_or_else(|| self.fault(ArchiveFault::Path))?;
        let parent = parents.join(&b"/"[..]);
        let name = name.to_vec();
        let name = name.as_slice();
        while !within(stack.path(), &parent) {
            self.finish_dir(stack)?;
        }
        if stack.path() != parent.as_slice() {
            return Err(self.fault(ArchiveFault::OutOfOrder));
        }
        let dir = stack
            .top_fd()
            .ok_or_else(|| self.io("restore", &entry.path)(Errno::EBADF))?;
        let rel = entry.path.clone();
        match &entry.kind {
            Kind::Dir => {
                mkdirat(dir, name, Mode::S_IRWXU).map_err(self.io("create directory", &rel))?;
                let fd = open_dir_at(dir, name).map_err(self.io("open", &rel))?;
                stack.push(name, fd, Some(entry))?;
                self.skip(stored)
            }
            Kind::File { size, .. } => {
                let flags = OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC;
                let fd = File::from(
                    openat(dir, name, flags, Mode::S_IRUSR | Mode::S_IWUSR)
                        .map_err(self.io("create", &rel))?,
                );
                if sparse {
                    self.sparse_data(&fd, *size, stored, &rel)?;
                } else {
                    self.data(&fd, stored, &rel)?;
                }
                self.apply_fd(&fd, &entry, &rel)
            }
            Kind::Symlink(target) => {
                symlinkat(OsStr::from_bytes(target), dir, name)
                    .map_err(self.io("symlink", &rel))?;
                self.apply_at(dir, name, &entry)?;
                self.skip(stored)
            }
            Kind::HardLink(target) => {
                let (from_dir, from) = self.link_source(target)?;
                linkat(&from_dir, from.as_slice(), dir, name, AtFlags::empty())
                    .map_err(self.io("hard link", &rel))?;
                self.skip(stored)
            }
            Kind::Char(..) | Kind::Block(..) | Kind::Fifo | Kind::Socket => {
                let (kind, dev) = match entry.kind {
                    Kind::Char(ma, mi) => (SFlag::S_IFCHR, makedev(ma, mi)),
                    Kind::Block(ma, mi) => (SFlag::S_IFBLK, makedev(ma, mi)),
                    Kind::Socket => (SFlag::S_IFSOCK, 0),
                    _ => (SFlag::S_IFIFO, 0),
                };
                mknodat(dir, name, kind, Mode::S_IRUSR | Mode::S_IWUSR, dev)
                    .map_err(self.io("make node", &rel))?;
                self.apply_at(dir, name, &entry)?;
                self.skip(stored)
            }
        }
    }

    /// Skips data an entry that holds none carries (none, as written).
    fn skip(&mut self, stored: u64) -> Result<(), Error> {
        let mut left = stored;
        while left > 0 {
            let n = usize::try_from(left.min(CHUNK as u64)).unwrap_or(CHUNK);
            let mut chunk = std::mem::take(&mut self.chunk);
            let read = self.src.read(&mut chunk[..n]);
            self.chunk = chunk;
            read.map_err(|f| self.fault(f))?;
            left -= n as u64;
        }
        self.src.skip_padding(stored).map_err(|f| self.fault(f))
    }

    /// Copies `len` bytes of data from the archive into `fd` at `offset`
    /// (sequentially when `offset` is `None`).
    fn copy(&mut self, fd: &File, offset: Option<u64>, len: u64, rel: &[u8]) -> Result<(), Error> {
        let mut done = 0;
        while done < len {
            let n = usize::try_from((len - done).min(CHUNK as u64)).unwrap_or(CHUNK);
            let mut chunk = std::mem::take(&mut self.chunk);
            let read = self.src.read(&mut chunk[..n]);
            let written = match offset {
                Some(at) => fd.write_all_at(&chunk[..n], at + done),
                None => (&*fd).write_all(&chunk[..n]),
            };
            self.chunk = chunk;
            read.map_err(|f| self.fault(f))?;
            written.map_err(Error::io("write", shown(self.upper, rel)))?;
            done += n as u64;
        }
        Ok(())
    }

    fn data(&mut self, fd: &File, stored: u64, rel: &[u8]) -> Result<(), Error> {
        self.copy(fd, None, stored, rel)?;
        self.src.skip_padding(stored).map_err(|f| self.fault(f))
    }

    /// A file with holes: the map of data runs, the file's size set, then
    /// each run written at its offset.
    fn sparse_data(&mut self, fd: &File, size: u64, stored: u64, rel: &[u8]) -> Result<(), Error> {
        let mut text = Vec::new();
        let (runs, used) = loop {
            if text.len() as u64 >= stored {
                return Err(self.fault(ArchiveFault::Field {
                    field: "GNU sparse map",
                }));
            }
            let block = self.src.block().map_err(|f| self.fault(f))?;
            text.extend_from_slice(&block);
            if let Some(map) = pax::decode_sparse_map(&text) {
                break map.map_err(|f| self.fault(f))?;
            }
        };
        let data: u64 = runs.iter().map(|(_, len)| len).sum();
        let fits = runs
            .iter()
            .all(|(off, len)| off.checked_add(*len).is_some_and(|end| end <= size));
        if used as u64 + data != stored || !fits {
            return Err(self.fault(ArchiveFault::Field {
                field: "GNU sparse map",
            }));
        }
        ftruncate(fd, i64::try_from(size).unwrap_or(i64::MAX)).map_err(self.io("truncate", rel))?;
        for (offset, len) in runs {
            self.copy(fd, Some(offset), len, rel)?;
        }
        self.src.skip_padding(data).map_err(|f| self.fault(f))
    }

    /// The directory holding a hard link's target and its last name,
    /// walked from the root one name at a time.
    fn link_source(&self, target: &[u8]) -> Result<(File, Vec<u8>), Error> {
        let names = components(target).ok_or_else(|| self.fault(ArchiveFault::Path))?;
        let (last, parents) = names
            .split_last()
            .ok_or_else(|| self.fault(ArchiveFault::Path))?;
        let mut dir = self
            .root
            .try_clone()
            .map_err(Error::io("duplicate", self.upper))?;
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        for name in parents {
            dir = File::from(
                openat(&dir, *name, flags, Mode::empty()).map_err(self.io("open", target))?,
            );
        }
        Ok((dir, last.to_vec()))
    }

    /// Owner, xattrs, mode and times of an open file or directory.
    fn apply_fd(&self, fd: &File, entry: &Entry, rel: &[u8]) -> Result<(), Error> {
        fchown(
            fd,
            Some(Uid::from_raw(entry.uid)),
            Some(Gid::from_raw(entry.gid)),
        )
        .map_err(self.io("chown", rel))?;
        for (name, value) in xattr_order(entry) {
            fd.set_xattr(OsStr::from_bytes(name), value)
                .map_err(Error::io("set xattr on", shown(self.upper, rel)))?;
        }
        fchmod(fd, Mode::from_bits_truncate(entry.mode)).map_err(self.io("chmod", rel))?;
        futimens(fd, &timespec(entry.atime), &timespec(entry.mtime))
            .map_err(self.io("set times of", rel))
    }

    /// The same for a node made by name in `dir` (never followed).
    fn apply_at(&self, dir: &File, name: &[u8], entry: &Entry) -> Result<(), Error> {
        let rel = &entry.path;
        fchownat(
            dir,
            name,
            Some(Uid::from_raw(entry.uid)),
            Some(Gid::from_raw(entry.gid)),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(self.io("chown", rel))?;
        let node = proc_path(dir, name);
        for (key, value) in xattr_order(entry) {
            xattr::set(&node, OsStr::from_bytes(key), value)
                .map_err(Error::io("set xattr on", shown(self.upper, rel)))?;
        }
        if !matches!(entry.kind, Kind::Symlink(_)) {
            // Not a symlink: this name is the node just made here.
            fchmodat(
                dir,
                name,
                Mode::from_bits_truncate(entry.mode),
                FchmodatFlags::FollowSymlink,
            )
            .map_err(self.io("chmod", rel))?;
        }
        utimensat(
            dir,
            name,
            &timespec(entry.atime),
            &timespec(entry.mtime),
            UtimensatFlags::NoFollowSymlink,
        )
        .map_err(self.io("set times of", rel))
    }
}
