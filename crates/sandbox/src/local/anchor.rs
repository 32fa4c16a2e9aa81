//! The owner's side of the anchor socket: one request line, one reply line.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use rollpoint_proto::anchor::{AnchorReply, AnchorRequest};

use crate::errors::Error;

/// A socket address holds at most 107 bytes of path, and run directories
/// and sandbox ids can make the socket's path longer: connect through the
/// directory's descriptor (`/proc/self/fd/<fd>/<name>`), which is short.
fn connect(socket: &Path) -> std::io::Result<UnixStream> {
    let (Some(dir), Some(name)) = (socket.parent(), socket.file_name()) else {
        return UnixStream::connect(socket);
    };
    let dir = std::fs::File::open(dir)?;
    let short = Path::new("/proc/self/fd")
        .join(dir.as_raw_fd().to_string())
        .join(name);
    UnixStream::connect(short)
}

pub(crate) fn ask(
    sandbox: &str,
    socket: &Path,
    request: &AnchorRequest,
    timeout: Duration,
) -> Result<AnchorReply, Error> {
    let fail = |message: String| Error::Anchor {
        sandbox: sandbox.to_owned(),
        socket: socket.to_owned(),
        message,
    };
    let mut stream = connect(socket).map_err(|e| fail(format!("connect: {e}")))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| fail(e.to_string()))?;
    let mut line = serde_json::to_vec(request).map_err(|e| fail(e.to_string()))?;
    line.push(b'\n');
    stream
        .write_all(&line)
        .map_err(|e| fail(format!("send: {e}")))?;
    let mut reply = Vec::new();
    BufReader::new(stream)
        .read_until(b'\n', &mut reply)
        .map_err(|e| fail(format!("read reply: {e}")))?;
    if reply.is_empty() {
        return Err(fail("closed without a reply".into()));
    }
    let reply = AnchorReply::decode(&reply).map_err(|e| fail(e.to_string()))?;
    match &reply.error {
        Some(message) if reply.refused => Err(Error::Refused {
            sandbox: sandbox.to_owned(),
            message: message.clone(),
        }),
        Some(message) => Err(fail(message.clone())),
        None => Ok(reply),
    }
}
