//! Process identity and race-free signalling.
//!
//! A pid alone can be reused between a scan and a signal (pid_max is 32768
//! on some machines, and a churning tree burns through pids quickly). A
//! [`ProcId`] pairs the pid with its start time; signals go through a pidfd
//! opened *before* the start time is re-read, so a match proves the pidfd
//! refers to the process that was scanned.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, AsRawFd};

use crate::scan;

/// A process: pid plus start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcId {
    pub pid: u32,
    pub start_time: u64,
}

/// What happened to a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Delivered to the identified process.
    Delivered,
    /// The process is gone (or its pid now names another process).
    Gone,
}

impl ProcId {
    /// The identity of `pid` now, if it exists.
    pub fn of(pid: u32) -> Option<Self> {
        scan::read_stat(pid).map(|s| Self {
            pid,
            start_time: s.start_time,
        })
    }

    /// Whether the identified process still exists (zombies count).
    pub fn exists(&self) -> bool {
        scan::read_stat(self.pid).is_some_and(|s| s.start_time == self.start_time)
    }

    /// Sends `sig` to this process and no other.
    pub fn signal(&self, sig: i32) -> io::Result<Sent> {
        let Ok(pid) = libc::pid_t::try_from(self.pid) else {
            return Ok(Sent::Gone);
        };
        let fd = match pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(Sent::Gone),
            Err(e) => return Err(e),
        };
        if !self.exists() {
            return Ok(Sent::Gone);
        }
        match pidfd_send_signal(&fd, sig) {
            Ok(()) => Ok(Sent::Delivered),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(Sent::Gone),
            Err(e) => Err(e),
        }
    }
}

fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1;
    // no memory is passed.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let raw = i32::try_from(ret).map_err(|_| io::Error::other("pidfd out of range"))?;
    // SAFETY: `raw` is a freshly opened fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn pidfd_send_signal(fd: &OwnedFd, sig: i32) -> io::Result<()> {
    // SAFETY: a null siginfo is allowed and means "as kill(2) would send";
    // the fd is valid for the duration of the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_the_identified_process_only() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let id = ProcId::of(child.id()).expect("child exists");
        let stale = ProcId {
            start_time: id.start_time + 1,
            ..id
        };
        assert_eq!(stale.signal(libc::SIGKILL).expect("signal"), Sent::Gone);
        assert!(id.exists(), "a stale identity must not hit the live process");
        assert_eq!(id.signal(libc::SIGKILL).expect("signal"), Sent::Delivered);
        child.wait().expect("wait");
        assert!(!id.exists());
        assert_eq!(id.signal(libc::SIGKILL).expect("signal"), Sent::Gone);
    }
}
