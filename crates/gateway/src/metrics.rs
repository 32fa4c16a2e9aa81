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
        Self {
            registry,
            calls,
            upstream,
            tokens,
            in_flight,
            recording,
            forbidden,
        }
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
