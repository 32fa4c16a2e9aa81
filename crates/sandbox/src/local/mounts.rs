//! The sandbox's root: an overlay of its upper over a read-only base,
//! mounted in the owner's mount namespace so uploads, downloads and
//! snapshots see exactly what the sandbox's processes see.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::mount::{MntFlags, MsFlags};

use crate::Error;

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

/// Gives a fresh upper its private, empty `/tmp` (mode 1777): an opaque
/// directory hides the base's `/tmp`, and it lives in the upper, so it is
/// snapshotted and forked with everything else.
pub(crate) fn private_tmp(sandbox: &str, upper: &Path) -> Result<(), Error> {
    let tmp = upper.join("tmp");
    std::fs::create_dir(&tmp).map_err(setup(sandbox, format!("create {}", tmp.display())))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))
        .map_err(setup(sandbox, format!("chmod {}", tmp.display())))?;
    xattr::set(&tmp, "trusted.overlay.opaque", b"y")
        .map_err(setup(sandbox, format!("mark {} opaque", tmp.display())))
}

/// Mounts the overlay of `upper` over `lowers` (top first) at `at`.
pub(crate) fn mount_overlay(
    sandbox: &str,
    lowers: &[std::path::PathBuf],
    upper: &Path,
    work: &Path,
    at: &Path,
) -> Result<(), Error> {
    let lowers = lowers
        .iter()
        .map(|l| option_path(sandbox, l))
        .collect::<Result<Vec<_>, _>>()?;
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lowers.join(":"),
        option_path(sandbox, upper)?,
        option_path(sandbox, work)?
    );
    std::fs::create_dir_all(at).map_err(setup(sandbox, format!("create {}", at.display())))?;
    nix::mount::mount(
        Some("overlay"),
        at,
        Some("overlay"),
        MsFlags::empty(),
        Some(options.as_str()),
    )
    .map_err(|e| Error::Setup {
        sandbox: sandbox.to_owned(),
        what: format!("mount overlay at {} ({options})", at.display()),
        source: e.into(),
    })
}

/// Unmounts the root; a root still busy (a straggler holding it open in the
/// owner's namespace) is detached instead, which frees it once released.
pub(crate) fn unmount(sandbox: &str, at: &Path) -> Result<(), Error> {
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
