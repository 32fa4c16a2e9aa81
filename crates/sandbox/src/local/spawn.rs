//! Starting a sandbox's anchor: the supervisor binary, run as root with
//! `--enter`: before anything else it joins the sandbox's cgroups (so
//! nothing it starts can escape them) and makes fresh mount, uts, ipc and
//! pid namespaces, and net unless the sandbox shares the host's. The host spawns it without a
//! hook between fork and exec, so the standard library spawns it with
//! `posix_spawn` (a vfork) rather than a fork that copies the owner's page
//! tables, the cost that dominated starting a thousand sandboxes. The
//! supervisor forks the namespace's first process and does the in-sandbox
//! mounts and `pivot_root` itself.
//!
//! The anchor's parent is the sandbox's owner: when that process dies the
//! anchor freezes the sandbox and keeps it for the sweep. So the anchor is
//! spawned directly by the process that owns the sandbox (the backend's
//! owner, recorded in `sandbox.json` and checked by the sweep), from any of
//! its threads, never through a helper process that exits (the sandbox
//! would freeze at once). `--owner` names this process, so an anchor whose
//! owner died before it looked refuses to start instead of watching
//! whoever adopted it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::errors::Error;

pub(crate) struct AnchorArgs<'a> {
    pub supervisor: &'a Path,
    pub root: &'a Path,
    /// This process's descriptor of the sandbox's overlay, attached
    /// nowhere: the anchor takes it (`--owner-root-fd`) and attaches it at
    /// `root` in the sandbox's own mount namespace.
    pub root_fd: std::os::fd::BorrowedFd<'a>,
    pub control: &'a Path,
    pub hostname: &'a str,
    pub cgroup_v2: Option<&'a Path>,
    pub cgroup_freezer: Option<&'a Path>,
    /// `--net ...` and its options (`network::anchor_args`).
    pub network: Vec<String>,
    pub log: File,
    /// The sandbox's cgroup directories, joined by the anchor first.
    pub join: Vec<PathBuf>,
    /// Mounted read-only under `/.rollpoint`.
    pub tools: &'a [super::backend::Tool],
    /// What commands and launches run as.
    pub identity: &'a super::user::Identity,
    /// The id range of a strict sandbox (`--userns`); `None`: trusted.
    pub userns: Option<rollpoint_proctree::isolate::IdRange>,
    /// This process's descriptor of that range's namespace, one per
    /// backend, which the anchor takes instead of making its own
    /// (`--owner-userns-fd`).
    pub userns_fd: Option<std::os::fd::BorrowedFd<'a>>,
    /// This process's descriptor of a fresh network namespace made ahead,
    /// which the anchor joins (`--owner-netns-fd`); held until it answers.
    pub netns_fd: Option<std::os::fd::BorrowedFd<'a>>,
    /// Host paths lent read-only at their own place (`--lend`).
    pub lend: &'a [PathBuf],
    /// Capability names the sandbox drops (`--drop-caps`, strict only).
    pub drop_capabilities: &'a [String],
    /// `no_new_privs` on what the sandbox runs (`--no-new-privs`, strict only).
    pub no_new_privs: bool,
}

pub(crate) fn spawn_anchor(sandbox: &str, args: AnchorArgs<'_>) -> Result<Child, Error> {
    let mut cmd = Command::new(args.supervisor);
    cmd.arg("anchor")
        .arg("--root")
        .arg(args.root)
        .arg("--control")
        .arg(args.control)
        .arg("--hostname")
        .arg(args.hostname)
        .arg("--owner")
        .arg(std::process::id().to_string())
        .arg("--enter")
        .arg("--owner-root-fd")
        .arg(std::os::fd::AsRawFd::as_raw_fd(&args.root_fd).to_string());
    for dir in &args.join {
        cmd.arg("--join").arg(dir);
    }
    if let Some(creds) = args.identity.credentials() {
        cmd.arg("--user").arg(creds.to_string());
    }
    cmd.arg("--home").arg(&args.identity.home);
    for tool in args.tools {
        let mut arg = std::ffi::OsString::from(format!("{}=", tool.at));
        arg.push(&tool.host);
        cmd.arg("--tool").arg(arg);
    }
    if let Some(dir) = args.cgroup_v2 {
        cmd.arg("--cgroup-v2").arg(dir);
    }
    if let Some(dir) = args.cgroup_freezer {
        cmd.arg("--cgroup-freezer").arg(dir);
    }
    cmd.args(&args.network);
    if let Some(fd) = args.netns_fd {
        use std::os::fd::AsRawFd;
        cmd.arg("--owner-netns-fd").arg(fd.as_raw_fd().to_string());
    }
    if let Some(range) = args.userns {
        cmd.arg("--userns").arg(range.to_string());
        if let Some(fd) = args.userns_fd {
            use std::os::fd::AsRawFd;
            cmd.arg("--owner-userns-fd").arg(fd.as_raw_fd().to_string());
        }
        if !args.drop_capabilities.is_empty() {
            cmd.arg("--drop-caps").arg(args.drop_capabilities.join(","));
        }
        if args.no_new_privs {
            cmd.arg("--no-new-privs");
        }
    }
    for path in args.lend {
        cmd.arg("--lend").arg(path);
    }
    let log_err = args.log.try_clone().map_err(|source| Error::Setup {
        sandbox: sandbox.to_owned(),
        what: "duplicate the anchor log".into(),
        source,
    })?;
    cmd.env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(args.log)
        .stderr(log_err);
    cmd.spawn().map_err(|source| Error::Setup {
        sandbox: sandbox.to_owned(),
        what: format!("start the anchor {}", args.supervisor.display()),
        source,
    })
}
