//! `launch`: start a harness under its own `run` supervisor and return at
//! once.
//!
//! The supervisor is this same binary (`/proc/self/exe` still names it after
//! the pivot), run with the session directory
//! `/run/rollpoint/launches/<launch id>`, which the host sees through the
//! control directory bind mount. Its stdout and stderr go to `output.log`
//! there. The launch's own control socket is then the way to it.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rollpoint_proctree::spawn::PreExec;
use rollpoint_proto::anchor::{
    LAUNCH_OUTPUT, LAUNCHES_DIR, LaunchRequest, SANDBOX_CONTROL_DIR, check_launch_id,
};

use super::RunAs;
use super::reaper::Reaper;

/// The names of the capabilities of `mask` (`CAP_X,CAP_Y`).
fn cap_names(mask: u64) -> String {
    rollpoint_proctree::isolate::KEPT
        .iter()
        .filter(|c| mask & c.bitmask() != 0)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Where a launch's supervisor finds the sandbox's user namespace.
const USERNS_FD: i32 = 3;

/// The `run` command line for a request (without the program name).
fn run_args(req: &LaunchRequest, run_as: &RunAs, session: &Path) -> Vec<String> {
    let mut args = vec![
        "run".to_owned(),
        "--session".to_owned(),
        session.display().to_string(),
        "--launch".to_owned(),
        req.launch_id.clone(),
        "--cwd".to_owned(),
        req.cwd.clone(),
    ];
    if let Some(freeze) = &req.freeze {
        args.extend(["--freeze".to_owned(), freeze.clone()]);
    }
    if let Some(user) = &run_as.user {
        args.extend(["--user".to_owned(), user.to_string()]);
    }
    if let Some(iso) = &run_as.isolation {
        args.extend(["--userns-fd".to_owned(), USERNS_FD.to_string()]);
        if iso.dropped() != 0 {
            args.extend(["--drop-caps".to_owned(), cap_names(iso.dropped())]);
        }
        if iso.no_new_privs() {
            args.push("--no-new-privs".to_owned());
        }
    }
    args.extend(req.options.iter().cloned());
    args.push("--".to_owned());
    args.extend(req.argv.iter().cloned());
    args
}

/// Checks the request; `Err` names the bad field.
fn check(req: &LaunchRequest, args: &[String]) -> Result<(), String> {
    check_launch_id(&req.launch_id)?;
    let id = &req.launch_id;
    if req.argv.is_empty() {
        return Err(format!("launch {id}: argv is empty"));
    }
    match std::fs::metadata(&req.cwd) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("launch {id}: cwd {}: not a directory", req.cwd)),
        Err(e) => return Err(format!("launch {id}: cwd {}: {e}", req.cwd)),
    }
    // `run` would refuse these after the reply: refuse them now, by name.
    crate::args::parse(args)
        .map(drop)
        .map_err(|e| format!("launch {id}: {e}"))
}

/// Why the request is refused as it stands (the sender can fix it), before
/// anything is made: a bad launch id, argv, working directory or option, or a
/// launch id already in use.
pub fn refusal(run_as: &RunAs, req: &LaunchRequest) -> Option<String> {
    let id = &req.launch_id;
    if let Err(e) = check_launch_id(id) {
        return Some(e);
    }
    let session = Path::new(SANDBOX_CONTROL_DIR).join(LAUNCHES_DIR).join(id);
    if let Err(e) = check(req, &run_args(req, run_as, &session)) {
        return Some(e);
    }
    session
        .exists()
        .then(|| format!("launch_id {id:?} already exists ({})", session.display()))
}

/// Starts the launch; returns the in-sandbox pid of its supervisor.
pub fn launch(reaper: &Reaper, run_as: &RunAs, req: &LaunchRequest) -> Result<u32, String> {
    let id = &req.launch_id;
    check_launch_id(id)?;
    let launches = Path::new(SANDBOX_CONTROL_DIR).join(LAUNCHES_DIR);
    let session = launches.join(id);
    let args = run_args(req, run_as, &session);
    check(req, &args)?;
    let in_dir = |what: &str, path: &PathBuf, e: std::io::Error| {
        format!("launch {id}: {what} {}: {e}", path.display())
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&launches)
        .map_err(|e| in_dir("create", &launches, e))?;
    match std::fs::DirBuilder::new().mode(0o700).create(&session) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(format!(
                "launch_id {id:?} already exists ({})",
                session.display()
            ));
        }
        Err(e) => return Err(in_dir("create", &session, e)),
    }
    let log_path = session.join(LAUNCH_OUTPUT);
    let log = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| in_dir("create", &log_path, e))?;
    let log2 = log.try_clone().map_err(|e| in_dir("open", &log_path, e))?;

    let mut cmd = Command::new("/proc/self/exe");
    cmd.args(&args)
        .env_clear()
        .envs(run_as.env(&req.env))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0);
    // Our mask blocks what the anchor waits for: the child starts clean.
    // The supervisor stays root outside the sandbox's user namespace (it
    // freezes the launch); it is handed the namespace for the harness.
    let mut hook = PreExec::new();
    if let Some(iso) = &run_as.isolation {
        let ns = iso
            .userns()
            .try_clone()
            .map_err(|e| format!("launch {id}: duplicate the user namespace: {e}"))?;
        hook = hook.pass(ns, USERNS_FD);
    }
    hook.install(&mut cmd);
    let (child, exited) = reaper
        .spawn(&mut cmd)
        .map_err(|e| format!("launch {id}: failed to start its supervisor: {e}"))?;
    let pid = child.id();
    // Only the reaper waits on children; this handle is just dropped.
    drop(child);
    let id = id.clone();
    let noted = std::thread::Builder::new()
        .name("launch-exit".into())
        .spawn(move || {
            if let Ok(exit) = exited.recv() {
                eprintln!("rollpoint-supervisor: launch {id} (supervisor pid {pid}) ended: {exit}");
            }
        });
    if let Err(e) = noted {
        eprintln!("rollpoint-supervisor: launch {pid}: cannot note its end: {e}");
    }
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(options: &[&str]) -> LaunchRequest {
        LaunchRequest {
            launch_id: "l1".into(),
            argv: vec!["harness".into(), "--flag".into()],
            env: std::collections::BTreeMap::new(),
            cwd: "/".into(),
            freeze: Some("sigstop".into()),
            options: options.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    const ROOT: RunAs = RunAs {
        user: None,
        isolation: None,
        home: String::new(),
    };

    #[test]
    fn builds_the_run_command_line() {
        let req = request(&["--stop-grace", "2"]);
        let args = run_args(&req, &ROOT, Path::new("/run/rollpoint/launches/l1"));
        assert_eq!(
            args.join(" "),
            "run --session /run/rollpoint/launches/l1 --launch l1 --cwd / \
             --freeze sigstop --stop-grace 2 -- harness --flag"
        );
        assert_eq!(check(&req, &args), Ok(()));
        let user = RunAs {
            user: Some(
                rollpoint_proctree::spawn::Credentials::parse("1000:1000:27").expect("parses"),
            ),
            home: "/home/n".into(),
            isolation: None,
        };
        let args = run_args(&req, &user, Path::new("/s"));
        assert!(
            args.join(" ")
                .contains("--freeze sigstop --user 1000:1000:27 --stop-grace")
        );
        assert_eq!(check(&req, &args), Ok(()));
    }

    #[test]
    fn names_bad_fields() {
        let req = request(&["--stop-grace", "soon"]);
        let err = check(&req, &run_args(&req, &ROOT, Path::new("/s"))).expect_err("bad option");
        assert!(err.contains("--stop-grace"), "{err}");
        let mut req = request(&[]);
        req.cwd = "/no/such/dir".into();
        let err = check(&req, &run_args(&req, &ROOT, Path::new("/s"))).expect_err("bad cwd");
        assert!(err.contains("/no/such/dir"), "{err}");
        let mut req = request(&[]);
        req.launch_id = "../x".into();
        let err = check(&req, &run_args(&req, &ROOT, Path::new("/s"))).expect_err("bad id");
        assert!(err.contains("launch_id"), "{err}");
        let mut req = request(&[]);
        req.freeze = Some("ice".into());
        let err = check(&req, &run_args(&req, &ROOT, Path::new("/s"))).expect_err("bad freeze");
        assert!(err.contains("ice"), "{err}");
    }
}
