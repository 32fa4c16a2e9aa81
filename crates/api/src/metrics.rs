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
/// with the values of `t`, under the registry's prefix.
pub fn register_snapshots(registry: &mut Registry, t: SnapshotTotals) {
    let taken = Counter::<u64>::default();
    taken.inc_by(t.taken);
    let bytes = Counter::<u64>::default();
    bytes.inc_by(t.bytes);
    let seconds = Counter::<f64, std::sync::atomic::AtomicU64>::default();
    seconds.inc_by(t.seconds);
    registry.register("snapshots", "Sandbox snapshots taken", taken);
    registry.register(
        "snapshot_bytes",
        "Bytes of the snapshots taken, where the store knows them (copy store archives)",
        bytes,
    );
    registry.register(
        "snapshot_frozen_seconds",
        "Time sandboxes were frozen to be snapshotted, summed",
        seconds,
    );
}
