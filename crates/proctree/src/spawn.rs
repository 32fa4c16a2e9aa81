//! Between fork and exec: the one hook every spawner installs on a
//! [`Command`], so every child starts from the same state.
//!
//! - [`reset_signals`]: every disposition back to `SIG_DFL` and an empty
//!   mask. A child inherits ignored signals and the mask from the forking
//!   thread (std's fork path keeps both; exec resets only caught ones), and
//!   the supervisor and the anchor block what they read from a signalfd.
//! - [`join_cgroups`]: write `0` to `cgroup.procs` descriptors opened before
//!   the fork, so the child is in its cgroups before its first instruction.
//! - [`Credentials::set`]: become a sandbox's user (groups, gid, uid), last,
//!   so the steps before it still run as root (the type lives in
//!   `credentials`, shared with `isolate`).
//!
//! - [`Isolation::enter`]: in a strict sandbox, instead of the plain
//!   credentials: its user namespace, capabilities, `no_new_privs` and
//!   seccomp filter, the user's ids set inside the namespace.
//! - [`PreExec::pass`]: a descriptor kept open across exec at a fixed
//!   number (the user namespace handed to a launch's supervisor).
//!
//! [`PreExec`] installs those, in that order. Each runs in the forked
//! child of a possibly multi-threaded parent, so each is async-signal-safe:
//! raw libc calls on memory of its own, no allocation, no lock.
//!
//! [`reset_signals`], [`join_cgroups`] and [`unshare`] (enter new
//! namespaces, `CLONE_NEW*` flags) also serve a process that does these
//! steps itself, first thing, as the anchor does with `--enter`.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;

pub use crate::credentials::Credentials;
use crate::isolate::Isolation;

/// One past the highest signal number on Linux (`_NSIG`).
const NSIG: libc::c_int = 65;

/// The kernel's sigset size for `rt_sigaction` (`_NSIG / 8`).
const KERNEL_SIGSET_BYTES: usize = 8;

/// Sets every signal a parent may have changed (1 to 64 but SIGKILL and
/// SIGSTOP, SIGCHLD included) to `SIG_DFL`, then empties the mask. All
/// signals stay blocked while the dispositions change, so none reaches a
/// handler inherited from the parent. Async-signal-safe.
///
/// The dispositions go through `rt_sigaction(2)` directly: the C library
/// refuses to touch the signals it keeps for itself (32 to 34), and glibc's
/// `posix_spawn` leaves those ignored in its children, which exec keeps.
pub fn reset_signals() -> io::Result<()> {
    // All zero is `SIG_DFL`, no flags and an empty mask in the kernel's
    // `struct sigaction` of every layout.
    let default = [0u64; 4];
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset and sigemptyset initialise the set they are given;
    // sigprocmask reads it once initialised and takes a null old set;
    // rt_sigaction reads an action no larger than `default` and takes a null
    // old action. All are async-signal-safe system calls.
    unsafe {
        libc::sigfillset(set.as_mut_ptr());
        if libc::sigprocmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        for sig in 1..NSIG {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    default.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    KERNEL_SIGSET_BYTES,
                );
            }
        }
        libc::sigemptyset(set.as_mut_ptr());
        if libc::sigprocmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Moves the calling process into every cgroup whose `cgroup.procs` is
/// open for writing in `procs`. Async-signal-safe.
pub fn join_cgroups<F: AsFd>(procs: &[F]) -> io::Result<()> {
    for file in procs {
        let fd = file.as_fd().as_raw_fd();
        // SAFETY: write(2) reads one byte of a static string from a
        // descriptor the caller keeps open.
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Enters new namespaces (`libc::CLONE_NEW*` flags); nothing when `flags`
/// is 0. Async-signal-safe.
pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare(2) takes an integer and touches no memory of ours.
    if flags != 0 && unsafe { libc::unshare(flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What a child does between fork and exec: [`reset_signals`], then
/// [`join_cgroups`], then its [`Credentials`] (inside its [`Isolation`]
/// when it has one), then the descriptors it is passed.
///
/// ```no_run
/// # use rollpoint_proctree::spawn::PreExec;
/// let mut cmd = std::process::Command::new("true");
/// PreExec::new().install(&mut cmd);
/// cmd.spawn()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct PreExec {
    join: Vec<OwnedFd>,
    credentials: Option<Credentials>,
    isolation: Option<Arc<Isolation>>,
    pass: Vec<(OwnedFd, RawFd)>,
    terminal: Option<OwnedFd>,
}

impl PreExec {
    /// Resets signals only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also joins the cgroup of `procs`, its `cgroup.procs` opened for
    /// writing. The descriptor lives as long as the command.
    pub fn join(mut self, procs: impl Into<OwnedFd>) -> Self {
        self.join.push(procs.into());
        self
    }

    /// Also joins every cgroup of `procs`.
    pub fn join_all(self, procs: impl IntoIterator<Item = File>) -> Self {
        procs.into_iter().fold(self, Self::join)
    }

    /// Also becomes `credentials` (nothing when `None`), last.
    pub fn credentials(mut self, credentials: Option<Credentials>) -> Self {
        self.credentials = credentials;
        self
    }

    /// Also confines the child ([`Isolation::enter`], with the
    /// credentials) when `isolation` is given; the credentials alone
    /// otherwise.
    pub fn isolate(mut self, isolation: Option<Arc<Isolation>>) -> Self {
        self.isolation = isolation;
        self
    }

    /// Also leaves `fd` open in the child as descriptor `at` (without
    /// close-on-exec), as the last step.
    pub fn pass(mut self, fd: OwnedFd, at: RawFd) -> Self {
        self.pass.push((fd, at));
        self
    }

    /// Also makes the child, first, the leader of a new session whose
    /// controlling terminal is `tty` (a pseudo-terminal's follower end), as a
    /// login shell's is. The command must not ask for a process group of its
    /// own: a group leader cannot start a session.
    pub fn terminal(mut self, tty: OwnedFd) -> Self {
        self.terminal = Some(tty);
        self
    }

    /// Installs the hook on `cmd` (std then forks rather than using
    /// `posix_spawn`).
    pub fn install(self, cmd: &mut Command) {
        let Self {
            join,
            credentials,
            isolation,
            pass,
            terminal,
        } = self;
        // SAFETY: the closure runs in the forked child before exec and calls
        // only the functions above and dup2/fcntl, which are
        // async-signal-safe and do not allocate; the descriptors and the
        // isolation it uses are owned by the closure, so they stay alive for
        // as long as `cmd` can spawn.
        unsafe {
            cmd.pre_exec(move || {
                reset_signals()?;
                if let Some(tty) = &terminal {
                    take_terminal(tty.as_raw_fd())?;
                }
                join_cgroups(&join)?;
                match (&isolation, &credentials) {
                    (Some(iso), creds) => iso.enter(creds.as_ref())?,
                    (None, Some(c)) => c.set()?,
                    (None, None) => {}
                }
                // Last: a descriptor moved to `at` may replace one the
                // steps above still used.
                for (fd, at) in &pass {
                    pass_fd(fd.as_raw_fd(), *at)?;
                }
                Ok(())
            });
        }
    }
}

/// A new session with `tty` as its controlling terminal. Async-signal-safe.
fn take_terminal(tty: RawFd) -> io::Result<()> {
    // SAFETY: setsid(2) and ioctl(2) TIOCSCTTY on a descriptor number, with
    // no memory passed.
    let r = unsafe {
        if libc::setsid() < 0 {
            -1
        } else {
            libc::ioctl(tty, libc::TIOCSCTTY, 0)
        }
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `fd` available as `at` across exec. Async-signal-safe.
fn pass_fd(fd: RawFd, at: RawFd) -> io::Result<()> {
    // SAFETY: dup2(2) and fcntl(2) on descriptor numbers; dup2 onto
    // itself keeps close-on-exec, so that case clears the flag instead.
    let r = unsafe {
        if fd == at {
            libc::fcntl(fd, libc::F_SETFD, 0)
        } else {
            libc::dup2(fd, at)
        }
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use std::io::{Read, Seek};

    #[test]
    fn join_cgroups_writes_one_zero_to_each_descriptor() {
        let mut files = [tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap()];
        join_cgroups(&files).unwrap();
        for file in &mut files {
            let mut text = String::new();
            file.rewind().unwrap();
            file.read_to_string(&mut text).unwrap();
            assert_eq!(text, "0");
        }
    }

    #[test]
    fn a_failed_join_fails_the_spawn() {
        // Read-only: the write in the child fails, and so does spawn.
        let procs = File::open("/proc/self/status").unwrap();
        let mut cmd = Command::new("true");
        PreExec::new().join(procs).install(&mut cmd);
        assert!(cmd.spawn().is_err());
    }

    #[test]
    fn unshare_of_nothing_is_a_no_op() {
        unshare(0).unwrap();
    }

    /// A child spawned through the hook sits in the cgroup it joined.
    #[test]
    fn root_spawned_child_is_in_the_cgroup_it_joined() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(euid, 0, "this test needs root (cgroups); run it as root");
        let root = crate::cgroup::v2_root()
            .or_else(crate::cgroup::v1_freezer_root)
            .expect("a cgroup v2 or v1 freezer hierarchy");
        let name = format!("spawn-test-{}", std::process::id());
        let dir = crate::cgroup::create(&root, &name).unwrap();
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .unwrap();
        let mut cmd = Command::new("cat");
        cmd.arg("/proc/self/cgroup");
        PreExec::new().join(procs).install(&mut cmd);
        let out = cmd.output();
        crate::cgroup::remove(&dir).unwrap();
        let out = out.unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let wanted = format!("/rollpoint/{name}");
        assert!(
            text.lines().any(|l| l.ends_with(&wanted)),
            "{wanted} not in /proc/self/cgroup of the child:\n{text}"
        );
    }

    #[test]
    fn credentials_text_round_trips_and_names_what_it_expects() {
        for text in [
            "0:0",
            "1000:1000",
            "1000:100:10,999",
            &format!("{}:1", u32::MAX),
        ] {
            let c = Credentials::parse(text).unwrap();
            assert_eq!(c.to_string(), *text);
        }
        assert_eq!(
            Credentials::parse("5:6:").unwrap().groups,
            Vec::<u32>::new()
        );
        for bad in ["", "1", "a:b", "1:2:x", "-1:0", "1:4294967296", "1:2:3,"] {
            let err = Credentials::parse(bad).unwrap_err();
            assert!(err.contains("expected UID:GID"), "{bad}: {err}");
        }
    }

    /// A child spawned with credentials has exactly those ids, and joins
    /// its cgroup first (which a non-root process could not).
    #[test]
    fn root_child_runs_with_the_credentials_it_was_given() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(euid, 0, "this test needs root (setuid); run it as root");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "id -u; id -g; id -G"]);
        let creds = Credentials::parse("4242:4343:10,4444").unwrap();
        PreExec::new().credentials(Some(creds)).install(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..2], ["4242", "4343"], "{text}");
        let mut groups: Vec<&str> = lines[2].split(' ').collect();
        groups.sort_unstable();
        assert_eq!(groups, ["10", "4343", "4444"], "{text}");
    }

    fn isolated_output(user: Option<Credentials>, dropped: u64, script: &str) -> String {
        isolated_output_nnp(user, dropped, false, script)
    }

    fn isolated_output_nnp(
        user: Option<Credentials>,
        dropped: u64,
        no_new_privs: bool,
        script: &str,
    ) -> String {
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root");
        let range = crate::isolate::IdRange::parse("1073741824:65536").unwrap();
        let ns = crate::isolate::userns::create(range).unwrap();
        let iso = Arc::new(Isolation::new(ns, dropped, no_new_privs).unwrap());
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        PreExec::new()
            .credentials(user)
            .isolate(Some(iso))
            .install(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Root of an isolated child is root only of its namespace: the host
    /// sees the range's first id, it keeps Docker's capabilities, and the
    /// filter is on (without `no_new_privs`, as Docker's default); it
    /// cannot make a namespace.
    #[test]
    fn root_isolated_child_is_confined() {
        let text = isolated_output(
            None,
            0,
            "id -u; grep -E '^(CapEff|CapBnd|Seccomp|NoNewPrivs):' /proc/self/status; \
             cat /proc/self/uid_map; cat /proc/self/cgroup; \
             unshare -U true 2>/dev/null && echo unshared || echo refused",
        );
        let kept = format!("{:016x}", crate::isolate::kept_mask());
        assert!(text.starts_with("0\n"), "{text}");
        assert!(text.contains(&format!("CapEff:\t{kept}")), "{text}");
        assert!(text.contains(&format!("CapBnd:\t{kept}")), "{text}");
        assert!(text.contains("Seccomp:\t2"), "{text}");
        assert!(text.contains("NoNewPrivs:\t0"), "{text}");
        assert!(text.contains("1073741824"), "{text}");
        assert!(
            text.lines().any(|l| l == "0::/"),
            "its cgroup is the root of its cgroup namespace: {text}"
        );
        assert!(text.trim_end().ends_with("refused"), "{text}");
    }

    /// A task that drops capabilities keeps the rest; one it cannot have
    /// cannot be named.
    #[test]
    fn root_an_isolated_child_drops_what_it_is_told() {
        let dropped = crate::isolate::drop_mask(&["net_raw", "CAP_MKNOD"]).unwrap();
        let text = isolated_output(None, dropped, "grep -E '^Cap(Eff|Bnd):' /proc/self/status");
        let want = format!("{:016x}", crate::isolate::kept_mask() & !dropped);
        assert_eq!(text, format!("CapEff:\t{want}\nCapBnd:\t{want}\n"));
        for bad in ["SYS_ADMIN", "NOPE"] {
            let err = crate::isolate::drop_mask(&[bad]).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    /// Asked for, `no_new_privs` is on, under the same filter and
    /// capabilities.
    #[test]
    fn root_an_isolated_child_sets_no_new_privs_when_asked() {
        let text = isolated_output_nnp(
            None,
            0,
            true,
            "grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status",
        );
        let kept = format!("{:016x}", crate::isolate::kept_mask());
        assert_eq!(
            text,
            format!("CapEff:\t{kept}\nNoNewPrivs:\t1\nSeccomp:\t2\n")
        );
    }

    /// Another user in the namespace has no capability at all.
    #[test]
    fn root_isolated_user_has_no_capabilities() {
        let user = Credentials::parse("1000:1000:27").unwrap();
        let text = isolated_output(Some(user), 0, "id -u; id -G; grep CapEff /proc/self/status");
        assert!(text.starts_with("1000\n"), "{text}");
        assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    }
}
