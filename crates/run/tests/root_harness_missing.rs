//! A harness task whose harness binary is not installed fails its rollout
//! with an error that names the install command, through the real
//! `rollpoint run` (root), and leaves nothing behind.

mod common;

use std::ffi::OsStr;
use std::time::Duration;

use common::{processes_of, spawn, wait, write_jsonl};
use rollpoint_driver::Status;
use rollpoint_testkit::{mounts_under, require_root, supervisor_bin};

#[test]
fn root_a_missing_harness_fails_naming_the_install_command() {
    require_root();
    let sup = supervisor_bin();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let rows: Vec<_> = ["opencode", "codex", "claude-code", "pi"]
        .iter()
        .map(|kind| {
            serde_json::json!({
                "v": 1,
                "task": {"id": format!("miss-{kind}"), "verify": {"command": ["true"]}},
                "adapter": {"kind": kind, "prompt": "count", "bin": format!("/nonexistent/{kind}")}
            })
        })
        .collect();
    let tasks = dir.join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    let run_dir = dir.join("run");
    let log = dir.join("run.log");
    let mut child = spawn(
        &[
            OsStr::new("run"),
            tasks.as_os_str(),
            OsStr::new("--run-dir"),
            run_dir.as_os_str(),
            OsStr::new("--supervisor"),
            sup.as_os_str(),
            OsStr::new("--checkpoint-every-s"),
            OsStr::new("0"),
        ],
        &log,
    );
    let status = wait(&mut child, Duration::from_secs(300), &log);
    assert!(
        status.success(),
        "run failed ({status}):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let rows = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert_eq!(r.status, Status::Failed, "{r:?}");
        let error = r.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("scripts/install-harnesses") && error.contains("/nonexistent/"),
            "{}: {error}",
            r.rollout
        );
        assert!(r.launches.is_empty(), "nothing was launched: {r:?}");
    }
    assert!(mounts_under(&run_dir).is_empty());
    assert!(processes_of("miss-").is_empty());
}
