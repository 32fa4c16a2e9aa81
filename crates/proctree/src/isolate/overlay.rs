//! A sandbox's overlay, made with the new mount API and left attached
//! nowhere on the host ([`split`] attaches it only for the moment of
//! cloning it): the sandbox's anchor attaches it in its own mount
//! namespace, so the host's mount table does not grow with the sandboxes
//! (and a new sandbox's `unshare` does not copy the others' overlays). For a
//! strict sandbox on a rootfs, a tarball or an image, each lower layer is an
//! idmapped mount (the layer's ids `0..65536` seen as the backend's range):
//! files copied up land in the upper under the range's ids, as the
//! sandbox's own writes do, so a layer shared by every sandbox of every run
//! keeps its own ids on disk.
//!
//! With the new mount API: `open_tree(OPEN_TREE_CLONE)` of each layer,
//! `mount_setattr(MOUNT_ATTR_IDMAP)` with the range's user namespace,
//! `fsopen("overlay")`, `fsconfig` (`lowerdir+`, top first;
//! `upperdir`, `workdir`), `fsmount`; the sandbox's anchor attaches the
//! result with `move_mount` in its own mount namespace. Raw system calls:
//! neither `nix` nor the standard library wraps this API.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A step of [`make_overlay`] that failed.
#[derive(Debug, thiserror::Error)]
#[error("failed to {what}: {source}")]
pub struct MountError {
    pub what: String,
    #[source]
    pub source: io::Error,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_EMPTY_PATH: libc::c_uint = 0x1000;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// `struct mount_attr` (linux/mount.h), first version.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::other("NUL in path"))
}

fn fd_result(r: libc::c_long) -> io::Result<OwnedFd> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(r).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn unit_result(r: libc::c_long) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Two detached mounts of the overlay `tree` ([`make_overlay`]'s): the
/// first for the sandbox's anchor to attach in its own namespace, the
/// second the owner's own view, which never holds what the sandbox mounts
/// on the first (its `/proc`, `/dev`, the control directory), so a path the
/// owner follows into the sandbox cannot cross into them. Linux refuses to
/// clone a detached mount before 6.15, so `tree` is attached at `at` for the
/// moment of the two clones and detached again: nothing stays in the
/// caller's mount table (a crash in between leaves it at `at`, where a
/// teardown unmounts it).
pub fn split(tree: OwnedFd, at: &Path) -> io::Result<(OwnedFd, OwnedFd)> {
    let path = cstring(at)?;
    attach(&tree, at)?;
    drop(tree);
    let clone = || {
        // SAFETY: open_tree(2) reads a NUL-terminated path.
        fd_result(unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                path.as_ptr(),
                OPEN_TREE_CLONE | libc::O_CLOEXEC.unsigned_abs(),
            )
        })
    };
    let clones = clone().and_then(|anchor| Ok((anchor, clone()?)));
    detach(at);
    clones
}

/// A detached, read-only, idmapped clone of the directory `layer`.
fn idmapped_layer(layer: &Path, userns: &OwnedFd) -> io::Result<OwnedFd> {
    let path = cstring(layer)?;
    // SAFETY: open_tree(2) reads a NUL-terminated path.
    let tree = fd_result(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC.unsigned_abs(),
        )
    })?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: u64::try_from(userns.as_raw_fd()).unwrap_or(u64::MAX),
    };
    // SAFETY: mount_setattr(2) reads `attr`, of the size given, and an
    // empty path relative to the descriptor.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            AT_EMPTY_PATH,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    })?;
    Ok(tree)
}

/// Attaches the detached mount `tree` at `point` in the caller's mount
/// namespace.
pub fn attach(tree: &OwnedFd, point: &Path) -> io::Result<()> {
    let target = cstring(point)?;
    // SAFETY: move_mount(2) reads an empty path relative to the mount's
    // descriptor and a NUL-terminated target path.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    })
}

/// Detaches whatever is mounted at `point` (a lazy unmount: the overlay's
/// private copy of the layer stays).
fn detach(point: &Path) {
    if let Ok(c) = cstring(point) {
        // SAFETY: umount2(2) reads a NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn fsconfig(
    fs: &OwnedFd,
    cmd: libc::c_uint,
    key: Option<&std::ffi::CStr>,
    value: Option<&std::ffi::CStr>,
    aux: RawFd,
) -> io::Result<()> {
    let ptr = |s: Option<&std::ffi::CStr>| s.map_or(std::ptr::null(), std::ffi::CStr::as_ptr);
    // SAFETY: fsconfig(2) reads the NUL-terminated key and value (or
    // takes null for them) and an integer.
    unit_result(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            cmd,
            ptr(key),
            ptr(value),
            aux,
        )
    })
}

/// Makes the overlay of `upper` over `lowers` (top first) as a detached
/// mount: its descriptor, attached nowhere, so the host's mount table never
/// holds it (whoever attaches it, the sandbox's anchor in its own mount
/// namespace, takes it from there). With `userns`, each lower is idmapped
/// through that user namespace; its clone is attached under `scratch` for
/// the moment overlayfs takes its private copy (overlayfs refuses a
/// detached idmapped mount), then detached again.
pub fn make_overlay(
    lowers: &[std::path::PathBuf],
    upper: &Path,
    work: &Path,
    scratch: &Path,
    userns: Option<&OwnedFd>,
) -> Result<OwnedFd, MountError> {
    let fail = |what: String| move |source: io::Error| MountError { what, source };
    // SAFETY: fsopen(2) reads a NUL-terminated name.
    let fs =
        fd_result(unsafe { libc::syscall(libc::SYS_fsopen, c"overlay".as_ptr(), FSOPEN_CLOEXEC) })
            .map_err(fail("open an overlay filesystem context".into()))?;
    let mut attached = Vec::with_capacity(lowers.len());
    let added = (|| {
        for (i, lower) in lowers.iter().enumerate() {
            let value = match userns {
                Some(userns) => {
                    let layer = idmapped_layer(lower, userns)
                        .map_err(fail(format!("idmap the layer {}", lower.display())))?;
                    let point = scratch.join(format!("layer{i}"));
                    std::fs::create_dir_all(&point)
                        .map_err(fail(format!("create {}", point.display())))?;
                    attach(&layer, &point).map_err(fail(format!("attach {}", point.display())))?;
                    attached.push(point.clone());
                    cstring(&point).map_err(fail(format!("name {}", point.display())))?
                }
                None => cstring(lower).map_err(fail(format!("name {}", lower.display())))?,
            };
            fsconfig(
                &fs,
                FSCONFIG_SET_STRING,
                Some(c"lowerdir+"),
                Some(&value),
                0,
            )
            .map_err(fail(format!("add the layer {}", lower.display())))?;
        }
        Ok(())
    })();
    let created = added.and_then(|()| {
        for (key, dir) in [(c"upperdir", upper), (c"workdir", work)] {
            let value = cstring(dir).map_err(fail(format!("name {}", dir.display())))?;
            fsconfig(&fs, FSCONFIG_SET_STRING, Some(key), Some(&value), 0)
                .map_err(fail(format!("set {key:?} to {}", dir.display())))?;
        }
        fsconfig(&fs, FSCONFIG_CMD_CREATE, None, None, 0)
            .map_err(fail(format!("create the overlay of {}", upper.display())))
    });
    for point in &attached {
        detach(point);
        let _ = std::fs::remove_dir(point);
    }
    created?;
    // SAFETY: fsmount(2) takes a descriptor and flags.
    fd_result(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0) })
        .map_err(fail(format!("mount the overlay of {}", upper.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_an_idmapped_overlay_shows_the_layer_shifted() {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
        let dir = tempfile::tempdir().expect("tempdir");
        let p = |s: &str| dir.path().join(s);
        for d in ["l", "u", "w", "m"] {
            std::fs::create_dir(p(d)).expect("dir");
        }
        std::fs::write(p("l/f"), "x").expect("file");
        let range = crate::isolate::IdRange::parse("1073741824:65536").expect("range");
        let ns = crate::isolate::userns::create(range).expect("userns");
        let r = make_overlay(&[p("l")], &p("u"), &p("w"), &p("m"), Some(&ns));
        eprintln!("{r:?}");
        attach(&r.expect("mount"), &p("m")).expect("attach");
        use std::os::unix::fs::MetadataExt;
        let uid = std::fs::metadata(p("m/f")).expect("stat").uid();
        std::fs::write(p("m/f"), "y").expect("copy up");
        let upper_uid = std::fs::metadata(p("u/f")).expect("stat").uid();
        nix_free_umount(&p("m"));
        assert_eq!(uid, 1_073_741_824);
        assert_eq!(upper_uid, 1_073_741_824, "copied up with the shifted owner");
    }

    fn nix_free_umount(at: &Path) {
        let c = cstring(at).expect("path");
        // SAFETY: umount2(2) reads a NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), 0) };
    }
}
