//! A harness task whose harness binary is not installed fails its rollout
//! with an error that names the install command, through the real
//! `rollpoint run` (root), and leaves nothing behind.

mod common;

use common::{processes_of, run_rows_to_end};
use rollpoint_driver::Status;
use rollpoint_testkit::{mounts_under, require_root};

#[test]
fn root_a_missing_harness_fails_naming_the_install_command() {
    require_root();
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
    let (rows, run_dir) = run_rows_to_end(dir, &rows);
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert_eq!(r.status, Status::InfraError, "{r:?}");
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
