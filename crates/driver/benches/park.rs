//! Cost of a checkpoint's park-and-open round for 4 rollouts running the
//! fake harness in real local sandboxes (root): pausing in place (the
//! default) against stopping and relaunching (the baseline, an adapter that
//! does not pause). Park: `request_park` until every run is parked. Back:
//! from `open` until every harness has made a new step.
//!
//! `cargo build --workspace --bins && cargo bench -p rollpoint-driver --bench park`
#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rollpoint_driver::{DriverConfig, RolloutTask, Runs};
use rollpoint_owner::{LocalOwner, Owner};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_testkit::{require_root, supervisor_bin};

const RUNS: usize = 4;
const ROUNDS: usize = 10;

fn stats(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
}

async fn steps(owner: &Arc<dyn Owner>, session: &str) -> usize {
    owner
        .download(session, ".fake-harness/progress", 1 << 24)
        .await
        .map_or(0, |b| b.iter().filter(|c| **c == b'\n').count())
}

async fn sessions(owner: &Arc<dyn Owner>, runs: &Runs) -> Vec<String> {
    loop {
        let mut found = Vec::new();
        for (_, mark) in runs.export() {
            if let Some(p) = mark.progress()
                && !p.launches.is_empty()
                && steps(owner, &p.session.session).await > 0
            {
                found.push(p.session.session.clone());
            }
        }
        if found.len() == RUNS {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Park and back times (ms) over the rounds.
async fn measure(owner: &Arc<dyn Owner>, pauses: bool) -> (Vec<f64>, Vec<f64>) {
    let runs = Runs::new(Arc::clone(owner), DriverConfig::default()).unwrap();
    for i in 0..RUNS {
        let task: RolloutTask = serde_json::from_value(serde_json::json!({
            "v": 1,
            "task": {"id": format!("bench-{pauses}-{i}"), "verify": {"command": ["true"]}},
            "adapter": {"kind": "fake", "steps": 1_000_000, "tick_ms": 10, "pauses": pauses}
        }))
        .unwrap();
        drop(runs.register(task).unwrap());
    }
    let sessions = sessions(owner, &runs).await;
    let (mut park, mut back) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let report = runs.request_park().await;
        park.push(start.elapsed().as_secs_f64() * 1e3);
        assert!(report.ready(), "{report:?}");
        let mut seen = Vec::new();
        for s in &sessions {
            seen.push(steps(owner, s).await);
        }
        let start = Instant::now();
        runs.open().await;
        for (s, before) in sessions.iter().zip(seen) {
            while steps(owner, s).await <= before {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        back.push(start.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (rollout, _) in runs.export() {
        runs.cancel(&rollout).await.unwrap();
    }
    (park, back)
}

fn main() {
    require_root();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(
            LocalBackend::open(
                &dir.path().join("owner"),
                LocalOptions::new(supervisor_bin()),
            )
            .unwrap(),
        );
        let owner: Arc<dyn Owner> =
            Arc::new(LocalOwner::new(Arc::clone(&backend) as Arc<dyn Backend>));
        let (pause_park, pause_back) = measure(&owner, true).await;
        let (stop_park, stop_back) = measure(&owner, false).await;
        let total = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x + y).collect::<Vec<_>>();
        let rows = [
            ("pause in place: park (ms)", pause_park.clone()),
            ("pause in place: back (ms)", pause_back.clone()),
            (
                "pause in place: park + back (ms)",
                total(&pause_park, &pause_back),
            ),
            ("stop and relaunch: park (ms)", stop_park.clone()),
            ("stop and relaunch: back (ms)", stop_back.clone()),
            (
                "stop and relaunch: park + back (ms)",
                total(&stop_park, &stop_back),
            ),
        ];
        println!("{RUNS} rollouts, {ROUNDS} rounds");
        println!("| metric | median | min | max |");
        println!("|---|---|---|---|");
        for (name, samples) in rows {
            let (med, min, max) = stats(samples);
            println!("| {name} | {med:.1} | {min:.1} | {max:.1} |");
        }
        let ratio =
            stats(total(&pause_park, &pause_back)).0 / stats(total(&stop_park, &stop_back)).0;
        println!("ratio pause / stop-and-relaunch (median park + back): {ratio:.3}");
        for id in backend.list().map(|l| l.sandboxes).unwrap_or_default() {
            let _ = backend.destroy(&id);
        }
    });
}
