//! Attempts stalled by the model: one of their calls has waited out an outage longer than
//! the retry budget. Whoever runs the rollouts (`rollpoint run`'s loop, over
//! `GET /v1/gateway/stalls`) pauses each stalled attempt's launch in place, so its timers and
//! tool commands do not run on while the model is away, and continues it once the call has a
//! reply. An attempt whose call outlasted the outage bound is `given up`: that call and every
//! later one of the attempt end `upstream_unreachable` at once, so its harness ends and the
//! rollout is an infrastructure failure, never a model answer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

use rollpoint_proto::key::AttemptKey;

#[derive(Debug, Default)]
struct Inner {
    /// Attempt → its calls stalled now.
    stalled: BTreeMap<AttemptKey, usize>,
    given_up: BTreeSet<AttemptKey>,
}

/// The registry of stalled attempts; every change bumps the generation.
#[derive(Debug)]
pub(crate) struct Stalls {
    inner: Mutex<Inner>,
    generation: watch::Sender<u64>,
    gauge: Gauge,
}

/// One stalled call; dropping it ends the stall.
#[derive(Debug)]
pub(crate) struct Stall {
    stalls: Arc<Stalls>,
    attempt: AttemptKey,
}

impl Drop for Stall {
    fn drop(&mut self) {
        let mut inner = self.stalls.lock();
        if let Some(n) = inner.stalled.get_mut(&self.attempt) {
            *n -= 1;
            if *n == 0 {
                inner.stalled.remove(&self.attempt);
            }
        }
        self.stalls.changed(&inner);
    }
}

/// The stalled and given-up attempts, and the registry's generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallView {
    pub generation: u64,
    pub stalled: Vec<AttemptKey>,
    pub given_up: Vec<AttemptKey>,
}

impl Stalls {
    pub(crate) fn new(gauge: Gauge) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            generation: watch::Sender::new(0),
            gauge,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn changed(&self, inner: &Inner) {
        self.gauge
            .set(i64::try_from(inner.stalled.len()).unwrap_or(i64::MAX));
        self.generation.send_modify(|g| *g += 1);
    }

    /// Marks a call of `attempt` stalled until the returned guard is dropped.
    pub(crate) fn stall(self: &Arc<Self>, attempt: &AttemptKey) -> Stall {
        let mut inner = self.lock();
        *inner.stalled.entry(attempt.clone()).or_default() += 1;
        self.changed(&inner);
        Stall {
            stalls: Arc::clone(self),
            attempt: attempt.clone(),
        }
    }

    /// A call of `attempt` outlasted the outage bound.
    pub(crate) fn give_up(&self, attempt: &AttemptKey) {
        let mut inner = self.lock();
        if inner.given_up.insert(attempt.clone()) {
            self.changed(&inner);
        }
    }

    pub(crate) fn is_given_up(&self, attempt: &AttemptKey) -> bool {
        self.lock().given_up.contains(attempt)
    }

    /// The registry now.
    pub(crate) fn view(&self) -> StallView {
        let inner = self.lock();
        StallView {
            generation: *self.generation.borrow(),
            stalled: inner.stalled.keys().cloned().collect(),
            given_up: inner.given_up.iter().cloned().collect(),
        }
    }

    /// Resolves once the generation is past `after`, or after `wait`.
    pub(crate) async fn changed_after(&self, after: u64, wait: std::time::Duration) {
        let mut rx = self.generation.subscribe();
        let _ = tokio::time::timeout(wait, rx.wait_for(|g| *g > after)).await;
    }
}
