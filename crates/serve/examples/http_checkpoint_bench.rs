//! Checkpoint cost over HTTP against the embedded default (root): N
//! in-flight command rollouts (appending to a file every 100 ms) on local
//! sandboxes with the copy store, each checkpoint taken (prepare, commit,
//! publish, resume) either by the coordinator in process over in-process
//! controls (`rollpoint run`'s embedded default, the baseline) or through
//! `POST /v1/coordinator/checkpoint` to `rollpoint serve coordinator`,
//! which drives `serve agent` and `serve owner` over HTTP, each its own
//! process.
//! Both measured in the same run. Prints median, min and max per phase.
//!
//! `cargo build --release -p rollpoint --bins && cargo run --release -p
//! rollpoint-serve --example http_checkpoint_bench [ROUNDS]`

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollpoint_checkpoint::Plan;
use rollpoint_driver::RolloutTask;
use rollpoint_run::stack::{Stack, open_backend};
use rollpoint_run::{RunConfig, StoreKind};
use rollpoint_serve::wire::{CheckpointReply, RolloutList, RolloutState};

const TOKEN: &str = "bench-token";

fn task(id: &str) -> serde_json::Value {
    serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["true"]}},
        "adapter": {"kind": "command", "pauses": true,
            "argv": ["/bin/sh", "-c", "while :; do echo x >> f; sleep 0.1; done"]}
    })
}

#[derive(Default)]
struct Samples {
    total: Vec<Duration>,
    prepare: Vec<Duration>,
    commit: Vec<Duration>,
    publish: Vec<Duration>,
    resume: Vec<Duration>,
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

fn run_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sb")
        .tempdir_in("/var/tmp")
        .expect("tempdir")
}

async fn embedded(n: usize, rounds: usize) -> Samples {
    let dir = run_dir();
    let config = RunConfig {
        concurrency: n,
        store: StoreKind::Copy,
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
    let ids: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
    let _handles: Vec<_> = ids
        .iter()
        .map(|id| {
            let t: RolloutTask = serde_json::from_value(task(id)).expect("task");
            stack.runs.register(t).expect("register")
        })
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
        s.publish.push(done.timings.publish);
        s.resume.push(done.timings.resume);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for id in &ids {
        let _cancelled = stack.runs.cancel(id).await;
    }
    backend.destroy_all().expect("destroy");
    backend.sweep_snapshots(&[]).expect("sweep");
    stack.shutdown().await;
    s
}

struct Service(Child);

impl Drop for Service {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.0.id()).expect("pid"));
        let _gone = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _reaped = self.0.wait();
    }
}

fn start(dir: &Path, name: &str, args: &[&str]) -> (Service, String) {
    let port_file = dir.join(format!("{name}.port"));
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log");
    let service = Service(
        Command::new(rollpoint_testkit::rollpoint_bin())
            .args(args)
            .arg("--port-file")
            .arg(&port_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn"),
    );
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(port) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|s| s.trim().parse::<u16>().ok())
        {
            return (service, format!("http://127.0.0.1:{port}"));
        }
        assert!(Instant::now() < end, "{name} wrote no port");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn over_http(n: usize, rounds: usize) -> Samples {
    let dir = run_dir();
    let logs = run_dir();
    let run = dir.path().to_str().expect("utf-8 path").to_owned();
    let token = logs.path().join("token");
    std::fs::write(&token, TOKEN).expect("token");
    let token = token.to_str().expect("utf-8 path").to_owned();
    let sup = rollpoint_testkit::supervisor_bin();
    let sup = sup.to_str().expect("utf-8 path");
    let (_owner, owner) = start(
        logs.path(),
        "owner",
        &[
            "serve",
            "owner",
            "--run-dir",
            &run,
            "--token-file",
            &token,
            "--store",
            "copy",
            "--supervisor",
            sup,
        ],
    );
    let slots = n.to_string();
    let (_agent, agent) = start(
        logs.path(),
        "agent",
        &[
            "serve",
            "agent",
            "--run-dir",
            &run,
            "--token-file",
            &token,
            "--owner",
            &owner,
            "--concurrency",
            &slots,
        ],
    );
    let (_coord, coord) = start(
        logs.path(),
        "coordinator",
        &[
            "serve",
            "coordinator",
            "--run-dir",
            &run,
            "--token-file",
            &token,
            "--participant",
            &format!("agent={agent}"),
            "--participant",
            &format!("resources={owner}"),
        ],
    );
    let http = reqwest::Client::new();
    let ids: Vec<String> = (0..n).map(|i| format!("h{i}")).collect();
    for id in &ids {
        let reply = http
            .post(format!("{agent}/v1/rollouts"))
            .bearer_auth(TOKEN)
            .body(task(id).to_string())
            .send()
            .await
            .expect("post");
        assert_eq!(reply.status().as_u16(), 202, "{id}");
    }
    let end = Instant::now() + Duration::from_secs(600);
    loop {
        let bytes = http
            .get(format!("{agent}/v1/rollouts"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("list")
            .bytes()
            .await
            .expect("list body");
        let list: RolloutList = serde_json::from_slice(&bytes).expect("list");
        if list
            .rollouts
            .iter()
            .all(|r| r.state == RolloutState::Running)
        {
            break;
        }
        assert!(Instant::now() < end, "{n} rollouts did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut s = Samples::default();
    for round in 0..rounds {
        let started = Instant::now();
        let reply = http
            .post(format!("{coord}/v1/coordinator/checkpoint"))
            .bearer_auth(TOKEN)
            .body(format!(r#"{{"v":1,"id":"bench-{round}"}}"#))
            .send()
            .await
            .expect("checkpoint");
        let status = reply.status();
        let bytes = reply.bytes().await.expect("checkpoint body");
        assert!(status.is_success(), "{}", String::from_utf8_lossy(&bytes));
        s.total.push(started.elapsed());
        let ck: CheckpointReply = serde_json::from_slice(&bytes).expect("reply");
        assert_eq!(ck.scope.len(), n);
        s.prepare.push(Duration::from_millis(ck.timings.prepare_ms));
        s.commit.push(Duration::from_millis(ck.timings.commit_ms));
        s.publish.push(Duration::from_millis(ck.timings.publish_ms));
        s.resume.push(Duration::from_millis(ck.timings.resume_ms));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for id in &ids {
        let _cancelled = http
            .delete(format!("{agent}/v1/rollouts/{id}"))
            .bearer_auth(TOKEN)
            .send()
            .await;
    }
    s
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    rollpoint_testkit::require_root();
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    println!(
        "checkpoint of N in-flight rollouts (copy store), {rounds} rounds each; ms: median (min..max)"
    );
    println!(
        "{:>4} {:>9} {:>22} {:>20} {:>22} {:>20} {:>18} {:>12}",
        "N", "via", "total", "prepare", "commit", "publish", "resume", "vs embedded"
    );
    for n in [8, 32] {
        let base = embedded(n, rounds).await;
        let http = over_http(n, rounds).await;
        let base_total = stats(&base.total).0;
        for (name, s) in [("embedded", &base), ("http", &http)] {
            let cell = |v: &[Duration]| {
                let (m, lo, hi) = stats(v);
                format!("{m:.1} ({lo:.1}..{hi:.1})")
            };
            println!(
                "{n:>4} {name:>9} {:>22} {:>20} {:>22} {:>20} {:>18} {:>11.2}x",
                cell(&s.total),
                cell(&s.prepare),
                cell(&s.commit),
                cell(&s.publish),
                cell(&s.resume),
                stats(&s.total).0 / base_total
            );
        }
    }
}
