//! The one owner of `waitpid` in the sandbox.
//!
//! As PID 1 the anchor inherits every orphan of the sandbox and must reap
//! them all. One thread calls `waitpid(-1)`; a process the anchor started
//! itself is registered in a table with a channel, and its exit status goes
//! there; any other status (an orphan's) is dropped.
//!
//! Spawning and inserting into the table happen under one lock, and the
//! reaper reaps only while holding it. That closes two races: a child that
//! exits before it is registered, and std's own `waitpid` on a child whose
//! exec failed (std reaps that child inside `Command::spawn`; with the
//! reaper shut out meanwhile it cannot steal the status, so spawn reports
//! the exec error instead of panicking).

use std::collections::HashMap;
use std::process::{Child, Command};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::os::fd::AsFd;

use crate::errors::Error;

/// How a process the anchor started ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Code(c) => write!(f, "exit code {c}"),
            Self::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

#[derive(Debug, Default)]
pub struct Reaper {
    waiters: Mutex<HashMap<i32, Sender<Exit>>>,
}

impl Reaper {
    /// The SIGCHLD signalfd; SIGCHLD must already be blocked in every thread.
    pub fn signals() -> Result<SignalFd, Error> {
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGCHLD);
        SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK).map_err(
            |source| Error::Sys {
                what: "create the SIGCHLD signalfd",
                source,
            },
        )
    }

    /// Spawns `cmd` and registers it; its exit arrives on the receiver.
    /// Never wait on the returned `Child`: only drop it.
    pub fn spawn(&self, cmd: &mut Command) -> std::io::Result<(Child, Receiver<Exit>)> {
        let mut waiters = self
            .waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let child = cmd.spawn()?;
        let (tx, rx) = channel();
        waiters.insert(i32::try_from(child.id()).unwrap_or(i32::MAX), tx);
        Ok((child, rx))
    }

    /// Reaps forever: on SIGCHLD, and every second in case a wakeup was
    /// coalesced away.
    pub fn run(&self, signals: &SignalFd) {
        loop {
            let mut fds = [PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(1000u16)) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => eprintln!("rollpoint-supervisor: anchor reaper: poll: {e}"),
            }
            while let Ok(Some(_)) = signals.read_signal() {}
            self.reap();
        }
    }

    /// Collects every status available now.
    fn reap(&self) {
        let mut waiters = self
            .waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            let (pid, exit) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, Exit::Code(code)),
                Ok(WaitStatus::Signaled(pid, sig, _)) => (pid, Exit::Signal(sig as i32)),
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(e) => {
                    eprintln!("rollpoint-supervisor: anchor reaper: waitpid: {e}");
                    return;
                }
            };
            if let Some(tx) = waiters.remove(&pid.as_raw()) {
                // The waiter may have given up (a timed-out exec): fine.
                let _ = tx.send(exit);
            }
        }
    }
}
