//! A hostile upper, built and described by descriptor: a directory chain
//! deeper than PATH_MAX, names with a newline and with bytes that are not
//! UTF-8, a 1 GiB sparse file, hard links (one reached only through the
//! deep chain), a FIFO, a socket node, a whiteout, an opaque directory,
//! user, capability and ACL xattrs, other owners, setuid/setgid/sticky
//! modes and fixed nanosecond times.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{
    FchmodatFlags, Mode, SFlag, UtimensatFlags, fchmodat, fstat, fstatat, futimens, makedev,
    mkdirat, mknodat, utimensat,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{Gid, Uid, Whence, fchownat, ftruncate, linkat, lseek, symlinkat};
use xattr::FileExt as _;

/// Levels of the deep chain, 10-byte names each: 6,600 bytes of path.
pub const LEVELS: usize = 600;
/// The sparse file's size and where its few blocks are written.
pub const SPARSE_SIZE: u64 = 1 << 30;
const SPARSE_BLOCKS: [u64; 3] = [0, 512 << 20, (1 << 30) - 4096];

pub const NEWLINE_NAME: &[u8] = b"new\nline";
pub const BINARY_NAME: &[u8] = b"bad-\xff\xfe-name";

/// `security.capability` for cap_net_raw+ep (VFS_CAP_REVISION_2).
pub const CAP_NET_RAW_EP: [u8; 20] = [
    1, 0, 0, 2, // magic: revision 2, effective
    0, 0x20, 0, 0, 0, 0, 0, 0, // permitted bit 13, inheritable
    0, 0, 0, 0, 0, 0, 0, 0,
];

/// An access ACL: owner rw, user 1234 r, group r, mask r, other r.
fn acl(extra_user: u32) -> Vec<u8> {
    let mut out = 2_u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01_u16, 6_u16, u32::MAX),
        (0x02, 4, extra_user),
        (0x04, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        out.extend(tag.to_le_bytes());
        out.extend(perm.to_le_bytes());
        out.extend(id.to_le_bytes());
    }
    out
}

fn open_dir(dir: &File, name: &[u8]) -> File {
    File::from(
        openat(
            dir,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_NOATIME,
            Mode::empty(),
        )
        .unwrap(),
    )
}

fn create(dir: &File, name: &[u8], body: &[u8]) -> File {
    let file = File::from(
        openat(
            dir,
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW,
            Mode::from_bits_truncate(0o644),
        )
        .unwrap(),
    );
    file.write_all_at(body, 0).unwrap();
    file
}

fn chown_at(dir: &File, name: &[u8], uid: u32, gid: u32) {
    fchownat(
        dir,
        name,
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .unwrap();
}

fn chmod_at(dir: &File, name: &[u8], mode: u32) {
    fchmodat(
        dir,
        name,
        Mode::from_bits_truncate(mode),
        FchmodatFlags::FollowSymlink,
    )
    .unwrap();
}

/// Opens a tree's root without touching its access time (the walk of the
/// original must not change what it then compares).
fn open_root(path: &Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_NOATIME).bits())
        .open(path)
        .unwrap()
}

/// Builds the hostile tree in the empty directory `upper`.
pub fn build(upper: &Path) {
    let root = open_root(upper);

    // The chain, then a file at its bottom that a name at the top links to.
    mkdirat(&root, "chain", Mode::S_IRWXU).unwrap();
    let mut dir = open_dir(&root, b"chain");
    for level in 0..LEVELS {
        let name = format!("d{level:09}");
        mkdirat(&dir, name.as_str(), Mode::S_IRWXU).unwrap();
        dir = open_dir(&dir, name.as_bytes());
    }
    drop(create(&dir, b"bottom", b"at the bottom\n"));
    linkat(&dir, "bottom", &root, "zz-link-to-bottom", AtFlags::empty()).unwrap();
    drop(dir);

    drop(create(&root, NEWLINE_NAME, b"newline\n"));
    drop(create(&root, BINARY_NAME, b"not utf-8\n"));

    let sparse = create(&root, b"sparse", b"");
    ftruncate(&sparse, i64::try_from(SPARSE_SIZE).unwrap()).unwrap();
    for at in SPARSE_BLOCKS {
        sparse.write_all_at(&[0xa5; 4096], at).unwrap();
    }
    drop(sparse);

    drop(create(&root, b"hl-a", b"linked\n"));
    linkat(&root, "hl-a", &root, "hl-b", AtFlags::empty()).unwrap();

    mknodat(
        &root,
        "fifo",
        SFlag::S_IFIFO,
        Mode::from_bits_truncate(0o640),
        0,
    )
    .unwrap();
    mknodat(
        &root,
        "sock",
        SFlag::S_IFSOCK,
        Mode::from_bits_truncate(0o755),
        0,
    )
    .unwrap();
    mknodat(
        &root,
        "whiteout",
        SFlag::S_IFCHR,
        Mode::empty(),
        makedev(0, 0),
    )
    .unwrap();

    mkdirat(&root, "opaque", Mode::S_IRWXU).unwrap();
    let opaque = open_dir(&root, b"opaque");
    opaque.set_xattr("trusted.overlay.opaque", b"y").unwrap();
    drop(create(&opaque, b"inside", b"in the opaque dir\n"));
    drop(opaque);

    let with_xattr = create(&root, b"user-xattr", b"x\n");
    with_xattr
        .set_xattr("user.note", b"hello\0binary\xff")
        .unwrap();
    drop(with_xattr);

    let cap = create(&root, b"cap-bin", b"#!/bin/true\n");
    drop(cap);
    chown_at(&root, b"cap-bin", 0, 0);
    chmod_at(&root, b"cap-bin", 0o755);
    open_file(&root, b"cap-bin")
        .set_xattr("security.capability", &CAP_NET_RAW_EP)
        .unwrap();

    drop(create(&root, b"acl-file", b"acl\n"));
    open_file(&root, b"acl-file")
        .set_xattr("system.posix_acl_access", &acl(1234))
        .unwrap();
    mkdirat(&root, "acl-dir", Mode::S_IRWXU).unwrap();
    open_dir(&root, b"acl-dir")
        .set_xattr("system.posix_acl_default", &acl(4321))
        .unwrap();

    drop(create(&root, b"owned", b"someone else's\n"));
    chown_at(&root, b"owned", 1234, 5678);
    symlinkat("dangling\ntarget", &root, "link").unwrap();
    chown_at(&root, b"link", 4321, 8765);

    drop(create(&root, b"suid", b"setuid\n"));
    chown_at(&root, b"suid", 1234, 5678);
    chmod_at(&root, b"suid", 0o4755);
    mkdirat(&root, "sgid-dir", Mode::S_IRWXU).unwrap();
    chown_at(&root, b"sgid-dir", 0, 5678);
    chmod_at(&root, b"sgid-dir", 0o2775);
    mkdirat(&root, "sticky", Mode::S_IRWXU).unwrap();
    chmod_at(&root, b"sticky", 0o1777);

    // A descriptor opened before its directory's entries were made may not
    // list them (btrfs fixes a directory's listing at open): reopen.
    let root = open_root(upper);
    let mut counter = 0;
    set_times(&root, &mut counter);
    futimens(&root, &time(counter, 1), &time(counter, 2)).unwrap();
}

fn open_file(dir: &File, name: &[u8]) -> File {
    File::from(
        openat(
            dir,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NOATIME,
            Mode::empty(),
        )
        .unwrap(),
    )
}

fn time(n: i64, which: i64) -> TimeSpec {
    TimeSpec::new(1_500_000_000 + n * 7 + which, 123_456_789 + which)
}

fn names(dir: &File) -> Vec<Vec<u8>> {
    let mut stream = Dir::from_fd(OwnedFd::from(dir.try_clone().unwrap())).unwrap();
    let mut out: Vec<Vec<u8>> = stream
        .iter()
        .map(|e| e.unwrap().file_name().to_bytes().to_vec())
        .filter(|n| n != b"." && n != b"..")
        .collect();
    out.sort();
    out
}

/// Sets distinct fixed times on everything below `dir`, contents first.
fn set_times(dir: &File, counter: &mut i64) {
    for name in names(dir) {
        let stat = fstatat(dir, name.as_slice(), AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        if stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits() {
            set_times(&open_dir(dir, &name), counter);
        }
        *counter += 1;
        utimensat(
            dir,
            name.as_slice(),
            &time(*counter, 1),
            &time(*counter, 2),
            UtimensatFlags::NoFollowSymlink,
        )
        .unwrap();
    }
}

/// What one name holds, as the tests compare it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Links of a non-directory, and the first path of its inode.
    pub nlink: u64,
    pub inode_of: Vec<u8>,
    pub size: u64,
    pub rdev: u64,
    pub atime: (i64, i64),
    pub mtime: (i64, i64),
    pub target: Vec<u8>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Hash of the non-zero 4 KiB blocks and their offsets.
    pub content: u64,
}

/// Blocks (512 B) allocated to a file, by descriptor.
pub fn allocated(upper: &Path, name: &[u8]) -> u64 {
    let root = open_root(upper);
    u64::try_from(
        fstatat(&root, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .unwrap()
            .st_blocks,
    )
    .unwrap()
}

/// Describes every name below `upper` (and `upper` itself as `.`).
pub fn describe(upper: &Path) -> BTreeMap<Vec<u8>, Node> {
    let root = open_root(upper);
    let mut out = BTreeMap::new();
    let mut inodes = BTreeMap::new();
    let stat = fstat(&root).unwrap();
    out.insert(b".".to_vec(), node(&root, None, &stat, b".", &mut inodes));
    walk(&root, b"", &mut out, &mut inodes);
    out
}

fn walk(
    dir: &File,
    prefix: &[u8],
    out: &mut BTreeMap<Vec<u8>, Node>,
    inodes: &mut BTreeMap<(u64, u64), Vec<u8>>,
) {
    for name in names(dir) {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            [prefix, b"/", &name].concat()
        };
        let stat = fstatat(dir, name.as_slice(), AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        let described = node(dir, Some(&name), &stat, &path, inodes);
        let is_dir = described.kind == SFlag::S_IFDIR.bits();
        out.insert(path.clone(), described);
        if is_dir {
            walk(&open_dir(dir, &name), &path, out, inodes);
        }
    }
}

fn node(
    dir: &File,
    name: Option<&[u8]>,
    stat: &nix::sys::stat::FileStat,
    path: &[u8],
    inodes: &mut BTreeMap<(u64, u64), Vec<u8>>,
) -> Node {
    let kind = stat.st_mode & SFlag::S_IFMT.bits();
    let is_dir = kind == SFlag::S_IFDIR.bits();
    let is_file = kind == SFlag::S_IFREG.bits();
    let opened = match name {
        None => Some(dir.try_clone().unwrap()),
        Some(name) if is_dir => Some(open_dir(dir, name)),
        Some(name) if is_file => Some(open_file(dir, name)),
        Some(_) => None,
    };
    let mut xattrs = BTreeMap::new();
    match (&opened, name) {
        (Some(file), _) => {
            for key in file.list_xattr().unwrap() {
                let value = file.get_xattr(&key).unwrap().unwrap();
                xattrs.insert(key.as_bytes().to_vec(), value);
            }
        }
        (None, Some(name)) => {
            let mut proc =
                format!("/proc/self/fd/{}/", std::os::fd::AsRawFd::as_raw_fd(dir)).into_bytes();
            proc.extend_from_slice(name);
            let proc = Path::new(OsStr::from_bytes(&proc));
            for key in xattr::list(proc).unwrap() {
                let value = xattr::get(proc, &key).unwrap().unwrap();
                xattrs.insert(key.as_bytes().to_vec(), value);
            }
        }
        (None, None) => {}
    }
    let target = match name {
        Some(name) if kind == SFlag::S_IFLNK.bits() => {
            readlinkat(dir, name).unwrap().as_bytes().to_vec()
        }
        _ => Vec::new(),
    };
    let inode_of = if is_dir {
        Vec::new()
    } else {
        inodes
            .entry((stat.st_dev, stat.st_ino))
            .or_insert_with(|| path.to_vec())
            .clone()
    };
    let size = u64::try_from(stat.st_size).unwrap();
    let content = match &opened {
        Some(file) if is_file => content_hash(file, size),
        _ => 0,
    };
    Node {
        kind,
        mode: stat.st_mode & 0o7777,
        uid: stat.st_uid,
        gid: stat.st_gid,
        nlink: if is_dir { 0 } else { stat.st_nlink },
        inode_of,
        size: if is_file { size } else { 0 },
        rdev: stat.st_rdev,
        atime: (stat.st_atime, stat.st_atime_nsec),
        mtime: (stat.st_mtime, stat.st_mtime_nsec),
        target,
        xattrs,
        content,
    }
}

/// Hashes the non-zero 4 KiB blocks in a file's data runs with their
/// offsets: equal for equal content whether zeros are holes or written.
fn content_hash(file: &File, size: u64) -> u64 {
    let mut hasher = DefaultHasher::new();
    let size = i64::try_from(size).unwrap();
    let mut pos = 0;
    let mut block = vec![0_u8; 4096];
    while pos < size {
        let Ok(data) = lseek(file, pos, Whence::SeekData) else {
            break;
        };
        let hole = lseek(file, data, Whence::SeekHole).unwrap().min(size);
        let mut at = data;
        while at < hole {
            let n = usize::try_from((hole - at).min(4096)).unwrap();
            file.read_exact_at(&mut block[..n], u64::try_from(at).unwrap())
                .unwrap();
            if block[..n].iter().any(|&b| b != 0) {
                (at, &block[..n]).hash(&mut hasher);
            }
            at += i64::try_from(n).unwrap();
        }
        pos = hole;
    }
    hasher.finish()
}
