//! The `bash` tool: a shell command in a process group of its own, stdout and stderr on one
//! pipe (interleaved as in a terminal), capped, killed with its whole group at the timeout.
//! When the command's own process exits, whatever it left running in its group is killed too,
//! before the group leader is reaped, so the group id cannot be reused while it is signalled.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::Pid;
use serde::Deserialize;

use super::capped::Capped;
use super::{Outcome, ToolContext};
use crate::transcript::ToolStatus;

/// How long to wait for the output pipe to close once the group is gone (a process that left
/// the group may still hold it).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub command: String,
}

fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

fn kill_group(group: Pid) {
    // ESRCH (nothing left in the group) is the common, harmless case.
    let _ = killpg(group, Signal::SIGKILL);
}

pub fn run(args: &Args, ctx: &ToolContext, output: &Arc<Mutex<Capped>>) -> Outcome {
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return Outcome::error(format!("cannot create a pipe: {e}")),
    };
    let writer_err = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return Outcome::error(format!("cannot duplicate a pipe: {e}")),
    };
    let mut command = Command::new(shell());
    command
        .arg("-c")
        .arg(&args.command)
        .current_dir(&ctx.workdir)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_err)
        .process_group(0);

    let started = Instant::now();
    let mut slot = ctx
        .running_group
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let spawned = command.spawn();
    // Our copies of the pipe's write end must go, or the reader never sees the end.
    drop(command);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Outcome::error(format!("cannot start {}: {e}", shell())),
    };
    let pid = i32::try_from(child.id())
        .map(Pid::from_raw)
        .unwrap_or(Pid::from_raw(-1));
    *slot = Some(pid);
    drop(slot);

    let (drained_tx, drained_rx) = mpsc::channel();
    let sink = Arc::clone(output);
    std::thread::spawn(move || {
        let mut reader = reader;
        let mut buf = [0u8; 8192];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => sink
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(&buf[..n]),
            }
        }
        sink.lock().unwrap_or_else(PoisonError::into_inner).close();
        let _ = drained_tx.send(());
    });

    // Learn of the exit without reaping, so the group id stays reserved until we are done.
    let (exited_tx, exited_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), flags) {}
        let _ = exited_tx.send(());
    });

    let timed_out = match exited_rx.recv_timeout(ctx.timeout) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => false,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            kill_group(pid);
            let _ = exited_rx.recv();
            true
        }
    };
    let mut slot = ctx
        .running_group
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    kill_group(pid);
    *slot = None;
    drop(slot);
    let status = child.wait();
    let duration = started.elapsed();
    let _ = drained_rx.recv_timeout(DRAIN_GRACE);

    let captured = output.lock().unwrap_or_else(PoisonError::into_inner);
    let mut content = captured.render();
    let truncated_bytes = captured.dropped();
    drop(captured);
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    let (status, exit_code) = match status {
        _ if timed_out => {
            content.push_str(&format!(
                "[timed out after {:.1}s: the command's process group was killed]",
                duration.as_secs_f64()
            ));
            (ToolStatus::TimedOut, None)
        }
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => {
                content.push_str(&format!("[exit code {code}]"));
                let status = if code == 0 {
                    ToolStatus::Ok
                } else {
                    ToolStatus::Error
                };
                (status, Some(code))
            }
            (None, signal) => {
                content.push_str(&format!("[killed by signal {}]", signal.unwrap_or(0)));
                (ToolStatus::Error, None)
            }
        },
        Err(e) => {
            content.push_str(&format!("[cannot collect exit status: {e}]"));
            (ToolStatus::Error, None)
        }
    };
    Outcome {
        content,
        status,
        exit_code,
        truncated_bytes,
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ctx(timeout: Duration, cap: usize) -> ToolContext {
        ToolContext {
            workdir: std::env::temp_dir(),
            timeout,
            output_cap: cap,
            running_group: Arc::new(Mutex::new(None)),
        }
    }

    fn bash(command: &str, ctx: &ToolContext) -> Outcome {
        let out = Arc::new(Mutex::new(Capped::new(ctx.output_cap)));
        run(
            &Args {
                command: command.to_owned(),
            },
            ctx,
            &out,
        )
    }

    #[test]
    fn captures_both_streams_and_the_exit_code() {
        let c = ctx(Duration::from_secs(30), 4096);
        let out = bash("echo out; echo err >&2; exit 3", &c);
        assert_eq!(out.content, "out\nerr\n[exit code 3]");
        assert_eq!(out.status, ToolStatus::Error);
        assert_eq!(out.exit_code, Some(3));
        assert!(c.running_group.lock().unwrap().is_none());
    }

    #[test]
    fn timeout_kills_the_whole_group_and_background_jobs_do_not_hold_it() {
        let c = ctx(Duration::from_millis(300), 4096);
        let began = Instant::now();
        let out = bash("sleep 30 & sleep 30; echo never", &c);
        assert_eq!(out.status, ToolStatus::TimedOut);
        assert!(!out.content.contains("never"));
        assert!(began.elapsed() < Duration::from_secs(10));
        // A background job left behind by a command that exits is killed with its group.
        let began = Instant::now();
        let out = bash("sleep 30 & echo left", &ctx(Duration::from_secs(30), 4096));
        assert_eq!(out.content, "left\n[exit code 0]");
        assert!(began.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn output_is_capped() {
        let c = ctx(Duration::from_secs(30), 100);
        let out = bash("head -c 100000 /dev/zero | tr '\\0' x", &c);
        assert!(out.truncated_bytes >= 99_900, "{}", out.truncated_bytes);
        assert!(out.content.len() < 300);
    }
}
