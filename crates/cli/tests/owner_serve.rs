//! `rollpoint owner` as its own service (root): the owner routes and the
//! checkpoint control routes on one port behind one token, a coordinator
//! driving it over HTTP to a published checkpoint that holds the session's
//! record, and SIGTERM leaving no sandbox behind.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;

use assert_cmd::cargo::cargo_bin;
use rollpoint_checkpoint::{Coordinator, CoordinatorConfig, HttpParticipant, ParticipantApi, Plan};
use rollpoint_testkit::{mounts_under, require_root, supervisor_bin};
use support::wait_for_port;

const TOKEN: &str = "serve-test-token";

#[tokio::test(flavor = "multi_thread")]
async fn root_owner_serves_sessions_and_checkpoint_routes() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let port_file = dir.path().join("port");
    let mut child = Command::new(cargo_bin("rollpoint"))
        .arg("owner")
        .arg("--run-dir")
        .arg(&run_dir)
        .arg("--token-file")
        .arg(&token_file)
        .arg("--port-file")
        .arg(&port_file)
        .args(["--store", "copy"])
        .arg("--supervisor")
        .arg(supervisor_bin())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let port = wait_for_port(&port_file);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();

    let refused = http
        .get(format!("{base}/v1/checkpoint/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    let created: serde_json::Value = http
        .post(format!("{base}/v1/owner/sessions"))
        .bearer_auth(TOKEN)
        .body(
            serde_json::json!({"task": {
                "id": "t1",
                "files": {"notes.txt": "kept"},
                "verify": {"command": ["true"]}
            }})
            .to_string(),
        )
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap();
    assert!(
        created["session"].as_str().unwrap().starts_with("t1-"),
        "{created}"
    );

    let control: Arc<dyn ParticipantApi> = Arc::new(HttpParticipant::new(&base, TOKEN).unwrap());
    let coordinator = Coordinator::new(vec![control], CoordinatorConfig::new(&run_dir))
        .await
        .unwrap();
    let done = coordinator
        .checkpoint(&Plan {
            id: "ck1".into(),
            scope: vec!["t1".parse().expect("key")],
            continues: None,
            stop: false,
        })
        .await
        .unwrap();
    assert_eq!(done.doc.id, "ck1");
    let latest = std::fs::read_to_string(run_dir.join("checkpoints/LATEST")).unwrap();
    assert_eq!(latest.trim(), "ck1");
    let records = std::fs::read_dir(run_dir.join("checkpoints/ck1/resources/owner"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("records-"))
        .unwrap();
    let text = std::fs::read_to_string(records.path()).unwrap();
    assert!(
        text.contains("\"key\":\"t1\"") && text.contains("notes.txt"),
        "{text}"
    );

    // SIGTERM: the owner destroys what it lent.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let sandboxes = std::fs::read_dir(run_dir.join("owner/sandboxes"))
        .unwrap()
        .count();
    assert_eq!(sandboxes, 0, "no sandbox left after SIGTERM");
    let mounts = mounts_under(&run_dir);
    assert!(mounts.is_empty(), "{mounts:?}");
}
