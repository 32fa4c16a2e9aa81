//! btrfs subvolumes made, snapshotted and deleted with the kernel's ioctls
//! rather than a `btrfs` process each: at a checkpoint of a thousand
//! sandboxes the process spawns were most of the commit. Written here
//! because the only crate over these calls binds the C `libbtrfsutil`,
//! which this project's machines do not have; the three calls and their
//! argument structs are stable kernel ABI (`linux/btrfs.h`).
#![allow(unsafe_code)]

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::errors::Error;

const BTRFS_IOCTL_MAGIC: u8 = 0x94;
/// `BTRFS_SUBVOL_NAME_MAX`: the longest name a v2 call takes.
const SUBVOL_NAME_MAX: usize = 4039;
/// `BTRFS_PATH_NAME_MAX`.
const PATH_NAME_MAX: usize = 4087;
/// `BTRFS_SUBVOL_RDONLY`.
const SUBVOL_RDONLY: u64 = 1 << 1;

/// `struct btrfs_ioctl_vol_args`.
#[repr(C)]
struct VolArgs {
    fd: i64,
    name: [u8; PATH_NAME_MAX + 1],
}

/// `struct btrfs_ioctl_vol_args_v2` (the qgroup union left zero).
#[repr(C)]
struct VolArgsV2 {
    fd: i64,
    transid: u64,
    flags: u64,
    unused: [u64; 4],
    name: [u8; SUBVOL_NAME_MAX + 1],
}

/// `struct btrfs_ioctl_quota_ctl_args`.
#[repr(C)]
struct QuotaCtlArgs {
    cmd: u64,
    status: u64,
}

/// `struct btrfs_ioctl_qgroup_limit_args` with its `struct btrfs_qgroup_limit`.
#[repr(C)]
struct QgroupLimitArgs {
    qgroupid: u64,
    flags: u64,
    max_rfer: u64,
    max_excl: u64,
    rsv_rfer: u64,
    rsv_excl: u64,
}

/// `BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA`: usage charged to the subvolume
/// that wrote an extent, kept as it is written (no rescan, cheap snapshots).
const QUOTA_CTL_ENABLE_SIMPLE: u64 = 4;
/// `BTRFS_QGROUP_LIMIT_MAX_RFER | BTRFS_QGROUP_LIMIT_MAX_EXCL`.
const LIMIT_MAX_RFER_EXCL: u64 = 0b11;

nix::ioctl_write_ptr!(snap_destroy, BTRFS_IOCTL_MAGIC, 15, VolArgs);
nix::ioctl_readwrite!(quota_ctl, BTRFS_IOCTL_MAGIC, 40, QuotaCtlArgs);
// `_IOR` in linux/btrfs.h although the kernel reads the struct.
nix::ioctl_read!(qgroup_limit, BTRFS_IOCTL_MAGIC, 43, QgroupLimitArgs);
nix::ioctl_write_ptr!(snap_create_v2, BTRFS_IOCTL_MAGIC, 23, VolArgsV2);
nix::ioctl_write_ptr!(subvol_create_v2, BTRFS_IOCTL_MAGIC, 24, VolArgsV2);

/// The parent directory (opened) and the last component of `path`, which
/// must fit `max` bytes and be a plain name.
fn split<'a>(path: &'a Path, max: usize, what: &str) -> Result<(File, &'a OsStr), Error> {
    let bad = |reason: String| Error::Btrfs {
        what: what.to_owned(),
        path: path.to_owned(),
        reason,
    };
    let name = path
        .file_name()
        .ok_or_else(|| bad("no final name".into()))?;
    if name.len() > max || name.as_bytes().contains(&0) {
        return Err(bad(format!(
            "the name must be 1 to {max} bytes without NUL"
        )));
    }
    let parent = path.parent().unwrap_or(Path::new("."));
    let dir = File::open(parent).map_err(|e| bad(format!("open {}: {e}", parent.display())))?;
    Ok((dir, name))
}

fn v2(fd: i64, flags: u64, name: &OsStr) -> Box<VolArgsV2> {
    let mut args = Box::new(VolArgsV2 {
        fd,
        transid: 0,
        flags,
        unused: [0; 4],
        name: [0; SUBVOL_NAME_MAX + 1],
    });
    args.name[..name.len()].copy_from_slice(name.as_bytes());
    args
}

fn failed(what: &str, path: &Path, e: nix::Error) -> Error {
    Error::Btrfs {
        what: what.to_owned(),
        path: path.to_owned(),
        reason: e.desc().to_owned(),
    }
}

/// `btrfs subvolume create PATH`.
pub(crate) fn create(path: &Path) -> Result<(), Error> {
    let what = "create the subvolume";
    let (dir, name) = split(path, SUBVOL_NAME_MAX, what)?;
    let args = v2(0, 0, name);
    // SAFETY: the kernel reads one `btrfs_ioctl_vol_args_v2` from a live,
    // fully initialised struct of that layout; `dir` is an open directory.
    unsafe { subvol_create_v2(dir.as_raw_fd(), &*args) }.map_err(|e| failed(what, path, e))?;
    Ok(())
}

/// `btrfs subvolume snapshot [-r] SOURCE TARGET`.
pub(crate) fn snapshot(source: &Path, target: &Path, read_only: bool) -> Result<(), Error> {
    let what = "snapshot the subvolume";
    let (dir, name) = split(target, SUBVOL_NAME_MAX, what)?;
    let src = File::open(source).map_err(|e| Error::Btrfs {
        what: what.to_owned(),
        path: source.to_owned(),
        reason: format!("open: {e}"),
    })?;
    let flags = if read_only { SUBVOL_RDONLY } else { 0 };
    let args = v2(i64::from(src.as_raw_fd()), flags, name);
    // SAFETY: as in `create`; `args.fd` is `src`, open for the whole call.
    unsafe { snap_create_v2(dir.as_raw_fd(), &*args) }.map_err(|e| failed(what, target, e))?;
    Ok(())
}

/// `btrfs subvolume delete PATH` (the subvolume and all it holds).
pub(crate) fn delete(path: &Path) -> Result<(), Error> {
    let what = "delete the subvolume";
    let (dir, name) = split(path, PATH_NAME_MAX, what)?;
    let mut args = Box::new(VolArgs {
        fd: 0,
        name: [0; PATH_NAME_MAX + 1],
    });
    args.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: the kernel reads one `btrfs_ioctl_vol_args` from a live,
    // fully initialised struct of that layout; `dir` is an open directory.
    unsafe { snap_destroy(dir.as_raw_fd(), &*args) }.map_err(|e| failed(what, path, e))?;
    Ok(())
}

/// Limits the subvolume at `path` (its own qgroup) to `bytes`, turning
/// simple quotas on for its filesystem first when no quota is on.
/// Writes past it fail with `EDQUOT`.
pub(crate) fn limit(path: &Path, bytes: u64) -> Result<(), Error> {
    let what = "limit the subvolume";
    let dir = File::open(path).map_err(|e| Error::Btrfs {
        what: what.to_owned(),
        path: path.to_owned(),
        reason: format!("open: {e}"),
    })?;
    let set = || {
        let mut args = QgroupLimitArgs {
            qgroupid: 0,
            flags: LIMIT_MAX_RFER_EXCL,
            max_rfer: bytes,
            max_excl: bytes,
            rsv_rfer: 0,
            rsv_excl: 0,
        };
        // SAFETY: the kernel reads one `btrfs_ioctl_qgroup_limit_args` from a
        // live struct of that layout; qgroup 0 is `dir`'s own subvolume.
        unsafe { qgroup_limit(dir.as_raw_fd(), &raw mut args) }
    };
    match set() {
        Ok(_) => Ok(()),
        // No quota on this filesystem yet.
        Err(nix::errno::Errno::ENOTCONN | nix::errno::Errno::ENOENT) => {
            let mut ctl = QuotaCtlArgs {
                cmd: QUOTA_CTL_ENABLE_SIMPLE,
                status: 0,
            };
            // SAFETY: one `btrfs_ioctl_quota_ctl_args`, read and written.
            unsafe { quota_ctl(dir.as_raw_fd(), &raw mut ctl) }
                .map_err(|e| failed("turn on simple quotas for", path, e))?;
            set().map(drop).map_err(|e| failed(what, path, e))
        }
        Err(e) => Err(failed(what, path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_structs_have_the_kernels_size() {
        // Both are 4096 bytes in linux/btrfs.h.
        assert_eq!(std::mem::size_of::<VolArgs>(), 4096);
        assert_eq!(std::mem::size_of::<VolArgsV2>(), 4096);
    }

    #[test]
    fn a_name_too_long_is_refused_before_any_call() {
        let long = std::env::temp_dir().join("x".repeat(SUBVOL_NAME_MAX + 1));
        let err = create(&long).expect_err("too long").to_string();
        assert!(err.contains("1 to 4039 bytes"), "{err}");
    }
}
