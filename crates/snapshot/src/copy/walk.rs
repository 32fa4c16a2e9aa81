//! The snapshot side: walks an upper by descriptor (`openat`, `fstatat`,
//! `readlinkat` relative to the directory being read, `O_NOFOLLOW`
//! throughout, at most [`super::dirs::MAX_OPEN_DIRS`] directories open)
//! and writes each entry to the archive in pre-order, names sorted, so a
//! directory always comes before what it holds and a hard link after the
//! name it links to.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, readlinkat};
use nix::sys::stat::{FileStat, SFlag, fstat, fstatat, major, minor};
use nix::unistd::{Whence, lseek};
use xattr::FileExt as _;

use crate::errors::Error;

use super::dirs::{DirStack, list, open_at, open_dir_at, proc_path};
use super::entry::{Entry, Kind, Time};
use super::pax;

/// Bytes read from a file at a time.
const CHUNK: usize = 1 << 18;

/// The archive being written, with the running CRC-32C of its bytes.
struct Sink<'a> {
    out: BufWriter<&'a File>,
    crc: u32,
    archive: &'a Path,
}

impl Sink<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.out
            .write_all(bytes)
            .map_err(Error::io("write", self.archive))
    }
}

/// Writes the archive of one upper.
pub(super) struct Archiver<'a> {
    sink: Sink<'a>,
    upper: &'a Path,
    /// First archived path of each inode with more than one name.
    links: HashMap<(u64, u64), Vec<u8>>,
    header: Vec<u8>,
    chunk: Vec<u8>,
}

fn time(sec: i64, nsec: i64) -> Time {
    Time {
        sec,
        nsec: u32::try_from(nsec).unwrap_or(0),
    }
}

fn entry(path: Vec<u8>, stat: &FileStat, kind: Kind, xattrs: Vec<(Vec<u8>, Vec<u8>)>) -> Entry {
    Entry {
        path,
        kind,
        mode: stat.st_mode & 0o7777,
        uid: stat.st_uid,
        gid: stat.st_gid,
        atime: time(stat.st_atime, stat.st_atime_nsec),
        mtime: time(stat.st_mtime, stat.st_mtime_nsec),
        xattrs,
    }
}

/// Every xattr of an open file or directory.
fn xattrs_of_fd(file: &File) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let names = match file.list_xattr() {
        Err(e) if e.raw_os_error() == Some(libc_enotsup()) => return Ok(out),
        other => other?,
    };
    for name in names {
        if let Some(value) = file.get_xattr(&name)? {
            out.push((name.as_bytes().to_vec(), value));
        }
    }
    Ok(out)
}

/// Every xattr of a node that cannot be opened, by its one-name path.
fn xattrs_of_node(path: &Path) -> std::io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let names = match xattr::list(path) {
        Err(e) if e.raw_os_error() == Some(libc_enotsup()) => return Ok(out),
        other => other?,
    };
    for name in names {
        if let Some(value) = xattr::get(path, &name)? {
            out.push((name.as_bytes().to_vec(), value));
        }
    }
    Ok(out)
}

fn libc_enotsup() -> i32 {
    Errno::EOPNOTSUPP as i32
}

/// The data runs of a file with holes (SEEK_DATA/SEEK_HOLE).
fn extents(file: &File, size: u64) -> nix::Result<Vec<(u64, u64)>> {
    let size = i64::try_from(size).unwrap_or(i64::MAX);
    let mut runs = Vec::new();
    let mut pos = 0;
    while pos < size {
        let data = match lseek(file, pos, Whence::SeekData) {
            Ok(data) => data,
            Err(Errno::ENXIO) => break,
            Err(e) => return Err(e),
        };
        if data >= size {
            break;
        }
        let hole = lseek(file, data, Whence::SeekHole)?.min(size);
        runs.push((data.cast_unsigned(), (hole - data).cast_unsigned()));
        pos = hole;
    }
    Ok(runs)
}

impl<'a> Archiver<'a> {
    /// Writes the archive of `upper` to `out` (the file at `archive`),
    /// flushed to the file but not fsynced.
    pub(super) fn write(upper: &'a Path, archive: &'a Path, out: &'a File) -> Result<(), Error> {
        let mut this = Self {
            sink: Sink {
                out: BufWriter::with_capacity(1 << 20, out),
                crc: 0,
                archive,
            },
            upper,
            links: HashMap::new(),
            header: Vec::new(),
            chunk: vec![0; CHUNK],
        };
        pax::encode_opening(&mut this.header);
        this.sink.put(&this.header)?;
        this.walk()?;
        this.header.clear();
        pax::encode_closing(&mut this.header, this.sink.crc);
        this.sink.put(&this.header)?;
        this.sink.out.flush().map_err(Error::io("write", archive))
    }

    fn walk(&mut self) -> Result<(), Error> {
        let root = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc_dir_flags())
            .open(self.upper)
            .map_err(Error::io("open", self.upper))?;
        let mut stack: DirStack<std::vec::IntoIter<Vec<u8>>> = DirStack::new(self.upper);
        let stat = fstat(&root).map_err(|source| Error::Walk {
            op: "stat",
            path: self.upper.to_owned(),
            source,
        })?;
        let xattrs = xattrs_of_fd(&root).map_err(Error::io("read xattrs of", self.upper))?;
        self.put_entry(&entry(b".".to_vec(), &stat, Kind::Dir, xattrs))?;
        let names = list(&root, self.upper)?;
        stack.push(b"", root, names.into_iter())?;
        while let Some(names) = stack.top_mut() {
            match names.next() {
                Some(name) => self.one(&mut stack, &name)?,
                None => drop(stack.pop()?),
            }
            if stack.is_empty() {
                break;
            }
        }
        Ok(())
    }

    fn put_entry(&mut self, entry: &Entry) -> Result<(), Error> {
        self.header.clear();
        pax::encode_entry(entry, &mut self.header);
        self.sink.put(&self.header)
    }

    /// Archives `name` in the stack's current directory.
    fn one(
        &mut self,
        stack: &mut DirStack<std::vec::IntoIter<Vec<u8>>>,
        name: &[u8],
    ) -> Result<(), Error> {
        let path = stack.child_path(name);
        let shown = stack.shown(&path);
        let walk = |op| {
            let shown = shown.clone();
            move |source| Error::Walk {
                op,
                path: shown,
                source,
            }
        };
        let dir = stack
            .top_fd()
            .ok_or_else(|| Error::io("walk", &shown)(Errno::EBADF.into()))?;
        let stat = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(walk("stat"))?;
        let format = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
        if format != SFlag::S_IFDIR && stat.st_nlink > 1 {
            let key = (stat.st_dev, stat.st_ino);
            if let Some(first) = self.links.get(&key) {
                let link = Kind::HardLink(first.clone());
                return self.put_entry(&entry(path, &stat, link, Vec::new()));
            }
            self.links.insert(key, path.clone());
        }
        let node_xattrs =
            || xattrs_of_node(&proc_path(dir, name)).map_err(Error::io("read xattrs of", &shown));
        match format {
            SFlag::S_IFDIR => {
                let fd = open_dir_at(dir, name).map_err(walk("open"))?;
                let stat = self.same(&fd, &stat, &shown)?;
                let xattrs = xattrs_of_fd(&fd).map_err(Error::io("read xattrs of", &shown))?;
                self.put_entry(&entry(path, &stat, Kind::Dir, xattrs))?;
                let names = list(&fd, &shown)?;
                stack.push(name, fd, names.into_iter())
            }
            SFlag::S_IFREG => {
                let flags = OFlag::O_RDONLY
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC
                    | OFlag::O_NONBLOCK
                    | OFlag::O_NOCTTY;
                let fd = open_at(dir, name, flags).map_err(walk("open"))?;
                let stat = self.same(&fd, &stat, &shown)?;
                let xattrs = xattrs_of_fd(&fd).map_err(Error::io("read xattrs of", &shown))?;
                let size = u64::try_from(stat.st_size).unwrap_or(0);
                let allocated = u64::try_from(stat.st_blocks).unwrap_or(0) * 512;
                let runs = if allocated < size {
                    Some(extents(&fd, size).map_err(walk("seek data of"))?)
                        .filter(|runs| runs.iter().map(|(_, len)| len).sum::<u64>() < size)
                } else {
                    None
                };
                let entry = entry(
                    path,
                    &stat,
                    Kind::File {
                        size,
                        extents: runs,
                    },
                    xattrs,
                );
                self.put_entry(&entry)?;
                self.put_data(&fd, &entry, &shown)
            }
            SFlag::S_IFLNK => {
                let target = readlinkat(dir, name).map_err(walk("read link"))?;
                let kind = Kind::Symlink(target.as_bytes().to_vec());
                self.put_entry(&entry(path, &stat, kind, node_xattrs()?))
            }
            SFlag::S_IFCHR | SFlag::S_IFBLK => {
                let (ma, mi) = (major(stat.st_rdev), minor(stat.st_rdev));
                let kind = if format == SFlag::S_IFCHR {
                    Kind::Char(ma, mi)
                } else {
                    Kind::Block(ma, mi)
                };
                self.put_entry(&entry(path, &stat, kind, node_xattrs()?))
            }
            SFlag::S_IFIFO => self.put_entry(&entry(path, &stat, Kind::Fifo, node_xattrs()?)),
            SFlag::S_IFSOCK => self.put_entry(&entry(path, &stat, Kind::Socket, node_xattrs()?)),
            _ => Err(Error::Changed {
                path: shown,
                what: "an unknown file type",
            }),
        }
    }

    /// The opened file's own stat, refused when it is not what `fstatat`
    /// saw (replaced while the walk ran).
    fn same(&self, fd: &File, seen: &FileStat, shown: &Path) -> Result<FileStat, Error> {
        let stat = fstat(fd).map_err(|source| Error::Walk {
            op: "stat",
            path: shown.to_owned(),
            source,
        })?;
        if (stat.st_dev, stat.st_ino, stat.st_mode) != (seen.st_dev, seen.st_ino, seen.st_mode) {
            return Err(Error::Changed {
                path: shown.to_owned(),
                what: "it was replaced",
            });
        }
        Ok(stat)
    }

    /// Copies a file's data (only its data runs when it has holes), then
    /// pads to a block.
    fn put_data(&mut self, fd: &File, entry: &Entry, shown: &Path) -> Result<(), Error> {
        let runs = match &entry.kind {
            Kind::File {
                extents: Some(runs),
                ..
            } => runs.clone(),
            Kind::File { size, .. } => vec![(0, *size)],
            _ => Vec::new(),
        };
        for (offset, len) in runs {
            let mut done = 0;
            while done < len {
                let n = usize::try_from((len - done).min(CHUNK as u64)).unwrap_or(CHUNK);
                fd.read_exact_at(&mut self.chunk[..n], offset + done)
                    .map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            Error::Changed {
                                path: shown.to_owned(),
                                what: "it shrank",
                            }
                        } else {
                            Error::io("read", shown)(e)
                        }
                    })?;
                self.sink.put(&self.chunk[..n])?;
                done += n as u64;
            }
        }
        let pad = pax::padding(entry.data_len());
        self.sink.put(&[0; pax::BLOCK][..pad])
    }
}

fn libc_dir_flags() -> i32 {
    (OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits()
}
