//! Upload and download confined to a sandbox root.
//!
//! A sandbox's files are written by an agent that may plant symlinks
//! anywhere, so a host-side write to `<root>/<path>` must never follow a link
//! out of the root. Paths are resolved by `cap-std` beneath a directory
//! handle (openat2 with `RESOLVE_BENEATH` where the kernel has it, a checked
//! component walk otherwise): a symlink that leads outside, absolute or
//! relative, is refused, and so is any `..` in the path we are given.
//! Uploads are atomic (temp file, fsync, rename, fsync the directory).

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, Permissions};

use crate::errors::Error;

/// A sandbox's root directory, opened once.
#[derive(Debug)]
pub struct SandboxRoot {
    root: PathBuf,
    dir: Dir,
}

/// The path of an in-sandbox location relative to the root: leading `/`
/// removed, `.` dropped, `..` refused.
pub fn sandbox_relative(path: &Path) -> Result<PathBuf, Error> {
    let mut rel = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => rel.push(part),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(Error::ParentComponent {
                    path: path.to_owned(),
                });
            }
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(Error::NotAFile {
            path: path.to_owned(),
        });
    }
    Ok(rel)
}

impl SandboxRoot {
    /// Opens the root directory of a sandbox.
    pub fn open(root: &Path) -> Result<Self, Error> {
        let dir = Dir::open_ambient_dir(root, ambient_authority()).map_err(|source| Error::Io {
            what: "open",
            root: root.to_owned(),
            path: root.to_owned(),
            source,
        })?;
        Ok(Self {
            root: root.to_owned(),
            dir,
        })
    }

    /// The root a descriptor names (a sandbox's overlay the owner holds,
    /// attached nowhere in its namespace); `root` names it in errors.
    pub fn from_fd(root: &Path, fd: &std::os::fd::OwnedFd) -> Result<Self, Error> {
        let io = |source| Error::Io {
            what: "open",
            root: root.to_owned(),
            path: root.to_owned(),
            source,
        };
        let file = std::fs::File::from(fd.try_clone().map_err(io)?);
        Ok(Self {
            root: root.to_owned(),
            dir: Dir::from_std_file(file),
        })
    }

    fn io(&self, what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
        let (root, path) = (self.root.clone(), path.to_owned());
        move |source| {
            // cap-std reports an escape, whichever way it resolved the path,
            // with its own error whose text is the only mark it carries.
            if source.to_string().contains("outside of the filesystem") {
                Error::Escape { root, path }
            } else {
                Error::Io {
                    what,
                    root,
                    path,
                    source,
                }
            }
        }
    }

    /// Writes `bytes` to `path` inside the sandbox with `mode`, atomically:
    /// a reader in the sandbox sees the old file or the new one, never part.
    pub fn upload(&self, path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
        self.upload_owned(path, bytes, mode, None)
    }

    /// Removes whatever is at `path` inside the sandbox (a directory with
    /// everything in it; a symlink itself, never what it points to);
    /// nothing there is not an error.
    pub fn remove_all(&self, path: &Path) -> Result<(), Error> {
        let rel = sandbox_relative(path)?;
        let meta = match self.dir.symlink_metadata(&rel) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(self.io("inspect", path)(e)),
        };
        if meta.is_dir() {
            self.dir.remove_dir_all(&rel)
        } else {
            self.dir.remove_file(&rel)
        }
        .map_err(self.io("remove", path))
    }

    /// Makes the directory `path` and its missing parents inside the
    /// sandbox, and gives `path` to `owner` (uid, gid) when given; a symlink
    /// on the way that leads outside is refused, as for an upload.
    pub fn make_dir(&self, path: &Path, owner: Option<(u32, u32)>) -> Result<(), Error> {
        let rel = sandbox_relative(path)?;
        self.dir
            .create_dir_all(&rel)
            .map_err(self.io("create the directory", path))?;
        if let Some((uid, gid)) = owner {
            let dir = self.dir.open_dir(&rel).map_err(self.io("open", path))?;
            // cap-std's directory handle may be `O_PATH`, which fchown(2)
            // refuses: fchownat on the handle itself.
            nix::unistd::fchownat(
                &dir,
                "",
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
                nix::fcntl::AtFlags::AT_EMPTY_PATH,
            )
            .map_err(|e| self.io("change the owner of", path)(e.into()))?;
        }
        Ok(())
    }

    /// [`Self::upload`], the file owned by `owner` (uid, gid) when given.
    pub fn upload_owned(
        &self,
        path: &Path,
        bytes: &[u8],
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<(), Error> {
        let rel = sandbox_relative(path)?;
        let name = rel.file_name().ok_or_else(|| Error::NotAFile {
            path: path.to_owned(),
        })?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        let dir = if parent.as_os_str().is_empty() {
            self.dir.try_clone().map_err(self.io("open", path))?
        } else {
            // Missing parents are made (confined like the file itself); a
            // parent that is a link leading out stays an escape.
            match self.dir.open_dir(parent) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.dir
                        .create_dir_all(parent)
                        .map_err(self.io("create the directory of", path))?;
                    self.dir.open_dir(parent)
                }
                other => other,
            }
            .map_err(self.io("open the directory of", path))?
        };
        let tmp = format!(
            ".{}.rollpoint-upload-{}",
            name.to_string_lossy(),
            std::process::id()
        );
        let write = || -> std::io::Result<()> {
            let mut opts = OpenOptions::new();
            opts.write(true).create_new(true);
            let mut file = dir.open_with(&tmp, &opts)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
            }
            // After the chown, which clears setuid and setgid bits.
            file.set_permissions(Permissions::from_std(
                std::os::unix::fs::PermissionsExt::from_mode(mode),
            ))?;
            file.write_all(bytes)?;
            file.sync_all()?;
            dir.rename(&tmp, &dir, name)?;
            // fsync the directory so the rename survives a crash.
            dir.open(".")?.sync_all()
        };
        write().map_err(|e| {
            let _ = dir.remove_file(&tmp);
            self.io("upload", path)(e)
        })
    }

    /// Reads `path` inside the sandbox, refusing files over `limit` bytes.
    pub fn download(&self, path: &Path, limit: u64) -> Result<Vec<u8>, Error> {
        let rel = sandbox_relative(path)?;
        let file = self.dir.open(&rel).map_err(self.io("open", path))?;
        let size = file.metadata().map_err(self.io("stat", path))?.len();
        if size > limit {
            return Err(Error::TooLarge {
                path: path.to_owned(),
                size,
                limit,
            });
        }
        let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // The file may grow after the stat: read at most one byte past the limit.
        file.take(limit.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(self.io("read", path))?;
        if out.len() as u64 > limit {
            return Err(Error::TooLarge {
                path: path.to_owned(),
                size: out.len() as u64,
                limit,
            });
        }
        Ok(out)
    }
}
