//! A launch whose binary or input file is missing fails, naming it (root,
//! real local sandboxes): its launch-log entry says `failed` and why, the
//! rollout's status is `failed` with an error naming the file, and nothing is
//! graded (the harness never ran) or left behind.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rollpoint_driver::{DriverConfig, LaunchEnd, RolloutResult, RolloutTask, Runs, Status};
use rollpoint_owner::{LocalOwner, Owner};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(180);

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

/// Runs `task` to its result over a fresh local owner; returns it with the
/// sandboxes left afterwards.
async fn run(task: serde_json::Value) -> (RolloutResult, Vec<String>) {
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
    let task: RolloutTask = serde_json::from_value(task).unwrap();
    let runs = Runs::new(Arc::clone(&owner), DriverConfig::default()).unwrap();
    let handle = runs.register(task).unwrap();
    let result = tokio::time::timeout(LIMIT, handle.result())
        .await
        .expect("the rollout ended in time")
        .unwrap();
    let left = backend.list().map(|l| l.sandboxes).unwrap_or_default();
    for id in &left {
        let _ = backend.destroy(id);
    }
    (result, left)
}

fn assert_failed_naming(result: &RolloutResult, name: &str) {
    assert_eq!(result.status, Status::InfraError, "{result:#?}");
    assert_eq!(result.verdict, None, "nothing was graded: {result:#?}");
    assert_eq!(result.reward, None, "{result:#?}");
    let error = result.error.as_deref().unwrap_or_default();
    assert!(error.contains(name), "the error names {name}: {error}");
    assert_eq!(result.launches.len(), 1, "{result:#?}");
    let launch = &result.launches[0];
    assert_eq!(launch.end, Some(LaunchEnd::Failed), "{launch:?}");
    assert!(launch.ended_at_ms.is_some(), "{launch:?}");
    let note = launch.note.as_deref().unwrap_or_default();
    assert!(
        note.contains(name) && note.contains("not started"),
        "the launch says why: {note}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn root_a_command_whose_binary_is_missing_fails_naming_it() {
    let missing = "/nonexistent/rollpoint-harness-xyz";
    let (result, left) = run(serde_json::json!({
        "v": 1,
        "task": {"id": "no-binary", "verify": {"command": ["true"]}},
        "adapter": {"kind": "command", "argv": [missing, "--flag"]}
    }))
    .await;
    assert_failed_naming(&result, missing);
    let error = result.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("No such file or directory"),
        "the error says why: {error}"
    );
    assert_eq!(result.launches[0].exit_code, Some(127), "{result:#?}");
    assert!(left.is_empty(), "the session was closed: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn root_a_command_not_on_path_fails_naming_it() {
    let missing = "rollpoint-no-such-command";
    let (result, left) = run(serde_json::json!({
        "v": 1,
        "task": {"id": "not-on-path", "verify": {"command": ["true"]}},
        "adapter": {"kind": "command", "argv": [missing]}
    }))
    .await;
    assert_failed_naming(&result, missing);
    assert!(left.is_empty(), "the session was closed: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn root_a_native_task_whose_input_file_is_missing_fails_naming_it() {
    let (result, left) = run(serde_json::json!({
        "v": 1,
        "task": {"id": "no-input", "verify": {"command": ["true"]}},
        "adapter": {"kind": "native", "input": "missing-input.json", "worker": worker_bin()}
    }))
    .await;
    assert_failed_naming(&result, "/workspace/missing-input.json");
    assert_eq!(result.launches[0].exit_code, None, "{result:#?}");
    assert!(left.is_empty(), "the session was closed: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn root_a_native_task_whose_worker_is_missing_fails_naming_it() {
    let input = serde_json::json!({"v": 1}).to_string();
    let (result, left) = run(serde_json::json!({
        "v": 1,
        "task": {
            "id": "no-worker",
            "files": {"input.json": input},
            "verify": {"command": ["true"]}
        },
        "adapter": {"kind": "native", "input": "input.json", "worker": "/nonexistent/rollpoint-worker"}
    }))
    .await;
    assert_failed_naming(&result, "/nonexistent/rollpoint-worker");
    assert!(left.is_empty(), "the session was closed: {left:?}");
}
