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
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
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

/// What the readers kept of stdout and of stderr.
type Streams = [Arc<Mutex<Kept>>; 2];

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
    if let Some(output) = unusable_cwd(&req.cwd) {
        return Ok(output);
    }
    let mut cmd = command(run_as, req, program);
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
    let group = Group::of(program, child.id());
    if let (Some(mut stdin), Some(text)) = (child.stdin.take(), req.stdin.clone()) {
        // A command that does not read its input must not hold the reply.
        group.helper(
            "exec-stdin",
            Box::new(move || {
                let _ = stdin.write_all(text.as_bytes());
            }),
        )?;
    }
    let limit = usize::try_from(req.output_limit).unwrap_or(usize::MAX);
    let (streams, mut pipes) = group.read_outputs(&mut child, limit)?;
    // Only the reaper waits on children; this handle is just dropped.
    drop(child);

    let (exit, mut timed_out) = group.wait_exit(&exited, deadline)?;
    // Readers see the end of a pipe a moment after its last writer exits.
    if !pipes.wait(deadline.max(Instant::now() + PIPE_SETTLE)) {
        timed_out = true;
        group.kill();
        pipes.wait(Instant::now() + PIPE_GRACE);
    }
    Ok(output(exit, timed_out, &streams, start))
}

/// `Some` reply of a command not started when its working directory cannot be used.
fn unusable_cwd(cwd: &str) -> Option<ExecOutput> {
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => None,
        Ok(_) => Some(not_started(
            126,
            format!("exec: cwd {cwd}: not a directory"),
        )),
        Err(e) => Some(not_started(126, format!("exec: cwd {cwd}: {e}"))),
    }
}

/// The command of the request: exactly its environment and working directory,
/// its own process group, its stdin (or /dev/null) and piped output.
fn command(run_as: &RunAs, req: &ExecRequest, program: &str) -> Command {
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
    cmd
}

/// The started command's process group, and how its errors name it.
struct Group<'a> {
    program: &'a str,
    pid: u32,
    group: Pid,
}

impl<'a> Group<'a> {
    fn of(program: &'a str, pid: u32) -> Self {
        Self {
            program,
            pid,
            group: Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
        }
    }

    fn kill(&self) {
        let _ = killpg(self.group, Signal::SIGKILL);
    }

    /// Starts a helper thread; without it the command cannot be served, so
    /// it is killed.
    fn helper(&self, name: &str, f: Box<dyn FnOnce() + Send>) -> Result<(), String> {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map(drop)
            .map_err(|e| {
                self.kill();
                format!(
                    "exec: {:?} (pid {}): cannot start a thread: {e}",
                    self.program, self.pid
                )
            })
    }

    /// Starts a reader on stdout and one on stderr, each keeping the first
    /// `limit` bytes; each reports on the receiver when its pipe closed.
    fn read_outputs(
        &self,
        child: &mut std::process::Child,
        limit: usize,
    ) -> Result<(Streams, Pipes), String> {
        let (done_tx, done_rx) = channel();
        let pipes = [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ];
        let streams = [
            Arc::new(Mutex::new(Kept::default())),
            Arc::new(Mutex::new(Kept::default())),
        ];
        for (pipe, kept) in pipes.into_iter().zip(&streams) {
            if let Some(pipe) = pipe {
                let kept = Arc::clone(kept);
                let done = done_tx.clone();
                self.helper(
                    "exec-output",
                    Box::new(move || {
                        keep(pipe, limit, &kept);
                        let _ = done.send(());
                    }),
                )?;
            } else {
                let _ = done_tx.send(());
            }
        }
        Ok((
            streams,
            Pipes {
                done: done_rx,
                open: 2,
            },
        ))
    }

    /// Waits for the command's exit until `deadline`, then kills the group
    /// and waits [`KILL_WAIT`] more; `true` beside it when it timed out.
    fn wait_exit(
        &self,
        exited: &Receiver<Exit>,
        deadline: Instant,
    ) -> Result<(Exit, bool), String> {
        let (program, pid) = (self.program, self.pid);
        match exited.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(exit) => Ok((exit, false)),
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                let exit = exited.recv_timeout(KILL_WAIT).map_err(|_| {
                    format!(
                        "exec: {program:?} (pid {pid}) was not reaped {KILL_WAIT:?} after SIGKILL"
                    )
                })?;
                Ok((exit, true))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(format!("exec: {program:?} (pid {pid}): its exit was lost"))
            }
        }
    }
}

/// The output readers still to report their pipe closed.
struct Pipes {
    done: Receiver<()>,
    open: usize,
}

impl Pipes {
    /// Waits until every pipe closed (`true`) or `until` passed.
    fn wait(&mut self, until: Instant) -> bool {
        while self.open > 0 {
            match self
                .done
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                Ok(()) => self.open -= 1,
                Err(_) => return false,
            }
        }
        true
    }
}

/// The reply: how the command ended and what was kept of its output.
fn output(exit: Exit, timed_out: bool, streams: &Streams, start: Instant) -> ExecOutput {
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
    ExecOutput {
        exit_code,
        signal,
        timed_out,
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
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
