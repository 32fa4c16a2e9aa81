//! The run's Prometheus metrics, served as OpenMetrics text at `GET /metrics` on the control
//! endpoint (behind its bearer token, like every route there).
//!
//! - `rollpoint_run_rollouts{state}`: `total`, `done`, `in_flight`, `queued`, `parked`, now.
//! - `rollpoint_run_results_total{status}`: result rows written, by status.
//! - `rollpoint_run_checkpoints_total{outcome}`: `published` or `failed`.
//! - `rollpoint_run_checkpoint_phase_seconds{phase}`: `total`, `prepare`, `commit`,
//!   `publish`, `held`, `resume` of each published checkpoint.
//! - `rollpoint_run_sandbox_cpu_seconds_total`, `rollpoint_run_sandbox_disk_bytes_total`,
//!   `rollpoint_run_sandbox_network_bytes_total{direction}` (`in`, `out`) and
//!   `rollpoint_run_limits_hit_total{limit}` (`memory`, `pids`, `cpu`): what the finished
//!   rollouts' sandboxes used, summed over the run. Not labelled by rollout (a label per
//!   rollout would grow without bound); each rollout's own figures are in its result row.

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

use crate::run_loop::progress::Progress;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: String,
}

/// The run's metrics.
#[derive(Debug)]
pub(crate) struct RunMetrics {
    registry: Registry,
    rollouts: Family<StateLabel, Gauge>,
    results: Family<StatusLabel, Counter>,
    checkpoints: CheckpointMetrics,
    sandboxes: Gauge,
    cpu_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    disk_bytes: Counter,
    network_bytes: Family<DirectionLabel, Counter>,
    limits_hit: Family<LimitLabel, Counter>,
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
        let cpu_seconds = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        let disk_bytes = Counter::default();
        let network_bytes = Family::<DirectionLabel, Counter>::default();
        let limits_hit = Family::<LimitLabel, Counter>::default();
        registry.register(
            "sandbox_cpu_seconds",
            "CPU time the finished rollouts' sandboxes used",
            cpu_seconds.clone(),
        );
        registry.register(
            "sandbox_disk_bytes",
            "Bytes the finished rollouts' sandboxes kept in their uppers",
            disk_bytes.clone(),
        );
        registry.register(
            "sandbox_network_bytes",
            "Bytes through the finished rollouts' relays, by direction",
            network_bytes.clone(),
        );
        registry.register(
            "limits_hit",
            "Sandbox limits that stopped something, by limit",
            limits_hit.clone(),
        );
        Self {
            registry,
            rollouts,
            results,
            checkpoints,
            sandboxes,
            cpu_seconds,
            disk_bytes,
            network_bytes,
            limits_hit,
        }
    }

    /// A result row was written.
    pub(crate) fn result(&self, result: &rollpoint_driver::RolloutResult) {
        self.status(result.status.as_str());
        if let Some(r) = &result.resources {
            self.used(r);
        }
    }

    fn status(&self, status: &str) {
        self.results
            .get_or_create(&StatusLabel {
                status: status.to_owned(),
            })
            .inc();
    }

    fn used(&self, r: &rollpoint_owner::ResourceUsage) {
        #[expect(clippy::cast_precision_loss, reason = "milliseconds as seconds")]
        self.cpu_seconds.inc_by(r.cpu_ms as f64 / 1000.0);
        self.disk_bytes.inc_by(r.disk_bytes);
        for (direction, bytes) in [("in", r.net_bytes_in), ("out", r.net_bytes_out)] {
            self.network_bytes
                .get_or_create(&DirectionLabel { direction })
                .inc_by(bytes);
        }
        for hit in &r.limits_hit {
            let limit = hit.split(':').next().unwrap_or(hit).to_owned();
            self.limits_hit.get_or_create(&LimitLabel { limit }).inc();
        }
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
        m.status("verified");
        m.used(&rollpoint_owner::ResourceUsage {
            cpu_ms: 1500,
            net_bytes_in: 10,
            limits_hit: vec!["pids: 3 forks refused by its limit of 8 processes (pids.max)".into()],
            ..rollpoint_owner::ResourceUsage::default()
        });
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
            "rollpoint_run_sandbox_cpu_seconds_total 1.5",
            "rollpoint_run_sandbox_network_bytes_total{direction=\"in\"} 10",
            "rollpoint_run_limits_hit_total{limit=\"pids\"} 1",
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
