//! The state every request shares: configuration, the upstream client, the ledger, the
//! gate, the registered attempts and the per-key call counters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rollpoint_proto::key::{AttemptKey, RolloutId};

use crate::config::GatewayConfig;
use crate::errors::GatewayError;
use crate::fleet::Fleet;
use crate::gate::Gate;
use crate::ledger::{self, CallId, Ledger};
use crate::metrics::Metrics;
use crate::stalls::Stalls;
use crate::tito::prompt::Tito;
use crate::upstream::Upstreams;

pub(crate) struct Shared {
    pub config: GatewayConfig,
    /// The upstreams: their clients, base URLs, credentials and limits.
    pub upstreams: Upstreams,
    pub ledger: Ledger,
    pub gate: Arc<Gate>,
    /// Registered rollouts and their current attempt.
    keys: Mutex<HashMap<RolloutId, u32>>,
    /// Each registered attempt's route secret, to name the sender of a
    /// forbidden call in one lookup (filled only with a route key).
    senders: Mutex<HashMap<String, AttemptKey>>,
    /// Next sequence number per attempt, loaded from the ledger on first use, so a
    /// call's id is known without waiting for the ledger.
    seqs: Mutex<HashMap<AttemptKey, i64>>,
    /// Calls sent upstream whose reply is not yet committed to the ledger.
    recording: tokio::sync::watch::Sender<usize>,
    /// Set when the gateway takes no new call (its run's controller is gone).
    closed: AtomicBool,
    pub metrics: Metrics,
    /// Attempts whose calls wait out an outage past the retry budget.
    pub stalls: Arc<Stalls>,
    /// The policy version and the fleet's pause.
    pub fleet: Fleet,
    /// The model's tokenizer and chat template, with token-in/token-out.
    pub tito: Option<Tito>,
}

/// Why an attempt's calls may not write into the ledger.
#[derive(Debug)]
pub(crate) enum KeyRefused {
    /// No such rollout, or an attempt later than the registered one.
    Unknown(String),
    /// An attempt earlier than the registered one.
    Fenced(String),
}

/// One call sent upstream and not yet recorded; dropping it says the recording ended.
pub(crate) struct Recording {
    count: tokio::sync::watch::Sender<usize>,
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("upstream", &self.upstreams.default().base)
            .field("ledger", &self.ledger.path())
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(
        config: GatewayConfig,
        upstreams: Upstreams,
        ledger: Ledger,
        metrics: Metrics,
        tito: Option<Tito>,
    ) -> Self {
        Self {
            tito,
            stalls: Arc::new(Stalls::new(metrics.stalled.clone())),
            fleet: Fleet::new(config.policy_version.clone(), config.fleet_paused),
            config,
            upstreams,
            ledger,
            gate: Arc::new(Gate::default()),
            keys: Mutex::new(HashMap::new()),
            senders: Mutex::new(HashMap::new()),
            seqs: Mutex::new(HashMap::new()),
            recording: tokio::sync::watch::Sender::new(0),
            closed: AtomicBool::new(false),
            metrics,
        }
    }

    /// Counts a call going upstream until the returned guard is dropped; `None` once the
    /// gateway takes no new call. The check and the count happen under the count's lock,
    /// the same lock [`Shared::close_for_good`] sets the flag under, so a drain that saw
    /// the count reach 0 can never be followed by a call sent upstream.
    pub(crate) fn start_recording(&self) -> Option<Recording> {
        let mut counted = false;
        self.recording.send_if_modified(|n| {
            if self.closed.load(Ordering::SeqCst) {
                return false;
            }
            *n += 1;
            counted = true;
            true
        });
        counted.then(|| Recording {
            count: self.recording.clone(),
        })
    }

    /// How many calls sent upstream are not yet recorded.
    pub(crate) fn recording(&self) -> usize {
        *self.recording.borrow()
    }

    /// Resolves once every call sent upstream is recorded.
    pub(crate) async fn recorded(&self) {
        let mut rx = self.recording.subscribe();
        let _closed = rx.wait_for(|n| *n == 0).await;
    }

    /// Takes no new call from now on: neither one arriving nor one already admitted that
    /// has not yet started its recording (one waiting at a closed gate, say).
    pub(crate) fn close_for_good(&self) {
        self.recording
            .send_modify(|_| self.closed.store(true, Ordering::SeqCst));
    }

    /// Whether new calls are refused.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<RolloutId, u32>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn register(&self, key: &AttemptKey) -> Result<(), GatewayError> {
        let mut keys = self.keys();
        let known = keys.get(key.rollout()).copied();
        if let Some(current) = known
            && key.attempt() < current
        {
            return Err(GatewayError::StaleAttempt {
                rollout: key.rollout().to_string(),
                attempt: key.attempt(),
                current,
            });
        }
        keys.insert(key.rollout().clone(), key.attempt());
        drop(keys);
        // Once per attempt: with open keys every call registers its key.
        if known != Some(key.attempt())
            && let Some(route_key) = &self.config.route_key
        {
            self.senders
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(route_key.secret(&key.to_string()), key.clone());
        }
        Ok(())
    }

    fn take_seq(&self, key: &AttemptKey) -> Option<i64> {
        let mut seqs = self.seqs.lock().unwrap_or_else(PoisonError::into_inner);
        let next = seqs.get_mut(key)?;
        let seq = *next;
        *next += 1;
        Some(seq)
    }

    /// The id of `key`'s next call.
    pub(crate) async fn next_call(&self, key: &AttemptKey) -> Result<CallId, GatewayError> {
        if let Some(seq) = self.take_seq(key) {
            return Ok(CallId::new(key.clone(), seq));
        }
        let row = ledger::RowKey::Attempt(key.clone());
        let stored = self.ledger.run(move |c| ledger::next_seq(c, &row)).await?;
        let mut seqs = self.seqs.lock().unwrap_or_else(PoisonError::into_inner);
        let next = seqs.entry(key.clone()).or_insert(stored);
        let seq = *next;
        *next += 1;
        Ok(CallId::new(key.clone(), seq))
    }

    /// The registered attempt whose route secret is `secret`, if any (to
    /// name the sandbox that sent a forbidden call).
    pub(crate) fn attempt_of_secret(&self, secret: &str) -> Option<AttemptKey> {
        self.senders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&secret.to_ascii_lowercase())
            .cloned()
    }

    /// Whether requests of `key` may write into the ledger.
    pub(crate) fn check_key(&self, key: &AttemptKey) -> Result<(), KeyRefused> {
        if self.config.open_keys && self.register(key).is_ok() {
            return Ok(());
        }
        match self.keys().get(key.rollout()) {
            None => Err(KeyRefused::Unknown(format!(
                "capture key {key} names no registered rollout"
            ))),
            Some(&current) if key.attempt() < current => Err(KeyRefused::Fenced(format!(
                "capture key {key} is attempt {} of rollout {}, fenced by attempt {current}",
                key.attempt(),
                key.rollout().as_str()
            ))),
            Some(&current) if key.attempt() > current => Err(KeyRefused::Unknown(format!(
                "capture key {key}: attempt {} of rollout {} is not registered (current {current})",
                key.attempt(),
                key.rollout().as_str()
            ))),
            Some(_) => Ok(()),
        }
    }
}
