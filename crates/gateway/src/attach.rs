//! Sandboxes' gateway listeners, handed over by their anchors on this node
//! (`rollpoint gateway --attach-socket PATH`), so that a model call from a
//! sandbox takes no relay: the harness's connection to
//! `127.0.0.1:<gateway port>` in its own network namespace is accepted here,
//! by the gateway, as a connection to its own port would be.
//!
//! The attach socket is a Unix `SOCK_SEQPACKET` socket, mode 0600, that only
//! root may use (the anchors are root on the host; the sandboxes never see
//! it). Each connection carries one [`GatewayAttach`] with, as `SCM_RIGHTS`,
//! the listener the anchor made in the sandbox's namespace; the answer is an
//! [`AttachReply`], and the anchor then holds the connection for its whole
//! life. The listener serves the model routes only (no metrics, no control
//! routes) until that connection ends, and each request it takes carries an
//! [`AttachedSandbox`] naming the sandbox, so a refused route is logged with
//! the sandbox that sent it.

use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use axum::{Extension, Router};
use rollpoint_proto::net::{ATTACH_VERSION, AttachReply, GatewayAttach};
use tokio_seqpacket::ancillary::OwnedAncillaryMessage;
use tokio_seqpacket::{UnixSeqpacket, UnixSeqpacketListener};

use crate::errors::GatewayError;

/// The sandbox whose namespace a request's connection was accepted in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachedSandbox(pub String);

/// The attach socket, bound.
#[derive(Debug)]
pub struct AttachSocket {
    listener: UnixSeqpacketListener,
    path: PathBuf,
}

impl AttachSocket {
    /// Binds `path` (mode 0600), replacing a socket a previous gateway left;
    /// anything else there is refused. Within a tokio runtime.
    pub fn bind(path: &Path) -> Result<Self, GatewayError> {
        let fail = |source: std::io::Error| GatewayError::AttachSocket {
            path: path.to_owned(),
            source,
        };
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path).map_err(fail)?,
            Ok(_) => {
                return Err(fail(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "exists and is not a socket",
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(e)),
        }
        // A socket address holds 108 bytes: a longer path is bound through a
        // descriptor of its directory (`/proc/self/fd/<n>/<name>`).
        let listener = match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) if path.as_os_str().len() >= 100 => {
                let dir = std::fs::File::open(dir).map_err(fail)?;
                let short = Path::new("/proc/self/fd")
                    .join(std::os::fd::AsRawFd::as_raw_fd(&dir).to_string())
                    .join(name);
                UnixSeqpacketListener::bind(short).map_err(fail)?
            }
            _ => UnixSeqpacketListener::bind(path).map_err(fail)?,
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(fail)?;
        Ok(Self {
            listener,
            path: path.to_owned(),
        })
    }

    /// Takes listeners until the task is dropped; each serves `app`.
    pub async fn serve(mut self, app: Router) {
        loop {
            match self.listener.accept().await {
                Ok(conn) => {
                    tokio::spawn(attach(conn, app.clone()));
                }
                Err(e) => {
                    tracing::warn!(socket = %self.path.display(), error = %e, "attach socket: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// One anchor's request: checked, answered, then served.
async fn attach(conn: UnixSeqpacket, app: Router) {
    let taken = take(&conn).await;
    let reply = AttachReply {
        v: ATTACH_VERSION,
        error: taken.as_ref().err().cloned(),
    };
    if let Ok(bytes) = serde_json::to_vec(&reply) {
        let _ignored = conn.send(&bytes).await;
    }
    let (sandbox, listener) = match taken {
        Ok(taken) => taken,
        Err(why) => {
            tracing::warn!("attach socket: a listener refused: {why}");
            return;
        }
    };
    tracing::info!(sandbox = %sandbox, "serving a sandbox's gateway listener in its namespace");
    let app = app.layer(Extension(AttachedSandbox(sandbox.clone())));
    let mut end = [0_u8; 1];
    tokio::select! {
        r = rollpoint_api::serve(listener, app) => {
            if let Err(e) = r {
                tracing::warn!(sandbox = %sandbox, error = %e, "a sandbox's gateway listener failed");
            }
        }
        // The anchor sends nothing more: any return is its end.
        _ = conn.recv(&mut end) => {
            tracing::debug!(sandbox = %sandbox, "the sandbox's anchor ended; its listener is closed");
        }
    }
}

/// The request's sandbox and listener, or why not.
async fn take(conn: &UnixSeqpacket) -> Result<(String, tokio::net::TcpListener), String> {
    let peer = conn
        .peer_cred()
        .map_err(|e| format!("cannot read the sender's credentials: {e}"))?;
    if peer.uid() != 0 {
        return Err(format!(
            "uid {} may not attach listeners (root only)",
            peer.uid()
        ));
    }
    let mut buf = [0_u8; 4096];
    let mut ancillary = [0_u8; 256];
    let (info, messages) = conn
        .recv_with_ancillary(&mut buf, &mut ancillary)
        .await
        .map_err(|e| format!("cannot read the request: {e}"))?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in messages.into_messages() {
        if let OwnedAncillaryMessage::FileDescriptors(more) = message {
            fds.extend(more);
        }
    }
    let request = GatewayAttach::decode(buf.get(..info.bytes_read()).unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let [listener]: [OwnedFd; 1] = fds.try_into().map_err(|fds: Vec<OwnedFd>| {
        format!(
            "sandbox {}: expected 1 descriptor (its listener), got {}",
            request.sandbox,
            fds.len()
        )
    })?;
    let listener = std::net::TcpListener::from(listener);
    let bad = |what: &str, e: std::io::Error| format!("sandbox {}: {what}: {e}", request.sandbox);
    listener
        .local_addr()
        .map_err(|e| bad("the first descriptor is not a TCP listener", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| bad("cannot make the listener non-blocking", e))?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| bad("cannot serve the listener", e))?;
    Ok((request.sandbox, listener))
}
