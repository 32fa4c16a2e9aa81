//! Which replica of an upstream a call goes to, and which are in use.
//!
//! A call goes to the live replica with the fewest calls outstanding. With `sticky` (the
//! default, for servers with a prefix cache such as vLLM and SGLang) a rollout's later calls
//! go to the replica its first call went to while that replica is live, so each turn finds
//! the conversation's prefix cached there; a replica taken out moves its rollouts to the
//! least loaded one. A replica is taken out when a connection to it is refused or reset, or
//! after [`OUT_AFTER`] failures in a row (429, 503, a reply cut before its first byte); a
//! task then probes it (`GET /v1/models`, any reply below 500 counts) with a growing wait
//! until it answers, and puts it back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rollpoint_proto::key::RolloutId;
use tokio::sync::Notify;

use crate::metrics::{Metrics, ReplicaMetrics};

/// Failures in a row (of any kind) that take a replica out.
const OUT_AFTER: u32 = 3;
/// First and longest wait between probes of a replica taken out.
const PROBE_FIRST: Duration = Duration::from_millis(200);
const PROBE_MAX: Duration = Duration::from_secs(5);
/// Rollouts remembered for stickiness; past this the map starts over (the cost is a cache
/// miss per rollout, not a wrong answer).
const MAX_STICKY: usize = 65_536;

/// What a send to a replica came back as, when it was not a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The connection was refused (or could not be made).
    Refused,
    /// The connection closed before the reply's head.
    Reset,
    /// 429 or 503.
    Busy,
    /// The reply's body ended in an error before its first byte.
    Cut,
}

impl Failure {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Reset => "reset",
            Self::Busy => "busy",
            Self::Cut => "cut",
        }
    }
}

/// One replica.
#[derive(Debug)]
pub(crate) struct Replica {
    /// Base URL without a trailing slash.
    pub base: String,
    index: usize,
    outstanding: AtomicUsize,
    out: AtomicBool,
    failures: AtomicU32,
    metrics: ReplicaMetrics,
}

/// A call's use of a replica: counted outstanding until dropped.
#[derive(Debug)]
pub(crate) struct Lease {
    replica: Arc<Replica>,
}

impl Lease {
    pub(crate) fn base(&self) -> &str {
        &self.replica.base
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let n = self.replica.outstanding.fetch_sub(1, Ordering::SeqCst) - 1;
        self.replica
            .metrics
            .outstanding
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// The replicas of one upstream.
#[derive(Debug)]
pub(crate) struct Replicas {
    list: Vec<Arc<Replica>>,
    sticky: bool,
    /// Rollout → index of the replica its calls go to.
    assigned: Mutex<HashMap<RolloutId, usize>>,
    /// Where the next scan for the least loaded starts, so ties spread.
    next: AtomicUsize,
    /// Notified when a replica is put back.
    back: Arc<Notify>,
}

impl Replicas {
    pub(crate) fn new(model: &str, bases: Vec<String>, sticky: bool, metrics: &Metrics) -> Self {
        let list = bases
            .into_iter()
            .enumerate()
            .map(|(index, base)| {
                Arc::new(Replica {
                    metrics: metrics.replica(model, &base),
                    base,
                    index,
                    outstanding: AtomicUsize::new(0),
                    out: AtomicBool::new(false),
                    failures: AtomicU32::new(0),
                })
            })
            .collect();
        Self {
            list,
            sticky,
            assigned: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(0),
            back: Arc::new(Notify::new()),
        }
    }

    /// The replica a call of `rollout` goes to now, or `None` when every one is out.
    pub(crate) fn pick(&self, rollout: &RolloutId) -> Option<Lease> {
        let replica = if self.sticky && self.list.len() > 1 {
            let mut assigned = self.assigned.lock().unwrap_or_else(PoisonError::into_inner);
            match assigned.get(rollout).map(|&i| &self.list[i]) {
                Some(r) if !r.out.load(Ordering::SeqCst) => Arc::clone(r),
                _ => {
                    let r = self.least_loaded()?;
                    if assigned.len() >= MAX_STICKY {
                        assigned.clear();
                    }
                    assigned.insert(rollout.clone(), r.index);
                    r
                }
            }
        } else {
            self.least_loaded()?
        };
        let n = replica.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
        replica
            .metrics
            .outstanding
            .set(i64::try_from(n).unwrap_or(i64::MAX));
        Some(Lease { replica })
    }

    fn least_loaded(&self) -> Option<Arc<Replica>> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let len = self.list.len();
        (0..len)
            .map(|i| &self.list[(start + i) % len])
            .filter(|r| !r.out.load(Ordering::SeqCst))
            .min_by_key(|r| r.outstanding.load(Ordering::SeqCst))
            .cloned()
    }

    /// A reply came back from `lease`'s replica.
    pub(crate) fn answered(&self, lease: &Lease) {
        lease.replica.failures.store(0, Ordering::SeqCst);
        lease.replica.metrics.sent("answered");
    }

    /// A send to `lease`'s replica failed as `failure`; a refused or reset connection, or
    /// [`OUT_AFTER`] failures in a row, take it out until a probe finds it answering.
    pub(crate) fn failed(&self, lease: &Lease, failure: Failure, client: &reqwest::Client) {
        let r = &lease.replica;
        r.metrics.sent(failure.as_str());
        let row = r.failures.fetch_add(1, Ordering::SeqCst) + 1;
        if matches!(failure, Failure::Refused | Failure::Reset) || row >= OUT_AFTER {
            self.take_out(r, client);
        }
    }

    /// A send that failed in a way that says nothing of the replica (a timeout).
    pub(crate) fn other_failure(lease: &Lease) {
        lease.replica.metrics.sent("failed");
    }

    /// Whether every replica is out.
    pub(crate) fn all_out(&self) -> bool {
        self.list.iter().all(|r| r.out.load(Ordering::SeqCst))
    }

    /// Resolves when a replica is put back (or at once if one is in use).
    pub(crate) async fn back(&self) {
        let notified = self.back.notified();
        if !self.all_out() {
            return;
        }
        notified.await;
    }

    fn take_out(&self, replica: &Arc<Replica>, client: &reqwest::Client) {
        if replica.out.swap(true, Ordering::SeqCst) {
            return;
        }
        replica.metrics.up.set(0);
        tracing::warn!(replica = %replica.base, "replica taken out; probing it until it answers");
        let replica = Arc::clone(replica);
        let client = client.clone();
        let back = Arc::clone(&self.back);
        tokio::spawn(async move {
            let mut wait = PROBE_FIRST;
            loop {
                tokio::time::sleep(wait).await;
                let probe = client
                    .get(format!("{}/v1/models", replica.base))
                    .timeout(Duration::from_secs(5))
                    .send()
                    .await;
                if probe.is_ok_and(|r| r.status().as_u16() < 500) {
                    replica.failures.store(0, Ordering::SeqCst);
                    replica.out.store(false, Ordering::SeqCst);
                    replica.metrics.up.set(1);
                    tracing::info!(replica = %replica.base, "replica answers again; back in use");
                    back.notify_waiters();
                    return;
                }
                wait = (wait * 2).min(PROBE_MAX);
            }
        });
    }
}
