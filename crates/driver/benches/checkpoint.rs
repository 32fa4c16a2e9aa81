//! A whole checkpoint of N in-flight rollouts in one process: the drivers
//! (agent) and the owner (resources) under the coordinator, over real
//! sandboxes whose harnesses are running. Times prepare (every launch
//! frozen and confirmed), commit (every sandbox snapshotted with its
//! processes frozen, records written), publish and resume (every launch
//! continued), for 8, 32 and 64 rollouts, with the btrfs store and the copy
//! store. Baseline, measured in the same run over the same sandboxes: the
//! reference's way, per rollout in turn: SIGSTOP the sandbox's processes
//! (cgroup freeze), `tar -c` of its upper directory, thaw.
//!
//! Needs root and the supervisor (`ROLLPOINT_SUPERVISOR` or the workspace
//! build). Run: `cargo bench -p rollpoint-driver --bench checkpoint`

#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollpoint_checkpoint::{
    Coordinator, CoordinatorConfig, HostConfig, Participant, ParticipantApi, ParticipantHost, Plan,
};
use rollpoint_driver::{AgentParticipant, DriverConfig, RolloutTask, Runs};
use rollpoint_owner::{LocalOwner, Owner, ResourcesParticipant};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_snapshot::{StoreChoice, StoreOptions};

const SIZES: [usize; 3] = [8, 32, 64];
const ROUNDS: usize = 5;

fn supervisor() -> PathBuf {
    std::env::var_os("ROLLPOINT_SUPERVISOR").map_or_else(
        || {
            let exe = std::env::current_exe().unwrap();
            exe.parent()
                .and_then(Path::parent)
                .and_then(Path::parent)
                .unwrap()
                .join("debug/rollpoint-supervisor")
        },
        PathBuf::from,
    )
}

fn task(id: &str) -> RolloutTask {
    serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["true"]}},
        "adapter": {"kind": "fake", "steps": 100_000, "tick_ms": 200, "pauses": true}
    }))
    .unwrap()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn stats(samples: &[f64]) -> (f64, f64, f64) {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn cell(samples: &[f64]) -> String {
    let (median, min, max) = stats(samples);
    format!("{median:.0}/{min:.0}/{max:.0}")
}

struct Row {
    store: &'static str,
    n: usize,
    total: Vec<f64>,
    prepare: Vec<f64>,
    commit: Vec<f64>,
    publish: Vec<f64>,
    resume: Vec<f64>,
    baseline: Vec<f64>,
}

/// The reference's way for one round: each sandbox in turn frozen, its
/// upper tarred, thawed.
fn baseline(backend_dir: &Path, scratch: &Path) -> Duration {
    let start = Instant::now();
    let sandboxes = backend_dir.join("sandboxes");
    for entry in std::fs::read_dir(&sandboxes).unwrap().flatten() {
        let rec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(entry.path().join("sandbox.json")).unwrap())
                .unwrap();
        let upper = rec["upper"].as_str().unwrap();
        let id = rec["id"].as_str().unwrap();
        let cgroup = std::fs::read_dir("/sys/fs/cgroup/unified/rollpoint")
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(&format!("-{id}")))
            .unwrap();
        std::fs::write(cgroup.join("cgroup.freeze"), "1").unwrap();
        while !std::fs::read_to_string(cgroup.join("cgroup.events"))
            .unwrap()
            .contains("frozen 1")
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        let archive = scratch.join(format!("{id}.tar"));
        let ok = Command::new("tar")
            .args(["--xattrs", "--numeric-owner", "-cf"])
            .arg(&archive)
            .arg("-C")
            .arg(upper)
            .arg(".")
            .status()
            .unwrap()
            .success();
        assert!(ok);
        std::fs::write(cgroup.join("cgroup.freeze"), "0").unwrap();
        std::fs::remove_file(&archive).unwrap();
    }
    start.elapsed()
}

async fn measure(store: &'static str, choice: StoreChoice, n: usize, scratch: &Path) -> Row {
    let run_dir = scratch.join(format!("{store}-{n}"));
    let mut options = LocalOptions::new(supervisor());
    options.store = StoreOptions {
        choice,
        ..StoreOptions::default()
    };
    let backend = Arc::new(LocalBackend::open(&run_dir.join("owner"), options).unwrap());
    let owner = Arc::new(LocalOwner::new(Arc::clone(&backend) as Arc<dyn Backend>));
    let runs = Runs::new(
        Arc::clone(&owner) as Arc<dyn Owner>,
        DriverConfig {
            slots: n,
            ..DriverConfig::default()
        },
    )
    .unwrap();
    let agent: Arc<dyn Participant> = Arc::new(AgentParticipant::new(runs.clone(), "agent0"));
    let resources: Arc<dyn Participant> =
        Arc::new(ResourcesParticipant::new(Arc::clone(&owner), "owner0"));
    let controls: Vec<Arc<dyn ParticipantApi>> = vec![
        Arc::new(ParticipantHost::new(agent, HostConfig::new(&run_dir)).unwrap()),
        Arc::new(ParticipantHost::new(resources, HostConfig::new(&run_dir)).unwrap()),
    ];
    let coordinator = Coordinator::new(controls, CoordinatorConfig::new(&run_dir))
        .await
        .unwrap();
    let scope: Vec<rollpoint_checkpoint::AttemptKey> = (0..n)
        .map(|i| format!("r{i}").parse().expect("key"))
        .collect();
    let _handles: Vec<_> = scope
        .iter()
        .map(|r| runs.register(task(r.rollout().as_str())).unwrap())
        .collect();
    // Every harness running (its progress file exists) before measuring.
    let start = Instant::now();
    loop {
        let live = owner.live_sessions();
        let mut running = 0;
        for s in &live {
            if owner
                .download(&s.session, ".fake-harness/progress", 1 << 16)
                .await
                .is_ok()
            {
                running += 1;
            }
        }
        if running == n {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "{running}/{n} running"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut row = Row {
        store,
        n,
        total: Vec::new(),
        prepare: Vec::new(),
        commit: Vec::new(),
        publish: Vec::new(),
        resume: Vec::new(),
        baseline: Vec::new(),
    };
    for round in 0..ROUNDS {
        let begun = Instant::now();
        let done = coordinator
            .checkpoint(&Plan {
                id: format!("ck{round}"),
                scope: scope.clone(),
                continues: None,
                stop: false,
            })
            .await
            .unwrap();
        row.total.push(ms(begun.elapsed()));
        row.prepare.push(ms(done.timings.prepare));
        row.commit.push(ms(done.timings.commit));
        row.publish.push(ms(done.timings.publish));
        row.resume.push(ms(done.timings.resume));
        let owner_dir = run_dir.join("owner");
        let base = tokio::task::spawn_blocking({
            let scratch = scratch.to_owned();
            move || baseline(&owner_dir, &scratch)
        })
        .await
        .unwrap();
        row.baseline.push(ms(base));
    }
    for r in &scope {
        runs.cancel(r.rollout().as_str()).await.unwrap();
    }
    backend.destroy_all().unwrap();
    backend.sweep_snapshots(&[]).unwrap();
    row
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    println!(
        "checkpoint of N running rollouts (prepare + commit + publish + resume), ms median/min/max over {ROUNDS} rounds"
    );
    println!(
        "{:>6} | {:>3} | {:>14} | {:>12} | {:>14} | {:>12} | {:>12} | {:>22} | {:>6}",
        "store",
        "n",
        "checkpoint",
        "prepare",
        "commit",
        "publish",
        "resume",
        "freeze+tar+thaw (base)",
        "ratio"
    );
    for (store, choice) in [("btrfs", StoreChoice::Btrfs), ("copy", StoreChoice::Copy)] {
        for n in SIZES {
            let r = runtime.block_on(measure(store, choice, n, scratch.path()));
            println!(
                "{:>6} | {:>3} | {:>14} | {:>12} | {:>14} | {:>12} | {:>12} | {:>22} | {:>5.2}x",
                r.store,
                r.n,
                cell(&r.total),
                cell(&r.prepare),
                cell(&r.commit),
                cell(&r.publish),
                cell(&r.resume),
                cell(&r.baseline),
                stats(&r.total).0 / stats(&r.baseline).0,
            );
        }
    }
}
