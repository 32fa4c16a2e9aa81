//! The gateway's Prometheus metrics, served as OpenMetrics text at `GET /metrics` (no token:
//! they hold counts, never a body, a key or a rollout's words).
//!
//! - `rollpoint_gateway_calls_total{status}`: calls by how they ended (`ok`, `replayed`,
//!   `upstream_unreachable`, a refusal's status, ...).
//! - `rollpoint_gateway_upstream_duration_seconds`: from sending a call upstream to the end
//!   of its reply.
//! - `rollpoint_gateway_tokens_total{kind}`: `input` and `output` tokens the upstream reported.
//! - `rollpoint_gateway_forbidden_total`: requests refused 403 for a route
//!   without its attempt's secret (a sandbox speaking for another rollout).
//! - `rollpoint_gateway_calls_in_flight`, `rollpoint_gateway_calls_recording`: now.
//! - `rollpoint_gateway_replica_calls_total{model,replica,outcome}`: sends to each replica by
//!   what came back (`answered`, `refused`, `reset`, `busy` for 429/503, `cut` before the
//!   first byte, `failed`); `rollpoint_gateway_replica_up{model,replica}` (1 while in use, 0
//!   while taken out and probed); `rollpoint_gateway_replica_outstanding{model,replica}`.
//! - `rollpoint_gateway_retries_total{reason}`: sends retried while a call waited out an
//!   outage; `rollpoint_gateway_attempts_stalled`: attempts paused for the model now.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::Value;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReplicaLabel {
    model: String,
    replica: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaOutcome {
    model: String,
    replica: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// One replica's metrics.
#[derive(Debug, Clone)]
pub(crate) struct ReplicaMetrics {
    label: ReplicaLabel,
    calls: Family<ReplicaOutcome, Counter>,
    pub up: Gauge,
    pub outstanding: Gauge,
}

impl ReplicaMetrics {
    /// A send to it came back as `outcome`.
    pub(crate) fn sent(&self, outcome: &'static str) {
        self.calls
            .get_or_create(&ReplicaOutcome {
                model: self.label.model.clone(),
                replica: self.label.replica.clone(),
                outcome,
            })
            .inc();
    }
}

/// The gateway's metrics.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    calls: Family<StatusLabel, Counter>,
    upstream: Histogram,
    tokens: Family<KindLabel, Counter>,
    in_flight: Gauge,
    recording: Gauge,
    forbidden: Counter,
    replica_calls: Family<ReplicaOutcome, Counter>,
    replica_up: Family<ReplicaLabel, Gauge>,
    replica_outstanding: Family<ReplicaLabel, Gauge>,
    retries: Family<ReasonLabel, Counter>,
    pub stalled: Gauge,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let calls = Family::<StatusLabel, Counter>::default();
        // 10 ms to about 10 minutes.
        let upstream = Histogram::new(exponential_buckets(0.01, 2.0, 17));
        let tokens = Family::<KindLabel, Counter>::default();
        let in_flight = Gauge::default();
        let recording = Gauge::default();
        let forbidden = Counter::default();
        let mut registry = Registry::with_prefix("rollpoint_gateway");
        rollpoint_api::process_metrics::register_process(&mut registry);
        registry.register("calls", "Model calls by how they ended", calls.clone());
        registry.register(
            "upstream_duration_seconds",
            "From sending a call upstream to the end of its reply",
            upstream.clone(),
        );
        registry.register("tokens", "Tokens the upstream reported", tokens.clone());
        registry.register(
            "calls_in_flight",
            "Requests waiting, upstream or delivering",
            in_flight.clone(),
        );
        registry.register(
            "calls_recording",
            "Calls sent upstream whose reply is not yet committed",
            recording.clone(),
        );
        registry.register(
            "forbidden",
            "Requests refused for a route without its attempt's secret",
            forbidden.clone(),
        );
        let replica_calls = Family::<ReplicaOutcome, Counter>::default();
        let replica_up = Family::<ReplicaLabel, Gauge>::default();
        let replica_outstanding = Family::<ReplicaLabel, Gauge>::default();
        let retries = Family::<ReasonLabel, Counter>::default();
        let stalled = Gauge::default();
        registry.register(
            "replica_calls",
            "Sends to each replica by what came back",
            replica_calls.clone(),
        );
        registry.register(
            "replica_up",
            "1 while a replica takes calls, 0 while it is out and probed",
            replica_up.clone(),
        );
        registry.register(
            "replica_outstanding",
            "Calls a replica is answering now",
            replica_outstanding.clone(),
        );
        registry.register(
            "retries",
            "Sends retried while a call waited out an outage",
            retries.clone(),
        );
        registry.register(
            "attempts_stalled",
            "Attempts paused in place while their call waits out an outage",
            stalled.clone(),
        );
        Self {
            registry,
            calls,
            upstream,
            tokens,
            in_flight,
            recording,
            forbidden,
            replica_calls,
            replica_up,
            replica_outstanding,
            retries,
            stalled,
        }
    }

    /// The metrics of replica `replica` of upstream `model`.
    pub(crate) fn replica(&self, model: &str, replica: &str) -> ReplicaMetrics {
        let label = ReplicaLabel {
            model: model.to_owned(),
            replica: replica.to_owned(),
        };
        let up = self.replica_up.get_or_create(&label).clone();
        up.set(1);
        ReplicaMetrics {
            up,
            outstanding: self.replica_outstanding.get_or_create(&label).clone(),
            calls: self.replica_calls.clone(),
            label,
        }
    }

    /// A send retried because of `reason`.
    pub(crate) fn retried(&self, reason: &'static str) {
        self.retries.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// A call ended with `status`.
    pub(crate) fn ended(&self, status: &str) {
        self.calls
            .get_or_create(&StatusLabel {
                status: status.to_owned(),
            })
            .inc();
    }

    /// A request refused 403 for its route.
    pub(crate) fn forbade(&self) {
        self.forbidden.inc();
        self.ended("route_forbidden");
    }

    /// A reply read from the upstream: its time and the tokens its usage reports.
    pub(crate) fn answered(&self, seconds: f64, usage: Option<&Value>) {
        self.upstream.observe(seconds);
        let Some(usage) = usage else { return };
        let count = |names: [&str; 2]| {
            names
                .iter()
                .find_map(|n| usage.get(*n).and_then(Value::as_u64))
                .unwrap_or(0)
        };
        for (kind, names) in [
            ("input", ["prompt_tokens", "input_tokens"]),
            ("output", ["completion_tokens", "output_tokens"]),
        ] {
            self.tokens
                .get_or_create(&KindLabel { kind })
                .inc_by(count(names));
        }
    }

    /// The text exposition, with the gauges set to `in_flight` and `recording` now.
    pub(crate) fn render(&self, in_flight: usize, recording: usize) -> String {
        self.in_flight
            .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
        self.recording
            .set(i64::try_from(recording).unwrap_or(i64::MAX));
        rollpoint_api::metrics::text(&self.registry)
    }
}
