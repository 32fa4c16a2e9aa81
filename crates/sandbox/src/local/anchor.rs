//! The owner's side of the anchor socket: one request line, one reply line.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use rollpoint_proto::anchor::{AnchorReply, AnchorRequest};

use crate::Error;

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
    let mut stream = UnixStream::connect(socket).map_err(|e| fail(format!("connect: {e}")))?;
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
        Some(message) => Err(fail(message.clone())),
        None => Ok(reply),
    }
}
