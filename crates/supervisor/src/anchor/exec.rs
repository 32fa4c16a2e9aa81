//! `exec`: run one command to completion and return its output.
//!
//! The command gets exactly the requested environment and working
//! directory, its own process group, stdin from the request (or /dev/null),
//! and stdout and stderr on pipes read by a thread each, which keep the
//! first `output_limit` bytes and drain the rest so the command never blocks
//! on a full pipe. At the deadline the whole group is killed. The reply waits
//! for the pipes to close as well as for the command, since a background
//! member of the group may still be writing; a member that left the group
//! and keeps a pipe open is given up on shortly after the deadline.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rollpoint_proctree::spawn::PreExec;
use rollpoint_proto::anchor::{ExecOutput, ExecRequest};

use super::RunAs;
use super::reaper::{Exit, Reaper};

/// How long a killed command may take to be reaped before the reply gives
/// up on it (a process in uninterruptible sleep dies only when it wakes).
const KILL_WAIT: Duration = Duration::from_secs(30);

/// How long the reply waits for pipes held open past the deadline by
/// processes that left the command's group.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// How long readers get to see the pipes close after the command exited.
const PIPE_SETTLE: Duration = Duration::from_millis(100);

/// What a reader kept of one pipe.
#[derive(Debug, Default)]
struct Kept {
    bytes: Vec<u8>,
    truncated: bool,
}

/// The result of a command that could not start, as a shell reports it:
/// exit 127 when the program is not there, 126 when it (or its working
/// directory) cannot be used, with the reason on stderr. The command is the
/// caller's, so this is its outcome, not the anchor's failure.
fn not_started(code: i32, message: String) -> ExecOutput {
    ExecOutput {
        exit_code: Some(code),
        signal: None,
        timed_out: false,
        stdout: String::new(),
        stderr: format!("{message}\n"),
        stdout_truncated: false,
        stderr_truncated: false,
        duration_ms: 0,
    }
}

/// Runs the request; `Err` is a message naming what was malformed.
pub fn exec(reaper: &Reaper, run_as: &RunAs, req: &ExecRequest) -> Result<ExecOutput, String> {
    let Some(program) = req.argv.first() else {
        return Err("exec: argv is empty".into());
    };
    match std::fs::metadata(&req.cwd) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Ok(not_started(
                126,
                format!("exec: cwd {}: not a directory", req.cwd),
            ));
        }
        Err(e) => return Ok(not_started(126, format!("exec: cwd {}: {e}", req.cwd))),
    }
    let mut cmd = Command::new(program);
    cmd.args(&req.argv[1..])
        .env_clear()
        .envs(run_as.env(&req.env))
        .current_dir(&req.cwd)
        .stdin(if req.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // Our mask blocks what the anchor waits for: the child starts clean,
    // as the sandbox's user, confined when the sandbox is strict.
    PreExec::new()
        .credentials(run_as.user.clone())
        .isolate(run_as.isolation.clone())
        .install(&mut cmd);

    let start = Instant::now();
    // A timeout too large for the clock is as good as none.
    let deadline = start
        .checked_add(Duration::from_millis(req.timeout_ms))
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 86_400));
    let (mut child, exited) = match reaper.spawn(&mut cmd) {
        Ok(started) => started,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let message = format!("exec: failed to start {program:?} in {}: {e}", req.cwd);
            return Ok(not_started(code, message));
        }
    };
    let pid = child.id();
    let group = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    let kill_group = || {
        let _ = killpg(group, Signal::SIGKILL);
    };
    // Without its helper threads the command cannot be served: kill it.
    let helper = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map(drop)
            .map_err(|e| {
                kill_group();
                format!("exec: {program:?} (pid {pid}): cannot start a thread: {e}")
            })
    };
    if let (Some(mut stdin), Some(text)) = (child.stdin.take(), req.stdin.clone()) {
        // A command that does not read its input must not hold the reply.
        helper(
            "exec-stdin",
            Box::new(move || {
                let _ = stdin.write_all(text.as_bytes());
            }),
        )?;
    }
    let limit = usize::try_from(req.output_limit).unwrap_or(usize::MAX);
    let (done_tx, done_rx) = channel();
    let mut streams = Vec::new();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ] {
        let kept = Arc::new(Mutex::new(Kept::default()));
        if let Some(pipe) = pipe {
            let kept = Arc::clone(&kept);
            let done = done_tx.clone();
            helper(
                "exec-output",
                Box::new(move || {
                    keep(pipe, limit, &kept);
                    let _ = done.send(());
                }),
            )?;
        } else {
            let _ = done_tx.send(());
        }
        streams.push(kept);
    }
    // Only the reaper waits on children; this handle is just dropped.
    drop(child);

    let mut timed_out = false;
    let exit = match exited.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(exit) => exit,
        Err(RecvTimeoutError::Timeout) => {
            timed_out = true;
            kill_group();
            exited.recv_timeout(KILL_WAIT).map_err(|_| {
                format!("exec: {program:?} (pid {pid}) was not reaped {KILL_WAIT:?} after SIGKILL")
            })?
        }
        Err(RecvTimeoutError::Disconnected) => {
            return Err(format!("exec: {program:?} (pid {pid}): its exit was lost"));
        }
    };
    let mut open = 2;
    let mut wait_pipes = |until: Instant| {
        while open > 0 {
            match done_rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(()) => open -= 1,
                Err(_) => return false,
            }
        }
        true
    };
    // Readers see the end of a pipe a moment after its last writer exits.
    if !wait_pipes(deadline.max(Instant::now() + PIPE_SETTLE)) {
        timed_out = true;
        kill_group();
        wait_pipes(Instant::now() + PIPE_GRACE);
    }

    let take = |k: &Arc<Mutex<Kept>>| {
        let k = k.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (String::from_utf8_lossy(&k.bytes).into_owned(), k.truncated)
    };
    let (stdout, stdout_truncated) = take(&streams[0]);
    let (stderr, stderr_truncated) = take(&streams[1]);
    let (exit_code, signal) = match exit {
        Exit::Code(c) => (Some(c), None),
        Exit::Signal(s) => (None, Some(s)),
    };
    Ok(ExecOutput {
        exit_code,
        signal,
        timed_out,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// Reads `pipe` to its end, keeping the first `limit` bytes.
fn keep(mut pipe: impl Read, limit: usize, kept: &Mutex<Kept>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let mut k = kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let room = limit.saturating_sub(k.bytes.len()).min(n);
        k.bytes.extend_from_slice(&buf[..room]);
        if room < n {
            k.truncated = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_bytes_and_flags_the_rest() {
        let input = vec![b'x'; 200_000];
        let kept = Mutex::new(Kept::default());
        keep(input.as_slice(), 70_000, &kept);
        let k = kept.into_inner().expect("lock");
        assert_eq!((k.bytes.len(), k.truncated), (70_000, true));

        let kept = Mutex::new(Kept::default());
        keep(&b"short"[..], 5, &kept);
        let k = kept.into_inner().expect("lock");
        assert_eq!((k.bytes.as_slice(), k.truncated), (&b"short"[..], false));
    }

    #[test]
    fn refuses_an_empty_argv_and_ends_a_bad_cwd_with_126() {
        let reaper = Reaper::default();
        let mut req = ExecRequest {
            argv: Vec::new(),
            env: std::collections::BTreeMap::new(),
            cwd: "/".into(),
            timeout_ms: 1000,
            output_limit: 10,
            stdin: None,
        };
        let root = RunAs {
            user: None,
            isolation: None,
            home: "/root".into(),
        };
        let err = exec(&reaper, &root, &req).expect_err("empty argv");
        assert!(err.contains("argv"), "{err}");
        // A command that cannot start is its outcome, as a shell's: 126.
        req.argv = vec!["true".into()];
        req.cwd = "/no/such/cwd".into();
        let out = exec(&reaper, &root, &req).expect("an outcome");
        assert_eq!(out.exit_code, Some(126));
        assert!(out.stderr.contains("/no/such/cwd"), "{}", out.stderr);
    }
}
