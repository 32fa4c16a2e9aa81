//! The host binary end to end, with no GPU and no network: the scripted
//! model, the recording gateway in front of it, and the native worker
//! running a task through the gateway's per-rollout route.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use assert_cmd::cargo::cargo_bin;
use serde_json::{Value, json};
use support::wait_for_port;

/// A child process killed when the test ends, pass or fail.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(args: &[&str], port_file: &Path) -> (Server, u16) {
    let child = Command::new(cargo_bin("rollpoint"))
        .args(args)
        .arg("--port-file")
        .arg(port_file)
        .stdin(Stdio::null())
        .spawn()
        .expect("start rollpoint");
    let server = Server(child);
    (server, wait_for_port(port_file))
}

#[test]
fn worker_runs_a_task_through_the_gateway_against_the_scripted_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |name: &str| -> PathBuf { dir.path().join(name) };
    let work = p("work");
    std::fs::create_dir(&work).expect("workdir");
    let script = json!({
        "version": 1,
        "steps": [
            {"shell": ["echo hello > out.txt"]},
            {"text": "wrote out.txt"}
        ]
    });
    std::fs::write(p("script.json"), script.to_string()).expect("script");

    let s = |path: PathBuf| path.display().to_string();
    let (_model, model_port) = serve(
        &[
            "model-script",
            "--script",
            &s(p("script.json")),
            "--log",
            &s(p("model.log")),
        ],
        &p("model.port"),
    );
    let upstream = format!("http://127.0.0.1:{model_port}");
    let (_gateway, gw_port) = serve(
        &[
            "gateway",
            "--upstream",
            &upstream,
            "--api",
            "all",
            "--db",
            &s(p("ledger.db")),
            "--open-keys",
        ],
        &p("gateway.port"),
    );

    let input = json!({
        "v": 1,
        "rollout_id": "chain-1",
        "task": {"prompt": "Write hello into out.txt."},
        "model": {
            "base_url": format!("http://127.0.0.1:{gw_port}/r/chain-1/v1"),
            "api": "chat_completions",
            "name": "scripted"
        },
        "workdir": work,
        "limits": {}
    });
    std::fs::write(p("input.json"), input.to_string()).expect("input");
    let out = Command::new(cargo_bin("rollpoint"))
        .args([
            "worker",
            &s(p("input.json")),
            &s(p("result.json")),
            "--checkpoint",
            &s(p("checkpoint")),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run the worker");
    assert!(
        out.status.success(),
        "worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let result: Value =
        serde_json::from_slice(&std::fs::read(p("result.json")).expect("result")).expect("json");
    assert_eq!(result["termination"], "completed", "{result}");
    assert_eq!(result["response"], "wrote out.txt", "{result}");
    assert_eq!(
        std::fs::read_to_string(work.join("out.txt")).expect("out.txt"),
        "hello\n"
    );

    // Both calls reached the model through the gateway, once each.
    let log = std::fs::read_to_string(p("model.log")).expect("model log");
    assert_eq!(log.lines().count(), 2, "{log}");
    let ledger = std::fs::metadata(p("ledger.db")).expect("the gateway's ledger");
    assert!(ledger.len() > 0);
}
