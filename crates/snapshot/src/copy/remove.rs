//! Removing an upper area by descriptor, as the walk reads one: an upper
//! a sandbox filled can hold a chain deeper than PATH_MAX, and a removal
//! that holds a descriptor (and a stack frame) per level, as
//! `std::fs::remove_dir_all` does, runs out of either first.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{SFlag, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::errors::Error;

use super::dirs::{DirStack, list, open_dir_at};

/// Removes the tree at `path` (a file or a directory); a missing one is
/// not an error.
pub(super) fn remove_tree(path: &Path) -> Result<(), Error> {
    let root = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW).bits())
        .open(path)
    {
        Ok(root) => root,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e)
            if e.raw_os_error() == Some(Errno::ENOTDIR as i32)
                || e.raw_os_error() == Some(Errno::ELOOP as i32) =>
        {
            return std::fs::remove_file(path).map_err(Error::io("remove", path));
        }
        Err(e) => return Err(Error::io("open", path)(e)),
    };
    let mut stack: DirStack<std::vec::IntoIter<Vec<u8>>> = DirStack::new(path);
    let names = list(&root, path)?;
    stack.push(b"", root, names.into_iter())?;
    while let Some(names) = stack.top_mut() {
        let next = names.next();
        let dir = stack
            .top_fd()
            .ok_or_else(|| Error::io("remove", path)(Errno::EBADF.into()))?;
        match next {
            Some(name) => {
                let rel = stack.child_path(&name);
                let walk = |op| {
                    let shown = stack.shown(&rel);
                    move |source| Error::Walk {
                        op,
                        path: shown,
                        source,
                    }
                };
                let stat = fstatat(dir, name.as_slice(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .map_err(walk("stat"))?;
                if stat.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits() {
                    let fd = open_dir_at(dir, &name).map_err(walk("open"))?;
                    let names = list(&fd, &stack.shown(&rel))?;
                    stack.push(&name, fd, names.into_iter())?;
                } else {
                    unlinkat(dir, name.as_slice(), UnlinkatFlags::NoRemoveDir)
                        .map_err(walk("remove"))?;
                }
            }
            None => {
                let Some((fd, rel, _)) = stack.pop()? else {
                    break;
                };
                drop::<File>(fd);
                let name = rel.rsplit(|&b| b == b'/').next().unwrap_or_default();
                match stack.top_fd() {
                    Some(parent) => {
                        unlinkat(parent, OsStr::from_bytes(name), UnlinkatFlags::RemoveDir)
                            .map_err(|source| Error::Walk {
                                op: "remove",
                                path: stack.shown(&rel),
                                source,
                            })?
                    }
                    None => break,
                }
            }
        }
    }
    std::fs::remove_dir(path).map_err(Error::io("remove", path))
}
