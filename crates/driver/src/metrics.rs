//! Pauses of launches for checkpoints, as Prometheus metrics: how many by outcome and how
//! long the supervisor took to confirm each frozen (its receipt's `duration_us`). Shared by
//! every run of a `Runs`; whoever serves `/metrics` registers them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// `pauses_total{outcome}` (`confirmed`, `already_ended`, `not_running`, `failed`) and
/// `pause_confirm_seconds`.
#[derive(Debug, Clone)]
pub struct PauseMetrics {
    pauses: Family<OutcomeLabel, Counter>,
    confirm: Histogram,
}

impl Default for PauseMetrics {
    fn default() -> Self {
        Self {
            pauses: Family::default(),
            // 100 µs to about 6.5 s.
            confirm: Histogram::new(exponential_buckets(0.0001, 2.0, 17)),
        }
    }
}

impl PauseMetrics {
    /// Registers the metrics (shared, not copied) in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "pauses",
            "Pauses of launches for checkpoints, by outcome",
            self.pauses.clone(),
        );
        registry.register(
            "pause_confirm_seconds",
            "Time the supervisor took to confirm a launch frozen",
            self.confirm.clone(),
        );
    }

    /// A pause ended with `outcome`; `confirm_us` is the receipt's duration.
    pub(crate) fn paused(&self, outcome: &'static str, confirm_us: u64) {
        self.pauses.get_or_create(&OutcomeLabel { outcome }).inc();
        if outcome == "confirmed" {
            #[expect(clippy::cast_precision_loss, reason = "microseconds of a pause")]
            self.confirm.observe(confirm_us as f64 / 1e6);
        }
    }
}
