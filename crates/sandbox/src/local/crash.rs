//! Crash points: the named steps of create, fork, snapshot, delete, destroy,
//! the sweeps and record writes between which a killed owner may stop. Every one must
//! leave only what a later sweep finds and removes (or what a retained
//! checkpoint names). Outside tests a point is nothing. In this crate's
//! tests the points reached are recorded, and a child process told to
//! (`ROLLPOINT_TEST_CRASH_AT=<point>#<passes>`) SIGKILLs itself at one, so
//! a test crashes at each point in turn.

#[cfg(test)]
use std::cell::RefCell;
#[cfg(test)]
use std::sync::OnceLock;
#[cfg(test)]
use std::sync::atomic::{AtomicUsize, Ordering};

/// Names the point a test child process dies at, and how many times it is
/// passed first: `<point>#<passes>`.
#[cfg(test)]
pub(crate) const CRASH_AT_ENV: &str = "ROLLPOINT_TEST_CRASH_AT";

#[cfg(test)]
thread_local! {
    static REACHED: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
static PASSES: AtomicUsize = AtomicUsize::new(0);

#[cfg(test)]
fn armed() -> Option<&'static (String, usize)> {
    static ARMED: OnceLock<Option<(String, usize)>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let value = std::env::var(CRASH_AT_ENV).ok()?;
            let (name, passes) = value.rsplit_once('#')?;
            Some((name.to_owned(), passes.parse().ok()?))
        })
        .as_ref()
}

/// Whether this process was told to crash somewhere.
#[cfg(test)]
pub(crate) fn is_armed() -> bool {
    armed().is_some()
}

/// Marks the step just done.
#[inline]
pub(crate) fn point(name: &'static str) {
    #[cfg(test)]
    {
        REACHED.with_borrow_mut(|r| r.push(name));
        if let Some((armed, passes)) = armed()
            && armed == name
            && PASSES.fetch_add(1, Ordering::SeqCst) == *passes
        {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
    }
    #[cfg(not(test))]
    let _ = name;
}

/// The points this thread reached and has not handed on (nothing outside
/// tests): a batch's worker threads hand theirs to the thread that
/// traces, through [`add_reached`].
#[cfg(test)]
pub(crate) type Reached = Vec<&'static str>;
#[cfg(not(test))]
pub(crate) type Reached = ();

pub(crate) fn take_reached() -> Reached {
    #[cfg(test)]
    {
        REACHED.with_borrow_mut(std::mem::take)
    }
}

pub(crate) fn add_reached(points: Reached) {
    #[cfg(test)]
    REACHED.with_borrow_mut(|r| r.extend(points));
    #[cfg(not(test))]
    let () = points;
}

/// Runs `f` and returns the points it reached, in order.
#[cfg(test)]
pub(crate) fn trace(f: impl FnOnce()) -> Vec<&'static str> {
    REACHED.with_borrow_mut(Vec::clear);
    f();
    REACHED.with_borrow_mut(std::mem::take)
}

#[cfg(test)]
mod tests;
