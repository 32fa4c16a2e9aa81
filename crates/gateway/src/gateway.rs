//! The gateway as a value: its router for the HTTP side, and the in-process API a checkpoint
//! control plane calls (close, open, export, install, register).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::any;
use axum::serve::ListenerExt as _;
use tokio::net::TcpListener;

use crate::capture::CaptureKey;
use crate::config::GatewayConfig;
use crate::errors::GatewayError;
use crate::gate::{CloseReport, Gate, TailPolicy};
use crate::ledger::record::{CallRecord, LedgerRecord};
use crate::ledger::{InstallReport, Ledger};
use crate::proxy::Refusal;

pub(crate) struct Shared {
    pub config: GatewayConfig,
    /// Upstream base URL without a trailing slash.
    pub upstream: String,
    pub ledger: Ledger,
    pub gate: Arc<Gate>,
    pub client: reqwest::Client,
    /// Registered rollouts and their current attempt.
    keys: Mutex<HashMap<String, u32>>,
    /// Next sequence number per capture key, loaded from the ledger on first use, so a
    /// call's id is known without waiting for the ledger.
    seqs: Mutex<HashMap<String, i64>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("upstream", &self.upstream)
            .field("ledger", &self.ledger.path())
            .finish_non_exhaustive()
    }
}

impl Shared {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self, key: &CaptureKey) -> Result<(), GatewayError> {
        let mut keys = self.keys();
        let current = keys.entry(key.rollout.clone()).or_insert(key.attempt);
        if key.attempt < *current {
            return Err(GatewayError::StaleAttempt {
                rollout: key.rollout.clone(),
                attempt: key.attempt,
                current: *current,
            });
        }
        *current = key.attempt;
        Ok(())
    }

    fn take_seq(&self, capture_key: &str) -> Option<i64> {
        let mut seqs = self.seqs.lock().unwrap_or_else(PoisonError::into_inner);
        let next = seqs.get_mut(capture_key)?;
        let seq = *next;
        *next += 1;
        Some(seq)
    }

    /// The next sequence number of `capture_key`: its call id is `<capture_key>#<seq>`.
    pub(crate) async fn next_seq(&self, capture_key: &str) -> Result<i64, GatewayError> {
        if let Some(seq) = self.take_seq(capture_key) {
            return Ok(seq);
        }
        let key = capture_key.to_owned();
        let stored = self
            .ledger
            .run(move |c| crate::ledger::ops::next_seq(c, &key))
            .await?;
        let mut seqs = self.seqs.lock().unwrap_or_else(PoisonError::into_inner);
        let next = seqs.entry(capture_key.to_owned()).or_insert(stored);
        let seq = *next;
        *next += 1;
        Ok(seq)
    }

    /// Whether requests of `key` may write into the ledger.
    pub(crate) fn check_key(&self, key: &CaptureKey) -> Result<(), Refusal> {
        if self.config.open_keys && self.register(key).is_ok() {
            return Ok(());
        }
        match self.keys().get(&key.rollout) {
            None => Err(Refusal::new(
                StatusCode::NOT_FOUND,
                "unknown_capture_key",
                format!("capture key {key} names no registered rollout"),
            )),
            Some(&current) if key.attempt < current => Err(Refusal::new(
                StatusCode::CONFLICT,
                "attempt_fenced",
                format!(
                    "capture key {key} is attempt {} of rollout {}, fenced by attempt {current}",
                    key.attempt, key.rollout
                ),
            )),
            Some(&current) if key.attempt > current => Err(Refusal::new(
                StatusCode::NOT_FOUND,
                "unknown_capture_key",
                format!(
                    "capture key {key}: attempt {} of rollout {} is not registered (current {current})",
                    key.attempt, key.rollout
                ),
            )),
            Some(_) => Ok(()),
        }
    }
}

/// A recording, gated model gateway.
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// Opens the ledger and prepares the upstream client.
    pub fn new(config: GatewayConfig) -> Result<Self, GatewayError> {
        let upstream = config.upstream.trim_end_matches('/').to_owned();
        if !upstream.starts_with("http://") {
            return Err(GatewayError::BadUpstream {
                url: config.upstream.clone(),
            });
        }
        let ledger = Ledger::open(&config.ledger)?;
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            // A proxy passes redirects on; it does not follow them.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(1024)
            .build()
            .map_err(GatewayError::Client)?;
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                upstream,
                ledger,
                gate: Arc::new(Gate::default()),
                client,
                keys: Mutex::new(HashMap::new()),
                seqs: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The HTTP routes: `/r/<capture key>/v1/...`.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/r/{key}/{*rest}", any(crate::proxy::handle))
            .with_state(self.shared.clone())
    }

    /// Serves the routes on `listener` until the task is dropped.
    pub async fn serve(&self, listener: TcpListener) -> std::io::Result<()> {
        // Streams are many small writes: without TCP_NODELAY, Nagle's algorithm holds each
        // behind the caller's delayed ACK (about 40 ms).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, self.router()).await
    }

    /// Lets `key`'s attempt write into the ledger; an older attempt of the rollout is fenced.
    pub fn register(&self, key: &CaptureKey) -> Result<(), GatewayError> {
        self.shared.register(key)
    }

    /// Closes the admission gate and reports what is in flight.
    #[must_use]
    pub fn close(&self, tails: TailPolicy) -> CloseReport {
        self.shared.gate.close(tails)
    }

    /// Opens the admission gate.
    pub fn open(&self) {
        self.shared.gate.open();
    }

    /// Whether the gate is open.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.shared.gate.is_open()
    }

    /// Every request in flight (waiting, upstream or delivering).
    #[must_use]
    pub fn in_flight(&self) -> Vec<crate::gate::InFlight> {
        self.shared.gate.in_flight()
    }

    /// Resolves at the next change of the gate or of a request in flight.
    pub async fn gate_changed(&self) {
        let mut rx = self.shared.gate.subscribe();
        let _closed = rx.changed().await;
    }

    /// Waits until no reply is being delivered (after `close(TailPolicy::Finish)`).
    pub async fn deliveries_drained(&self) {
        self.shared.gate.deliveries_drained().await;
    }

    /// Every ledger record of `rollout`: its calls and the bodies they reference.
    pub async fn export(&self, rollout: &str) -> Result<Vec<LedgerRecord>, GatewayError> {
        let rollout = rollout.to_owned();
        self.shared
            .ledger
            .run(move |c| crate::ledger::ops::export(c, &rollout))
            .await
    }

    /// Installs exported records and registers `attempt` as the continuing attempt of each
    /// rollout they hold; repeated conversations of that attempt are then replayed.
    pub async fn install(
        &self,
        records: Vec<LedgerRecord>,
        attempt: u32,
    ) -> Result<InstallReport, GatewayError> {
        let report = self
            .shared
            .ledger
            .run(move |c| crate::ledger::ops::install(c, &records, attempt))
            .await?;
        for rollout in &report.rollouts {
            self.shared.register(&CaptureKey::new(rollout, attempt)?)?;
        }
        Ok(report)
    }

    /// Waits until everything recorded so far is committed to the ledger file.
    pub async fn flush(&self) -> Result<(), GatewayError> {
        self.shared.ledger.flush().await
    }

    /// Ledger rows of `rollout`, or all rows, in admission order.
    pub async fn calls(&self, rollout: Option<&str>) -> Result<Vec<CallRecord>, GatewayError> {
        let rollout = rollout.map(str::to_owned);
        self.shared
            .ledger
            .run(move |c| crate::ledger::ops::rows(c, rollout.as_deref()))
            .await
    }

    /// A stored body by digest.
    pub async fn body(&self, digest: &str) -> Result<Option<Vec<u8>>, GatewayError> {
        let digest = digest.to_owned();
        self.shared
            .ledger
            .run(move |c| crate::ledger::ops::body(c, &digest))
            .await
    }
}
