//! `anchor`: the first process of a sandbox.
//!
//! The host starts it already inside the sandbox's new mount, uts and ipc
//! namespaces, with a new pid namespace waiting for its first child. It
//! forks once: the parent stays in the host's pid namespace, so the host has
//! a pid to wait on and to signal, and exits with the child's status; the
//! child is PID 1 of the sandbox. The child sets up the sandbox's mounts and
//! pivots into its root ([`mounts`]), then:
//! - a reaper thread owns `waitpid(-1)` for the whole sandbox ([`reaper`]),
//! - an accept thread serves the anchor socket, one thread per connection
//!   ([`serve`], [`exec`], [`launch`]),
//! - the main thread waits for SIGTERM or SIGINT from outside the sandbox
//!   and exits, which makes the kernel kill every process left in the
//!   namespace; the same signals from a process of the sandbox are ignored.
//!
//! PID 1 carries a parent-death signal (SIGKILL), so the sandbox never
//! outlives the host-side pid, even when that is SIGKILLed.
//!
//! The host-side process polls its signals (a signalfd) together with a
//! pidfd of its own parent, the sandbox's owner: when the owner dies, it
//! freezes the sandbox and stays ([`owner`]).
//!
//! Signals are blocked before the fork: neither side can lose one, and PID 1,
//! which gets no default signal actions, still receives the ones it waits for
//! (a blocked signal is queued even for a namespace's init).

mod attach;
mod exec;
mod launch;
mod mounts;
pub mod net;
mod owner;
mod reaper;
mod serve;
mod shell;

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork, pipe2};

use rollpoint_proctree::isolate::Isolation;
use rollpoint_proctree::spawn::Credentials;

use crate::args::AnchorOpts;
use crate::errors::Error;

/// Who the sandbox's commands and launches run as (`--user`, `--home`),
/// and in what confinement (`--userns`).
#[derive(Debug, Clone)]
pub struct RunAs {
    /// `None`: root (of the sandbox's user namespace when isolated, else
    /// the host's, as the anchor is).
    pub user: Option<Credentials>,
    pub home: String,
    /// `Some` in a strict sandbox: every child enters it.
    pub isolation: Option<Arc<Isolation>>,
}

impl RunAs {
    /// A request's environment with `HOME` set where it sets none.
    pub fn env(&self, env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut env = env.clone();
        env.entry("HOME".into())
            .or_insert_with(|| self.home.clone());
        env
    }
}

/// `--enter`: what a host that starts the anchor with a plain spawn leaves
/// to it, done before anything else, while it is one thread: signals back
/// to their defaults (a spawn keeps what the host ignored), into the
/// sandbox's cgroups (so nothing it starts is ever outside them), then the
/// sandbox's namespaces (pid for its first child).
fn enter(opts: &AnchorOpts, netns: Option<&OwnedFd>) -> Result<(), Error> {
    let io = crate::errors::io_err;
    rollpoint_proctree::spawn::reset_signals()
        .map_err(io("reset signals before entering", &opts.root))?;
    for dir in &opts.join {
        let procs = dir.join("cgroup.procs");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .map_err(io("open", &procs))?;
        rollpoint_proctree::spawn::join_cgroups(&[file]).map_err(io("join the cgroup", dir))?;
    }
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC | libc::CLONE_NEWPID;
    if opts.net.own_namespace() && netns.is_none() {
        flags |= libc::CLONE_NEWNET;
    }
    rollpoint_proctree::spawn::unshare(flags)
        .map_err(io("enter new namespaces for", &opts.root))?;
    if let Some(ns) = netns {
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|source| {
            Error::Setup {
                what: "join the network namespace the owner made for",
                path: opts.root.clone(),
                source,
            }
        })?;
    }
    Ok(())
}

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> Error {
    move |source| Error::Sys { what, source }
}

/// Runs the anchor; returns the exit status of the sandbox's PID 1.
pub fn anchor(opts: &AnchorOpts) -> Result<i32, Error> {
    // The host's network namespace, for the relay, before leaving it.
    let host_net = if opts.enter {
        net::host_namespace(&opts.net)?
    } else {
        None
    };
    // The owner first: a namespace it made ahead is taken through its pidfd.
    let owner = owner::Owner::watch(opts.owner)?;
    let netns = opts
        .owner_netns_fd
        .map(|fd| owner.namespace("--owner-netns-fd", fd, libc::CLONE_NEWNET))
        .transpose()?;
    if opts.enter {
        enter(opts, netns.as_ref())?;
    }
    drop(netns);
    check_isolated(opts)?;
    let network = net::prepare(&opts.net, host_net, &opts.control)?;
    // On the host's view, before PID 1 pivots it away.
    let freezer = owner::Freezer::open(opts)?;
    let userns = opts
        .owner_userns_fd
        .map(|fd| owner.namespace("--owner-userns-fd", fd, libc::CLONE_NEWUSER))
        .transpose()?;
    let root = opts
        .owner_root_fd
        .map(|fd| owner.root_mount(fd))
        .transpose()?;
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
    // The parent holds the write end for its whole life: the child sees the
    // pipe hang up if the parent died before the death signal was armed.
    let (alive_rx, alive_tx) = pipe2(OFlag::O_CLOEXEC).map_err(sys("create a pipe"))?;
    // SAFETY: nothing has started a thread yet (argument parsing only), so
    // the child is a complete copy and may run arbitrary code.
    match unsafe { fork() }.map_err(sys("fork the sandbox's first process"))? {
        ForkResult::Parent { child } => {
            drop(alive_rx);
            drop(userns);
            drop(root);
            // On failure PID 1 reads the pipe's end and goes no further.
            let gateway = network.map(net::HostSide::start).transpose()?;
            nix::unistd::write(&alive_tx, b"1").map_err(sys("let PID 1 serve"))?;
            let sandbox = owner::Sandbox {
                hostname: &opts.hostname,
                pid1: child,
                freezer: freezer.as_ref(),
            };
            let status = outer(&sandbox, &mask, owner);
            drop(alive_tx);
            drop(gateway);
            status
        }
        ForkResult::Child => {
            // The sandbox's processes can read PID 1's descriptors: none of
            // the host's may stay open in it.
            drop(owner);
            drop(freezer);
            drop(network);
            drop(alive_tx);
            tie_to_parent(&alive_rx)?;
            inner(opts, userns, root, alive_rx)
        }
    }
}

/// The anchor mounts and pivots; it acts only where that cannot touch the
/// host: its root must exist (nothing is created outside it), it must run in
/// a mount namespace of its own (not its parent's), and a new pid namespace
/// must wait for its first child. Otherwise it refuses before doing
/// anything.
fn check_isolated(opts: &AnchorOpts) -> Result<(), Error> {
    let refuse = |why: String| Err(Error::Refused(why));
    match std::fs::metadata(&opts.root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return refuse(format!("root {} is not a directory", opts.root.display())),
        Err(e) => return refuse(format!("root {}: {e}", opts.root.display())),
    }
    let ns = |path: &str| {
        std::fs::read_link(path).map_err(|e| {
            Error::Refused(format!(
                "cannot read {path} ({e}), so isolation is unproven"
            ))
        })
    };
    let parent = nix::unistd::getppid();
    if ns("/proc/self/ns/mnt")? == ns(&format!("/proc/{parent}/ns/mnt"))? {
        return refuse(format!(
            "it shares the mount namespace of its parent (pid {parent}); the owner starts it \
             with new mount, uts, ipc and pid namespaces"
        ));
    }
    if opts.net.own_namespace()
        && ns("/proc/self/ns/net")? == ns(&format!("/proc/{parent}/ns/net"))?
    {
        return refuse(format!(
            "it shares the network namespace of its parent (pid {parent}) with --net {:?}",
            opts.net.mode
        ));
    }
    // After unshare(CLONE_NEWPID) and before the first child, the link
    // `pid_for_children` cannot be read (ENOENT): that is the new namespace
    // waiting. Readable and equal to our own, there is none.
    match std::fs::read_link("/proc/self/ns/pid_for_children") {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return refuse(format!(
                "cannot read /proc/self/ns/pid_for_children ({e}), so isolation is unproven"
            ));
        }
        Ok(children) if children == ns("/proc/self/ns/pid")? => {
            return refuse(
                "no new pid namespace waits for its first child; the owner starts it with one"
                    .to_owned(),
            );
        }
        Ok(_) => {}
    }
    Ok(())
}

/// Makes the sandbox die with the host-side parent, however it dies (the
/// host's handle on the sandbox is that pid).
fn tie_to_parent(alive: &OwnedFd) -> Result<(), Error> {
    prctl::set_pdeathsig(Signal::SIGKILL).map_err(sys("set the parent-death signal"))?;
    let mut fds = [PollFd::new(alive.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).map_err(sys("poll the parent's pipe"))?;
    // A byte may be there already (the parent's go-ahead); a hang-up is its
    // end.
    if fds[0]
        .revents()
        .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
    {
        return Err(Error::ParentGone);
    }
    Ok(())
}

/// Waits for the host-side parent's go-ahead (one byte: its side of the
/// network is set up); the pipe's end instead means it failed or died.
fn wait_for_parent(alive: OwnedFd) -> Result<(), Error> {
    let mut byte = [0_u8; 1];
    loop {
        match nix::unistd::read(&alive, &mut byte) {
            Ok(1) => return Ok(()),
            Ok(_) => return Err(Error::ParentGone),
            Err(nix::errno::Errno::EINTR) => {}
            Err(source) => {
                return Err(Error::Sys {
                    what: "read the parent's go-ahead",
                    source,
                });
            }
        }
    }
}

/// The host-side parent: forwards SIGTERM and SIGINT to PID 1 and exits with
/// its status (128+N when signal N ended it). When the owner dies it freezes
/// the sandbox and stays; a SIGTERM or SIGINT then ends the frozen sandbox
/// (PID 1 could not act on a forwarded one).
fn outer(sandbox: &owner::Sandbox<'_>, mask: &SigSet, owner: owner::Owner) -> Result<i32, Error> {
    let child = sandbox.pid1;
    let signals = SignalFd::with_flags(mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys("create the anchor's signalfd"))?;
    let mut watch = owner::Watch::Owned(owner);
    loop {
        let ready = {
            let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
            if let Some(fd) = watch.pidfd() {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
            match poll(&mut fds, watch.timeout()) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => return Err(sys("poll the signals and the owner")(e)),
            }
            fds.get(1)
                .and_then(PollFd::revents)
                .is_some_and(|r| !r.is_empty())
        };
        watch = watch.step(ready, sandbox);
        while let Some(info) = signals
            .read_signal()
            .map_err(sys("read the anchor's signalfd"))?
        {
            let sig = i32::try_from(info.ssi_signo).map(Signal::try_from);
            if let Ok(Ok(sig @ (Signal::SIGTERM | Signal::SIGINT))) = sig {
                if watch.holds_frozen() {
                    watch = sandbox.end(&format!("{sig} while frozen"));
                } else {
                    let _ = kill(child, sig);
                }
            }
        }
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                return Err(Error::Sys {
                    what: "wait for the sandbox's first process",
                    source: e,
                });
            }
        }
    }
}

/// The sandbox's user namespace and filter (`--userns`), set up once,
/// before the socket serves anything. The namespace is the owner's when it
/// passed one (`given`, one per run: a fork less per sandbox), else made
/// here (the reaper may reap the short-lived child first;
/// `userns::create` does not need its status).
fn isolation(opts: &AnchorOpts, given: Option<OwnedFd>) -> Result<Option<Arc<Isolation>>, Error> {
    let Some(range) = opts.userns else {
        return Ok(None);
    };
    let ns = match given {
        Some(ns) => ns,
        None => {
            rollpoint_proctree::isolate::userns::create(range).map_err(|source| Error::SetupIo {
                what: "create the user namespace of",
                path: opts.root.clone(),
                source,
            })?
        }
    };
    let iso = Isolation::new(ns, opts.drop_caps, opts.no_new_privs)
        .map_err(|e| Error::Refused(e.to_string()))?;
    Ok(Some(Arc::new(iso)))
}

/// PID 1 of the sandbox.
fn inner(
    opts: &AnchorOpts,
    userns: Option<OwnedFd>,
    root: Option<OwnedFd>,
    alive: OwnedFd,
) -> Result<i32, Error> {
    mounts::enter(opts, root)?;
    let signals = reaper::Reaper::signals()?;
    let reaper = Arc::new(reaper::Reaper::default());
    {
        let reaper = Arc::clone(&reaper);
        std::thread::Builder::new()
            .name("reaper".into())
            .spawn(move || reaper.run(&signals))
            .map_err(|source| Error::SetupIo {
                what: "start the reaper thread for",
                path: opts.root.clone(),
                source,
            })?;
    }
    wait_for_parent(alive)?;
    let (listener, socket) = serve::bind()?;
    let run_as = Arc::new(RunAs {
        user: opts.user.clone(),
        home: opts.home.clone(),
        isolation: isolation(opts, userns)?,
    });
    std::thread::Builder::new()
        .name("anchor".into())
        .spawn(move || serve::serve(&listener, &reaper, &run_as))
        .map_err(|source| Error::SetupIo {
            what: "start the server thread for",
            path: socket.clone(),
            source,
        })?;
    eprintln!(
        "rollpoint-supervisor: anchor of {} serving {}",
        opts.hostname,
        socket.display()
    );

    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    let stops = SignalFd::with_flags(&stop, SfdFlags::SFD_CLOEXEC)
        .map_err(sys("create the SIGTERM signalfd"))?;
    loop {
        let Some(info) = stops
            .read_signal()
            .map_err(sys("read the SIGTERM signalfd"))?
        else {
            continue;
        };
        // A sender outside the namespace reads as pid 0: that is the host.
        // A process of the sandbox may not end the sandbox.
        if info.ssi_pid == 0 {
            eprintln!(
                "rollpoint-supervisor: anchor of {}: signal {}, exiting",
                opts.hostname, info.ssi_signo
            );
            break;
        }
        eprintln!(
            "rollpoint-supervisor: anchor of {}: ignored signal {} from pid {} of the sandbox",
            opts.hostname, info.ssi_signo, info.ssi_pid
        );
    }
    Ok(0)
}
