//! Token capture through a real gateway against the scripted model in token mode: the
//! harness sees the same bytes with capture on as with it off, and the ledger holds the ids
//! and logprobs the upstream gave; an upstream that ignores the fields or returns them
//! malformed leaves a marker naming the call, never made-up ids.
#![expect(clippy::unwrap_used, reason = "test")]

mod common;

use common::{Gw, gateway_with, model, script, shell};
use rollpoint_gateway::tokens::{CallTokens, FaultKind};
use rollpoint_gateway::{CallRecord, TokenSource};
use rollpoint_model_script::tokens::TokenMode;
use serde_json::{Value, json};

fn tools(route: &str) -> Value {
    let schema = json!({"type": "object", "properties": {"command": {"type": "string"}},
                        "required": ["command"]});
    match route {
        "responses" => json!([{"type": "function", "name": "bash", "parameters": schema}]),
        "messages" => json!([{"name": "bash", "input_schema": schema}]),
        _ => json!([{"type": "function", "function": {"name": "bash", "parameters": schema}}]),
    }
}

/// A first-turn request of `route`, streamed or not, and its path.
fn request(route: &str, stream: bool) -> (&'static str, Value) {
    let user = json!({"role": "user", "content": "count the files"});
    match route {
        "chat" => (
            "v1/chat/completions",
            json!({"model": "m", "messages": [user], "tools": tools(route), "stream": stream}),
        ),
        "responses" => (
            "v1/responses",
            json!({"model": "m", "input": [{"type": "message", "role": "user",
                   "content": "count the files"}], "tools": tools(route), "stream": stream}),
        ),
        _ => (
            "v1/messages",
            json!({"model": "m", "max_tokens": 64, "messages": [user], "tools": tools(route),
                   "stream": stream}),
        ),
    }
}

async fn post(url: &str, body: &Value) -> Vec<u8> {
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    resp.bytes().await.unwrap().to_vec()
}

async fn open_gateway(upstream: &str, capture: bool) -> Gw {
    gateway_with(upstream, |c| {
        c.open_keys = true;
        c.tokens = capture.then_some(TokenSource::Vllm);
    })
    .await
}

/// A capturing gateway that asks for the ids only (`model_logprobs = false`).
async fn ids_gateway(upstream: &str) -> Gw {
    gateway_with(upstream, |c| {
        c.open_keys = true;
        c.tokens = Some(TokenSource::Vllm);
        c.token_logprobs = false;
    })
    .await
}

async fn only_row(gw: &Gw, rollout: &str) -> CallRecord {
    let rows = gw.settled(rollout).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows.into_iter().next().unwrap()
}

async fn tokens_of(gw: &Gw, row: &CallRecord) -> CallTokens {
    let digest = row
        .tokens_digest
        .as_deref()
        .unwrap_or_else(|| panic!("call {} has no tokens: {:?}", row.call_id, row.tokens_fault));
    let doc = gw.gateway.body(digest).await.unwrap().unwrap();
    CallTokens::decode(&doc).unwrap()
}

/// The ids the model gives when asked directly, whole: (prompt, completion, logprobs).
async fn direct_ids(base: &str, route: &str) -> (Vec<u64>, Vec<u64>, Option<Vec<f64>>) {
    let (path, mut body) = request(route, false);
    body["return_token_ids"] = json!(true);
    body["logprobs"] = json!(true);
    body["enable_response_messages"] = json!(true);
    let reply: Value =
        serde_json::from_slice(&post(&format!("{base}/{path}"), &body).await).unwrap();
    let ids = |v: &Value| -> Vec<u64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect()
    };
    if route == "responses" {
        (
            ids(&reply["input_messages"][0]["tokens"]),
            ids(&reply["output_messages"][0]["tokens"]),
            None,
        )
    } else {
        let lp = reply["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["logprob"].as_f64().unwrap())
            .collect();
        (
            ids(&reply["prompt_token_ids"]),
            ids(&reply["choices"][0]["token_ids"]),
            Some(lp),
        )
    }
}

#[tokio::test]
async fn capture_records_the_upstreams_ids_and_the_harness_sees_the_bytes_of_no_capture() {
    let mut s = script(vec![shell(&["ls | wc -l"])]);
    s.tokens = Some(TokenMode::default());
    let upstream = model(s).await;
    let base = upstream.base_url();
    let off = open_gateway(&base, false).await;
    let on = open_gateway(&base, true).await;
    let ids = ids_gateway(&base).await;
    for route in ["chat", "responses"] {
        let expected = direct_ids(&base, route).await;
        for stream in [false, true] {
            let (path, body) = request(route, stream);
            let rollout = format!("{route}-{stream}");
            let seen_off = post(&off.url(&rollout, path), &body).await;
            let seen_on = post(&on.url(&rollout, path), &body).await;
            assert_eq!(
                String::from_utf8_lossy(&seen_on),
                String::from_utf8_lossy(&seen_off),
                "{route} stream={stream}: the harness sees the reply of no capture"
            );
            assert!(only_row(&off, &rollout).await.tokens_digest.is_none());
            let row = only_row(&on, &rollout).await;
            let t = tokens_of(&on, &row).await;
            let got: (Vec<u64>, Vec<u64>) = (
                t.prompt_ids.iter().map(|&x| u64::from(x)).collect(),
                t.completion_ids.iter().map(|&x| u64::from(x)).collect(),
            );
            assert_eq!(
                got,
                (expected.0.clone(), expected.1.clone()),
                "{route} stream={stream}"
            );
            assert!(!t.prompt_ids.is_empty() && !t.completion_ids.is_empty());
            assert_eq!(t.logprobs, expected.2, "{route} stream={stream}");
            assert_eq!(t.model.as_deref(), Some("m"));
            assert!(t.finish_reason.is_some(), "{route} stream={stream}: {t:?}");
            // Ids only: the same ids, no logprobs, and the same bytes again.
            let seen_ids = post(&ids.url(&rollout, path), &body).await;
            assert_eq!(seen_ids, seen_off, "{route} stream={stream}: ids only");
            let t = tokens_of(&ids, &only_row(&ids, &rollout).await).await;
            assert_eq!(t.prompt_ids.len(), expected.0.len());
            assert_eq!(t.completion_ids.len(), expected.1.len());
            assert_eq!(
                t.logprobs, None,
                "{route} stream={stream}: no logprobs asked"
            );
        }
    }
    // Messages is not a route capture covers: the reply is untouched and the row says so.
    for stream in [false, true] {
        let (path, body) = request("messages", stream);
        let rollout = format!("messages-{stream}");
        let seen_off = post(&off.url(&rollout, path), &body).await;
        let seen_on = post(&on.url(&rollout, path), &body).await;
        assert_eq!(seen_on, seen_off);
        let row = only_row(&on, &rollout).await;
        let fault = row.tokens_fault.unwrap();
        assert_eq!(fault.kind, FaultKind::Unsupported);
        assert!(fault.message.contains(&row.call_id), "{fault:?}");
    }
}

#[tokio::test]
async fn an_upstream_that_ignores_the_token_fields_leaves_a_marker_naming_the_call() {
    // The scripted model outside token mode answers as a server without token ids does.
    let upstream = model(script(vec![shell(&["ls"])])).await;
    let on = open_gateway(&upstream.base_url(), true).await;
    for stream in [false, true] {
        let (path, body) = request("chat", stream);
        let rollout = format!("plain-{stream}");
        let seen: Vec<u8> = post(&on.url(&rollout, path), &body).await;
        assert!(!seen.is_empty());
        let row = only_row(&on, &rollout).await;
        assert!(row.tokens_digest.is_none());
        let fault = row.tokens_fault.unwrap();
        assert_eq!(fault.kind, FaultKind::Missing);
        assert!(
            fault.message.contains(&row.call_id) && fault.message.contains("prompt_token_ids"),
            "{fault:?}"
        );
    }
}

#[tokio::test]
async fn malformed_token_fields_are_a_capture_error_with_the_call_id() {
    use axum::routing::post as route_post;
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        route_post(|| async {
            (
                [("content-type", "application/json")],
                r#"{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"x","role":"assistant"},"token_ids":[1,-2]}],"model":"m","prompt_token_ids":[1,2]}"#,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let on = open_gateway(&format!("http://{addr}"), true).await;
    let (path, body) = request("chat", false);
    let seen: Value = serde_json::from_slice(&post(&on.url("bad", path), &body).await).unwrap();
    // What capture added is still taken out; what the harness asked for is kept.
    assert!(seen.get("prompt_token_ids").is_none(), "{seen}");
    assert!(seen["choices"][0].get("token_ids").is_none(), "{seen}");
    let row = only_row(&on, "bad").await;
    assert!(row.tokens_digest.is_none());
    let fault = row.tokens_fault.unwrap();
    assert_eq!(fault.kind, FaultKind::Malformed);
    assert!(
        fault.message.contains("bad#0") && fault.message.contains("token_ids"),
        "{fault:?}"
    );
    server.abort();
}

#[tokio::test]
async fn logprob_token_ids_are_asked_for_until_the_upstream_lists_token_ids() {
    use axum::extract::State;
    use axum::routing::post as route_post;
    use std::sync::{Arc, Mutex};
    // A vLLM that lists `token_ids` for its first two calls, then one that does not (as
    // before 0.10.2); every request it gets is kept.
    type Seen = Arc<Mutex<Vec<Value>>>;
    async fn answer(
        State(seen): State<Seen>,
        body: String,
    ) -> ([(&'static str, &'static str); 1], String) {
        let req: Value = serde_json::from_str(&body).unwrap();
        let n = {
            let mut seen = seen.lock().unwrap();
            seen.push(req.clone());
            seen.len()
        };
        let as_ids = req["return_tokens_as_token_ids"] == json!(true);
        let token = |id: u32, text: &str| {
            let token = if as_ids {
                format!("token_id:{id}")
            } else {
                text.to_owned()
            };
            json!({"token": token, "logprob": -0.5, "bytes": token.as_bytes(), "top_logprobs": []})
        };
        let mut choice = json!({"finish_reason": "stop", "index": 0,
            "logprobs": {"content": [token(72, "H"), token(105, "i")]},
            "message": {"content": "Hi", "role": "assistant"}});
        if n <= 2 {
            choice["token_ids"] = json!([72, 105]);
        }
        let reply = json!({"choices": [choice], "model": "m", "prompt_token_ids": [1, 2, 3]});
        ([("content-type", "application/json")], reply.to_string())
    }
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route("/v1/chat/completions", route_post(answer))
        .with_state(Arc::clone(&seen));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let on = open_gateway(&format!("http://{addr}"), true).await;
    let (path, body) = request("chat", false);
    let mut rows = Vec::new();
    for k in 0..4 {
        let rollout = format!("r{k}");
        let seen_by_harness: Value =
            serde_json::from_slice(&post(&on.url(&rollout, path), &body).await).unwrap();
        // Whatever was asked for, the harness gets no logprobs it did not ask for.
        assert_eq!(seen_by_harness["choices"][0]["logprobs"], Value::Null);
        rows.push(only_row(&on, &rollout).await);
    }
    let asked: Vec<bool> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r["return_tokens_as_token_ids"] == json!(true))
        .collect();
    // Asked for until a reply listed `token_ids`; asked for again once one did not.
    assert_eq!(asked, [true, false, false, true]);
    for k in [0, 1, 3] {
        let t = tokens_of(&on, &rows[k]).await;
        assert_eq!(t.completion_ids, [72, 105], "call {k}");
        assert_eq!(t.logprobs, Some(vec![-0.5, -0.5]), "call {k}");
    }
    // The call that met the change has no ids, and says so: none are made up.
    assert!(rows[2].tokens_digest.is_none());
    let fault = rows[2].tokens_fault.as_ref().unwrap();
    assert_eq!(fault.kind, FaultKind::Missing);
    assert!(fault.message.contains("token_ids"), "{fault:?}");
    server.abort();
}
