//! What one action costs a rollout with N rollouts in flight (root, real
//! sandboxes at their default isolation, btrfs store): an `exec` through the
//! owner in process and over HTTP, a launch's start (request to its harness
//! running), and a checkpoint's pause and continue as every in-flight launch
//! sees it (the batched pause of all N, then the batched continue). Each of N
//! sessions runs a launch (`sleep`) the whole time. The baseline of each
//! action is the same action with one rollout in flight (an idle node),
//! measured first in the same run; sizes grow by adding sessions.
//!
//! `ROLLPOINT_SUPERVISOR=… cargo bench -p rollpoint-owner --bench actions [-- --sizes 1,128,1024 --reps 30]`
#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use rollpoint_owner::{HttpOwner, LocalOwner, Owner, OwnerTask, SessionLaunch};
use rollpoint_proto::anchor::{ExecRequest, LaunchRequest};
use rollpoint_proto::launch::LaunchRecord;
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_snapshot::StoreChoice;
use rollpoint_testkit::{stats, supervisor_bin};

const TOKEN: &str = "actions-bench-token";

fn args() -> (Vec<usize>, usize) {
    let mut sizes = vec![1, 128, 1024];
    let mut reps = 30;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--sizes" => {
                sizes = it
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|s| s.parse().unwrap())
                    .collect();
            }
            "--reps" => reps = it.next().unwrap().parse().unwrap(),
            _ => {}
        }
    }
    (sizes, reps)
}

fn launch(id: &str, argv: &[&str]) -> LaunchRequest {
    LaunchRequest {
        launch_id: id.to_owned(),
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        env: BTreeMap::new(),
        cwd: String::new(),
        freeze: None,
        options: Vec::new(),
    }
}

/// Whether the launch's supervisor has started its harness.
fn started(session_dir: &Path) -> bool {
    std::fs::read(session_dir.join("launch.json"))
        .ok()
        .and_then(|b| LaunchRecord::decode(&b).ok())
        .is_some_and(|r| r.started_at_ms.is_some() || r.ended.is_some())
}

async fn add_session(owner: &LocalOwner, i: usize) -> String {
    let task: OwnerTask = serde_json::from_value(serde_json::json!({
        "id": format!("r{i}"), "verify": {"command": ["true"]},
    }))
    .unwrap();
    let s = owner.create_session(task).await.unwrap();
    owner
        .launch(&s.session, launch("ticker", &["sleep", "3600"]))
        .await
        .unwrap();
    s.session
}

fn row(action: &str, n: usize, (med, min, max): (f64, f64, f64), base: f64, unit: &str) {
    println!(
        "{action:<28} {n:>6} {med:>10.3} {min:>10.3} {max:>10.3} {:>7.2}  {unit}",
        med / base
    );
}

fn main() {
    let (sizes, reps) = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::Builder::new()
            .prefix("ba")
            .tempdir_in("/var/tmp")
            .unwrap();
        let mut options = LocalOptions::new(supervisor_bin());
        options.store.choice = StoreChoice::Btrfs;
        let backend: Arc<dyn Backend> =
            Arc::new(LocalBackend::open(&dir.path().join("owner"), options).unwrap());
        let owner = Arc::new(LocalOwner::new(Arc::clone(&backend)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let served: Arc<dyn Owner> = Arc::clone(&owner) as Arc<dyn Owner>;
        let server = tokio::spawn(async move {
            rollpoint_owner::serve(listener, served, TOKEN)
                .await
                .unwrap();
        });
        let http = HttpOwner::new(&base, TOKEN).unwrap();
        let exec = ExecRequest {
            output_limit: 1 << 10,
            ..rollpoint_testkit::command(&["true"])
        };

        println!(
            "{:<28} {:>6} {:>10} {:>10} {:>10} {:>7}",
            "action", "N", "median", "min", "max", "ratio"
        );
        let mut sessions: Vec<String> = Vec::new();
        let mut baseline: BTreeMap<&str, f64> = BTreeMap::new();
        for &n in &sizes {
            let started_at = Instant::now();
            let added: Vec<String> = futures_util::stream::iter(sessions.len()..n)
                .map(|i| {
                    let owner = Arc::clone(&owner);
                    async move { add_session(&owner, i).await }
                })
                .buffer_unordered(16)
                .collect()
                .await;
            sessions.extend(added);
            eprintln!(
                "{n} in flight (start-up of {} more: {:.1} s)",
                n.saturating_sub(1),
                started_at.elapsed().as_secs_f64()
            );
            let s0 = sessions[0].clone();
            let mut measured: Vec<(&str, (f64, f64, f64), &str)> = Vec::new();

            let mut samples = Vec::new();
            for _ in 0..reps {
                let t = Instant::now();
                owner.exec(&s0, exec.clone()).await.unwrap();
                samples.push(t.elapsed().as_secs_f64() * 1e3);
            }
            measured.push(("exec (in process)", stats(samples), "ms"));

            let mut samples = Vec::new();
            for _ in 0..reps {
                let t = Instant::now();
                http.exec(&s0, exec.clone()).await.unwrap();
                samples.push(t.elapsed().as_secs_f64() * 1e3);
            }
            measured.push(("exec (HTTP)", stats(samples), "ms"));

            let mut samples = Vec::new();
            for r in 0..reps {
                let t = Instant::now();
                let l = owner
                    .launch(&s0, launch(&format!("start-{n}-{r}"), &["true"]))
                    .await
                    .unwrap();
                while !started(&l.session_dir) {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
                samples.push(t.elapsed().as_secs_f64() * 1e3);
            }
            measured.push(("launch start", stats(samples), "ms"));

            let all: Vec<SessionLaunch> = sessions
                .iter()
                .map(|s| SessionLaunch {
                    session: s.clone(),
                    launch_id: "ticker".to_owned(),
                })
                .collect();
            let (mut pause, mut resume) = (Vec::new(), Vec::new());
            for _ in 0..reps.min(10) {
                let t = Instant::now();
                let receipts = owner.pause_launches(&all).await.unwrap();
                pause.push(t.elapsed().as_secs_f64() * 1e3);
                assert!(
                    receipts
                        .iter()
                        .all(|r| r.as_ref().is_some_and(|r| r.confirmed())),
                    "every launch paused"
                );
                let t = Instant::now();
                let receipts = owner.continue_launches(&all).await.unwrap();
                resume.push(t.elapsed().as_secs_f64() * 1e3);
                assert!(
                    receipts.iter().all(|r| r.confirmed()),
                    "every launch continued"
                );
            }
            measured.push(("pause of all N (batch)", stats(pause), "ms"));
            measured.push(("continue of all N (batch)", stats(resume), "ms"));

            for (action, s, unit) in measured {
                let base = *baseline.entry(action).or_insert(s.0);
                row(action, n, s, base, unit);
            }
        }
        println!("ratio = median at N / median at the first size (the idle baseline)");
        for s in &sessions {
            let _ = owner.close(s).await;
        }
        server.abort();
    });
}
