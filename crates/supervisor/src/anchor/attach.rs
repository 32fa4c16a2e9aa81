//! Handing the sandbox's gateway listener to a gateway on the same node
//! (`--gateway-attach SANDBOX=PATH`), so that a model call takes no relay:
//! the harness's connection to `127.0.0.1:<gateway port>` is accepted by
//! the gateway itself, in the sandbox's namespace, as if it were local.
//!
//! One message on the gateway's attach socket (Unix `SOCK_SEQPACKET`, the
//! gateway's, mode 0600): a [`GatewayAttach`] and, as `SCM_RIGHTS`, the
//! listener. The gateway's answer comes back on the same connection, read
//! by the host-side process after the fork (the gateway's work overlaps PID
//! 1's mounts, and PID 1 serves nothing until it is read), which then holds
//! the connection for its whole life (PID 1 never holds it): when the
//! anchor, and so the sandbox, ends, the gateway sees the connection end and
//! closes the listener. A sandbox whose gateway refuses or cannot be reached
//! does not start: its calls would have nowhere to go.

use std::io::{IoSlice, IoSliceMut};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr, connect, recvmsg,
    sendmsg, setsockopt, socket, sockopt,
};
use nix::sys::stat::Mode;
use nix::sys::time::TimeVal;
use rollpoint_proto::net::{ATTACH_VERSION, AttachReply, GatewayAttach};

use crate::errors::Error;

/// How long the gateway may take to answer.
const ANSWER: Duration = Duration::from_secs(10);

/// A listener sent, its answer not yet read.
#[derive(Debug)]
pub struct Sent {
    sock: OwnedFd,
    path: PathBuf,
    sandbox: String,
}

/// Sends `listener` for `sandbox` to the gateway at `socket_path`; the
/// answer is read by [`Sent::confirm`], so that the gateway's work overlaps
/// PID 1's. A gateway that is not there fails here.
pub fn send(socket_path: &Path, sandbox: &str, listener: &TcpListener) -> Result<Sent, Error> {
    let fail = |what: &'static str| {
        let path = socket_path.to_owned();
        move |source: nix::Error| Error::Setup { what, path, source }
    };
    let sock: OwnedFd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(fail("open a socket to the gateway's attach socket"))?;
    let timeout = TimeVal::new(i64::try_from(ANSWER.as_secs()).unwrap_or(i64::MAX), 0);
    setsockopt(&sock, sockopt::ReceiveTimeout, &timeout)
        .map_err(fail("set a timeout on the gateway's attach socket"))?;
    setsockopt(&sock, sockopt::SendTimeout, &timeout)
        .map_err(fail("set a timeout on the gateway's attach socket"))?;
    // A socket address holds 108 bytes: a longer path is reached through a
    // descriptor of its directory (`/proc/self/fd/<n>/<name>`).
    let (dir, name) = (socket_path.parent(), socket_path.file_name());
    let _held;
    let short = match (dir, name) {
        (Some(dir), Some(name)) if socket_path.as_os_str().len() >= 100 => {
            let fd = nix::fcntl::open(
                dir,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(fail("open the directory of the gateway's attach socket"))?;
            let short = Path::new("/proc/self/fd")
                .join(fd.as_raw_fd().to_string())
                .join(name);
            _held = fd;
            short
        }
        _ => socket_path.to_owned(),
    };
    let addr = UnixAddr::new(&short).map_err(fail("name the gateway's attach socket"))?;
    connect(sock.as_raw_fd(), &addr).map_err(fail("connect to the gateway's attach socket"))?;
    let header = serde_json::to_vec(&GatewayAttach {
        v: ATTACH_VERSION,
        sandbox: sandbox.to_owned(),
    })
    .map_err(|source| Error::Encode {
        path: socket_path.to_owned(),
        source,
    })?;
    let fds = [listener.as_raw_fd()];
    sendmsg::<()>(
        sock.as_raw_fd(),
        &[IoSlice::new(&header)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(fail("hand the gateway listener over on"))?;
    Ok(Sent {
        sock,
        path: socket_path.to_owned(),
        sandbox: sandbox.to_owned(),
    })
}

impl Sent {
    /// Reads the gateway's answer; returns the connection, to be held while
    /// the sandbox lives.
    pub fn confirm(self) -> Result<OwnedFd, Error> {
        let mut buf = [0_u8; 4096];
        let n = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            recvmsg::<()>(self.sock.as_raw_fd(), &mut iov, None, MsgFlags::empty())
                .map_err(|source| Error::Setup {
                    what: "read the gateway's answer on",
                    path: self.path.clone(),
                    source,
                })?
                .bytes
        };
        let reply = AttachReply::decode(buf.get(..n).unwrap_or_default()).map_err(|source| {
            Error::Format {
                path: self.path.clone(),
                source,
            }
        })?;
        match reply.error {
            None => Ok(self.sock),
            Some(why) => Err(Error::Refused(format!(
                "the gateway at {} does not serve sandbox {}'s listener: {why}",
                self.path.display(),
                self.sandbox
            ))),
        }
    }
}
