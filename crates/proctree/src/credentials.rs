//! The user a spawned child becomes: its ids, their text form on command
//! lines, and the raw calls that set them between fork and exec.

use std::io;

/// The user a child runs as. Its text form, `UID:GID` or
/// `UID:GID:G1,G2,...`, is how the owner tells the anchor and the anchor a
/// launch's supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (none: the list is emptied).
    pub groups: Vec<u32>,
}

impl Credentials {
    /// Parses the text form; `Err` says what is expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{text:?}: expected UID:GID or UID:GID:G1,G2,... (numbers 0 to {})",
                u32::MAX
            )
        };
        let mut parts = text.splitn(3, ':');
        let num = |s: Option<&str>| s.and_then(|s| s.parse::<u32>().ok()).ok_or_else(bad);
        let (uid, gid) = (num(parts.next())?, num(parts.next())?);
        let groups = match parts.next() {
            None | Some("") => Vec::new(),
            Some(list) => list
                .split(',')
                .map(|g| g.parse::<u32>().map_err(|_| bad()))
                .collect::<Result<_, _>>()?,
        };
        Ok(Self { uid, gid, groups })
    }

    /// Sets the supplementary groups, the gid, then the uid (after which
    /// nothing else can be changed). Async-signal-safe: raw system calls on
    /// memory the caller owns.
    pub fn set(&self) -> io::Result<()> {
        let check = |r: libc::c_long| {
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        // SAFETY: setgroups(2) reads `groups.len()` gids from a live slice;
        // setgid(2) and setuid(2) take integers. Raw calls, not the C
        // library's wrappers, which may broadcast to threads the forked
        // child no longer has.
        unsafe {
            check(libc::syscall(
                libc::SYS_setgroups,
                self.groups.len(),
                self.groups.as_ptr(),
            ))?;
            check(libc::syscall(libc::SYS_setgid, self.gid))?;
            check(libc::syscall(libc::SYS_setuid, self.uid))
        }
    }
}

impl std::fmt::Display for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)?;
        for (i, g) in self.groups.iter().enumerate() {
            write!(f, "{}{g}", if i == 0 { ":" } else { "," })?;
        }
        Ok(())
    }
}
