//! A command on a terminal in a sandbox (`rollpoint shell`): asked of the sandbox's anchor,
//! which starts it like an exec and hands back the terminal's leader end; the caller reads
//! and writes the terminal, then waits for how the command ended.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use rollpoint_proto::anchor::{ANCHOR_SOCKET, AnchorReply, AnchorRequest, ExecOutput, ExecRequest};

use super::backend::LocalBackend;
use crate::errors::Error;

/// Longest reply line the anchor sends.
const REPLY_MAX: u64 = 64 * 1024;

/// A command running on a terminal.
#[derive(Debug)]
pub struct Terminal {
    /// The terminal's leader end: what is written is the command's input, what is read its
    /// output. Dropping it hangs the command up.
    pub leader: OwnedFd,
    /// The command's pid in the sandbox.
    pub pid: u32,
    conn: UnixStream,
    /// Bytes read past the first reply line.
    pending: Vec<u8>,
    sandbox: String,
    socket: PathBuf,
}

impl Terminal {
    /// Lets go of the terminal (a command still running gets its hangup once no copy of the
    /// leader end is left) and waits for the command to end (no time limit but the
    /// request's).
    pub fn wait(self) -> Result<ExecOutput, Error> {
        let Self {
            leader,
            conn,
            pending,
            sandbox,
            socket,
            ..
        } = self;
        drop(leader);
        let fail = |message: String| Error::Anchor {
            sandbox: sandbox.clone(),
            socket: socket.clone(),
            message,
        };
        let mut line = pending;
        if !line.contains(&b'\n') {
            BufReader::new((&conn).take(REPLY_MAX))
                .read_until(b'\n', &mut line)
                .map_err(|e| fail(format!("reading how the shell ended: {e}")))?;
        }
        let end = line.iter().position(|b| *b == b'\n').unwrap_or(line.len());
        let reply = AnchorReply::decode(&line[..end]).map_err(|e| fail(e.to_string()))?;
        match (reply.exec, reply.error) {
            (Some(out), _) => Ok(out),
            (None, e) => Err(fail(
                e.unwrap_or_else(|| "the shell's end was not said".into()),
            )),
        }
    }
}

impl LocalBackend {
    /// Starts `req`'s command on a new terminal of `size` (rows, columns) in sandbox `id`,
    /// as an exec runs (the sandbox's user, its isolation).
    pub fn shell(&self, id: &str, req: &ExecRequest, size: (u16, u16)) -> Result<Terminal, Error> {
        let info = self.info(id)?;
        let socket = info.control.join(ANCHOR_SOCKET);
        let fail = |message: String| Error::Anchor {
            sandbox: id.to_owned(),
            socket: socket.clone(),
            message,
        };
        let (env, cwd) = super::exec::in_sandbox(&info, &req.env, &req.cwd);
        let request = AnchorRequest::shell(
            ExecRequest {
                env,
                cwd,
                ..req.clone()
            },
            size,
        );
        let mut conn = UnixStream::connect(&socket).map_err(|e| fail(format!("connect: {e}")))?;
        let mut line = serde_json::to_vec(&request).map_err(|e| fail(e.to_string()))?;
        line.push(b'\n');
        conn.write_all(&line)
            .map_err(|e| fail(format!("send the shell request: {e}")))?;
        let mut buf = vec![0_u8; 8192];
        let (n, leader) = rollpoint_proctree::fdpass::recv_with_fd(conn.as_fd(), &mut buf)
            .map_err(|e| fail(format!("read the shell's terminal: {e}")))?;
        buf.truncate(n);
        let end = buf.iter().position(|b| *b == b'\n').unwrap_or(buf.len());
        let reply = AnchorReply::decode(&buf[..end]).map_err(|e| fail(e.to_string()))?;
        if let Some(e) = reply.error {
            return Err(fail(e));
        }
        let (Some(leader), Some(pid)) = (leader, reply.launched) else {
            return Err(fail("the anchor sent no terminal".into()));
        };
        Ok(Terminal {
            leader,
            pid,
            pending: buf.get(end + 1..).unwrap_or_default().to_vec(),
            conn,
            sandbox: id.to_owned(),
            socket,
        })
    }
}
