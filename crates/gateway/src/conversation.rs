//! What the gateway reads from a generation request: its conversation items, the turns the
//! model authored, and the digests the ledger keys on. Pure functions over parsed JSON; the
//! bytes that go upstream are never re-serialized.

pub use rollpoint_proto::responses::is_model_item;
use serde_json::{Value, json};

use crate::digest::{canonical, json_digest, sha256_hex, write_canonical_skipping};

/// The routes the gateway serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Chat,
    Responses,
    Messages,
    Models,
}

impl Route {
    /// Maps a method and the path after `/r/<key>/` to a route.
    #[must_use]
    pub fn from_path(method: &axum::http::Method, path: &str) -> Option<Self> {
        use axum::http::Method;
        match (method, path.trim_end_matches('/')) {
            (&Method::POST, "v1/chat/completions") => Some(Self::Chat),
            (&Method::POST, "v1/responses") => Some(Self::Responses),
            (&Method::POST, "v1/messages") => Some(Self::Messages),
            (&Method::GET, "v1/models") => Some(Self::Models),
            _ => None,
        }
    }

    /// The name stored in the ledger.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Responses => "responses",
            Self::Messages => "messages",
            Self::Models => "models",
        }
    }
}

/// One thing a model said: text, or a tool call with canonical arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Atom {
    Text(String),
    Call { name: String, args: String },
}

/// A model turn: what one response said, in order.
pub type Turn = Vec<Atom>;

/// Fingerprint of a sequence of model turns.
#[must_use]
pub fn fingerprint(turns: &[Turn]) -> String {
    let value: Vec<Value> = turns
        .iter()
        .map(|t| {
            t.iter()
                .map(|a| match a {
                    Atom::Text(s) => json!(["text", s]),
                    Atom::Call { name, args } => json!(["call", name, args]),
                })
                .collect()
        })
        .collect();
    json_digest(&Value::Array(value))
}

/// Request fields that change between runs of the same conversation and so do not count.
const VOLATILE: &[&str] = &[
    "metadata",
    "user",
    "prompt_cache_key",
    "safety_identifier",
    "client_metadata",
    "service_tier",
    "store",
];

/// The ledger's view of a generation request.
#[derive(Debug, Clone)]
pub struct RequestView {
    pub model: Option<String>,
    pub stream: bool,
    /// Digest of each conversation item, in order.
    pub items: Vec<String>,
    /// The model-authored turns in the conversation.
    pub model_turns: Vec<Turn>,
    /// Digest of the whole request less volatile fields: equal digests mean the same call.
    pub conversation_digest: String,
}

impl RequestView {
    /// Fingerprint of the model-authored turns, if there are any.
    #[must_use]
    pub fn model_fp(&self) -> Option<String> {
        (!self.model_turns.is_empty()).then(|| fingerprint(&self.model_turns))
    }
}

/// Reads a parsed generation request of `route`.
#[must_use]
pub fn read_request(route: Route, body: &Value) -> RequestView {
    let model = body.get("model").and_then(Value::as_str).map(str::to_owned);
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let wrapped;
    let items: &[Value] = match route {
        Route::Chat | Route::Messages => body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice),
        Route::Responses => match body.get("input") {
            Some(Value::Array(items)) => items,
            Some(other @ Value::String(_)) => {
                wrapped = [json!({"role": "user", "content": other})];
                &wrapped
            }
            _ => &[],
        },
        Route::Models => &[],
    };
    let model_turns = match route {
        Route::Chat => items
            .iter()
            .filter(|m| role(m) == Some("assistant"))
            .map(chat_turn)
            .collect(),
        Route::Messages => items
            .iter()
            .filter(|m| role(m) == Some("assistant"))
            .map(|m| anthropic_turn(m.get("content")))
            .collect(),
        Route::Responses => responses_turns(items),
        Route::Models => Vec::new(),
    };
    let mut canonical = String::with_capacity(1024);
    canonical.push_str(route.name());
    canonical.push('\n');
    write_canonical_skipping(body, VOLATILE, &mut canonical);
    let conversation_digest = sha256_hex(canonical.as_bytes());
    RequestView {
        model,
        stream,
        items: items.iter().map(json_digest).collect(),
        model_turns,
        conversation_digest,
    }
}

fn role(v: &Value) -> Option<&str> {
    v.get("role").and_then(Value::as_str)
}

fn push_text(turn: &mut Turn, text: &str) {
    let t = text.trim();
    if !t.is_empty() {
        turn.push(Atom::Text(t.to_owned()));
    }
}

/// Canonical arguments: parsed JSON text if it parses, the raw string otherwise.
#[must_use]
pub fn canonical_args(raw: &Value) -> String {
    match raw {
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v) => canonical(&v),
            Err(_) => canonical(raw),
        },
        other => canonical(other),
    }
}

fn push_call(turn: &mut Turn, name: Option<&Value>, args: Option<&Value>) {
    turn.push(Atom::Call {
        name: name.and_then(Value::as_str).unwrap_or_default().to_owned(),
        args: args.map(canonical_args).unwrap_or_else(|| "{}".into()),
    });
}

/// Text parts of a content value: a string, or an array of parts with `text`.
fn push_content(turn: &mut Turn, content: Option<&Value>) {
    match content {
        Some(Value::String(s)) => push_text(turn, s),
        Some(Value::Array(parts)) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    push_text(turn, t);
                }
            }
        }
        _ => {}
    }
}

/// A chat completions assistant message as a turn.
#[must_use]
pub fn chat_turn(message: &Value) -> Turn {
    let mut turn = Vec::new();
    push_content(&mut turn, message.get("content"));
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = call.get("function");
        push_call(
            &mut turn,
            f.and_then(|f| f.get("name")),
            f.and_then(|f| f.get("arguments")),
        );
    }
    turn
}

/// An Anthropic assistant content (string or blocks) as a turn.
#[must_use]
pub fn anthropic_turn(content: Option<&Value>) -> Turn {
    let mut turn = Vec::new();
    match content {
        Some(Value::Array(blocks)) => {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => push_content(&mut turn, b.get("text")),
                    Some("tool_use" | "server_tool_use") => {
                        push_call(&mut turn, b.get("name"), b.get("input"));
                    }
                    _ => {}
                }
            }
        }
        other => push_content(&mut turn, other),
    }
    turn
}

/// Adds one model-authored Responses item to a turn.
pub fn push_responses_item(turn: &mut Turn, item: &Value) {
    match item.get("type").and_then(Value::as_str) {
        Some("function_call") => push_call(turn, item.get("name"), item.get("arguments")),
        Some("custom_tool_call") => push_call(turn, item.get("name"), item.get("input")),
        Some("local_shell_call") => {
            push_call(turn, Some(&json!("local_shell")), item.get("action"));
        }
        Some("message") | None => push_content(turn, item.get("content")),
        _ => {}
    }
}

/// Runs of consecutive model-authored Responses items, one turn per run.
#[must_use]
pub fn responses_turns(items: &[Value]) -> Vec<Turn> {
    let mut turns = Vec::new();
    let mut current: Option<Turn> = None;
    for item in items {
        if is_model_item(item) {
            push_responses_item(current.get_or_insert_with(Vec::new), item);
        } else if let Some(t) = current.take() {
            turns.push(t);
        }
    }
    turns.extend(current);
    turns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_request_turns_and_volatile_fields() {
        let a = json!({"model": "m", "user": "u1", "messages": [
            {"role": "user", "content": "do it"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "out"}]});
        let mut b = a.clone();
        b["user"] = json!("u2");
        let va = read_request(Route::Chat, &a);
        let vb = read_request(Route::Chat, &b);
        assert_eq!(va.conversation_digest, vb.conversation_digest);
        assert_eq!(va.items.len(), 3);
        assert_eq!(
            va.model_turns,
            vec![vec![Atom::Call {
                name: "bash".into(),
                args: r#"{"command":"ls"}"#.into()
            }]]
        );
    }

    #[test]
    fn responses_string_input_is_one_user_item() {
        let v = read_request(Route::Responses, &json!({"input": "hi", "stream": true}));
        assert_eq!(v.items.len(), 1);
        assert!(v.stream);
        assert!(v.model_fp().is_none());
    }
}
