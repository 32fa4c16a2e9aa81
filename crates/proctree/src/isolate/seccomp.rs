//! The system-call filter of a strict sandbox: an allow list with the
//! semantics of Docker's default profile for a container without
//! `CAP_SYS_ADMIN` and the other capabilities it drops. Everything not
//! listed is refused with `EPERM`, so a harness sees an ordinary error
//! rather than a killed process; `clone3` is refused with `ENOSYS`, which
//! makes the C library fall back to `clone`, whose flags a filter can read
//! (and which is allowed only without `CLONE_NEW*` flags).
//!
//! Refused, among others: `mount`, `umount2` and the new mount API,
//! `unshare`, `setns`, `pivot_root`, `chroot` beyond the sandbox's own
//! (allowed: it needs `CAP_SYS_CHROOT`, which a sandbox keeps, and cannot
//! leave the sandbox's root), kernel modules, `kexec_*`, `bpf`,
//! `perf_event_open`, `keyctl`, `add_key`, `request_key`, `userfaultfd`,
//! `open_by_handle_at`, `reboot`, `swapon`/`swapoff`, clock settings,
//! `quotactl`, `acct`, `kcmp`, `pidfd_getfd`, `io_uring_*` (refused as
//! current Docker does), `syslog`, `ioperm`/`iopl`, `vhangup`, and every
//! 32-bit and x32 entry point (their numbers are not on the list).
//!
//! The allow list and the `clone3` answer are one program, laid out as a
//! search by [`super::bpf`]: the same answers as `seccompiler`'s linear
//! chain and `clone3` filter together, which the tests compare it with, at
//! a ninth of the length (pure Rust: the static supervisor links no C
//! library).
//! Only x86_64 has a list; elsewhere building one is an error the
//! caller reports, never a sandbox without a filter.

use seccompiler::{BpfProgram, TargetArch};

use super::bpf::{self, Arg0};

/// Every `CLONE_NEW*` flag: `clone` is allowed only with none of them.
const NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

/// `personality` values that change nothing a sandbox should not change
/// (Linux, `UNAME26`, `ADDR_NO_RANDOMIZE` alone and together, and the query
/// `0xffffffff`).
const PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// The `AF_VSOCK` address family: a socket to the hypervisor, refused.
const AF_VSOCK: u64 = 40;

#[cfg(target_arch = "x86_64")]
const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
#[cfg(not(target_arch = "x86_64"))]
const ARCH: Option<TargetArch> = None;

/// System calls allowed with any arguments.
#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const ALLOWED: &[libc::c_long] = {
    use libc::*;
    &[
        SYS_accept, SYS_accept4, SYS_access, SYS_adjtimex, SYS_alarm, SYS_arch_prctl, SYS_bind,
        SYS_brk, SYS_capget, SYS_capset, SYS_chdir, SYS_chmod, SYS_chown, SYS_chroot,
        SYS_clock_adjtime, SYS_clock_getres, SYS_clock_gettime, SYS_clock_nanosleep, SYS_close,
        SYS_close_range, SYS_connect, SYS_copy_file_range, SYS_creat, SYS_dup, SYS_dup2,
        SYS_dup3, SYS_epoll_create, SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_pwait,
        SYS_epoll_pwait2, SYS_epoll_wait, SYS_eventfd, SYS_eventfd2, SYS_execve, SYS_execveat,
        SYS_exit, SYS_exit_group, SYS_faccessat, SYS_faccessat2, SYS_fadvise64, SYS_fallocate,
        SYS_fanotify_mark, SYS_fchdir, SYS_fchmod, SYS_fchmodat, SYS_fchmodat2, SYS_fchown,
        SYS_fchownat, SYS_fcntl, SYS_fdatasync, SYS_fgetxattr, SYS_flistxattr, SYS_flock,
        SYS_fork, SYS_fremovexattr, SYS_fsetxattr, SYS_fstat, SYS_fstatfs, SYS_fsync,
        SYS_ftruncate, SYS_futex, SYS_futex_waitv, SYS_futimesat, SYS_getcpu, SYS_getcwd,
        SYS_getdents, SYS_getdents64, SYS_getegid, SYS_geteuid, SYS_getgid, SYS_getgroups,
        SYS_getitimer, SYS_getpeername, SYS_getpgid, SYS_getpgrp, SYS_getpid, SYS_getppid,
        SYS_getpriority, SYS_getrandom, SYS_getresgid, SYS_getresuid, SYS_getrlimit,
        SYS_get_robust_list, SYS_getrusage, SYS_getsid, SYS_getsockname, SYS_getsockopt,
        SYS_get_thread_area, SYS_gettid, SYS_gettimeofday, SYS_getuid, SYS_getxattr,
        SYS_inotify_add_watch, SYS_inotify_init, SYS_inotify_init1, SYS_inotify_rm_watch,
        SYS_io_cancel, SYS_ioctl, SYS_io_destroy, SYS_io_getevents, SYS_ioprio_get,
        SYS_ioprio_set, SYS_io_setup, SYS_io_submit, SYS_kill, SYS_landlock_add_rule,
        SYS_landlock_create_ruleset, SYS_landlock_restrict_self, SYS_lchown, SYS_lgetxattr,
        SYS_link, SYS_linkat, SYS_listen, SYS_listxattr, SYS_llistxattr, SYS_lremovexattr,
        SYS_lseek, SYS_lsetxattr, SYS_lstat, SYS_madvise, SYS_membarrier, SYS_memfd_create,
        SYS_memfd_secret, SYS_mincore, SYS_mkdir, SYS_mkdirat, SYS_mknod, SYS_mknodat,
        SYS_mlock, SYS_mlock2, SYS_mlockall, SYS_mmap, SYS_modify_ldt, SYS_mprotect,
        SYS_mq_getsetattr, SYS_mq_notify, SYS_mq_open, SYS_mq_timedreceive, SYS_mq_timedsend,
        SYS_mq_unlink, SYS_mremap, SYS_mseal, SYS_msgctl, SYS_msgget, SYS_msgrcv, SYS_msgsnd,
        SYS_msync, SYS_munlock, SYS_munlockall, SYS_munmap, SYS_name_to_handle_at,
        SYS_nanosleep, SYS_newfstatat, SYS_open, SYS_openat, SYS_openat2, SYS_pause,
        SYS_pidfd_open, SYS_pidfd_send_signal, SYS_pipe, SYS_pipe2, SYS_pkey_alloc,
        SYS_pkey_free, SYS_pkey_mprotect, SYS_poll, SYS_ppoll, SYS_prctl, SYS_pread64,
        SYS_preadv, SYS_preadv2, SYS_prlimit64, SYS_process_mrelease, SYS_process_vm_readv,
        SYS_process_vm_writev, SYS_pselect6, SYS_ptrace, SYS_pwrite64, SYS_pwritev,
        SYS_pwritev2, SYS_read, SYS_readahead, SYS_readlink, SYS_readlinkat, SYS_readv,
        SYS_recvfrom, SYS_recvmmsg, SYS_recvmsg, SYS_remap_file_pages, SYS_removexattr,
        SYS_rename, SYS_renameat, SYS_renameat2, SYS_restart_syscall, SYS_rmdir, SYS_rseq,
        SYS_rt_sigaction, SYS_rt_sigpending, SYS_rt_sigprocmask, SYS_rt_sigqueueinfo,
        SYS_rt_sigreturn, SYS_rt_sigsuspend, SYS_rt_sigtimedwait, SYS_rt_tgsigqueueinfo,
        SYS_sched_getaffinity, SYS_sched_getattr, SYS_sched_getparam,
        SYS_sched_get_priority_max, SYS_sched_get_priority_min, SYS_sched_getscheduler,
        SYS_sched_rr_get_interval, SYS_sched_setaffinity, SYS_sched_setattr,
        SYS_sched_setparam, SYS_sched_setscheduler, SYS_sched_yield, SYS_seccomp, SYS_select,
        SYS_semctl, SYS_semget, SYS_semop, SYS_semtimedop, SYS_sendfile, SYS_sendmmsg,
        SYS_sendmsg, SYS_sendto, SYS_setfsgid, SYS_setfsuid, SYS_setgid, SYS_setgroups,
        SYS_setitimer, SYS_setpgid, SYS_setpriority, SYS_setregid, SYS_setresgid,
        SYS_setresuid, SYS_setreuid, SYS_setrlimit, SYS_set_robust_list, SYS_setsid,
        SYS_setsockopt, SYS_set_thread_area, SYS_set_tid_address, SYS_setuid, SYS_setxattr,
        SYS_shmat, SYS_shmctl, SYS_shmdt, SYS_shmget, SYS_shutdown, SYS_sigaltstack,
        SYS_signalfd, SYS_signalfd4, SYS_socketpair, SYS_splice, SYS_stat, SYS_statfs,
        SYS_statx, SYS_symlink, SYS_symlinkat, SYS_sync, SYS_sync_file_range, SYS_syncfs,
        SYS_sysinfo, SYS_tee, SYS_tgkill, SYS_time, SYS_timer_create, SYS_timer_delete,
        SYS_timer_getoverrun, SYS_timer_gettime, SYS_timer_settime, SYS_timerfd_create,
        SYS_timerfd_gettime, SYS_timerfd_settime, SYS_times, SYS_tkill, SYS_truncate,
        SYS_umask, SYS_uname, SYS_unlink, SYS_unlinkat, SYS_utime, SYS_utimensat, SYS_utimes,
        SYS_vfork, SYS_vmsplice, SYS_wait4, SYS_waitid, SYS_write, SYS_writev,
    ]
};
#[cfg(not(target_arch = "x86_64"))]
const ALLOWED: &[libc::c_long] = &[];

/// Why a filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("strict isolation has no system-call list for this architecture ({0})")]
    Architecture(&'static str),
    #[error("laying out the seccomp filter: a call listed twice, or a check too long to jump over")]
    Layout,
}

/// `AUDIT_ARCH_X86_64`: the architecture a call must come from.
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;

/// The allowed calls and what each one's first argument must be.
fn allowed() -> Vec<(u32, Arg0)> {
    let nr = |n: libc::c_long| u32::try_from(n).unwrap_or(u32::MAX);
    let mut calls: Vec<(u32, Arg0)> = ALLOWED.iter().map(|&n| (nr(n), Arg0::Any)).collect();
    // The mask is within the low word: every `CLONE_NEW*` flag is below 2^32.
    let namespaces = u32::try_from(NAMESPACE_FLAGS).unwrap_or(u32::MAX);
    calls.push((nr(libc::SYS_clone), Arg0::Clear(namespaces)));
    calls.push((nr(libc::SYS_socket), Arg0::Not(AF_VSOCK)));
    calls.push((nr(libc::SYS_personality), Arg0::OneOf(&PERSONALITIES)));
    calls
}

/// The program: the allow list (`EPERM` for the rest), with `clone3`
/// answered `ENOSYS`, laid out as a search ([`super::bpf`]). One program,
/// so a call runs one filter.
pub fn program() -> Result<BpfProgram, FilterError> {
    ARCH.ok_or(FilterError::Architecture(std::env::consts::ARCH))?;
    let nr = u32::try_from(libc::SYS_clone3).map_err(|_| FilterError::Layout)?;
    bpf::allow_list(
        AUDIT_ARCH_X86_64,
        &allowed(),
        &[(nr, bpf::RET_ERRNO | libc::ENOSYS.unsigned_abs())],
        bpf::RET_ERRNO | libc::EPERM.unsigned_abs(),
    )
    .ok_or(FilterError::Layout)
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::isolate::bpf::interpret::run;
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    use std::collections::BTreeMap;

    fn condition(index: u8, op: SeccompCmpOp, value: u64) -> SeccompCondition {
        SeccompCondition::new(index, SeccompCmpArgLen::Qword, op, value).unwrap()
    }

    /// The allow list as `seccompiler` builds it: the reference the tree
    /// must agree with.
    fn linear_allow() -> BpfProgram {
        let arch = ARCH.expect("x86_64");
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            ALLOWED.iter().map(|&nr| (nr, Vec::new())).collect();
        let rule = |op, value| SeccompRule::new(vec![condition(0, op, value)]).unwrap();
        rules.insert(
            libc::SYS_clone,
            vec![rule(SeccompCmpOp::MaskedEq(NAMESPACE_FLAGS), 0)],
        );
        rules.insert(libc::SYS_socket, vec![rule(SeccompCmpOp::Ne, AF_VSOCK)]);
        rules.insert(
            libc::SYS_personality,
            PERSONALITIES
                .iter()
                .map(|&p| rule(SeccompCmpOp::Eq, p))
                .collect(),
        );
        let errno = SeccompAction::Errno(libc::EPERM.unsigned_abs());
        SeccompFilter::new(rules, errno, SeccompAction::Allow, arch)
            .unwrap()
            .try_into()
            .unwrap()
    }

    /// `clone3` answered `ENOSYS`, as `seccompiler` builds it.
    fn clone3_filter() -> BpfProgram {
        SeccompFilter::new(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS.unsigned_abs()),
            ARCH.expect("x86_64"),
        )
        .unwrap()
        .try_into()
        .unwrap()
    }

    /// What the kernel returns for two filters, `last` installed after
    /// `first`: the more restrictive action (compared signed, as the
    /// kernel does), and on a tie the one installed last.
    fn combined(last: u32, first: u32) -> u32 {
        let action = |r: u32| i32::from_ne_bytes((r & 0xffff_0000).to_ne_bytes());
        if action(first) < action(last) {
            first
        } else {
            last
        }
    }

    /// The tree answers every call as `seccompiler`'s chain and `clone3`
    /// filter do together: every number up to 1,024 and x32's, another
    /// architecture, and first arguments around each condition's edges; and
    /// no call runs more than a few dozen of its instructions.
    #[test]
    fn the_tree_answers_as_the_chain_in_a_few_steps() {
        let tree = program().expect("filter");
        let chain = linear_allow();
        let clone3 = clone3_filter();
        assert!(tree.len() < chain.len(), "{} {}", tree.len(), chain.len());
        let (mut tree_most, mut chain_most) = (0, 0);
        let mut args: Vec<u64> = vec![0, 1, 8, 40, 41, 0x2_0000, 0x2_0008, 0xffff_ffff];
        args.extend([1 << 32, (1 << 32) | 40, (1 << 32) | 8, u64::MAX]);
        args.extend((0..32).map(|bit| 1u64 << bit));
        args.push(0x0001_1200 | u64::from(libc::SIGCHLD.unsigned_abs()));
        let numbers = (0..1024).chain((0x4000_0000..0x4000_0000 + 600).step_by(7));
        for nr in numbers {
            for &arg in &args {
                for arch in [AUDIT_ARCH_X86_64, 0x4000_0003] {
                    let (ours, steps) = run(&tree, arch, nr, arg);
                    let (theirs, chain_steps) = run(&chain, arch, nr, arg);
                    let theirs = combined(run(&clone3, arch, nr, arg).0, theirs);
                    assert_eq!(ours, theirs, "call {nr} of arch {arch:#x} with {arg:#x}");
                    tree_most = tree_most.max(steps);
                    chain_most = chain_most.max(chain_steps);
                }
            }
        }
        assert!(
            tree_most <= 40,
            "the tree runs up to {tree_most} instructions"
        );
        assert!(
            chain_most > 10 * tree_most,
            "{chain_most} against {tree_most}"
        );
        let allow = |nr: libc::c_long, arg| {
            run(&tree, AUDIT_ARCH_X86_64, u32::try_from(nr).unwrap(), arg).0 == bpf::RET_ALLOW
        };
        assert!(allow(libc::SYS_read, 0));
        assert!(!allow(libc::SYS_mount, 0));
        assert!(!allow(
            libc::SYS_clone,
            u64::from(libc::CLONE_NEWUSER.unsigned_abs())
        ));
        assert!(allow(
            libc::SYS_clone,
            u64::from(libc::SIGCHLD.unsigned_abs())
        ));
        assert!(!allow(libc::SYS_socket, AF_VSOCK));
        assert!(allow(libc::SYS_personality, 0x8));
        assert!(!allow(libc::SYS_personality, 0x40_0000));
    }

    #[test]
    fn the_program_is_short_and_refuses_namespaces() {
        let tree = program().expect("filter");
        let chain = linear_allow();
        assert!(
            tree.len() * 8 < chain.len(),
            "{} instructions against the chain's {}",
            tree.len(),
            chain.len()
        );
        let answer =
            |nr: libc::c_long| run(&tree, AUDIT_ARCH_X86_64, u32::try_from(nr).unwrap(), 0).0;
        assert_eq!(answer(libc::SYS_clone3), bpf::RET_ERRNO | 38, "ENOSYS");
        assert_eq!(answer(libc::SYS_mount), bpf::RET_ERRNO | 1, "EPERM");
        for refused in [
            libc::SYS_mount,
            libc::SYS_unshare,
            libc::SYS_setns,
            libc::SYS_bpf,
            libc::SYS_keyctl,
            libc::SYS_init_module,
            libc::SYS_kexec_load,
            libc::SYS_perf_event_open,
            libc::SYS_open_by_handle_at,
            libc::SYS_io_uring_setup,
            libc::SYS_userfaultfd,
            libc::SYS_pivot_root,
        ] {
            assert!(!ALLOWED.contains(&refused), "{refused} must not be allowed");
        }
    }
}
