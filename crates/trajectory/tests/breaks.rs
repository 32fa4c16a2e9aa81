//! Trajectories of conversations recorded through a real capturing gateway against the
//! scripted model in token mode: a model whose template changes mid-rollout gives a token
//! break at that call, split or masked as configured; a conversation carrying a turn no
//! recorded call produced is not trainable and says why.
#![expect(clippy::unwrap_used, reason = "test")]

use rollpoint_gateway::{Gateway, GatewayConfig, TokenSource, UpstreamApi};
use rollpoint_model_script::tokens::TokenMode;
use rollpoint_model_script::{Script, ScriptServer, Step};
use rollpoint_trajectory::{BreakPolicy, Outcome, Reason, build};
use serde_json::{Value, json};

struct Stack {
    model: ScriptServer,
    gateway: Gateway,
    base: String,
    _dir: tempfile::TempDir,
}

async fn stack(template_change_at: Option<usize>) -> Stack {
    let mut script = Script::new(Vec::new());
    script.after_last = Some(Step {
        shell: vec!["make test".into()],
        ..Step::default()
    });
    script.tokens = Some(TokenMode { template_change_at });
    let model = ScriptServer::start(script, "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config =
        GatewayConfig::new(model.base_url(), UpstreamApi::All, dir.path().join("l.db"));
    config.tokens = Some(TokenSource::Vllm);
    config.open_keys = true;
    let gateway = Gateway::new(config).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let g = gateway.clone();
    tokio::spawn(async move { g.serve(listener).await });
    Stack {
        model,
        gateway,
        base: format!("http://{addr}"),
        _dir: dir,
    }
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}])
}

async fn ask(s: &Stack, rollout: &str, messages: &[Value]) -> Value {
    let url = format!("{}/r/{rollout}/v1/chat/completions", s.base);
    let body = json!({"model": "m", "messages": messages, "tools": tools()});
    let bytes = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&bytes).unwrap();
    reply["choices"][0]["message"].clone()
}

/// `calls` turns of a conversation as a harness keeps it: each answer and its tool's
/// result go into the next request.
async fn converse(s: &Stack, rollout: &str, calls: usize) {
    let mut messages = vec![json!({"role": "user", "content": "fix the failing test"})];
    for _ in 0..calls {
        let message = ask(s, rollout, &messages).await;
        let id = message["tool_calls"][0]["id"].as_str().unwrap().to_owned();
        messages.push(message);
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "ok"}));
    }
}

fn done() -> Outcome {
    Outcome {
        finished: true,
        reward: Some(1.0),
        passed: Some(true),
        ..Outcome::default()
    }
}

#[tokio::test]
async fn a_template_change_mid_rollout_is_a_token_break_at_that_call() {
    let s = stack(Some(2)).await;
    converse(&s, "tb", 4).await;
    s.gateway.flush().await.unwrap();
    let records = s.gateway.export("tb").await.unwrap();
    let t = build("tb", &records, Some(&done()), BreakPolicy::Split);
    assert!(t.trainable, "{:?}", t.not_trainable);
    assert_eq!(t.calls.len(), 4);
    // From position 2 on the template renders earlier tool calls anew, so every call from
    // the third on departs from what its predecessor generated.
    let at: Vec<(usize, &str)> = t
        .token_breaks
        .iter()
        .map(|b| (b.call_index, b.call_id.as_str()))
        .collect();
    assert_eq!(at, [(2, "tb#2"), (3, "tb#3")]);
    let b = &t.token_breaks[0];
    // It departs where the first earlier tool call is rendered.
    let previous = &t.calls[1];
    let first_call_at = previous
        .prompt_ids
        .iter()
        .position(|&id| id == rollpoint_model_script::tokens::TOOL_START)
        .unwrap();
    assert_eq!(b.position, first_call_at);
    assert_eq!(t.segments.len(), 3);
    assert_eq!(t.segments[1].first_call, 2);
    assert_eq!(t.segments[2].first_call, 3);
    assert!(t.segments[1].loss_mask.contains(&1));

    let masked = build("tb", &records, Some(&done()), BreakPolicy::Mask);
    assert!(!masked.trainable);
    let why = masked.not_trainable.unwrap();
    assert_eq!(
        (why.reason, why.call_id.as_deref()),
        (Reason::TokenBreak, Some("tb#2"))
    );
    assert!(
        masked
            .segments
            .iter()
            .all(|seg| seg.loss_mask.iter().all(|&m| m == 0))
    );
    s.model.shutdown().await;
}

#[tokio::test]
async fn a_conversation_with_a_turn_no_call_produced_is_not_trainable() {
    let s = stack(None).await;
    let made_up = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "x",
        "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]});
    let messages = vec![
        json!({"role": "user", "content": "fix the failing test"}),
        made_up,
        json!({"role": "tool", "tool_call_id": "x", "content": "a b"}),
    ];
    ask(&s, "made", &messages).await;
    s.gateway.flush().await.unwrap();
    let records = s.gateway.export("made").await.unwrap();
    let t = build("made", &records, Some(&done()), BreakPolicy::Split);
    assert!(!t.trainable);
    let why = t.not_trainable.unwrap();
    assert_eq!(
        (why.reason, why.call_id.as_deref()),
        (Reason::UnresolvedLineage, Some("made#0"))
    );
    assert!(why.message.contains("no_match"), "{}", why.message);
    s.model.shutdown().await;
}
