//! Network namespaces made ahead of the sandboxes that take them.
//!
//! Making a network namespace runs every per-namespace setup of the kernel's
//! network stack (about 0.45 ms here), a tenth of a sandbox's start. So the
//! backend keeps a few fresh ones, made by a thread of its own off the start
//! path, and each sandbox with a network of its own takes one: its anchor
//! joins it (`--owner-netns-fd`, copied through the owner's pidfd) instead of
//! making one. A namespace is taken once and never returned: the sandbox's
//! listeners and addresses go into a namespace nothing else has seen. When
//! none is ready (a burst of starts), the anchor makes its own as before.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

/// Fresh namespaces kept ready.
const READY: usize = 8;

#[derive(Debug, Default)]
struct Ready {
    fresh: Vec<OwnedFd>,
    /// The maker has failed once: it makes no more, and every anchor makes
    /// its own.
    broken: bool,
    started: bool,
}

#[derive(Debug, Default)]
struct Shared {
    ready: Mutex<Ready>,
    taken: Condvar,
}

/// The backend's namespaces made ahead.
#[derive(Debug, Default)]
pub(super) struct NetnsPool {
    shared: Arc<Shared>,
}

impl NetnsPool {
    /// A fresh network namespace, if one is ready; the first call starts
    /// the thread that makes them.
    pub(super) fn take(&self) -> Option<OwnedFd> {
        let mut ready = self
            .shared
            .ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !ready.started {
            ready.started = true;
            let weak = Arc::downgrade(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("netns-maker".into())
                .stack_size(128 << 10)
                .spawn(move || make(&weak));
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start the thread that makes network namespaces ahead; each anchor makes its own");
                ready.broken = true;
            }
        }
        let fd = ready.fresh.pop();
        self.shared.taken.notify_one();
        fd
    }
}

/// Keeps `READY` namespaces made until the backend is gone. Each is made by
/// this thread moving into a new one (a thread's own property) and keeping a
/// descriptor of it.
fn make(weak: &Weak<Shared>) {
    loop {
        let Some(shared) = weak.upgrade() else {
            return;
        };
        {
            let ready = shared.ready.lock().unwrap_or_else(PoisonError::into_inner);
            // Woken when one is taken; the timeout notices the backend gone.
            let (ready, _) = shared
                .taken
                .wait_timeout_while(ready, Duration::from_secs(1), |r| {
                    r.fresh.len() >= READY && !r.broken
                })
                .unwrap_or_else(PoisonError::into_inner);
            if ready.broken {
                return;
            }
            if ready.fresh.len() >= READY {
                continue;
            }
        }
        let made = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)
            .and_then(|()| std::fs::File::open("/proc/thread-self/ns/net"));
        let mut ready = shared.ready.lock().unwrap_or_else(PoisonError::into_inner);
        match made {
            Ok(ns) => ready.fresh.push(OwnedFd::from(ns)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot make a network namespace ahead; each anchor makes its own");
                ready.broken = true;
                return;
            }
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    /// Needs root (CAP_SYS_ADMIN for a network namespace): fresh, distinct
    /// namespaces, none of them this process's, refilled once taken.
    #[test]
    fn root_namespaces_made_ahead_are_fresh_and_distinct() {
        rollpoint_testkit::require_root();
        let pool = NetnsPool::default();
        let own = std::fs::read_link("/proc/self/ns/net").unwrap();
        let mut seen = Vec::new();
        for _ in 0..(READY * 2) {
            let fd =
                rollpoint_testkit::wait_for(Duration::from_secs(10), "a namespace", || pool.take());
            let link = std::fs::read_link(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&fd)
            ))
            .unwrap();
            assert!(link.to_string_lossy().starts_with("net:["), "{link:?}");
            assert_ne!(link, own, "not this process's namespace");
            assert!(
                !seen.iter().any(|(l, _)| *l == link),
                "each is new: {link:?}"
            );
            // Held, so no namespace's number is reused while compared.
            seen.push((link, fd));
        }
    }
}
