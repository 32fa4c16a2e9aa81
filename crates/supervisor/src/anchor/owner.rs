//! The sandbox's owner and what happens when it dies.
//!
//! The owner is the process that started the anchor: its parent. It drives
//! the sandbox and destroys it; when it dies (a crash, a SIGKILL) nobody is
//! left to do either, and the sandbox must stop acting at once. The
//! host-side process holds a pidfd of its parent, polled with its signals;
//! when the owner is gone it freezes the whole sandbox (its v2 cgroup, else
//! its v1 freezer cgroup), confirms the freeze, logs it and stays: the
//! sandbox's processes are kept, frozen, for the next sweep (which kills and
//! removes it) or a debugging look. A sandbox without a cgroup, or whose
//! freeze cannot be confirmed, is ended instead (SIGKILL of its PID 1).
//!
//! Not PR_SET_PDEATHSIG: it fires when the parent *thread* that forked the
//! anchor exits, and the host spawns anchors from short-lived threads. The
//! pidfd reports the death of the whole process; `getppid()` changing (the
//! anchor is re-parented only when that process is gone) is the fallback
//! check and covers a kernel without `pidfd_open`.
//!
//! The cgroup directory is opened before the fork: after PID 1's
//! `pivot_root` the host-side process shares the sandbox's mount namespace
//! and root, where the host's cgroup paths no longer resolve. Before
//! freezing, the host-side process moves itself to the parent cgroup, so it
//! is not frozen with the sandbox and can confirm the freeze and go on
//! reaping PID 1.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{OFlag, open, openat};
use nix::poll::PollTimeout;
use nix::sys::signal::{Signal, kill};
use nix::sys::stat::Mode;
use nix::unistd::{Pid, getpid, getppid};

use crate::args::AnchorOpts;
use crate::errors::Error;

/// How long the kernel may take to confirm a freeze (a task in
/// uninterruptible sleep delays it until its syscall returns).
const CONFIRM: Duration = Duration::from_secs(30);

/// The anchor's parent, watched for its death.
#[derive(Debug)]
pub struct Owner {
    pid: Pid,
    /// None on a kernel without `pidfd_open` (before 5.3): then only
    /// `getppid()` tells, checked on every wakeup.
    fd: Option<OwnedFd>,
}

impl Owner {
    /// Watches the current parent; refuses when it is already gone, or is
    /// not `expected` (the host's `--owner`: without it, a parent that died
    /// before this check would leave the anchor watching whoever adopted
    /// it).
    pub fn watch(expected: Option<i32>) -> Result<Self, Error> {
        let pid = getppid();
        if let Some(owner) = expected.filter(|o| *o != pid.as_raw()) {
            return Err(Error::OwnerGone(owner));
        }
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new
        // descriptor (close-on-exec) or -1; checked before use.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
        let errno = Errno::last();
        // Re-parenting happens only on the owner's death: a parent that
        // died before the pidfd was opened shows here, whatever the pid
        // named by then.
        if getppid() != pid {
            return Err(Error::OwnerGone(pid.as_raw()));
        }
        let fd = match i32::try_from(raw) {
            // SAFETY: a fresh descriptor that nothing else owns.
            Ok(fd) if fd >= 0 => Some(unsafe { OwnedFd::from_raw_fd(fd) }),
            _ if errno == Errno::ENOSYS => None,
            _ => {
                return Err(Error::Sys {
                    what: "open a pidfd of the anchor's owner",
                    source: errno,
                });
            }
        };
        Ok(Self { pid, fd })
    }

    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// A copy of the owner's descriptor `fd`, which must be a namespace of
    /// type `kind` (`CLONE_NEWUSER` for `--owner-userns-fd`, `CLONE_NEWNET`
    /// for `--owner-netns-fd`, the option named in errors). Taken through
    /// the pidfd, so it is this owner's, whatever its pid names by then;
    /// `Err` without a pidfd.
    pub fn namespace(&self, option: &str, fd: i32, kind: libc::c_int) -> Result<OwnedFd, Error> {
        let ns = self.take(option, fd, "take a namespace from the anchor's owner")?;
        // NS_GET_NSTYPE (linux/nsfs.h): the namespace type of an nsfs file.
        const NS_GET_NSTYPE: libc::Ioctl = 0xb703;
        // SAFETY: ioctl(2) on a descriptor we own, no argument.
        let got = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_NSTYPE) };
        if got != kind {
            let name = if kind == libc::CLONE_NEWNET {
                "network"
            } else {
                "user"
            };
            return Err(Error::Refused(format!(
                "{option} {fd}: the owner's descriptor {fd} is not a {name} namespace"
            )));
        }
        Ok(ns)
    }

    /// A copy of the owner's descriptor `fd` (`option` named in errors),
    /// taken through the pidfd, so it is this owner's whatever its pid names
    /// by then; `Err` without a pidfd.
    fn take(&self, option: &str, fd: i32, what: &'static str) -> Result<OwnedFd, Error> {
        let Some(pidfd) = &self.fd else {
            return Err(Error::Refused(format!(
                "{option} {fd}: this kernel has no pidfd to take it with"
            )));
        };
        // SAFETY: pidfd_getfd(2) takes a pidfd, a descriptor number and
        // flags, and returns a new close-on-exec descriptor or -1.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
        let raw = i32::try_from(raw).unwrap_or(-1);
        if raw < 0 {
            return Err(Error::Sys {
                what,
                source: Errno::last(),
            });
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }

    /// A copy of the owner's descriptor `fd` of the sandbox's root
    /// (`--owner-root-fd`): an overlay mount the owner made and attached
    /// nowhere, which the anchor attaches in the sandbox's own mount
    /// namespace. Anything but an overlay is refused.
    pub fn root_mount(&self, fd: i32) -> Result<OwnedFd, Error> {
        const OPTION: &str = "--owner-root-fd";
        let root = self.take(
            OPTION,
            fd,
            "take the sandbox's root from the anchor's owner",
        )?;
        let fs = nix::sys::statfs::fstatfs(&root).map_err(|source| Error::Sys {
            what: "read the filesystem of the sandbox's root",
            source,
        })?;
        if fs.filesystem_type() != nix::sys::statfs::OVERLAYFS_SUPER_MAGIC {
            return Err(Error::Refused(format!(
                "{OPTION} {fd}: the owner's descriptor {fd} is not an overlay"
            )));
        }
        Ok(root)
    }

    /// The pidfd to poll, readable once the owner has exited.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(AsFd::as_fd)
    }

    /// The owner is gone (the anchor was re-parented).
    pub fn gone(&self) -> bool {
        getppid() != self.pid
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    V2,
    V1,
}

/// The sandbox's freezer cgroup, opened on the host's view.
#[derive(Debug)]
pub struct Freezer {
    kind: Kind,
    /// The host path, for messages only: it may not resolve any more.
    path: PathBuf,
    dir: OwnedFd,
    /// The parent cgroup's `cgroup.procs`, where the host-side process goes
    /// before freezing.
    parent_procs: Option<File>,
}

impl Freezer {
    /// Opens the cgroup the sandbox is frozen with: the v2 one when the
    /// sandbox has it (a sweep's `cgroup.kill` ends frozen v2 tasks), else
    /// the v1 freezer; None without either. Call before the fork.
    pub fn open(opts: &AnchorOpts) -> Result<Option<Self>, Error> {
        let (kind, path) = match (&opts.cgroup_v2, &opts.cgroup_freezer) {
            (Some(p), _) => (Kind::V2, p),
            (None, Some(p)) => (Kind::V1, p),
            (None, None) => return Ok(None),
        };
        let dir = open(
            path.as_path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|source| Error::Setup {
            what: "open the sandbox's cgroup",
            path: path.clone(),
            source,
        })?;
        let parent_procs = path.parent().and_then(|p| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p.join("cgroup.procs"))
                .ok()
        });
        Ok(Some(Self {
            kind,
            path: path.clone(),
            dir,
            parent_procs,
        }))
    }

    pub fn describe(&self) -> String {
        match self.kind {
            Kind::V2 => format!("cgroup {} (cgroup.freeze)", self.path.display()),
            Kind::V1 => format!("v1 freezer cgroup {} (freezer.state)", self.path.display()),
        }
    }

    fn file(&self, name: &str, write: bool) -> Result<File, String> {
        let flags = if write {
            OFlag::O_WRONLY
        } else {
            OFlag::O_RDONLY
        } | OFlag::O_CLOEXEC;
        openat(&self.dir, name, flags, Mode::empty())
            .map(File::from)
            .map_err(|e| format!("open {}: {e}", self.path.join(name).display()))
    }

    fn write(&self, name: &str, value: &str) -> Result<(), String> {
        self.file(name, true)?
            .write_all(value.as_bytes())
            .map_err(|e| format!("write {value} to {}: {e}", self.path.join(name).display()))
    }

    fn read(&self, name: &str) -> Result<String, String> {
        let mut text = String::new();
        self.file(name, false)?
            .read_to_string(&mut text)
            .map_err(|e| format!("read {}: {e}", self.path.join(name).display()))?;
        Ok(text)
    }

    /// Moves the calling process out of the sandbox's cgroup into its
    /// parent, so freezing the sandbox does not freeze it.
    pub fn leave(&self) -> Result<(), String> {
        let mut procs = self
            .parent_procs
            .as_ref()
            .ok_or_else(|| format!("no parent cgroup of {} opened", self.path.display()))?;
        procs
            .write_all(getpid().to_string().as_bytes())
            .map_err(|e| format!("move to the parent of {}: {e}", self.path.display()))
    }

    /// The kernel reports every process of the sandbox frozen.
    fn frozen(&self) -> Result<bool, String> {
        Ok(match self.kind {
            Kind::V2 => self
                .read("cgroup.events")?
                .lines()
                .any(|l| l.trim() == "frozen 1"),
            Kind::V1 => self.read("freezer.state")?.trim() == "FROZEN",
        })
    }

    /// Asks the kernel to freeze every process of the sandbox; [`Self::frozen`]
    /// confirms it.
    fn start(&self) -> Result<(), String> {
        match self.kind {
            Kind::V2 => self.write("cgroup.freeze", "1"),
            Kind::V1 => self.write("freezer.state", "FROZEN"),
        }
    }

    /// Ends the sandbox: SIGKILL to PID 1 takes its whole pid namespace.
    /// Frozen v2 tasks die of SIGKILL; frozen v1 tasks only once thawed, so
    /// the v1 freezer is thawed after the signal is queued (a thawed task
    /// dies on its way back to user space).
    pub fn end(&self, pid1: Pid) -> Result<(), String> {
        kill(pid1, Signal::SIGKILL).map_err(|e| format!("kill the sandbox's PID 1: {e}"))?;
        if self.kind == Kind::V1 {
            self.write("freezer.state", "THAWED")?;
        }
        Ok(())
    }
}

/// The sandbox the host-side process watches over.
#[derive(Debug, Clone, Copy)]
pub struct Sandbox<'a> {
    pub hostname: &'a str,
    pub pid1: Pid,
    pub freezer: Option<&'a Freezer>,
}

impl Sandbox<'_> {
    /// One line in the anchor's log (its stderr).
    fn log(&self, message: &str) {
        eprintln!(
            "rollpoint-supervisor: anchor of {}: {message}",
            self.hostname
        );
    }

    /// Ends the sandbox: SIGKILL to PID 1 takes its whole pid namespace
    /// (thawing a v1 freezer after it, see [`Freezer::end`]).
    pub fn end(&self, why: &str) -> Watch {
        self.log(&format!("{why}: ending the sandbox"));
        let ended = match self.freezer {
            Some(f) => f.end(self.pid1),
            None => kill(self.pid1, Signal::SIGKILL)
                .map_err(|e| format!("kill the sandbox's PID 1: {e}")),
        };
        if let Err(e) = ended {
            self.log(&format!("failed to end the sandbox: {e}"));
        }
        Watch::Ended
    }
}

/// Where the host-side process stands with the owner. Every step is
/// logged, and none blocks: the process goes on reaping PID 1 and reading
/// its signals meanwhile (a sweep may kill the sandbox at any moment).
#[derive(Debug)]
pub enum Watch {
    /// The owner lives.
    Owned(Owner),
    /// The owner is gone and the freeze was asked for at this instant; the
    /// kernel has not confirmed it yet.
    Freezing(Instant),
    /// The sandbox is frozen and stays so.
    Frozen,
    /// The sandbox is being ended, or nothing more can be done.
    Ended,
}

impl Watch {
    /// The pidfd to poll, while the owner lives.
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Self::Owned(o) => o.fd(),
            _ => None,
        }
    }

    /// How long the next poll may wait.
    pub fn timeout(&self) -> PollTimeout {
        match self {
            // Without a pidfd only getppid() tells.
            Self::Owned(o) if o.fd().is_none() => PollTimeout::from(100u16),
            Self::Freezing(_) => PollTimeout::from(10u16),
            _ => PollTimeout::NONE,
        }
    }

    /// The sandbox is frozen or being frozen: a forwarded SIGTERM could not
    /// be acted on.
    pub fn holds_frozen(&self) -> bool {
        matches!(self, Self::Freezing(_) | Self::Frozen)
    }

    /// After every wakeup; `ready` is whether the pidfd polled readable.
    pub fn step(self, ready: bool, sandbox: &Sandbox<'_>) -> Self {
        match self {
            Self::Owned(o) if ready || o.gone() => orphaned(o.pid(), sandbox),
            Self::Freezing(since) => confirm(since, sandbox),
            other => other,
        }
    }
}

/// The owner is gone: freeze the sandbox (or end it when it cannot be).
fn orphaned(owner: Pid, sandbox: &Sandbox<'_>) -> Watch {
    let Some(freezer) = sandbox.freezer else {
        return sandbox.end(&format!(
            "its owner (pid {owner}) is gone and it has no cgroup to freeze"
        ));
    };
    sandbox.log(&format!(
        "its owner (pid {owner}) is gone: freezing the sandbox, {}",
        freezer.describe()
    ));
    let inside = freezer.leave().err();
    if let Some(e) = &inside {
        // Frozen with the sandbox, this process cannot confirm anything,
        // but the sandbox stops all the same.
        sandbox.log(&format!(
            "cannot leave the sandbox's cgroup ({e}): freezing it with the anchor inside, \
             unconfirmed"
        ));
    }
    match freezer.start() {
        Err(e) => sandbox.end(&format!("cannot freeze the sandbox ({e})")),
        Ok(()) if inside.is_some() => Watch::Frozen,
        Ok(()) => confirm(Instant::now(), sandbox),
    }
}

fn confirm(since: Instant, sandbox: &Sandbox<'_>) -> Watch {
    let Some(freezer) = sandbox.freezer else {
        return Watch::Ended;
    };
    match freezer.frozen() {
        Ok(true) => {
            sandbox.log(&format!(
                "sandbox frozen (confirmed after {:?}); it stays frozen, its processes kept, \
                 until it is swept or the anchor is sent SIGTERM",
                since.elapsed()
            ));
            Watch::Frozen
        }
        Ok(false) if since.elapsed() < CONFIRM => Watch::Freezing(since),
        Ok(false) => sandbox.end(&format!(
            "cannot freeze the sandbox ({} did not confirm within {}s)",
            freezer.describe(),
            CONFIRM.as_secs()
        )),
        Err(e) => sandbox.end(&format!("cannot confirm the freeze ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn opts(v2: Option<&Path>, v1: Option<&Path>) -> AnchorOpts {
        AnchorOpts {
            root: PathBuf::from("/"),
            control: PathBuf::from("/"),
            hostname: "h".into(),
            cgroup_v2: v2.map(Path::to_owned),
            cgroup_freezer: v1.map(Path::to_owned),
            net: crate::net_opts::NetOpts::default(),
            owner: None,
            tools: Vec::new(),
            user: None,
            userns: None,
            owner_userns_fd: None,
            owner_netns_fd: None,
            owner_root_fd: None,
            lend: Vec::new(),
            drop_caps: 0,
            no_new_privs: false,
            home: "/root".into(),
            enter: false,
            join: Vec::new(),
        }
    }

    #[test]
    fn v2_is_preferred_and_a_missing_cgroup_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("v2"), dir.path().join("v1"));
        std::fs::create_dir(&a).expect("v2");
        std::fs::create_dir(&b).expect("v1");
        let f = Freezer::open(&opts(Some(&a), Some(&b)))
            .expect("opens")
            .expect("a freezer");
        assert_eq!((f.kind, f.path.as_path()), (Kind::V2, a.as_path()));
        let f = Freezer::open(&opts(None, Some(&b)))
            .expect("opens")
            .expect("a freezer");
        assert_eq!(f.kind, Kind::V1);
        assert!(Freezer::open(&opts(None, None)).expect("opens").is_none());
        let missing = dir.path().join("missing");
        let err = Freezer::open(&opts(Some(&missing), None)).expect_err("missing");
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn freezing_writes_and_confirms_through_the_open_directory() {
        // A plain directory standing in for a v2 cgroup, renamed after it
        // was opened: every later access goes through the descriptor.
        let dir = tempfile::tempdir().expect("tempdir");
        let cg = dir.path().join("cg");
        std::fs::create_dir(&cg).expect("cg");
        std::fs::write(cg.join("cgroup.freeze"), "0").expect("freeze file");
        std::fs::write(cg.join("cgroup.events"), "populated 1\nfrozen 1\n").expect("events");
        std::fs::write(dir.path().join("cgroup.procs"), "").expect("parent procs");
        let f = Freezer::open(&opts(Some(&cg), None))
            .expect("opens")
            .expect("a freezer");
        std::fs::rename(&cg, dir.path().join("moved")).expect("rename");
        f.start().expect("written");
        assert_eq!(f.frozen(), Ok(true));
        let written = std::fs::read_to_string(dir.path().join("moved/cgroup.freeze"));
        assert_eq!(written.expect("written"), "1");
        f.leave().expect("leaves");
        let procs = std::fs::read_to_string(dir.path().join("cgroup.procs")).expect("procs");
        assert_eq!(procs, std::process::id().to_string());
    }

    #[test]
    fn the_owner_is_the_parent_and_alive() {
        let err = Owner::watch(Some(1)).expect_err("init is not the parent");
        assert!(err.to_string().contains("pid 1"), "{err}");
        let owner = Owner::watch(Some(getppid().as_raw())).expect("the test runner is alive");
        assert_eq!(owner.pid(), getppid());
        assert!(!owner.gone());
        let fd = owner.fd().expect("a pidfd on this kernel");
        let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        let n = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).expect("poll");
        assert_eq!(n, 0, "a live owner's pidfd is not readable");
    }
}
