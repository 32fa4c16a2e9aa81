//! The sandbox's filesystem view, built before anything runs in it: a proc
//! of its own pid namespace, a minimal /dev, a /sys holding only the
//! sandbox's cgroups (so `run` finds them through mountinfo and nests launch
//! cgroups under them), the host's control directory at /run/rollpoint; then
//! the hostname, loopback, and the pivot into the root.
//!
//! /tmp is deliberately not a tmpfs: it lives in the overlay, so snapshots
//! keep it.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::unistd::{chdir, pivot_root, sethostname};

use rollpoint_proto::anchor::SANDBOX_CONTROL_DIR;

use crate::args::AnchorOpts;
use crate::errors::{Error, io_err};

/// Device nodes bind-mounted from the host's /dev.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// /dev symlinks: name and target.
const DEV_LINKS: [(&str, &str); 5] = [
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

fn nix_err(what: &'static str, path: &Path) -> impl FnOnce(nix::Error) -> Error {
    let path = path.to_owned();
    move |source| Error::Setup { what, path, source }
}

fn mkdir(path: &Path) -> Result<(), Error> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(path)
        .map_err(io_err("create directory", path))
}

/// Creates `root/rel` one component at a time, refusing symlinks: before
/// the pivot an absolute link in the root's tree would resolve on the host.
fn mkdir_in(root: &Path, rel: &str) -> Result<PathBuf, Error> {
    let mut path = root.to_owned();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::SetupIo {
                    what: "use as a mount point",
                    path,
                    source: std::io::Error::other("not a directory (symlinks are refused)"),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => mkdir(&path)?,
            Err(e) => return Err(io_err("inspect", &path)(e)),
        }
    }
    Ok(path)
}

fn mount_fs(fstype: &str, target: &Path, flags: MsFlags, data: &str) -> Result<(), Error> {
    mkdir(target)?;
    let what = match fstype {
        "proc" => "mount proc at",
        "devpts" => "mount devpts at",
        _ => "mount tmpfs at",
    };
    mount(Some(fstype), target, Some(fstype), flags, Some(data)).map_err(nix_err(what, target))
}

fn bind(source: &Path, target: &Path) -> Result<(), Error> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| Error::Setup {
        what: "bind-mount",
        path: PathBuf::from(format!("{} at {}", source.display(), target.display())),
        source: e,
    })
}

/// Builds the view and pivots into it; afterwards `/` is the sandbox root.
/// `overlay`, the root the owner made and attached nowhere, is attached at
/// the root's path first, in this namespace alone.
pub fn enter(opts: &AnchorOpts, overlay: Option<std::os::fd::OwnedFd>) -> Result<(), Error> {
    let root = &opts.root;
    // Nothing done here may propagate back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(nix_err("make private the mounts under", Path::new("/")))?;
    if let Some(overlay) = overlay {
        rollpoint_proctree::isolate::overlay::attach(&overlay, root).map_err(|source| {
            Error::SetupIo {
                what: "attach the sandbox's root at",
                path: root.clone(),
                source,
            }
        })?;
    }

    let hidden = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let proc = mkdir_in(root, "proc")?;
    mount_fs("proc", &proc, hidden, "")?;
    if opts.userns.is_some() {
        mask_proc(&proc)?;
    }
    dev(&mkdir_in(root, "dev")?)?;
    sys(&mkdir_in(root, "sys")?, opts)?;
    let control = mkdir_in(root, SANDBOX_CONTROL_DIR)?;
    bind(&opts.control, &control)?;
    if !opts.tools.is_empty() {
        tools(&mkdir_in(root, TOOLS_DIR)?, &opts.tools)?;
    }
    for path in &opts.lend {
        lend(root, path)?;
    }

    sethostname(&opts.hostname).map_err(|source| Error::Setup {
        what: "set the hostname to",
        path: PathBuf::from(&opts.hostname),
        source,
    })?;
    if opts.net.own_namespace() {
        hosts(
            root,
            &opts.control,
            &super::net::hosts_file(&opts.hostname, &opts.net),
        )?;
    }
    pivot(root)
}

/// In-sandbox directory of the tools of a sandbox not on the host's root.
const TOOLS_DIR: &str = ".rollpoint";

/// A read-only tmpfs holding each tool bind-mounted read-only at its
/// place: nothing of them is written to the sandbox's upper, so snapshots
/// do not carry them and a fork gets whatever the host has then.
fn tools(dir: &Path, tools: &[(String, PathBuf)]) -> Result<(), Error> {
    let hidden = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_fs("tmpfs", dir, hidden, "mode=0755,size=1m")?;
    for (at, host) in tools {
        let target = dir.join(at);
        if let Some(parent) = target.parent() {
            mkdir(parent)?;
        }
        if host.is_dir() {
            mkdir(&target)?;
        } else {
            std::fs::File::create(&target).map_err(io_err("create the mount point", &target))?;
        }
        bind(host, &target)?;
        read_only(&target, MsFlags::MS_BIND)?;
    }
    read_only(dir, hidden)
}

/// `/proc` files a sandbox may not read (kernel memory, keys, timers and
/// scheduler internals) or write (`sysrq-trigger`): `/dev/null` over them.
const PROC_MASKED_FILES: [&str; 7] = [
    "kcore",
    "keys",
    "latency_stats",
    "timer_list",
    "timer_stats",
    "sched_debug",
    "sysrq-trigger",
];

/// `/proc` directories hidden under an empty read-only tmpfs.
const PROC_MASKED_DIRS: [&str; 3] = ["acpi", "asound", "scsi"];

/// `/proc` directories a sandbox may read but never write (`sys` holds
/// `core_pattern`, whose pipe handler the host kernel would run as root).
const PROC_READ_ONLY: [&str; 4] = ["sys", "irq", "bus", "fs"];

/// Masks a strict sandbox's `/proc` as `docker run` does. Mounts in the
/// sandbox's mount namespace, which the sandbox's root cannot undo (the
/// namespace belongs to the host's user namespace, and the filter refuses
/// `umount2`). A path this kernel lacks is skipped.
fn mask_proc(proc: &Path) -> Result<(), Error> {
    for name in PROC_MASKED_FILES {
        let target = proc.join(name);
        if target.exists() {
            bind(Path::new("/dev/null"), &target)?;
        }
    }
    for name in PROC_MASKED_DIRS {
        let target = proc.join(name);
        if target.is_dir() {
            mount(
                Some("tmpfs"),
                &target,
                Some("tmpfs"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some("size=0,mode=0555"),
            )
            .map_err(nix_err("mask", &target))?;
        }
    }
    for name in PROC_READ_ONLY {
        let target = proc.join(name);
        if target.is_dir() {
            bind(&target, &target)?;
            read_only(
                &target,
                MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            )?;
        }
    }
    Ok(())
}

/// Bind-mounts the host's `path` read-only at the same place in the root
/// (`--lend`), making the mount point (a directory, or an empty file for a
/// file) without following a symlink.
fn lend(root: &Path, path: &Path) -> Result<(), Error> {
    let rel = path.to_string_lossy();
    let target = if path.is_dir() {
        mkdir_in(root, &rel)?
    } else {
        let parent = path.parent().map(|p| p.to_string_lossy().into_owned());
        let dir = mkdir_in(root, parent.as_deref().unwrap_or("/"))?;
        let target = dir.join(path.file_name().unwrap_or_default());
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                return Err(Error::SetupIo {
                    what: "use as a mount point",
                    path: target,
                    source: std::io::Error::other("not a regular file (symlinks are refused)"),
                });
            }
            Err(_) => {
                std::fs::File::create(&target)
                    .map_err(io_err("create the mount point", &target))?;
            }
        }
        target
    };
    bind(path, &target)?;
    read_only(
        &target,
        MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
    )
}

fn read_only(target: &Path, flags: MsFlags) -> Result<(), Error> {
    mount(
        None::<&str>,
        target,
        None::<&str>,
        flags | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(nix_err("make read-only", target))
}

fn dev(dev: &Path) -> Result<(), Error> {
    mount_fs(
        "tmpfs",
        dev,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=0755,size=65536k",
    )?;
    for name in DEVICES {
        let target = dev.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&target)
            .map_err(io_err("create the mount point", &target))?;
        bind(&Path::new("/dev").join(name), &target)?;
    }
    for (name, target) in DEV_LINKS {
        let link = dev.join(name);
        std::os::unix::fs::symlink(target, &link).map_err(io_err("create the symlink", &link))?;
    }
    mount_fs(
        "devpts",
        &dev.join("pts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620",
    )?;
    mount_fs(
        "tmpfs",
        &dev.join("shm"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=1777",
    )
}

fn sys(sys: &Path, opts: &AnchorOpts) -> Result<(), Error> {
    let hidden = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_fs("tmpfs", sys, hidden, "mode=0755,size=1024k")?;
    let cgroups = [
        (&opts.cgroup_v2, "fs/cgroup/unified"),
        (&opts.cgroup_freezer, "fs/cgroup/freezer"),
    ];
    for (host, inside) in cgroups {
        if let Some(host) = host {
            let target = sys.join(inside);
            mkdir(&target)?;
            bind(host, &target)?;
        }
    }
    // Only the cgroup mounts below it are writable.
    mount(
        None::<&str>,
        sys,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | hidden,
        Some("mode=0755,size=1024k"),
    )
    .map_err(nix_err("remount read-only", sys))
}

/// `/etc/hosts` of a sandbox with a network of its own, written to the
/// control directory and bound over the root's (made empty where the root
/// has none; a symlink there is refused, as it would resolve on the host).
fn hosts(root: &Path, control: &Path, text: &str) -> Result<(), Error> {
    let file = control.join("hosts");
    std::fs::write(&file, text).map_err(io_err("write", &file))?;
    let etc = mkdir_in(root, "etc")?;
    let target = etc.join("hosts");
    match std::fs::symlink_metadata(&target) {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            return Err(Error::SetupIo {
                what: "bind the sandbox's hosts file at",
                path: target,
                source: std::io::Error::other("not a regular file (symlinks are refused)"),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o644)
                .open(&target)
                .map_err(io_err("create", &target))?;
        }
        Err(e) => return Err(io_err("inspect", &target)(e)),
    }
    bind(&file, &target)?;
    mount(
        None::<&str>,
        &target,
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(nix_err("remount read-only", &target))
}

/// pivot_root(".", ".") then a lazy unmount of the old root stacked on top,
/// as runc does: no directory for the old root is needed in the sandbox.
fn pivot(root: &Path) -> Result<(), Error> {
    chdir(root).map_err(nix_err("change directory to", root))?;
    pivot_root(".", ".").map_err(nix_err("pivot_root into", root))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(nix_err("detach the host root from", root))?;
    chdir("/").map_err(nix_err("change directory to", Path::new("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_created_but_never_through_a_symlink() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("root");
        let made = mkdir_in(&root, "/run/rollpoint").expect("created");
        assert!(made.is_dir() && made == root.join("run/rollpoint"));

        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("outside");
        std::os::unix::fs::symlink(&outside, root.join("dev")).expect("symlink");
        let err = mkdir_in(&root, "dev/pts").expect_err("symlink").to_string();
        assert!(
            err.contains(&root.join("dev").display().to_string()),
            "{err}"
        );
        assert!(!outside.join("pts").exists());
    }
}
