//! Checkpoint cost of the embedded default (root): prepare + commit +
//! resume with 8, 32 and 64 in-flight rollouts (command harnesses appending
//! to a file), on the btrfs store against the copy store (the baseline),
//! measured in the same run. Prints median, min and max per phase.
//!
//! `cargo run --release -p rollpoint-run --example checkpoint_bench [ROUNDS]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use rollpoint_checkpoint::Plan;
use rollpoint_driver::RolloutTask;
use rollpoint_run::stack::{Stack, open_backend};
use rollpoint_run::{RunConfig, StoreKind};

fn task(id: &str) -> RolloutTask {
    serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["true"]}},
        "adapter": {"kind": "command", "pauses": true,
            "argv": ["/bin/sh", "-c", "while :; do echo x >> f; sleep 0.1; done"]}
    }))
    .expect("task")
}

#[derive(Default)]
struct Samples {
    prepare: Vec<Duration>,
    commit: Vec<Duration>,
    resume: Vec<Duration>,
    total: Vec<Duration>,
}

fn stats(v: &[Duration]) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let median = ms.get(ms.len() / 2).copied().unwrap_or(0.0);
    (
        median,
        ms.first().copied().unwrap_or(0.0),
        ms.last().copied().unwrap_or(0.0),
    )
}

async fn measure(store: StoreKind, n: usize, rounds: usize) -> Samples {
    let dir = tempfile::Builder::new()
        .prefix("rb")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let config = RunConfig {
        concurrency: n,
        store,
        checkpoint_every_s: 0,
        ..RunConfig::default()
    };
    let backend =
        open_backend(dir.path(), &config, rollpoint_testkit::supervisor_bin()).expect("sandboxes");
    // No model: no gateway process is started.
    let program = rollpoint_testkit::rollpoint_bin();
    let stack = Stack::build(dir.path(), &config, Arc::clone(&backend), &program, 0)
        .await
        .expect("stack");
    let ids: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
    let _handles: Vec<_> = ids
        .iter()
        .map(|id| stack.runs.register(task(id)).expect("register"))
        .collect();
    let end = Instant::now() + Duration::from_secs(600);
    while stack.owner.live_sessions().len() < n || stack.owner.seeds_in_flight() > 0 {
        assert!(Instant::now() < end, "{n} sandboxes did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut s = Samples::default();
    for round in 0..rounds {
        let plan = Plan {
            id: format!("bench-{round}"),
            scope: ids
                .iter()
                .map(|id| id.parse().expect("a task id is a key"))
                .collect(),
            continues: None,
            stop: false,
        };
        let started = Instant::now();
        let done = stack
            .coordinator
            .checkpoint(&plan)
            .await
            .expect("checkpoint");
        s.total.push(started.elapsed());
        s.prepare.push(done.timings.prepare);
        s.commit.push(done.timings.commit);
        s.resume.push(done.timings.resume);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for id in &ids {
        let _cancelled = stack.runs.cancel(id).await;
    }
    backend.destroy_all().expect("destroy");
    backend.sweep_snapshots(&[]).expect("sweep");
    stack.shutdown().await;
    // The store unmounts its image when the last handle goes.
    drop(backend);
    tokio::time::sleep(Duration::from_millis(500)).await;
    s
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    rollpoint_testkit::require_root();
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    println!("checkpoint of N in-flight rollouts, {rounds} rounds each; ms: median (min..max)");
    println!(
        "{:>4} {:>6} {:>24} {:>24} {:>24} {:>24} {:>12}",
        "N", "store", "total", "prepare", "commit", "resume", "vs copy"
    );
    for n in [8, 32, 64] {
        let copy = measure(StoreKind::Copy, n, rounds).await;
        let btrfs = measure(StoreKind::Btrfs, n, rounds).await;
        let base = stats(&copy.total).0;
        for (name, s) in [("copy", &copy), ("btrfs", &btrfs)] {
            let cell = |v: &[Duration]| {
                let (m, lo, hi) = stats(v);
                format!("{m:.1} ({lo:.1}..{hi:.1})")
            };
            let ratio = stats(&s.total).0 / base;
            println!(
                "{n:>4} {name:>6} {:>24} {:>24} {:>24} {:>24} {:>11.2}x",
                cell(&s.total),
                cell(&s.prepare),
                cell(&s.commit),
                cell(&s.resume),
                ratio
            );
        }
    }
}
