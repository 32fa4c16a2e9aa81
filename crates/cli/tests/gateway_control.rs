//! `rollpoint gateway` with a run directory answers the checkpoint control
//! routes as the model participant, behind its own token.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::process::{Command, Stdio};

use assert_cmd::cargo::cargo_bin;
use support::wait_for_port;

/// `rollpoint gateway` with its control routes (token `gw-token`) in `dir`, and its port.
fn control_gateway(dir: &std::path::Path, extra: &[&str]) -> (std::process::Child, u16) {
    let token_file = dir.join("token");
    std::fs::write(&token_file, "gw-token\n").unwrap();
    let port_file = dir.join("port");
    let child = Command::new(cargo_bin("rollpoint"))
        .args(["gateway", "--upstream", "http://127.0.0.1:9"])
        .args(extra)
        .arg("--db")
        .arg(dir.join("ledger.db"))
        .arg("--port-file")
        .arg(&port_file)
        .arg("--run-dir")
        .arg(dir.join("run"))
        .arg("--control-token-file")
        .arg(&token_file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let port = wait_for_port(&port_file);
    (child, port)
}

#[tokio::test(flavor = "multi_thread")]
async fn gateway_answers_checkpoint_routes_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, port) = control_gateway(dir.path(), &["--open-keys"]);
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

/// A chat completions body (a new conversation).
fn chat(text: &str) -> String {
    serde_json::json!({"model": "m", "messages": [{"role": "user", "content": text}]}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn gateway_registers_keys_and_reports_its_state_over_its_own_routes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, port) = control_gateway(dir.path(), &[]);
    let base = format!("http://127.0.0.1:{port}/v1/gateway");
    let client =
        rollpoint_gateway::GatewayClient::new(&format!("http://127.0.0.1:{port}"), "gw-token")
            .unwrap();
    let keys = ["r1-a2".parse().unwrap(), "r2".parse().unwrap()];
    client.register(&keys).await.unwrap();
    let status = client.status().await.unwrap();
    assert_eq!(status.pid, child.id());
    assert!(status.open);
    assert_eq!((status.in_flight, status.recording), (0, 0));

    let http = reqwest::Client::new();
    let stale = http
        .post(format!("{base}/keys"))
        .bearer_auth("gw-token")
        .body(r#"{"v":1,"keys":["r2","r1-a1"]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 409);
    let body: serde_json::Value = serde_json::from_slice(&stale.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["field"], "keys[1]", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("older"),
        "{body}"
    );
    let bad = http
        .post(format!("{base}/keys"))
        .bearer_auth("gw-token")
        .body(r#"{"v":2,"keys":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let text = String::from_utf8_lossy(&bad.bytes().await.unwrap()).into_owned();
    assert!(text.contains("version 2"), "{text}");
    let unauthorized = http.get(format!("{base}/status")).send().await.unwrap();
    assert_eq!(unauthorized.status(), 401);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn gateway_refuses_an_owner_that_is_not_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(cargo_bin("rollpoint"))
        .args([
            "gateway",
            "--upstream",
            "http://127.0.0.1:9",
            "--owner",
            "1",
        ])
        .arg("--db")
        .arg(dir.path().join("ledger.db"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--owner 1"), "{err}");
    assert!(!dir.path().join("ledger.db").exists(), "nothing was opened");
}

/// The state letter of `pid` (`None` once it is gone).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].chars().next()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_whose_owner_dies_records_the_call_upstream_refuses_new_ones_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"version": 1, "steps": [{"text": "late", "delay_ms": 1500}]}"#,
    )
    .unwrap();
    let port_file = dir.path().join("port");
    // The owner: a shell that starts the gateway as its child, then waits.
    let mut owner = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#""$0" gateway --owner $$ --open-keys --api all --model-script "$1" --model-log "$2" --db "$3" --port-file "$4" 2>"$5" & exec sleep 600"#)
        .arg(cargo_bin("rollpoint"))
        .arg(&script)
        .arg(dir.path().join("model.log"))
        .arg(dir.path().join("ledger.db"))
        .arg(&port_file)
        .arg(dir.path().join("gateway.log"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let port = wait_for_port(&port_file);
    let url = format!("http://127.0.0.1:{port}/r/k1/v1/chat/completions");
    let asked = tokio::spawn({
        let url = url.clone();
        async move {
            let reply = reqwest::Client::new()
                .post(url)
                .body(chat("first"))
                .send()
                .await
                .unwrap();
            (reply.status(), reply.bytes().await.unwrap())
        }
    });
    let model_log = dir.path().join("model.log");
    while std::fs::read_to_string(&model_log)
        .unwrap_or_default()
        .is_empty()
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let pids = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit(')').next().map(str::to_owned))
                .and_then(|rest| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(owner.id())
        })
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("gateway"))
        })
        .collect::<Vec<_>>();
    assert_eq!(pids.len(), 1, "the owner's gateway child: {pids:?}");
    let gateway = pids[0];
    owner.kill().unwrap();
    owner.wait().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let refused = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/r/k2/v1/chat/completions"))
        .body(chat("second"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503, "no new call once the owner is gone");
    let (status, body) = asked.await.unwrap();
    assert_eq!(status, 200, "the call upstream still reached its caller");
    assert!(String::from_utf8_lossy(&body).contains("late"));
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while state(gateway).is_some_and(|s| s != 'Z') {
        assert!(std::time::Instant::now() < end, "the gateway did not exit");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let log = std::fs::read_to_string(dir.path().join("gateway.log")).unwrap();
    assert!(
        log.contains("every call sent upstream is recorded"),
        "{log}"
    );
    let ledger = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    let recorded: String = ledger
        .query_row(
            "SELECT status FROM calls WHERE capture_key = 'k1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        recorded, "ok",
        "the call upstream at the owner's death is recorded"
    );
    assert_eq!(
        std::fs::read_to_string(&model_log).unwrap().lines().count(),
        1,
        "the refused call never went upstream"
    );
}

/// A gateway its owner started is signalled with the whole job (a scheduler's SIGTERM, a
/// terminal's SIGINT): it goes on serving, since the owner's stop checkpoint still needs it, and
/// stops when the owner sends SIGUSR2.
#[test]
fn a_gateway_with_an_owner_ignores_the_jobs_sigterm_and_stops_on_sigusr2() {
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    // The owner: a shell that starts the gateway as its child, waits for it, and says how it
    // ended.
    let mut owner = Command::new("/bin/sh")
        .arg("-c")
        .arg(r#""$0" gateway --owner $$ --open-keys --upstream http://127.0.0.1:9 --db "$1" --port-file "$2" 2>"$3" & echo $!; wait $!; echo "exit $?""#)
        .arg(cargo_bin("rollpoint"))
        .arg(dir.path().join("ledger.db"))
        .arg(&port_file)
        .arg(dir.path().join("gateway.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let port = wait_for_port(&port_file);
    let mut out = std::io::BufReader::new(owner.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    let gateway = nix::unistd::Pid::from_raw(line.trim().parse().unwrap());
    for sig in [nix::sys::signal::SIGTERM, nix::sys::signal::SIGINT] {
        nix::sys::signal::kill(gateway, sig).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let alive = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(alive.is_ok(), "the gateway stopped on the job's signal");
    nix::sys::signal::kill(gateway, nix::sys::signal::SIGUSR2).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest.trim(), "exit 0", "the gateway stops on SIGUSR2");
    assert!(owner.wait().unwrap().success());
    let log = std::fs::read_to_string(dir.path().join("gateway.log")).unwrap();
    assert!(log.contains("signal=\"SIGTERM\""), "{log}");
    assert!(log.contains("signal=\"SIGINT\""), "{log}");
}
