//! A child spawned through `PreExec` starts with an empty signal mask and
//! every disposition at its default, whatever its parent blocked or ignored.
//! One test in its own binary: it changes process-wide dispositions.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::io::Read;
use std::process::{Command, Stdio};

use rollpoint_proctree::spawn::PreExec;

/// The `SigBlk` and `SigIgn` masks of a `/proc/.../status` text.
fn masks(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} missing from:\n{status}"));
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    (field("SigBlk:"), field("SigIgn:"))
}

fn bit(sig: libc::c_int) -> u64 {
    1 << (sig - 1)
}

#[test]
fn child_gets_an_empty_mask_and_default_dispositions() {
    let blocked = [
        libc::SIGCHLD,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGUSR1,
    ];
    let ignored = [
        libc::SIGCHLD,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR2,
        libc::SIGTTOU,
        libc::SIGRTMIN() + 2,
    ];
    // SAFETY: the set is initialised before use; this thread, which spawns
    // below, is the only one whose mask changes; SIG_IGN runs no handler
    // code, and this binary holds no other test that needs the defaults.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        for sig in blocked {
            libc::sigaddset(set.as_mut_ptr(), sig);
        }
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()),
            0
        );
        for sig in ignored {
            assert_ne!(libc::signal(sig, libc::SIG_IGN), libc::SIG_ERR);
        }
    }
    let parent = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let (parent_blk, parent_ign) = masks(&parent);
    for sig in blocked {
        assert_ne!(
            parent_blk & bit(sig),
            0,
            "signal {sig} not blocked in the parent"
        );
    }
    for sig in ignored {
        assert_ne!(
            parent_ign & bit(sig),
            0,
            "signal {sig} not ignored in the parent"
        );
    }

    let mut cmd = Command::new("cat");
    cmd.arg("/proc/self/status").stdout(Stdio::piped());
    PreExec::new().install(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut status = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut status)
        .unwrap();
    // SIGCHLD is ignored here, so the kernel reaps the child: the wait
    // returns once it is gone, with ECHILD.
    let _ = child.wait();
    let (blk, ign) = masks(&status);
    assert_eq!(blk, 0, "the child's SigBlk is {blk:016x}, not empty");
    assert_eq!(ign, 0, "the child's SigIgn is {ign:016x}, not empty");
}
