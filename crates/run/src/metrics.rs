//! The run's Prometheus metrics, served as OpenMetrics text at `GET /metrics` on the control
//! endpoint (behind its bearer token, like every route there).
//!
//! - `rollpoint_run_rollouts{state}`: `total`, `done`, `in_flight`, `queued`, `parked`, now.
//! - `rollpoint_run_results_total{status}`: result rows written, by status.
//! - `rollpoint_run_checkpoints_total{outcome}`: `published` or `failed`.
//! - `rollpoint_run_checkpoint_phase_seconds{phase}`: `total`, `prepare`, `commit`,
//!   `publish`, `held`, `resume` of each published checkpoint.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rollpoint_api::metrics::CheckpointMetrics;
use rollpoint_api::metrics::SnapshotTotals;
use rollpoint_api::wire::PhaseTimings;
use rollpoint_driver::metrics::PauseMetrics;
use rollpoint_owner::OwnerCounts;

use crate::progress::Progress;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

/// The run's metrics.
#[derive(Debug)]
pub(crate) struct RunMetrics {
    registry: Registry,
    rollouts: Family<StateLabel, Gauge>,
    results: Family<StatusLabel, Counter>,
    checkpoints: CheckpointMetrics,
    sandboxes: Gauge,
}

impl RunMetrics {
    /// `snapshots` reads the owner's snapshot totals at each scrape.
    pub(crate) fn new(
        pauses: &PauseMetrics,
        snapshots: impl Fn() -> SnapshotTotals + Send + Sync + 'static,
    ) -> Self {
        let rollouts = Family::<StateLabel, Gauge>::default();
        let results = Family::<StatusLabel, Counter>::default();
        let mut registry = Registry::with_prefix("rollpoint_run");
        pauses.register(&mut registry);
        let sandboxes = Gauge::default();
        registry.register(
            "sandboxes",
            "Sandboxes the run's owner holds",
            sandboxes.clone(),
        );
        rollpoint_api::metrics::register_snapshots(&mut registry, snapshots);
        rollpoint_api::process_metrics::register_process(&mut registry);
        registry.register("rollouts", "Rollouts of the run by state", rollouts.clone());
        registry.register("results", "Result rows written, by status", results.clone());
        let checkpoints = CheckpointMetrics::register(&mut registry);
        Self {
            registry,
            rollouts,
            results,
            checkpoints,
            sandboxes,
        }
    }

    /// A result row of `status` was written.
    pub(crate) fn result(&self, status: &str) {
        self.results
            .get_or_create(&StatusLabel {
                status: status.to_owned(),
            })
            .inc();
    }

    /// A checkpoint was published with these timings.
    pub(crate) fn published(&self, t: &PhaseTimings) {
        self.checkpoints.published(t);
    }

    /// A checkpoint failed.
    pub(crate) fn failed(&self) {
        self.checkpoints.failed();
    }

    /// The text exposition, the rollout gauges set from `p`.
    pub(crate) fn render(&self, p: &Progress, owner: &OwnerCounts) -> String {
        self.sandboxes
            .set(i64::try_from(owner.sessions).unwrap_or(i64::MAX));
        for (state, n) in [
            ("total", p.total),
            ("done", p.done),
            ("in_flight", p.in_flight),
            ("queued", p.queued),
            ("parked", p.parked),
        ] {
            self.rollouts
                .get_or_create(&StateLabel { state })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        rollpoint_api::metrics::text(&self.registry)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_in_the_text() {
        let owner = std::sync::Arc::new(std::sync::Mutex::new(OwnerCounts {
            sessions: 2,
            snapshots: 3,
            snapshot_bytes: 4096,
            snapshot_seconds: 0.5,
            ..OwnerCounts::default()
        }));
        let m = RunMetrics::new(&PauseMetrics::default(), {
            let owner = std::sync::Arc::clone(&owner);
            move || owner.lock().unwrap().snapshot_totals()
        });
        m.result("verified");
        m.failed();
        let first = *owner.lock().unwrap();
        let _ = m.render(&Progress::default(), &first);
        owner.lock().unwrap().snapshots = 5;
        let counts = *owner.lock().unwrap();
        let text = m.render(
            &Progress {
                total: 3,
                done: 1,
                ..Progress::default()
            },
            &counts,
        );
        for name in [
            "rollpoint_run_rollouts{state=\"total\"} 3",
            "rollpoint_run_results_total{status=\"verified\"} 1",
            "rollpoint_run_checkpoints_total{outcome=\"failed\"} 1",
            "rollpoint_run_sandboxes 2",
            "rollpoint_run_snapshots_total 5",
            "rollpoint_run_snapshot_bytes_total 4096",
            "rollpoint_run_snapshot_frozen_seconds_total 0.5",
            "rollpoint_run_pause_confirm_seconds_count 0",
            "rollpoint_run_process_threads",
        ] {
            assert!(text.contains(name), "{name} in:\n{text}");
        }
        assert!(text.trim_end().ends_with("# EOF"));
        let parsed =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
        assert!(!parsed.samples.is_empty());
    }
}
