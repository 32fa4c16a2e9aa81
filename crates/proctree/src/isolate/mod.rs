//! Strict confinement of what runs in a sandbox: the process enters the
//! sandbox's user namespace (root inside is an unprivileged range of host
//! ids), installs the system-call filter ([`seccomp`]), keeps Docker's
//! default capabilities and no others, and sets `no_new_privs` when the
//! sandbox asks for it. The
//! anchor and the launch supervisors stay root in the host's user namespace
//! (they freeze cgroups and mount); only the children they start are
//! confined, between fork and exec, through `spawn::PreExec`.
//!
//! Why the namespace is entered by each child rather than made by the
//! anchor for itself: the sandbox's mount, pid, ipc, uts and network
//! namespaces then stay owned by the host's user namespace, so root inside
//! holds no capability over any of them (no mount, no `sethostname`, no
//! network configuration), and nothing inside can reach the more
//! privileged anchor or supervisors (a different uid: no signal, no ptrace,
//! no `/proc/<pid>/root`).
//!
//! Why `no_new_privs` is not always set: a kernel without it still needs
//! `CAP_SYS_ADMIN` to install a filter, which the child holds only in its
//! own user namespace, just after entering it. The filter goes in there,
//! before anything else, and is inherited by every exec after; a setuid
//! program (`sudo` in an image) then gains what root of the namespace holds
//! (the kept capabilities, under the same filter), which is Docker's
//! default. A sandbox that wants none of that sets `no_new_privs`.

mod bpf;
pub mod overlay;
pub mod seccomp;
pub mod userns;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use caps::Capability;
use seccompiler::BpfProgram;

pub use seccomp::FilterError;
pub use userns::IdRange;

use crate::credentials::Credentials;

/// The capabilities a sandbox's root keeps: Docker's default set.
pub const KEPT: [Capability; 14] = [
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_FOWNER,
    Capability::CAP_FSETID,
    Capability::CAP_KILL,
    Capability::CAP_SETGID,
    Capability::CAP_SETUID,
    Capability::CAP_SETPCAP,
    Capability::CAP_NET_BIND_SERVICE,
    Capability::CAP_NET_RAW,
    Capability::CAP_SYS_CHROOT,
    Capability::CAP_MKNOD,
    Capability::CAP_AUDIT_WRITE,
    Capability::CAP_SETFCAP,
];

/// [`KEPT`] as a bit mask.
pub fn kept_mask() -> u64 {
    KEPT.iter().fold(0, |mask, cap| mask | cap.bitmask())
}

/// The mask of capability names a task drops from [`KEPT`] (`NET_RAW` or
/// `CAP_NET_RAW`, any case); `Err` names one that is unknown or not kept
/// (a sandbox may drop, never add).
pub fn drop_mask<S: AsRef<str>>(names: &[S]) -> Result<u64, String> {
    names.iter().try_fold(0, |mask, name| {
        let name = name.as_ref();
        let cap: Capability = caps::to_canonical(name).parse().map_err(|_| {
            format!("{name:?} is not a capability name (CHOWN, NET_RAW, ... or CAP_CHOWN, ...)")
        })?;
        if !KEPT.contains(&cap) {
            let kept: Vec<String> = KEPT.iter().map(|c| c.to_string()).collect();
            return Err(format!(
                "{name:?} is not one a sandbox keeps, so it cannot be dropped (a sandbox may \
                 drop, never add; it keeps {})",
                kept.join(", ")
            ));
        }
        Ok(mask | cap.bitmask())
    })
}

/// Highest capability number a kernel may know; the bounding set is
/// emptied of every other one up to it (an unknown one reads EINVAL).
const LAST_CAP: u8 = 63;

/// `_LINUX_CAPABILITY_VERSION_3` (linux/capability.h).
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// What a confined child enters: the sandbox's user namespace and the
/// filter, built once (before any fork) and shared by every spawn.
#[derive(Debug)]
pub struct Isolation {
    userns: OwnedFd,
    filter: BpfProgram,
    kept: u64,
    no_new_privs: bool,
    /// The namespace's root, for a child given no user.
    root: Credentials,
}

impl Isolation {
    /// Confinement into the user namespace `userns` (a descriptor of it),
    /// keeping [`KEPT`] but the capabilities of `dropped` ([`drop_mask`]),
    /// with `no_new_privs` set when asked.
    pub fn new(userns: OwnedFd, dropped: u64, no_new_privs: bool) -> Result<Self, FilterError> {
        Ok(Self {
            userns,
            filter: seccomp::program()?,
            kept: kept_mask() & !dropped,
            no_new_privs,
            root: Credentials {
                uid: 0,
                gid: 0,
                groups: Vec::new(),
            },
        })
    }

    /// The capabilities of [`KEPT`] this confinement drops (a mask).
    pub fn dropped(&self) -> u64 {
        kept_mask() & !self.kept
    }

    /// Whether everything confined runs with `no_new_privs`.
    pub fn no_new_privs(&self) -> bool {
        self.no_new_privs
    }

    /// The user namespace's descriptor (handed to a launch's supervisor).
    pub fn userns(&self) -> &OwnedFd {
        &self.userns
    }

    /// Enters the confinement as `user` (root of the namespace when
    /// `None`). Runs between fork and exec: async-signal-safe, raw system
    /// calls on memory built before the fork, no allocation. Order: a
    /// cgroup namespace, the user namespace (full capabilities in it, none
    /// outside), the filter (it needs `CAP_SYS_ADMIN` there, or
    /// `no_new_privs`, and it refuses `setns`, so right after it), the bounding
    /// and ambient sets, the ids (inside the namespace), the effective,
    /// permitted and inheritable sets, then `no_new_privs` when asked.
    pub fn enter(&self, user: Option<&Credentials>) -> io::Result<()> {
        let check = |r: libc::c_long| {
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        // SAFETY: unshare(2) and setns(2) take integers (a descriptor this
        // value owns); prctl(2) integer arguments.
        unsafe {
            // A cgroup namespace rooted where the child now is (its launch's
            // or its sandbox's cgroup): `/proc/self/cgroup` shows no host
            // path. Made while still the host's root, so it belongs to the
            // host's user namespace and nothing inside can change it.
            check(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWCGROUP))?;
            check(libc::syscall(
                libc::SYS_setns,
                self.userns.as_raw_fd(),
                libc::CLONE_NEWUSER,
            ))?;
        }
        self.install_filter()?;
        // SAFETY: prctl(2) with integer arguments.
        unsafe {
            for cap in 0..=LAST_CAP {
                if self.kept & (1u64 << cap) == 0
                    && libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) != 0
                    && *libc::__errno_location() != libc::EINVAL
                {
                    return Err(io::Error::last_os_error());
                }
            }
            check(libc::c_long::from(libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            )))?;
        }
        let user = user.unwrap_or(&self.root);
        user.set()?;
        // Changing ids from the host's root (not this namespace's root)
        // clears no capability, so set them as exec will: the kept set for
        // root, none for any other user.
        let caps = if user.uid == 0 { self.kept } else { 0 };
        self.capset(caps)?;
        if self.no_new_privs {
            // SAFETY: prctl(2) with integer arguments.
            check(libc::c_long::from(unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            }))?;
        }
        Ok(())
    }

    /// Installs the filter; the caller holds `CAP_SYS_ADMIN` in its user
    /// namespace (just entered), so no `no_new_privs` is needed.
    fn install_filter(&self) -> io::Result<()> {
        let prog = libc::sock_fprog {
            len: u16::try_from(self.filter.len())
                .map_err(|_| io::Error::other("filter too long"))?,
            filter: self.filter.as_ptr().cast_mut().cast(),
        };
        // SAFETY: seccomp(2) reads `prog`, which points at a live program of
        // `len` instructions.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &raw const prog,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Sets the effective and permitted sets to `caps` and the inheritable
    /// set to none. The `caps` crate's setters allocate (a hash set), so
    /// the raw call.
    fn capset(&self, caps: u64) -> io::Result<()> {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let header = Header {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let half = |shift: u32| u32::try_from((caps >> shift) & 0xffff_ffff).unwrap_or(0);
        let data = [
            Data {
                effective: half(0),
                permitted: half(0),
                inheritable: 0,
            },
            Data {
                effective: half(32),
                permitted: half(32),
                inheritable: 0,
            },
        ];
        // SAFETY: capset(2) reads a version-3 header and two data structs.
        if unsafe { libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
