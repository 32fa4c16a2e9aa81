//! Shared test fixtures: a scripted upstream, a gateway in front of it on 127.0.0.1:0, and a
//! small client that keeps a conversation the way a harness does.
#![allow(dead_code, reason = "each test binary uses a different part")]
#![expect(clippy::unwrap_used, reason = "test fixtures")]

use rollpoint_proto::key::AttemptKey;
use std::net::SocketAddr;
use std::time::Duration;

use rollpoint_gateway::conversation::{Atom, Route};
use rollpoint_gateway::response::read_response;
use rollpoint_gateway::{CallRecord, Gateway, GatewayConfig, UpstreamApi};
use rollpoint_model_script::{Script, ScriptServer, Step};
use serde_json::{Value, json};

/// Starts the scripted model on an ephemeral port.
pub async fn model(script: Script) -> ScriptServer {
    ScriptServer::start(script, "127.0.0.1:0".parse().unwrap(), None)
        .await
        .expect("scripted model starts")
}

/// A script of `steps`.
pub fn script(steps: Vec<Step>) -> Script {
    Script::new(steps)
}

/// A text step.
pub fn text(t: &str) -> Step {
    Step {
        text: Some(t.into()),
        ..Step::default()
    }
}

/// A step of parallel shell calls.
pub fn shell(cmds: &[&str]) -> Step {
    Step {
        shell: cmds.iter().map(|c| (*c).to_owned()).collect(),
        ..Step::default()
    }
}

/// A running gateway.
pub struct Gw {
    pub gateway: Gateway,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Gw {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Gw {
    /// URL of `path` under capture key `key`.
    pub fn url(&self, key: &str, path: &str) -> String {
        format!("http://{}/r/{key}/{path}", self.addr)
    }

    /// Rows of `rollout` once none is in flight.
    pub async fn settled(&self, rollout: &str) -> Vec<CallRecord> {
        for _ in 0..400 {
            let rows = self.gateway.calls(Some(rollout)).await.unwrap();
            if rows.iter().all(|r| r.status != "in_flight") {
                return rows;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("rows of {rollout} still in flight after 10 s");
    }
}

/// Starts a gateway in front of `upstream` with `tweak` applied to its configuration.
pub async fn gateway_with(upstream: &str, tweak: impl FnOnce(&mut GatewayConfig)) -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::new(upstream, UpstreamApi::All, dir.path().join("ledger.db"));
    tweak(&mut config);
    let gateway = Gateway::new(config).expect("gateway opens its ledger");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let g = gateway.clone();
    let task = tokio::spawn(async move {
        g.serve(listener).await.unwrap();
    });
    Gw {
        gateway,
        addr,
        dir,
        task,
    }
}

/// A gateway with defaults in front of `upstream`, with `rollouts` registered at attempt 0.
pub async fn gateway(upstream: &str, rollouts: &[&str]) -> Gw {
    let gw = gateway_with(upstream, |_| {}).await;
    for r in rollouts {
        gw.gateway.register(&AttemptKey::of(r, 0).unwrap()).unwrap();
    }
    gw
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

/// The request path of an API.
pub fn path(route: Route) -> &'static str {
    match route {
        Route::Chat => "v1/chat/completions",
        Route::Responses => "v1/responses",
        Route::Messages => "v1/messages?beta=true",
        Route::Models => "v1/models",
    }
}

/// Tool definitions offering a shell tool in the shape each API (and its harness) uses.
pub fn tools(route: Route) -> Value {
    let schema = json!({"type": "object", "properties": {"command": {"type": "string"}},
                        "required": ["command"]});
    match route {
        Route::Chat => {
            json!([{"type": "function", "function": {"name": "bash", "parameters": schema}},
                               {"type": "function", "function": {"name": "read", "parameters": {}}}])
        }
        Route::Responses => json!([{"type": "function", "name": "exec_command", "parameters":
            {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]),
        Route::Messages => json!([{"name": "Bash", "input_schema": schema}]),
        Route::Models => json!([]),
    }
}

/// A conversation kept the way a harness keeps it.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub route: Route,
    pub stream: bool,
    pub items: Vec<Value>,
    pub tag: String,
}

impl Conversation {
    pub fn new(route: Route, stream: bool, task: &str) -> Self {
        let first = json!({"role": "user", "content": task});
        Self {
            route,
            stream,
            items: vec![first],
            tag: task.to_owned(),
        }
    }

    /// The request body for the next call.
    pub fn body(&self) -> Vec<u8> {
        let mut body = json!({"model": "scripted-model", "stream": self.stream,
                              "tools": tools(self.route)});
        match self.route {
            Route::Responses => {
                body["input"] = Value::Array(self.items.clone());
                body["instructions"] = json!("be brief");
            }
            Route::Messages => {
                body["messages"] = Value::Array(self.items.clone());
                body["system"] = json!("be brief");
                body["max_tokens"] = json!(1024);
            }
            _ => {
                let mut msgs = vec![json!({"role": "system", "content": "be brief"})];
                msgs.extend(self.items.iter().cloned());
                body["messages"] = Value::Array(msgs);
                if self.stream {
                    body["stream_options"] = json!({"include_usage": true});
                }
            }
        }
        serde_json::to_vec(&body).unwrap()
    }

    /// Appends the model's reply (raw response bytes) and a result for each tool call.
    /// Returns the number of tool calls.
    pub fn absorb(&mut self, reply: &[u8]) -> usize {
        let view = read_response(self.route, self.stream, reply);
        let turn = view.turn.expect("reply holds a model turn");
        let mut calls = Vec::new();
        let mut text = None;
        for (i, atom) in turn.iter().enumerate() {
            match atom {
                Atom::Text(t) => text = Some(t.clone()),
                Atom::Call { name, args } => {
                    calls.push((
                        format!("c{}_{i}", self.items.len()),
                        name.clone(),
                        args.clone(),
                    ));
                }
            }
        }
        match self.route {
            Route::Chat => {
                let mut m = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    m["tool_calls"] = calls
                        .iter()
                        .map(|(id, n, a)| {
                            json!({"id": id, "type": "function",
                            "function": {"name": n, "arguments": a}})
                        })
                        .collect();
                }
                self.items.push(m);
                for (id, _, _) in &calls {
                    self.items
                        .push(json!({"role": "tool", "tool_call_id": id, "content": "ok"}));
                }
            }
            Route::Responses => {
                if let Some(t) = &text {
                    self.items
                        .push(json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": t}]}));
                }
                for (id, n, a) in &calls {
                    self.items
                        .push(json!({"type": "function_call", "call_id": id, "name": n,
                                           "arguments": a}));
                }
                for (id, _, _) in &calls {
                    self.items
                        .push(json!({"type": "function_call_output", "call_id": id,
                                           "output": "ok"}));
                }
            }
            Route::Messages => {
                let mut blocks = Vec::new();
                if let Some(t) = &text {
                    blocks.push(json!({"type": "text", "text": t}));
                }
                for (id, n, a) in &calls {
                    let input: Value = serde_json::from_str(a).unwrap();
                    blocks.push(json!({"type": "tool_use", "id": id, "name": n, "input": input}));
                }
                self.items
                    .push(json!({"role": "assistant", "content": blocks}));
                if !calls.is_empty() {
                    let results: Vec<Value> = calls
                        .iter()
                        .map(|(id, _, _)| {
                            json!({"type": "tool_result", "tool_use_id": id,
                                                  "content": "ok"})
                        })
                        .collect();
                    self.items.push(json!({"role": "user", "content": results}));
                }
            }
            Route::Models => {}
        }
        if calls.is_empty() {
            self.items
                .push(json!({"role": "user", "content": format!("go on ({})", self.tag)}));
        }
        calls.len()
    }
}

/// POSTs `body` and returns status, content type, the call id header and the body bytes.
pub async fn post(client: &reqwest::Client, url: &str, body: Vec<u8>) -> Reply {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request reaches the server");
    Reply::read(resp).await
}

/// A reply as the caller saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    pub call_id: Option<String>,
    pub replayed_from: Option<String>,
    pub body: Vec<u8>,
}

impl Reply {
    pub async fn read(resp: reqwest::Response) -> Self {
        let header = |n: &str| {
            resp.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let status = resp.status().as_u16();
        let content_type = header("content-type");
        let call_id = header("x-rollpoint-call-id");
        let replayed_from = header("x-rollpoint-replayed-from");
        let body = resp.bytes().await.expect("reply body completes").to_vec();
        Self {
            status,
            content_type,
            call_id,
            replayed_from,
            body,
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("reply is JSON")
    }
}

/// Hex SHA-256, as the scripted model logs request bodies.
pub fn sha256(bytes: &[u8]) -> String {
    rollpoint_gateway::digest::sha256_hex(bytes)
}
