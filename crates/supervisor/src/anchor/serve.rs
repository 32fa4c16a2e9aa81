//! The anchor socket: one JSON request line in, one JSON reply line out, each
//! connection on its own thread so a long `exec` never holds up a `launch`
//! or a `status`.
//!
//! The socket is bound under a temporary name and renamed into place, so a
//! host that sees `anchor.sock` can connect to it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::stat::{Mode, umask};
use rollpoint_proto::anchor::{
    ANCHOR_SOCKET, ANCHOR_VERSION, AnchorReply, AnchorRequest, AnchorVerb, SANDBOX_CONTROL_DIR,
};

use super::reaper::Reaper;
use super::{RunAs, exec, launch, shell};
use crate::errors::Error;

/// Largest request line accepted (an exec may carry its stdin).
const MAX_REQUEST: u64 = 64 * 1024 * 1024;

/// How long a client may take to send its request line.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Binds the anchor socket, mode 0600; returns it and its path.
pub fn bind() -> Result<(UnixListener, PathBuf), Error> {
    let dir = Path::new(SANDBOX_CONTROL_DIR);
    let path = dir.join(ANCHOR_SOCKET);
    let temp = dir.join(format!(".{ANCHOR_SOCKET}.{}", std::process::id()));
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Socket { path, source }
    };
    match std::fs::remove_file(&temp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&temp)(e)),
        _ => {}
    }
    // Created private: no moment where another user could connect.
    let old = umask(Mode::from_bits_truncate(0o077));
    let bound = UnixListener::bind(&temp);
    umask(old);
    let listener = bound.map_err(io(&temp))?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600)).map_err(io(&temp))?;
    std::fs::rename(&temp, &path).map_err(io(&path))?;
    Ok((listener, path))
}

/// Accepts connections for as long as the anchor lives.
pub fn serve(listener: &UnixListener, reaper: &Arc<Reaper>, run_as: &Arc<RunAs>) {
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                eprintln!("rollpoint-supervisor: anchor socket: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let reaper = Arc::clone(reaper);
        let run_as = Arc::clone(run_as);
        let started = std::thread::Builder::new()
            .name("anchor-request".into())
            .spawn(move || {
                if let Err(e) = answer(&stream, &reaper, &run_as) {
                    eprintln!("rollpoint-supervisor: anchor request failed: {e}");
                }
            });
        if let Err(e) = started {
            eprintln!("rollpoint-supervisor: anchor socket: cannot serve a connection: {e}");
        }
    }
}

fn answer(stream: &UnixStream, reaper: &Reaper, run_as: &RunAs) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut line = Vec::new();
    BufReader::new(stream.take(MAX_REQUEST)).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        // A liveness probe: connected and hung up without asking.
        return Ok(());
    }
    let reply = match AnchorRequest::decode(&line) {
        Ok(AnchorRequest {
            verb: AnchorVerb::Shell,
            exec: Some(x),
            size,
            ..
        }) => {
            stream.set_read_timeout(None)?;
            return shell::serve(stream, reaper, run_as, &x, size.unwrap_or((24, 80)));
        }
        Ok(req) => perform(reaper, run_as, &req),
        Err(e) => AnchorReply::error(std::process::id(), e.to_string()),
    };
    let mut out = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
    out.push(b'\n');
    let mut stream = stream;
    stream.write_all(&out)
}

/// Serves one request.
fn perform(reaper: &Reaper, run_as: &RunAs, req: &AnchorRequest) -> AnchorReply {
    let pid = std::process::id();
    let mut reply = AnchorReply {
        v: ANCHOR_VERSION,
        pid,
        exec: None,
        launched: None,
        error: None,
        refused: false,
    };
    let result = match req.verb {
        AnchorVerb::Status => Ok(()),
        AnchorVerb::Exec => match &req.exec {
            Some(x) => exec::exec(reaper, run_as, x).map(|out| reply.exec = Some(out)),
            None => Err("exec request: field `exec` is missing".to_owned()),
        },
        AnchorVerb::Shell => Err("shell request: field `exec` is missing".to_owned()),
        AnchorVerb::Launch => match &req.launch {
            Some(l) => match launch::refusal(run_as, l) {
                Some(why) => {
                    reply.refused = true;
                    Err(why)
                }
                None => launch::launch(reaper, run_as, l).map(|p| reply.launched = Some(p)),
            },
            None => Err("launch request: field `launch` is missing".to_owned()),
        },
    };
    reply.error = result.err();
    reply
}
