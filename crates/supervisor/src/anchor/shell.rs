//! A command on a terminal (`rollpoint shell`): a new pseudo-terminal in the sandbox's
//! `/dev/pts`, the command started on it exactly as an exec is (the sandbox's user, its
//! isolation), as the leader of its own session; the terminal's leader end goes back to the
//! asker over the socket (`SCM_RIGHTS`) with the first reply line, and the second line says
//! how the command ended. The anchor holds no copy of the terminal: when the asker lets go,
//! the command gets a hangup.

use std::io::{IoSlice, Write as _};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::pty::{OpenptyResult, Winsize, openpty};
use nix::sys::signal::{Signal, killpg};
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use nix::unistd::Pid;
use rollpoint_proctree::spawn::PreExec;
use rollpoint_proto::anchor::{ANCHOR_VERSION, AnchorReply, ExecOutput, ExecRequest};

use super::RunAs;
use super::reaper::{Exit, Reaper};

/// Serves a shell request on `stream`; an error is said on the stream when nothing was
/// started.
pub fn serve(
    stream: &UnixStream,
    reaper: &Reaper,
    run_as: &RunAs,
    req: &ExecRequest,
    size: (u16, u16),
) -> std::io::Result<()> {
    let pid = std::process::id();
    let (leader, child) = match start(reaper, run_as, req, size) {
        Ok(started) => started,
        Err(e) => return write_line(stream, &AnchorReply::error(pid, e)),
    };
    let (child_pid, exited) = child;
    let first = AnchorReply {
        launched: Some(child_pid),
        ..quiet(pid)
    };
    let mut line = serde_json::to_vec(&first).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let fds = [leader.as_raw_fd()];
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&line)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    );
    drop(leader);
    let group = Pid::from_raw(i32::try_from(child_pid).unwrap_or(i32::MAX));
    if let Err(e) = sent {
        let _ = killpg(group, Signal::SIGKILL);
        return Err(std::io::Error::other(format!(
            "shell (pid {child_pid}): handing over its terminal: {e}"
        )));
    }
    let limit = Duration::from_millis(req.timeout_ms);
    let (exit, timed_out) = match exited.recv_timeout(limit) {
        Ok(exit) => (Some(exit), false),
        Err(_) => {
            let _ = killpg(group, Signal::SIGKILL);
            (exited.recv_timeout(Duration::from_secs(5)).ok(), true)
        }
    };
    let last = AnchorReply {
        exec: Some(ExecOutput {
            exit_code: match exit {
                Some(Exit::Code(c)) => Some(c),
                _ => None,
            },
            signal: match exit {
                Some(Exit::Signal(s)) => Some(s),
                _ => None,
            },
            timed_out,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration_ms: 0,
        }),
        ..quiet(pid)
    };
    write_line(stream, &last)
}

/// A reply with nothing in it yet.
fn quiet(pid: u32) -> AnchorReply {
    AnchorReply {
        v: ANCHOR_VERSION,
        pid,
        exec: None,
        launched: None,
        error: None,
        refused: false,
    }
}

fn write_line(mut stream: &UnixStream, reply: &AnchorReply) -> std::io::Result<()> {
    let mut out = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    out.push(b'\n');
    stream.write_all(&out)
}

type Started = (OwnedFd, (u32, std::sync::mpsc::Receiver<Exit>));

/// Opens the terminal and starts the command on it.
fn start(
    reaper: &Reaper,
    run_as: &RunAs,
    req: &ExecRequest,
    (rows, cols): (u16, u16),
) -> Result<Started, String> {
    let Some(program) = req.argv.first() else {
        return Err("shell: argv is empty".into());
    };
    let size = Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let OpenptyResult { master, slave } =
        openpty(Some(&size), None).map_err(|e| format!("shell: open a terminal: {e}"))?;
    let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| format!("shell: terminal: {e}"));
    let mut cmd = Command::new(program);
    cmd.args(&req.argv[1..])
        .env_clear()
        .envs(run_as.env(&req.env))
        .current_dir(&req.cwd)
        .stdin(Stdio::from(dup(&slave)?))
        .stdout(Stdio::from(dup(&slave)?))
        .stderr(Stdio::from(dup(&slave)?));
    PreExec::new()
        .terminal(slave)
        .credentials(run_as.user.clone())
        .isolate(run_as.isolation.clone())
        .install(&mut cmd);
    let (child, exited) = reaper
        .spawn(&mut cmd)
        .map_err(|e| format!("shell: failed to start {program:?} in {}: {e}", req.cwd))?;
    let pid = child.id();
    drop(child);
    // The command's copies of the follower end go with `cmd`.
    drop(cmd);
    Ok((master, (pid, exited)))
}
