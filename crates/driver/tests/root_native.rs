//! The native adapter over a real local sandbox (root): `rollpoint-worker`
//! runs against the scripted model on 127.0.0.1, is paused at a checkpoint,
//! and after a simulated crash relaunches in the fork of the snapshot and
//! continues from the checkpoint file the snapshot carried.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollpoint_driver::{Bookmark, DriverConfig, LaunchEnd, ParkState, RolloutTask, Runs, Status};
use rollpoint_model_script::{Script, ScriptServer};
use rollpoint_owner::{LocalOwner, Owner};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(240);
const STEPS: usize = 6;

/// `ROLLPOINT_WORKER_BIN`, else the workspace's own build beside this test.
fn worker_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ROLLPOINT_WORKER_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let mut dir = exe.parent().unwrap().to_owned();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let p = dir.join("rollpoint-worker");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

async fn lines(owner: &Arc<dyn Owner>, session: &str) -> usize {
    owner
        .download(session, "work.txt", 1 << 20)
        .await
        .map_or(0, |b| b.iter().filter(|c| **c == b'\n').count())
}

#[tokio::test(flavor = "multi_thread")]
async fn root_native_worker_is_paused_then_continues_from_its_checkpoint_in_the_fork() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(
        LocalBackend::open(
            &dir.path().join("owner"),
            LocalOptions::new(supervisor_bin()),
        )
        .unwrap(),
    );
    let owner: Arc<dyn Owner> = Arc::new(LocalOwner::new(Arc::clone(&backend) as Arc<dyn Backend>));
    let steps: Vec<serde_json::Value> = (1..=STEPS)
        .map(|n| serde_json::json!({"shell": [format!("echo step {n} >> work.txt; sleep 0.3")]}))
        .collect();
    let script: Script = serde_json::from_value(serde_json::json!({
        "version": 1,
        "steps": steps,
        "after_last": {"text": "all steps done"}
    }))
    .unwrap();
    let model = ScriptServer::start(script, "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    // The sandbox's network is the default: its relay reaches the model, at
    // the same 127.0.0.1 port inside, and nothing else.
    let std::net::SocketAddr::V4(at) = model.addr() else {
        panic!("the model listens on IPv4")
    };
    backend.route_to_gateway(at);
    let input = serde_json::json!({
        "v": 1,
        "rollout_id": "native",
        "task": {"prompt": "Append the steps."},
        "model": {"base_url": format!("{}/v1", model.base_url()), "api": "chat_completions", "name": "scripted"},
        "workdir": "/workspace"
    });
    let check = format!("test \"$(sort -u work.txt | wc -l)\" -eq {STEPS}");
    let task: RolloutTask = serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {
            "id": "native",
            "files": {"input.json": input.to_string()},
            "verify": {"command": ["/bin/sh", "-c", check]},
            // A strict sandbox sees the host's paths it is lent, no others.
            "sandbox": {"host_paths": [worker_bin()]}
        },
        "adapter": {"kind": "native", "input": "input.json", "worker": worker_bin()}
    }))
    .unwrap();

    let first = Runs::new(Arc::clone(&owner), DriverConfig::default()).unwrap();
    let _abandoned = first.register(task.clone()).unwrap();
    tokio::time::timeout(LIMIT, async {
        let end = Instant::now() + LIMIT;
        let session = loop {
            let (_, mark) = first.export().pop().unwrap();
            if let Some(p) = mark.progress()
                && !p.launches.is_empty()
                && lines(&owner, &p.session.session).await >= 2
            {
                break p.session.session.clone();
            }
            assert!(Instant::now() < end, "the worker made no progress");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let report = first.request_park().await;
        assert_eq!(report.runs["native"], ParkState::Paused, "{report:?}");
        let (_, mark) = first.export().pop().unwrap();
        let bytes = mark.encode();
        let record = owner.snapshot(&session, "ck1").await.unwrap();
        owner.restore(record).await.unwrap();

        let second = Runs::new(Arc::clone(&owner), DriverConfig::default()).unwrap();
        let handle = second
            .install(vec![(task.clone(), Bookmark::decode(&bytes).unwrap())])
            .unwrap()
            .pop()
            .unwrap();
        let result = handle.result().await.unwrap();
        assert_eq!(result.status, Status::Verified, "{result:?}");
        assert_eq!(result.reward, Some(1.0), "{result:?}");
        assert_eq!(result.launches.len(), 2, "{result:?}");
        assert_eq!(result.launches[0].end, Some(LaunchEnd::Interrupted));
        let resumed = &result.launches[1];
        assert!(resumed.resumed, "{resumed:?}");
        assert!(
            resumed.reason.contains("checkpoint of rollout `native`"),
            "{resumed:?}"
        );
        assert_eq!(resumed.end, Some(LaunchEnd::Finished), "{resumed:?}");
        let usage = result.usage.clone().expect("usage collected");
        assert!(usage.model_calls > STEPS as u64, "{usage:?}");
    })
    .await
    .unwrap();
    for id in backend.list().map(|l| l.sandboxes).unwrap_or_default() {
        let _ = backend.destroy(&id);
    }
}
