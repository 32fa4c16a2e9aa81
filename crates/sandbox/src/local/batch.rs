//! Work over many sandboxes at once: a bounded pool of threads for the
//! per-sandbox steps of a batch (snapshots, sweeps), and how long each step
//! took, for the debug log, where a scale benchmark reads where a
//! sandbox's time goes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::crash;

#[derive(Clone)]
pub(super) struct Phases {
    last: Instant,
    done: Vec<(&'static str, f64)>,
}

impl Phases {
    pub(super) fn new() -> Self {
        Self {
            last: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Ends the step running since the last mark (or the start).
    pub(super) fn mark(&mut self, step: &'static str) {
        let now = Instant::now();
        self.done
            .push((step, (now - self.last).as_secs_f64() * 1e3));
        self.last = now;
    }
}

impl std::fmt::Display for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (step, ms)) in self.done.iter().enumerate() {
            write!(f, "{}{step} {ms:.1} ms", if i == 0 { "" } else { ", " })?;
        }
        Ok(())
    }
}

/// Workers for the per-sandbox steps of a batch (freeze, snapshot, thaw):
/// enough to overlap their waits on the kernel, few enough that a thousand
/// sandboxes do not contend for two cores.
const BATCH_WORKERS: usize = 16;

/// Workers for a batch's snapshots. btrfs commits the snapshots pending in
/// one transaction together, and a worker spends nearly all its time
/// waiting on that commit, so more of them waiting means fewer commits.
pub(super) const SNAPSHOT_WORKERS: usize = 256;

/// `f` over every item on up to [`BATCH_WORKERS`] threads; results in order.
pub(super) fn parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    parallel_on(BATCH_WORKERS, items, f)
}

/// `f` over every item on up to `workers` threads; results in order.
pub(super) fn parallel_on<T: Sync, R: Send>(
    workers: usize,
    items: &[T],
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let workers = workers.min(items.len());
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut out: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return (done, crash::take_reached());
                        };
                        done.push((i, f(item)));
                    }
                })
            })
            .collect();
        let mut out = Vec::new();
        for handle in handles {
            let (done, reached) = handle
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            out.extend(done);
            crash::add_reached(reached);
        }
        out
    });
    out.sort_unstable_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}
