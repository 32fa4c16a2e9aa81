//! The sandbox's root: an overlay of its upper over a read-only base,
//! mounted in the owner's mount namespace so uploads, downloads and
//! snapshots see exactly what the sandbox's processes see.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use nix::mount::MntFlags;

use crate::errors::Error;

fn setup(sandbox: &str, what: String) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Setup {
        sandbox: sandbox.to_owned(),
        what,
        source,
    }
}

/// overlayfs splits its options on `,` and its layer lists on `:`; a path
/// holding either (or `\`) cannot be passed safely.
fn option_path<'a>(sandbox: &str, path: &'a Path) -> Result<&'a str, Error> {
    path.to_str()
        .filter(|s| !s.contains([',', ':', '\\']))
        .ok_or_else(|| Error::Invalid {
            sandbox: sandbox.to_owned(),
            message: format!(
                "{}: overlay layer paths must be UTF-8 without `,`, `:` or `\\`",
                path.display()
            ),
        })
}

/// The host's system directories, which a strict sandbox on the host's root
/// sees through the overlay's lower (read-only to its root, whose ids do not
/// map the host's files).
const HOST_SYSTEM_DIRS: [&str; 8] = [
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc",
];

/// Top-level entries the anchor mounts over, left as they are. Everything
/// else at the top (`/root`, `/home`, `/var`, `/srv`, `/mnt`, `/opt`, run
/// directories, ...) is an empty directory of the sandbox's own.
const ANCHOR_MOUNT_POINTS: [&str; 5] = ["proc", "sys", "dev", "run", "tmp"];

/// Whether the absolute host `path` lies in one of [`HOST_SYSTEM_DIRS`],
/// which a strict sandbox on the host's root sees without a lend.
pub(crate) fn in_host_system_dir(path: &Path) -> bool {
    let mut parts = path
        .components()
        .skip_while(|c| c == &std::path::Component::RootDir);
    parts
        .next()
        .is_some_and(|first| HOST_SYSTEM_DIRS.iter().any(|d| first.as_os_str() == *d))
}

/// Files under the host's `/etc` a strict sandbox does not see (whited out
/// in the layer below its upper, [`HostView::layer`]): password hashes, private TLS keys; and every
/// `ssh/*_key` (the host's private keys).
const ETC_SECRETS: [&str; 6] = [
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "ssl/private",
    "security/opasswd",
];

/// A directory of the upper's own that hides the base's (opaque).
fn opaque_dir(
    sandbox: &str,
    path: &Path,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> Result<(), Error> {
    std::fs::create_dir(path).map_err(setup(sandbox, format!("create {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(setup(sandbox, format!("chmod {}", path.display())))?;
    chown(sandbox, path, owner)?;
    xattr::set(path, "trusted.overlay.opaque", b"y")
        .map_err(setup(sandbox, format!("mark {} opaque", path.display())))
}

fn chown(sandbox: &str, path: &Path, owner: Option<(u32, u32)>) -> Result<(), Error> {
    match owner {
        Some((uid, gid)) => std::os::unix::fs::lchown(path, Some(uid), Some(gid))
            .map_err(setup(sandbox, format!("chown {}", path.display()))),
        None => Ok(()),
    }
}

/// An overlay whiteout at `path`: the base's entry there is hidden.
fn whiteout(sandbox: &str, path: &Path) -> Result<(), Error> {
    nix::sys::stat::mknod(
        path,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::empty(),
        0,
    )
    .map_err(|e| setup(sandbox, format!("white out {}", path.display()))(e.into()))
}

/// What a strict sandbox on the host's root must not see of the host, read
/// once per backend rather than at every sandbox's start.
#[derive(Debug)]
pub(crate) struct HostView {
    /// Top-level entries to hide: the name, and whether it is a directory.
    hidden: Vec<(std::ffi::OsString, bool)>,
    /// Directories the whiteouts go in (`etc`, `etc/ssh`, ...), parents
    /// first, with the host's modes, so a whiteout changes nothing else.
    dirs: Vec<(std::path::PathBuf, u32)>,
    /// What is whited out, relative to `/` ([`ETC_SECRETS`] and the host
    /// keys that exist).
    secrets: Vec<std::path::PathBuf>,
}

impl HostView {
    /// Reads the host's `/` and `/etc`.
    pub(crate) fn read() -> std::io::Result<Self> {
        let mut hidden = Vec::new();
        for entry in std::fs::read_dir("/")? {
            let entry = entry?;
            let name = entry.file_name();
            let shown = HOST_SYSTEM_DIRS.iter().chain(&ANCHOR_MOUNT_POINTS);
            if !shown.into_iter().any(|e| name == *e) {
                hidden.push((name, entry.file_type().is_ok_and(|t| t.is_dir())));
            }
        }
        let host_keys = std::fs::read_dir("/etc/ssh")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| format!("ssh/{}", e.file_name().to_string_lossy()))
            .filter(|name| name.ends_with("_key"));
        let mut dirs: Vec<(std::path::PathBuf, u32)> = Vec::new();
        let mut secrets = Vec::new();
        for secret in ETC_SECRETS.iter().map(|s| (*s).to_owned()).chain(host_keys) {
            let rel = Path::new("etc").join(&secret);
            if std::fs::symlink_metadata(Path::new("/").join(&rel)).is_err() {
                continue;
            }
            let parents: Vec<&Path> = rel.ancestors().skip(1).collect();
            for parent in parents
                .into_iter()
                .rev()
                .filter(|p| !p.as_os_str().is_empty())
            {
                if !dirs.iter().any(|(d, _)| d == parent) {
                    let mode = std::fs::metadata(Path::new("/").join(parent))?.mode() & 0o7777;
                    dirs.push((parent.to_owned(), mode));
                }
            }
            secrets.push(rel);
        }
        Ok(Self {
            hidden,
            dirs,
            secrets,
        })
    }

    /// The layer that hides what this view hides, for strict sandboxes
    /// whose root is host ids `owner`, between each one's upper and the
    /// host's `/`: every other top-level entry an empty opaque directory of
    /// the sandbox's root (a whiteout for anything not a directory), and the
    /// secrets of `/etc` whited out. Made once per backend under `dir`, in a
    /// temporary directory renamed into place, and named by what it holds,
    /// so it is never changed while an overlay reads it: a later process
    /// that reads the same host uses it as it is, one that reads another
    /// makes another. One layer for all, rather than the same entries
    /// written into every upper: a sandbox's start makes none of them, and
    /// its snapshots do not carry them.
    pub(crate) fn layer(
        &self,
        sandbox: &str,
        dir: &Path,
        owner: (u32, u32),
    ) -> Result<std::path::PathBuf, Error> {
        use sha2::{Digest, Sha256};
        let mut digest = Sha256::new();
        digest.update(format!("host-mask v1 {owner:?}\n"));
        for (name, is_dir) in &self.hidden {
            digest.update(format!("hide {name:?} {is_dir}\n"));
        }
        for (rel, mode) in &self.dirs {
            digest.update(format!("dir {rel:?} {mode:o}\n"));
        }
        for rel in &self.secrets {
            digest.update(format!("secret {rel:?}\n"));
        }
        let hex = format!("{:x}", digest.finalize());
        let hex = &hex[..16];
        let at = dir.join(format!("host-mask-{hex}"));
        if at.is_dir() {
            return Ok(at);
        }
        std::fs::create_dir_all(dir)
            .map_err(setup(sandbox, format!("create {}", dir.display())))?;
        remove_dead_makers(dir);
        let temp = dir.join(format!(".host-mask-{hex}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&temp);
        std::fs::create_dir(&temp).map_err(setup(sandbox, format!("create {}", temp.display())))?;
        let made = self.hide(sandbox, &temp, owner).and_then(|()| {
            match std::fs::rename(&temp, &at) {
                Ok(()) => {}
                // Another process made it first: the same entries.
                Err(_) if at.is_dir() => {
                    let _ = std::fs::remove_dir_all(&temp);
                }
                Err(e) => return Err(setup(sandbox, format!("rename to {}", at.display()))(e)),
            }
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(setup(sandbox, format!("sync {}", dir.display())))
        });
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&temp);
            return Err(e);
        }
        Ok(at)
    }

    /// Whether overlayfs takes `layer` as a lower over the host's `/`: it
    /// refuses one on the host's root filesystem (`ELOOP`, "overlapping
    /// lowerdir path"), which only a trial mount tells for certain (a
    /// btrfs subvolume has a device of its own and the same tree). Tried
    /// once per backend, in `scratch`, which is removed again.
    pub(crate) fn stacks_on_host_root(sandbox: &str, layer: &Path, scratch: &Path) -> bool {
        let _ = std::fs::remove_dir_all(scratch);
        let (upper, work, at) = (scratch.join("u"), scratch.join("w"), scratch.join("m"));
        let lowers = [layer.to_owned(), std::path::PathBuf::from("/")];
        let stacks = [&upper, &work]
            .iter()
            .try_for_each(std::fs::create_dir_all)
            .is_ok()
            && make_overlay(sandbox, &lowers, &upper, &work, &at, None).is_ok();
        let _ = std::fs::remove_dir_all(scratch);
        stacks
    }

    /// Writes the hiding entries of [`Self::layer`] into `at`: the layer,
    /// or, where no layer can be stacked, a sandbox's upper, fresh or
    /// forked (then whatever of its own it has at a hidden name already
    /// hides the host's entry, a directory once it is made opaque).
    pub(crate) fn hide(&self, sandbox: &str, at: &Path, owner: (u32, u32)) -> Result<(), Error> {
        for (name, is_dir) in &self.hidden {
            let target = at.join(name);
            match std::fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => {
                    xattr::set(&target, "trusted.overlay.opaque", b"y")
                        .map_err(setup(sandbox, format!("mark {} opaque", target.display())))?;
                    continue;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(setup(sandbox, format!("inspect {}", target.display()))(e)),
            }
            if !is_dir {
                whiteout(sandbox, &target)?;
                continue;
            }
            let mode = if name == "root" { 0o700 } else { 0o755 };
            opaque_dir(sandbox, &target, mode, Some(owner))?;
            // Programs expect it, writable by all.
            if name == "var" {
                let dir = target.join("tmp");
                std::fs::create_dir(&dir)
                    .map_err(setup(sandbox, format!("create {}", dir.display())))?;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777))
                    .map_err(setup(sandbox, format!("chmod {}", dir.display())))?;
                chown(sandbox, &dir, Some(owner))?;
            }
        }
        // Not opaque: the host's entries show through but for the secrets.
        for (rel, mode) in &self.dirs {
            let dir = at.join(rel);
            if dir.is_dir() {
                continue;
            }
            std::fs::create_dir(&dir)
                .map_err(setup(sandbox, format!("create {}", dir.display())))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(*mode))
                .map_err(setup(sandbox, format!("chmod {}", dir.display())))?;
        }
        for rel in &self.secrets {
            let target = at.join(rel);
            if std::fs::symlink_metadata(&target).is_err() {
                whiteout(sandbox, &target)?;
            }
        }
        Ok(())
    }
}

/// Prepares a fresh upper. Every sandbox gets a private, empty `/tmp` (mode
/// 1777): an opaque directory that hides the base's, in the upper, so it is
/// snapshotted and forked with everything else. A strict sandbox (`owner`:
/// its root's host ids) also owns its `/` and `/tmp`.
pub(crate) fn prepare_upper(
    sandbox: &str,
    upper: &Path,
    owner: Option<(u32, u32)>,
) -> Result<(), Error> {
    opaque_dir(sandbox, &upper.join("tmp"), 0o1777, owner)?;
    chown(sandbox, upper, owner)
}

/// The overlay of `upper` over `lowers` (top first), detached: the anchor
/// attaches it in the sandbox's own mount namespace, so nothing is added to
/// the owner's. `scratch` is where a strict sandbox's idmapped layers are
/// attached while overlayfs takes them (`userns`: the run's namespace).
pub(crate) fn make_overlay(
    sandbox: &str,
    lowers: &[std::path::PathBuf],
    upper: &Path,
    work: &Path,
    scratch: &Path,
    userns: Option<&std::os::fd::OwnedFd>,
) -> Result<std::os::fd::OwnedFd, Error> {
    for path in lowers.iter().map(AsRef::as_ref).chain([upper, work]) {
        option_path(sandbox, path)?;
    }
    std::fs::create_dir_all(scratch)
        .map_err(setup(sandbox, format!("create {}", scratch.display())))?;
    rollpoint_proctree::isolate::overlay::make_overlay(lowers, upper, work, scratch, userns)
        .map_err(|e| Error::Setup {
            sandbox: sandbox.to_owned(),
            what: e.what,
            source: e.source,
        })
}

/// Unmounts the root; a root still busy (a straggler holding it open in the
/// owner's namespace) is detached instead, which frees it once released.
pub(crate) fn unmount(sandbox: &str, at: &Path) -> Result<(), Error> {
    unmount_root(sandbox, at)?;
    // A strict sandbox's layers are attached at `at/layer<N>` for the
    // moment its overlay is made; a crash then leaves them there.
    for entry in std::fs::read_dir(at).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with("layer") {
            let _ = nix::mount::umount2(&entry.path(), MntFlags::MNT_DETACH);
        }
    }
    Ok(())
}

fn unmount_root(sandbox: &str, at: &Path) -> Result<(), Error> {
    match nix::mount::umount2(at, MntFlags::empty()) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(()),
        Err(nix::errno::Errno::EBUSY) => {
            nix::mount::umount2(at, MntFlags::MNT_DETACH).map_err(|e| Error::Setup {
                sandbox: sandbox.to_owned(),
                what: format!("detach {}", at.display()),
                source: e.into(),
            })
        }
        Err(e) => Err(Error::Setup {
            sandbox: sandbox.to_owned(),
            what: format!("unmount {}", at.display()),
            source: e.into(),
        }),
    }
}

/// Removes the half-made layers (`.host-mask-<digest>.<pid>`) of makers
/// that are gone: a process killed while it made one leaves it behind.
fn remove_dead_makers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.starts_with(".host-mask-"))
            .and_then(|n| n.rsplit_once('.'))
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(path = %e.path().display(), pid, "removing a host-mask layer its maker left half-made");
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn half_made_layers_of_dead_makers_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let names = [
            format!(".host-mask-abc.{dead}"),
            format!(".host-mask-abc.{}", std::process::id()),
            "host-mask-abc".to_owned(),
            ".host-mask-odd".to_owned(),
        ];
        for n in &names {
            std::fs::create_dir(dir.path().join(n)).unwrap();
        }
        remove_dead_makers(dir.path());
        let left: Vec<bool> = names.iter().map(|n| dir.path().join(n).exists()).collect();
        assert_eq!(left, [false, true, true, true]);
    }
}
