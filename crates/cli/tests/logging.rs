//! The host binary's logs: `--log-format json` is one JSON object per stderr line with the
//! event's fields and its spans (a gateway call's span names its key and call id);
//! `--log-format text` prints the same event as one line with its fields and span fields;
//! `RUST_LOG` chooses which events.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::process::{Command, Stdio};

use assert_cmd::cargo::cargo_bin;
use support::wait_for_port;

/// Runs a gateway over the scripted model with `format` and `filter`, makes one call with key
/// `k1`, stops the gateway and returns its stderr.
fn one_call(format: &str, filter: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(&script, r#"{"version": 1, "steps": [{"text": "hello"}]}"#).unwrap();
    let port_file = dir.path().join("port");
    let log = dir.path().join("stderr");
    let mut child = Command::new(cargo_bin("rollpoint"))
        .args(["--log-format", format, "gateway", "--model-script"])
        .arg(&script)
        .arg("--db")
        .arg(dir.path().join("ledger.db"))
        .arg("--port-file")
        .arg(&port_file)
        .args(["--register", "k1"])
        .env("RUST_LOG", filter)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let port = wait_for_port(&port_file);
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let reply = ureq::post(&format!("http://127.0.0.1:{port}/r/k1/v1/chat/completions"))
        .header("content-type", "application/json")
        .send(body.to_string())
        .unwrap();
    assert_eq!(reply.status().as_u16(), 200);
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    child.wait().unwrap();
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn json_logs_are_one_object_a_line_with_the_call_s_span() {
    let text = one_call("json", "info,rollpoint_gateway=debug");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(!lines.is_empty(), "no log lines");
    for l in &lines {
        assert!(l["timestamp"].is_string() && l["level"].is_string(), "{l}");
    }
    let answered = lines
        .iter()
        .find(|l| l["message"] == "call answered upstream")
        .unwrap_or_else(|| panic!("no call event in:\n{text}"));
    assert_eq!(answered["level"], "DEBUG", "{answered}");
    assert_eq!(answered["status"], "ok", "{answered}");
    assert_eq!(answered["http_status"], 200, "{answered}");
    assert_eq!(answered["span"]["name"], "call", "{answered}");
    assert_eq!(answered["span"]["key"], "k1", "{answered}");
    assert_eq!(answered["span"]["call"], "k1#0", "{answered}");
    assert!(
        lines.iter().any(|l| l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("gateway listening"))
            && l["address"].is_string()),
        "the listening event carries its address as a field:\n{text}"
    );
}

#[test]
fn text_logs_are_one_line_per_event_and_rust_log_filters_them() {
    let text = one_call("text", "info,rollpoint_gateway=debug");
    let line = text
        .lines()
        .find(|l| l.contains("call answered upstream"))
        .unwrap_or_else(|| panic!("no call line in:\n{text}"));
    assert!(line.starts_with("rollpoint: debug: "), "{line}");
    assert!(line.contains("status=\"ok\" http_status=200"), "{line}");
    assert!(
        line.ends_with("[key=k1 path=v1/chat/completions call=\"k1#0\"]"),
        "the call's span fields end the line: {line}"
    );
    assert!(
        text.lines().all(|l| l.starts_with("rollpoint: ")),
        "every line is an event:\n{text}"
    );

    let quiet = one_call("text", "warn");
    assert!(
        !quiet.contains("call answered upstream") && !quiet.contains("listening"),
        "RUST_LOG=warn leaves info and debug out:\n{quiet}"
    );
}
