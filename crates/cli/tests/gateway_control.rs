//! `rollpoint gateway` with a run directory answers the checkpoint control
//! routes as the model participant, behind its own token.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::process::{Command, Stdio};

use assert_cmd::cargo::cargo_bin;
use support::wait_for_port;

#[tokio::test(flavor = "multi_thread")]
async fn gateway_answers_checkpoint_routes_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "gw-token\n").unwrap();
    let port_file = dir.path().join("port");
    let mut child = Command::new(cargo_bin("rollpoint"))
        .args(["gateway", "--upstream", "http://127.0.0.1:9", "--open-keys"])
        .arg("--db")
        .arg(dir.path().join("ledger.db"))
        .arg("--port-file")
        .arg(&port_file)
        .arg("--run-dir")
        .arg(dir.path().join("run"))
        .arg("--control-token-file")
        .arg(&token_file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let port = wait_for_port(&port_file);
    let base = format!("http://127.0.0.1:{port}/v1/checkpoint");
    let http = reqwest::Client::new();
    let status = http
        .get(format!("{base}/status"))
        .bearer_auth("gw-token")
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 200);
    let body: serde_json::Value = serde_json::from_slice(&status.bytes().await.unwrap()).unwrap();
    assert_eq!(body["kind"], "model", "{body}");
    assert_eq!(body["phase"], "idle", "{body}");
    let wrong = http
        .get(format!("{base}/status"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let bad = http
        .post(format!("{base}/prepare"))
        .bearer_auth("gw-token")
        .body(r#"{"checkpoint":"ck1","timeout_ms":"soon"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let text = String::from_utf8_lossy(&bad.bytes().await.unwrap()).into_owned();
    assert!(text.contains("timeout_ms"), "{text}");
    child.kill().unwrap();
    child.wait().unwrap();
}
