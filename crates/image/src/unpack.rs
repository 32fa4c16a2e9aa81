//! One layer tarball into one directory that overlayfs takes as a lower
//! layer. The tar crate writes files, directories, links and file xattrs;
//! what it does not do is done here, which is why this is not one
//! `Archive::unpack` call: OCI whiteouts become overlayfs ones (`.wh.NAME`
//! a 0/0 character device, `.wh..wh..opq` the `trusted.overlay.opaque`
//! xattr on its directory), device files and fifos are made with `mknod`
//! (tar writes them as empty files), and directories get their xattrs.
//! Owners, modes (setuid included: owners are set first) and mtimes are kept.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::sys::stat::{Mode, SFlag, makedev, mknod};
use tar::EntryType;

use crate::digest::Digest;
use crate::digest::Hashing;
use crate::errors::UnpackError;
use crate::manifest::Compression;

const OPAQUE: &str = ".wh..wh..opq";
const WHITEOUT: &str = ".wh.";

/// What a layer's bytes hashed to: the blob as stored, and the tar inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpacked {
    pub blob: Digest,
    pub blob_bytes: u64,
    pub diff_id: Digest,
}

/// Unpacks `blob` into `into` (an empty directory) and returns the digests
/// of what it read, both through the end of their streams.
pub fn unpack(
    blob: impl Read,
    compression: Compression,
    into: &Path,
) -> Result<Unpacked, UnpackError> {
    let mut stored = Hashing::new(blob);
    let decoded: Box<dyn Read + '_> = match compression {
        Compression::None => Box::new(&mut stored),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut stored)),
        Compression::Zstd => {
            Box::new(zstd::stream::read::Decoder::new(&mut stored).map_err(UnpackError::Zstd)?)
        }
    };
    let mut tarball = Hashing::new(decoded);
    {
        let mut archive = tar::Archive::new(&mut tarball);
        archive.set_preserve_permissions(true);
        archive.set_preserve_ownerships(true);
        archive.set_preserve_mtime(true);
        archive.set_unpack_xattrs(true);
        archive.set_overwrite(true);
        let entries = archive.entries().map_err(UnpackError::NotTar)?;
        for entry in entries {
            let mut entry = entry.map_err(UnpackError::ReadTar)?;
            entry_into(&mut entry, into)?;
        }
    }
    let (diff_id, _) = tarball.finish().map_err(UnpackError::ReadTar)?;
    let (blob, blob_bytes) = stored.finish().map_err(UnpackError::ReadBlob)?;
    Ok(Unpacked {
        blob,
        blob_bytes,
        diff_id,
    })
}

fn entry_into<R: Read>(entry: &mut tar::Entry<'_, R>, into: &Path) -> Result<(), UnpackError> {
    let name = entry.path().map_err(UnpackError::EntryPath)?.into_owned();
    let write = |source| UnpackError::Write {
        entry: name.clone(),
        source,
    };
    let rel = relative(&name).ok_or_else(|| UnpackError::Leaves {
        entry: name.clone(),
    })?;
    let Some(file) = rel.file_name().and_then(|f| f.to_str()).map(str::to_owned) else {
        return Ok(()); // The layer's root itself.
    };
    let parent = rel.parent().unwrap_or(Path::new(""));
    let kind = entry.header().entry_type();
    if file == OPAQUE {
        let dir = inside(into, parent, &name)?;
        std::fs::create_dir_all(&dir).map_err(write)?;
        return xattr::set(&dir, "trusted.overlay.opaque", b"y").map_err(|source| {
            UnpackError::Step {
                what: format!("mark {} opaque", dir.display()),
                entry: name.clone(),
                source,
            }
        });
    }
    if let Some(hidden) = file.strip_prefix(WHITEOUT) {
        let dir = inside(into, parent, &name)?;
        std::fs::create_dir_all(&dir).map_err(write)?;
        let at = dir.join(hidden);
        remove_any(&at).map_err(write)?;
        return mknod(&at, SFlag::S_IFCHR, Mode::empty(), makedev(0, 0)).map_err(|source| {
            UnpackError::Node {
                what: format!("make the whiteout {}", at.display()),
                entry: name.clone(),
                source,
            }
        });
    }
    match kind {
        EntryType::Char | EntryType::Block | EntryType::Fifo => {
            special(entry, into, parent, &file, &name)
        }
        _ => {
            let unpacked = entry.unpack_in(into).map_err(write)?;
            if !unpacked {
                return Err(UnpackError::Leaves { entry: name });
            }
            if kind == EntryType::Directory {
                dir_xattrs(entry, &into.join(rel), &name)?;
            }
            Ok(())
        }
    }
}

/// The path with `.` and leading `/` dropped, or `None` when it has `..`.
fn relative(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// `into/parent`, refusing a parent that a symlink of the layer points out
/// of it.
fn inside(into: &Path, parent: &Path, name: &Path) -> Result<PathBuf, UnpackError> {
    let dir = into.join(parent);
    let mut at = into.to_path_buf();
    for part in parent.components() {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(UnpackError::SymlinkDir {
                entry: name.to_owned(),
                dir: parent.to_owned(),
            });
        }
    }
    Ok(dir)
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn special<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    into: &Path,
    parent: &Path,
    file: &str,
    name: &Path,
) -> Result<(), UnpackError> {
    let header = entry.header();
    let kind = match header.entry_type() {
        EntryType::Char => SFlag::S_IFCHR,
        EntryType::Block => SFlag::S_IFBLK,
        _ => SFlag::S_IFIFO,
    };
    let bad = |what: &str, source: std::io::Error| UnpackError::Step {
        entry: name.to_owned(),
        what: what.to_owned(),
        source,
    };
    let major = header
        .device_major()
        .map_err(|e| bad("device major", e))?
        .unwrap_or(0);
    let minor = header
        .device_minor()
        .map_err(|e| bad("device minor", e))?
        .unwrap_or(0);
    let mode = header.mode().map_err(|e| bad("mode", e))?;
    let uid = header.uid().map_err(|e| bad("uid", e))?;
    let gid = header.gid().map_err(|e| bad("gid", e))?;
    let dir = inside(into, parent, name)?;
    std::fs::create_dir_all(&dir).map_err(|e| bad("create its directory", e))?;
    let at = dir.join(file);
    remove_any(&at).map_err(|e| bad("replace", e))?;
    mknod(
        &at,
        kind,
        Mode::empty(),
        makedev(major.into(), minor.into()),
    )
    .map_err(|source| UnpackError::Node {
        entry: name.to_owned(),
        what: "mknod".to_owned(),
        source,
    })?;
    let id = |id: u64| {
        u32::try_from(id).map_err(|_| UnpackError::OwnerId {
            entry: name.to_owned(),
            id,
        })
    };
    std::os::unix::fs::lchown(&at, Some(id(uid)?), Some(id(gid)?)).map_err(|e| bad("chown", e))?;
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| bad("chmod", e))?;
    dir_xattrs(entry, &at, name)
}

/// The `SCHILY.xattr.` records of an entry the tar crate does not apply
/// them to (it does so for regular files only).
fn dir_xattrs<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    at: &Path,
    name: &Path,
) -> Result<(), UnpackError> {
    let step = |what: String| {
        move |source| UnpackError::Step {
            entry: name.to_owned(),
            what,
            source,
        }
    };
    let Some(exts) = entry
        .pax_extensions()
        .map_err(step("pax records".to_owned()))?
    else {
        return Ok(());
    };
    for ext in exts {
        let ext = ext.map_err(step("pax record".to_owned()))?;
        let Some(attr) = ext.key().ok().and_then(|k| k.strip_prefix("SCHILY.xattr.")) else {
            continue;
        };
        xattr::set(at, attr, ext.value_bytes()).map_err(step(format!("xattr {attr}")))?;
    }
    Ok(())
}
