//! `run`: start the harness and own its process tree until nothing is left.
//!
//! Order of events, and why:
//! 1. SIGCHLD, SIGTERM, SIGINT and SIGHUP are blocked before any thread or
//!    child exists and read from a signalfd, so no signal is lost and no
//!    handler runs at an awkward moment. The harness gets an empty mask and
//!    default dispositions back before it execs.
//! 2. The supervisor becomes a child subreaper (read back to confirm), so
//!    everything the harness orphans is reparented here and reaped here. This
//!    thread is the only one that calls `waitpid`.
//! 3. A stop file means the launch never starts; a pause file holds it.
//! 4. The harness gets its own process group, the launch tag in its
//!    environment, and joins the launch cgroups before it execs.
//! 5. When the harness is reaped, the record gets `ended` and the exit code
//!    first; then a cleanup thread stops whatever it left while this thread
//!    keeps reaping; then the supervisor exits with the harness's code.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use rollpoint_proctree::isolate::Isolation;
use rollpoint_proctree::spawn::PreExec;
use rollpoint_proctree::{Freezer, Launch, MemberSpec, ProcId, cgroup};
use rollpoint_proto::clock::unix_ms;
use rollpoint_proto::launch::{Ended, LAUNCH_TAG_VAR, LaunchPhase};
use rollpoint_proto::receipt::Op;
use rollpoint_proto::session::NEVER_STARTED_EXIT;
use rollpoint_proto::supervisor::{SUPERVISOR_SOCKET, Verb};

use crate::args::RunOpts;
use crate::errors::Error;
use crate::server::Shared;
use crate::session::Session;

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> Error {
    move |source| Error::Sys { what, source }
}

pub fn run(opts: RunOpts) -> Result<i32, Error> {
    let mut mask = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
    ] {
        mask.add(s);
    }
    mask.thread_block().map_err(sys("block signals"))?;
    let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys("create signalfd"))?;
    prctl::set_child_subreaper(true).map_err(sys("become a child subreaper"))?;
    if !prctl::get_child_subreaper().map_err(sys("read the subreaper flag"))? {
        return Err(Error::SubreaperNotSet);
    }

    let session = Session::create(&opts.session, &opts.launch_id, &opts.argv)?;
    let shared = Arc::new(Shared::new(session));
    let socket_path = opts.session.join(SUPERVISOR_SOCKET);
    let _ = std::fs::remove_file(&socket_path);
    let listener = UnixListener::bind(&socket_path).map_err(|source| Error::Socket {
        path: socket_path.clone(),
        source,
    })?;
    std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o600)).map_err(
        |source| Error::Socket {
            path: socket_path.clone(),
            source,
        },
    )?;
    {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("control".into())
            .spawn(move || shared.serve(listener))
            .map_err(|source| Error::Socket {
                path: socket_path.clone(),
                source,
            })?;
    }

    hold(&shared, &signals);
    let code = supervise(&opts, &shared, &signals)?;
    shared.drain_requests(Duration::from_secs(5));
    let _ = std::fs::remove_file(&socket_path);
    Ok(code)
}

/// Waits while a pause file holds a launch that has not started. A stop
/// (file, request or signal) ends the wait; `supervise` then sees it and
/// never starts the harness.
fn hold(shared: &Shared, signals: &SignalFd) {
    while shared.session.pause_file()
        && !shared.session.stop_file()
        && !shared.stop_requested.load(Ordering::SeqCst)
    {
        if let Ok(Some(info)) = signals.read_signal()
            && info.ssi_signo != Signal::SIGCHLD as u32
        {
            shared.stop_requested.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The launch cgroups, created when the kernel lets us.
struct Cgroups {
    v2: Option<PathBuf>,
    v1: Option<PathBuf>,
}

impl Cgroups {
    fn create(launch_id: &str, enabled: bool) -> Self {
        if !enabled {
            return Self { v2: None, v1: None };
        }
        let make = |root: Option<PathBuf>| {
            let dir = cgroup::create(&root?, launch_id).ok()?;
            // Joining needs a writable cgroup.procs (delegation or root).
            std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
                .ok()
                .map(|_| dir)
        };
        Self {
            v2: make(cgroup::v2_root()),
            v1: make(cgroup::v1_freezer_root()),
        }
    }

    fn remove(&self) {
        for dir in [&self.v2, &self.v1].into_iter().flatten() {
            if let Err(e) = cgroup::remove(dir) {
                eprintln!("rollpoint-supervisor: {e}");
            }
        }
    }
}

/// The confinement of a strict sandbox's harness, from the user namespace
/// the anchor passed (`--userns-fd`), built before the fork.
fn isolation(opts: &RunOpts) -> Result<Option<Arc<Isolation>>, Error> {
    let Some(fd) = opts.userns_fd else {
        return Ok(None);
    };
    // SAFETY: the anchor leaves the namespace open at this number for this
    // process alone, and nothing else here takes it.
    let ns = unsafe { OwnedFd::from_raw_fd(fd) };
    // Not for the harness to inherit.
    nix::fcntl::fcntl(
        &ns,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(|source| Error::Sys {
        what: "mark the user namespace descriptor close-on-exec",
        source,
    })?;
    Isolation::new(ns, opts.drop_caps, opts.no_new_privs)
        .map(|iso| Some(Arc::new(iso)))
        .map_err(|e| Error::Refused(e.to_string()))
}

fn supervise(opts: &RunOpts, shared: &Arc<Shared>, signals: &SignalFd) -> Result<i32, Error> {
    // Hold the control lock from the last stop check until the launch is
    // controllable, so a stop either keeps it from starting or stops it.
    let mut control_slot = shared
        .control
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if shared.session.stop_file() || shared.stop_requested.load(Ordering::SeqCst) {
        drop(control_slot);
        shared
            .session
            .update(|r| r.phase = LaunchPhase::NeverStarted)?;
        return Ok(NEVER_STARTED_EXIT);
    }
    let isolation = isolation(opts)?;
    let cgroups = Cgroups::create(&opts.launch_id, opts.cgroups);
    let join = [&cgroups.v2, &cgroups.v1]
        .into_iter()
        .flatten()
        .filter_map(|d| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(d.join("cgroup.procs"))
                .ok()
        });

    let mut cmd = Command::new(&opts.argv[0]);
    cmd.args(&opts.argv[1..])
        .env(LAUNCH_TAG_VAR, &opts.launch_id)
        .process_group(0);
    if let Some(cwd) = &opts.cwd {
        cmd.current_dir(cwd);
    }
    // std forks to run the hook and the child would keep our blocked mask:
    // the harness gets a standard signal state, its launch cgroups, and
    // the sandbox's user (the supervisor stays root to freeze it).
    PreExec::new()
        .join_all(join)
        .credentials(opts.user.clone())
        .isolate(isolation)
        .install(&mut cmd);
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(source) => {
            cgroups.remove();
            shared.session.update(|r| {
                r.phase = LaunchPhase::Ended;
                r.ended = Some(Ended {
                    exit_code: Some(127),
                    signal: None,
                    at_ms: unix_ms(),
                });
            })?;
            return Err(Error::Spawn {
                argv0: opts.argv[0].clone(),
                source,
            });
        }
    };
    // Closes the cgroup.procs descriptors the hook held.
    drop(cmd);
    let harness = child.id();
    // The Child handle is never waited on: this thread's waitpid(-1) loop
    // owns every status. Dropping it does not reap or kill.
    drop(child);
    let start_time = ProcId::of(harness).map(|p| p.start_time);

    let launch = Launch {
        id: opts.launch_id.clone(),
        spec: MemberSpec {
            roots: vec![std::process::id()],
            include_roots: false,
            tag: Some(opts.launch_id.clone()),
            exclude: Vec::new(),
        },
        cgroup_v2: cgroups.v2.clone(),
        cgroup_v1: cgroups.v1.clone(),
    };
    *control_slot = Some(Freezer::new(launch, opts.strategy, opts.budgets)?);
    shared.session.update(|r| {
        r.phase = LaunchPhase::Running;
        r.pid = Some(harness);
        r.start_time = start_time;
        r.cgroup_v2 = cgroups.v2.as_ref().map(|p| p.display().to_string());
        r.cgroup_v1_freezer = cgroups.v1.as_ref().map(|p| p.display().to_string());
        r.started_at_ms = Some(unix_ms());
    })?;
    drop(control_slot);

    let code = reap_loop(shared, signals, harness)?;
    cgroups.remove();
    Ok(code)
}

/// The only place that waits on children.
fn reap_loop(shared: &Arc<Shared>, signals: &SignalFd, harness: u32) -> Result<i32, Error> {
    let harness_pid = Pid::from_raw(i32::try_from(harness).unwrap_or(i32::MAX));
    let (wake_rx, wake_tx) = nix::unistd::pipe().map_err(sys("create a pipe"))?;
    let mut wake_tx = Some(wake_tx);
    let mut exit_code: Option<i32> = None;
    let mut cleanup_done = false;
    let mut stopping = false;
    loop {
        // Reap everything that has exited.
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(WaitStatus::Exited(pid, code)) if pid == harness_pid => {
                    exit_code = Some(code);
                    harness_ended(shared, Some(code), None, &mut wake_tx)?;
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == harness_pid => {
                    exit_code = Some(128 + sig as i32);
                    harness_ended(shared, None, Some(sig as i32), &mut wake_tx)?;
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => {
                    return Err(Error::Sys {
                        what: "wait for children",
                        source: e,
                    });
                }
            }
        }
        // Drain what the cleanup killed, then leave.
        if cleanup_done
            && let Some(code) = exit_code
            && drain_children(Duration::from_secs(5))
        {
            return Ok(code);
        }
        let mut fds = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(wake_rx.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::from(1000u16)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                return Err(Error::Sys {
                    what: "poll",
                    source: e,
                });
            }
        }
        if fds[1]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
        {
            cleanup_done = true;
        }
        while let Ok(Some(info)) = signals.read_signal() {
            let signo = i32::try_from(info.ssi_signo).unwrap_or(0);
            if signo != Signal::SIGCHLD as i32 && !stopping && exit_code.is_none() {
                // Asked to go away: stop the launch; its end is reaped here.
                stopping = true;
                let shared = Arc::clone(shared);
                std::thread::spawn(move || {
                    let _ = shared.perform(Verb::Stop);
                });
            }
        }
    }
}

/// Records the end first, then cleans up in a thread while reaping goes on.
fn harness_ended(
    shared: &Arc<Shared>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    wake: &mut Option<std::os::fd::OwnedFd>,
) -> Result<(), Error> {
    shared.session.update(|r| {
        r.phase = LaunchPhase::Ended;
        r.ended = Some(Ended {
            exit_code,
            signal,
            at_ms: unix_ms(),
        });
    })?;
    let shared = Arc::clone(shared);
    let wake = wake.take();
    let code = exit_code.or(signal.map(|s| 128 + s));
    std::thread::spawn(move || {
        let receipt = {
            let mut guard = shared
                .control
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            guard.as_mut().map(|c| {
                let mut r = c.stop_with(Op::Cleanup);
                r.exit_code = code;
                r
            })
        };
        if let Some(r) = receipt
            && let Err(e) = shared.session.write_receipt(&r)
        {
            eprintln!("rollpoint-supervisor: {e}");
        }
        if let Some(w) = wake {
            let _ = nix::unistd::write(&w, b"x");
        }
    });
    Ok(())
}

/// Reaps remaining children until none is left; false if some outlive
/// `budget` (they will be reaped on the next round).
fn drain_children(budget: Duration) -> bool {
    let end = std::time::Instant::now() + budget;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Err(Errno::ECHILD) => return true,
            Ok(WaitStatus::StillAlive) => {
                if std::time::Instant::now() >= end {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {}
        }
    }
}
