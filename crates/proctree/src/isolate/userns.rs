//! A user namespace with a fixed mapping, held by a descriptor: root inside
//! is an unprivileged range of host ids outside. The namespace is made by a
//! short-lived child (a user namespace lives while a process or a
//! descriptor refers to it), whose maps the caller writes as host root, so
//! `setgroups` stays allowed inside.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;

/// Ids `0..count` inside map to `host..host + count` outside, for users
/// and groups alike. Text form `HOST:COUNT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub host: u32,
    pub count: u32,
}

impl IdRange {
    /// Parses `HOST:COUNT`; `Err` says what is expected.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{text:?}: expected HOST:COUNT (numbers, COUNT 1 or more, HOST + COUNT at most {})",
                u32::MAX
            )
        };
        let (host, count) = text.split_once(':').ok_or_else(bad)?;
        let host: u32 = host.parse().map_err(|_| bad())?;
        let count: u32 = count.parse().map_err(|_| bad())?;
        if count == 0 || host.checked_add(count).is_none() {
            return Err(bad());
        }
        Ok(Self { host, count })
    }

    /// The host id of `inside`, `None` when the range does not hold it.
    pub fn to_host(&self, inside: u32) -> Option<u32> {
        (inside < self.count).then(|| self.host + inside)
    }

    /// The `uid_map`/`gid_map` line.
    fn map_line(&self) -> String {
        format!("0 {} {}\n", self.host, self.count)
    }
}

impl std::fmt::Display for IdRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.count)
    }
}

/// Makes a user namespace mapped by `range` and returns a descriptor of
/// it. The caller must be root in the initial user namespace. Safe to call
/// from a multi-threaded process, from several threads at once: the child,
/// born in the new namespace, makes raw system calls only and waits to be
/// killed. (Not for a pipe's end of file: a child of another thread's call
/// would hold a copy of this one's write end, and each would wait for the
/// other.)
pub fn create(range: IdRange) -> io::Result<OwnedFd> {
    let flags = libc::c_ulong::try_from(libc::CLONE_NEWUSER | libc::SIGCHLD).unwrap_or(0);
    // SAFETY: clone with fork semantics (no CLONE_VM, a null stack: the
    // child runs on its own copy of ours). The child only sleeps until it
    // is killed, without running any of the parent's code.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        loop {
            // SAFETY: pause(2) takes nothing; the parent's SIGKILL ends it.
            unsafe { libc::pause() };
        }
    }
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::other("clone: pid out of range"))?;
    let made = (|| {
        let proc = format!("/proc/{pid}");
        std::fs::write(format!("{proc}/uid_map"), range.map_line())?;
        std::fs::write(format!("{proc}/gid_map"), range.map_line())?;
        File::open(format!("{proc}/ns/user")).map(OwnedFd::from)
    })();
    let mut status = 0;
    // SAFETY: kill(2) and waitpid(2) of the child made above, which is ours
    // to reap.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, &raw mut status, 0);
    }
    made
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn ranges_round_trip_and_refuse_overflow() {
        let r = IdRange::parse("1073741824:65536").expect("parse");
        assert_eq!(r.to_string(), "1073741824:65536");
        assert_eq!(r.to_host(0), Some(1_073_741_824));
        assert_eq!(r.to_host(65535), Some(1_073_741_824 + 65535));
        assert_eq!(r.to_host(65536), None);
        for bad in ["", "1", "a:b", "1:0", "4294967295:2", "-1:5"] {
            let err = IdRange::parse(bad).expect_err(bad);
            assert!(err.contains("HOST:COUNT"), "{bad}: {err}");
        }
    }

    /// Many threads at once: none waits on another's child.
    #[test]
    fn root_namespaces_made_from_many_threads_at_once() {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
        let range = IdRange::parse("1073741824:65536").expect("range");
        let threads: Vec<_> = (0..16)
            .map(|_| std::thread::spawn(move || (0..20).all(|_| create(range).is_ok())))
            .collect();
        for t in threads {
            assert!(t.join().expect("thread"), "every namespace made");
        }
    }

    #[test]
    fn root_a_namespace_maps_its_range() {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
        let range = IdRange::parse("1073741824:65536").expect("range");
        let ns = create(range).expect("user namespace");
        let link = std::fs::read_link(format!("/proc/self/fd/{}", ns.as_raw_fd())).expect("link");
        assert!(link.to_string_lossy().starts_with("user:["), "{link:?}");
        assert_ne!(
            link,
            std::fs::read_link("/proc/self/ns/user").expect("own"),
            "a new namespace, not ours"
        );
    }
}
