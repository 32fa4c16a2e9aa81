//! The scripted model over real HTTP: each API answers streamed and not, the shell tool is
//! picked from the offered tools with arguments shaped from its schema, a repeated request
//! gets the same bytes, scripted failures and delays happen, and the request log is written.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::time::{Duration, Instant};

use rollpoint_model_script::{Fail, Script, ScriptServer, Step, StepKey};
use serde_json::{Value, json};

async fn serve(script: Script, log: Option<std::path::PathBuf>) -> ScriptServer {
    ScriptServer::start(script, "127.0.0.1:0".parse().unwrap(), log)
        .await
        .unwrap()
}

async fn post(server: &ScriptServer, path: &str, body: &Value) -> (u16, String, Vec<u8>) {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", server.base_url()))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, ct, resp.bytes().await.unwrap().to_vec())
}

fn shell_then_text() -> Script {
    Script::new(vec![
        Step {
            shell: vec!["echo one".into(), "echo two".into()],
            ..Step::default()
        },
        Step {
            text: Some("finished step {step}".into()),
            ..Step::default()
        },
    ])
}

#[tokio::test]
async fn codex_responses_get_exec_command_with_cmd() {
    let server = serve(shell_then_text(), None).await;
    let body = json!({"model": "m", "input": [{"role": "user", "content": "go"}], "tools": [
        {"type": "function", "name": "write_stdin", "parameters": {}},
        {"type": "function", "name": "exec_command", "parameters":
            {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]});
    let (status, ct, bytes) = post(&server, "/v1/responses", &body).await;
    assert_eq!((status, ct.as_str()), (200, "application/json"));
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "two parallel calls");
    assert_eq!(out[0]["name"], "exec_command");
    let args: Value = serde_json::from_str(out[1]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"cmd": "echo two"}));
}

#[tokio::test]
async fn responses_stream_runs_from_created_to_completed() {
    let server = serve(shell_then_text(), None).await;
    let body = json!({"model": "m", "stream": true, "input": "go", "tools": []});
    let (status, ct, bytes) = post(&server, "/v1/responses", &body).await;
    assert_eq!((status, ct.as_str()), (200, "text/event-stream"));
    let text = String::from_utf8(bytes).unwrap();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(events.first(), Some(&"response.created"));
    assert_eq!(events.last(), Some(&"response.completed"));
    assert!(
        text.contains("no shell tool offered"),
        "no tools: a text answer"
    );
}

#[tokio::test]
async fn claude_messages_stream_calls_bash_with_command() {
    let server = serve(shell_then_text(), None).await;
    let body = json!({"model": "m", "stream": true, "max_tokens": 100,
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"name": "Read", "input_schema": {}}, {"name": "Bash", "input_schema":
            {"properties": {"command": {"type": "string"}, "description": {"type": "string"}},
             "required": ["command"]}}]});
    let (status, _, bytes) = post(&server, "/v1/messages?beta=true", &body).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.starts_with("event: message_start"));
    assert!(text.contains("\"name\":\"Bash\""));
    assert!(text.contains("\"stop_reason\":\"tool_use\""));
    assert!(
        text.trim_end()
            .ends_with("data: {\"type\":\"message_stop\"}")
    );
}

#[tokio::test]
async fn chat_position_keys_steps_and_repeats_are_identical() {
    let server = serve(shell_then_text(), None).await;
    let tools = json!([{"type": "function", "function": {"name": "bash", "parameters":
        {"properties": {"command": {"type": "string"}}}}}]);
    let first = json!({"model": "m", "stream": true, "tools": tools,
        "messages": [{"role": "user", "content": "go"}]});
    let (_, _, a) = post(&server, "/v1/chat/completions", &first).await;
    let (_, _, b) = post(&server, "/v1/chat/completions", &first).await;
    assert_eq!(a, b, "a repeated request gets the same bytes");
    assert!(String::from_utf8(a).unwrap().ends_with("data: [DONE]\n\n"));
    let second = json!({"model": "m", "tools": tools, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "x", "type": "function",
            "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "x", "content": "one"}]});
    let (_, _, c) = post(&server, "/v1/chat/completions", &second).await;
    let v: Value = serde_json::from_slice(&c).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "finished step 1");
    let log = server.log_entries();
    assert_eq!(
        log.iter().map(|e| e.step).collect::<Vec<_>>(),
        vec![0, 0, 1]
    );
}

#[tokio::test]
async fn counter_key_fail_step_delay_and_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let mut script = Script::new(vec![
        Step {
            fail: Some(Fail {
                status: 503,
                body: "overloaded".into(),
            }),
            ..Step::default()
        },
        Step {
            text: Some("late".into()),
            delay_ms: 200,
            ..Step::default()
        },
    ]);
    script.key = StepKey::Counter;
    let server = serve(script, Some(log.clone())).await;
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "go"}]});
    let (status, _, bytes) = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!((status, bytes.as_slice()), (503, b"overloaded".as_slice()));
    let t = Instant::now();
    let (status, _, _) = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "the step's delay was kept"
    );
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["v"], 1);
    assert_eq!(lines[0]["reply"], "fail");
    assert_eq!(lines[1]["step"], 1);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[tokio::test]
async fn invalid_json_is_a_400() {
    let server = serve(shell_then_text(), None).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/messages", server.base_url()))
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let v: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("not JSON"));
}

#[test]
fn scripts_are_validated_with_the_field_named() {
    let p = std::path::Path::new("s.json");
    let err = Script::parse(br#"{"version": 7, "steps": []}"#, p).unwrap_err();
    assert!(err.to_string().contains("unsupported version 7"), "{err}");
    let err = Script::parse(
        br#"{"version": 1, "steps": [{"text": "a", "shell": ["b"]}]}"#,
        p,
    )
    .unwrap_err();
    assert!(err.to_string().contains("steps[0]"), "{err}");
    let err = Script::parse(br#"{"version": 1, "steps": [{"txt": "a"}]}"#, p).unwrap_err();
    assert!(err.to_string().contains("txt"), "{err}");
    let err = Script::parse(br#"{"steps": []}"#, p).unwrap_err();
    assert!(err.to_string().contains("version"), "{err}");
}
