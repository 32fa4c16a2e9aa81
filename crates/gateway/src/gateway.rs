//! The gateway as a value: its router for the HTTP side, and the in-process API a checkpoint
//! control plane calls (close, open, export, install, register). Its OpenAPI description is
//! `openapi`.

use std::sync::Arc;

use axum::Router;
use axum::response::IntoResponse as _;
use axum::routing::any;
use tokio::net::TcpListener;

use crate::config::GatewayConfig;
use crate::errors::GatewayError;
use crate::gate::{CloseReport, TailPolicy};
use crate::ledger::record::{CallRecord, LedgerRecord};
use crate::ledger::{self, InstallReport, Ledger};
use crate::shared::Shared;
use rollpoint_proto::key::AttemptKey;

/// A recording, gated model gateway.
#[derive(Debug, Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// Opens the ledger and prepares the upstream client.
    pub fn new(config: GatewayConfig) -> Result<Self, GatewayError> {
        let metrics = crate::metrics::Metrics::new();
        let upstream = crate::upstream::Upstreams::new(&config, &metrics)?;
        let tito = config
            .tito
            .as_ref()
            .map(crate::tito::prompt::Tito::load)
            .transpose()?;
        let ledger = Ledger::open(&config.ledger)?;
        Ok(Self {
            shared: Arc::new(Shared::new(config, upstream, ledger, metrics, tito)),
        })
    }

    /// The HTTP routes: `/r/<capture key>/v1/...` and `/metrics`.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/r/{key}/{*rest}", any(crate::call::handle))
            .route("/metrics", axum::routing::get(metrics))
            .with_state(self.shared.clone())
    }

    /// The model routes alone, `/r/<capture key>/v1/...`: what a sandbox's
    /// attached listener serves.
    pub fn model_router(&self) -> Router {
        Router::new()
            .route("/r/{key}/{*rest}", any(crate::call::handle))
            .with_state(self.shared.clone())
    }

    /// Serves the routes on `listener` until the task is dropped.
    pub async fn serve(&self, listener: TcpListener) -> std::io::Result<()> {
        rollpoint_api::serve(listener, self.router()).await
    }

    /// Lets `key`'s attempt write into the ledger; an older attempt of the rollout is fenced.
    pub fn register(&self, key: &AttemptKey) -> Result<(), GatewayError> {
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

    /// Takes no new call from now on (each is answered 503 `gateway_closed`) and resolves
    /// once every call already sent upstream is recorded and committed. Calls still waiting
    /// at a closed gate never went upstream and stay unanswered.
    pub async fn drain(&self) {
        self.shared.close_for_good();
        self.shared.recorded().await;
    }

    /// The attempts stalled by the model now and those given up, with the registry's
    /// generation, once the generation is past `after` or `wait` has passed.
    pub async fn stalls(&self, after: u64, wait: std::time::Duration) -> crate::stalls::StallView {
        self.shared.stalls.changed_after(after, wait).await;
        self.shared.stalls.view()
    }

    /// Pauses the fleet: no call goes upstream until [`Gateway::fleet_continue`]; calls
    /// generating now finish or are asked again after, as `calls` says.
    pub fn fleet_pause(&self, calls: crate::fleet::InFlightCalls) -> crate::fleet::FleetState {
        self.shared.fleet.pause(calls);
        self.fleet()
    }

    /// Continues the fleet, calls from now on tagged with `version` when given.
    pub fn fleet_continue(&self, version: Option<String>) -> crate::fleet::FleetState {
        self.shared.fleet.resume(version);
        self.fleet()
    }

    /// The fleet's state.
    #[must_use]
    pub fn fleet(&self) -> crate::fleet::FleetState {
        crate::fleet::FleetState {
            paused: self.shared.fleet.paused().is_some(),
            calls: self.shared.fleet.paused(),
            version: self.shared.fleet.version(),
            recording: self.shared.recording(),
        }
    }

    /// How many calls sent upstream are not yet recorded.
    #[must_use]
    pub fn recording(&self) -> usize {
        self.shared.recording()
    }

    /// The ledger's file.
    #[must_use]
    pub fn ledger_path(&self) -> &std::path::Path {
        self.shared.ledger.path()
    }

    /// Every ledger record of `rollout`: its calls and the bodies they reference.
    pub async fn export(&self, rollout: &str) -> Result<Vec<LedgerRecord>, GatewayError> {
        let rollout = rollout.to_owned();
        self.shared
            .ledger
            .run(move |c| ledger::export(c, &rollout))
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
            .run(move |c| ledger::install(c, &records, attempt))
            .await?;
        for rollout in &report.rollouts {
            self.shared.register(&AttemptKey::of(rollout, attempt)?)?;
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
            .run(move |c| ledger::rows(c, rollout.as_deref()))
            .await
    }

    /// A stored body by digest.
    pub async fn body(&self, digest: &str) -> Result<Option<Vec<u8>>, GatewayError> {
        let digest = digest.to_owned();
        self.shared
            .ledger
            .run(move |c| ledger::body(c, &digest))
            .await
    }
}

/// `GET /metrics`: the gateway's metrics as OpenMetrics text.
async fn metrics(
    axum::extract::State(shared): axum::extract::State<Arc<Shared>>,
) -> axum::response::Response {
    let text = shared
        .metrics
        .render(shared.gate.in_flight().len(), shared.recording());
    (
        [(
            axum::http::header::CONTENT_TYPE,
            rollpoint_api::metrics::OPENMETRICS,
        )],
        text,
    )
        .into_response()
}
