//! Prometheus metrics every service shares the shape of: the OpenMetrics reply of `GET
//! /metrics`, and the checkpoint counters and phase histograms of whoever coordinates
//! checkpoints (`rollpoint run`, `rollpoint serve coordinator`).

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse as _, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::wire::PhaseTimings;

/// The content type of the OpenMetrics text format.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `registry` as an OpenMetrics reply.
#[must_use]
pub fn reply(registry: &Registry) -> Response {
    ([(CONTENT_TYPE, OPENMETRICS)], text(registry)).into_response()
}

/// `registry` as OpenMetrics text.
#[must_use]
pub fn text(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing to a String does not fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

fn phase_histogram() -> Histogram {
    // 1 ms to about a minute.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// `checkpoints_total{outcome}` (`published`, `failed`) and
/// `checkpoint_phase_seconds{phase}` (`total`, `prepare`, `commit`, `publish`, `held`,
/// `resume`), registered under the registry's prefix.
#[derive(Debug, Clone)]
pub struct CheckpointMetrics {
    checkpoints: Family<OutcomeLabel, Counter>,
    phases: Family<PhaseLabel, Histogram, fn() -> Histogram>,
}

impl CheckpointMetrics {
    /// Registers the checkpoint metrics in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let checkpoints = Family::<OutcomeLabel, Counter>::default();
        let phases: Family<PhaseLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(phase_histogram);
        registry.register("checkpoints", "Checkpoints by outcome", checkpoints.clone());
        registry.register(
            "checkpoint_phase_seconds",
            "Time of each phase of a published checkpoint",
            phases.clone(),
        );
        Self {
            checkpoints,
            phases,
        }
    }

    /// A checkpoint was published with these timings.
    pub fn published(&self, t: &PhaseTimings) {
        self.checkpoints
            .get_or_create(&OutcomeLabel {
                outcome: "published",
            })
            .inc();
        for (phase, ms) in [
            ("total", t.total_ms),
            ("prepare", t.prepare_ms),
            ("commit", t.commit_ms),
            ("publish", t.publish_ms),
            ("held", t.held_ms),
            ("resume", t.resume_ms),
        ] {
            #[expect(clippy::cast_precision_loss, reason = "milliseconds of a checkpoint")]
            let seconds = ms as f64 / 1000.0;
            self.phases
                .get_or_create(&PhaseLabel { phase })
                .observe(seconds);
        }
    }

    /// A checkpoint failed.
    pub fn failed(&self) {
        self.checkpoints
            .get_or_create(&OutcomeLabel { outcome: "failed" })
            .inc();
    }
}

/// What an owner's snapshots came to since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SnapshotTotals {
    pub taken: u64,
    /// Bytes of the snapshots whose store knows their size (the copy store's archives).
    pub bytes: u64,
    /// Time their sandboxes were frozen for them, summed.
    pub seconds: f64,
}

/// Registers `snapshots_total`, `snapshot_bytes_total` and `snapshot_frozen_seconds_total`
/// under the registry's prefix, read from `totals` at each scrape (the owner keeps the
/// totals; nothing is copied between scrapes).
pub fn register_snapshots(
    registry: &mut Registry,
    totals: impl Fn() -> SnapshotTotals + Send + Sync + 'static,
) {
    registry.register_collector(Box::new(SnapshotCollector(Box::new(totals))));
}

struct SnapshotCollector(Box<dyn Fn() -> SnapshotTotals + Send + Sync>);

impl std::fmt::Debug for SnapshotCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SnapshotCollector")
    }
}

impl prometheus_client::collector::Collector for SnapshotCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric as _;
        use prometheus_client::metrics::counter::ConstCounter;
        let t = (self.0)();
        for (name, help, value) in [
            ("snapshots", "Sandbox snapshots taken", t.taken),
            (
                "snapshot_bytes",
                "Bytes of the snapshots taken, where the store knows them (copy store archives)",
                t.bytes,
            ),
        ] {
            let c = ConstCounter::new(value);
            c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        let seconds = ConstCounter::new(t.seconds);
        seconds.encode(encoder.encode_descriptor(
            "snapshot_frozen_seconds",
            "Time sandboxes were frozen to be snapshotted, summed",
            None,
            seconds.metric_type(),
        )?)?;
        Ok(())
    }
}
