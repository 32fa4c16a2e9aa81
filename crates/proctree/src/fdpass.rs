//! Receiving a descriptor another process sent over a Unix socket (`SCM_RIGHTS`): the one
//! place the received number becomes an owned descriptor.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};

/// Reads into `buf` from `sock` with at most one descriptor attached: the bytes read and
/// the descriptor, if one came. Extra descriptors are closed.
pub fn recv_with_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut got: Option<OwnedFd> = None;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for fd in fds {
                // SAFETY: the kernel just installed `fd` in this process for this message;
                // nothing else owns it.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                if got.is_none() {
                    got = Some(owned);
                }
            }
        }
    }
    Ok((msg.bytes, got))
}
