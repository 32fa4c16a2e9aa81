//! A rollout's model calls as the page shows them: per call, the messages its request added
//! since the call it continues (its parent in the ledger, else the call before it) and what
//! the model answered, read from the recorded bodies. Bodies are the harness's and the
//! model's bytes: nothing here trusts their shape, a body that does not parse shows nothing.

use std::collections::BTreeMap;

use rollpoint_gateway::conversation::{Atom, Route};
use rollpoint_gateway::{CallRecord, LedgerRecord};
use serde::Serialize;
use serde_json::Value;

/// Longest text kept of one message or reply; the rest is cut and said to be.
const TEXT_MAX: usize = 64 * 1024;

/// One model call.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CallView {
    pub call_id: String,
    pub seq: i64,
    pub attempt: u32,
    pub status: String,
    pub route: String,
    pub model: Option<String>,
    pub policy_version: Option<String>,
    /// The recorded call it was answered from (a replay after a restore).
    pub replayed_from: Option<String>,
    pub admitted_ms: i64,
    pub finished_ms: Option<i64>,
    pub latency_ms: Option<i64>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub error: Option<String>,
    /// Messages its request added since the call it continues.
    pub added: Vec<Message>,
    pub reply: Option<Reply>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Message {
    pub role: String,
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Reply {
    pub text: String,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

/// The calls among `records` in ledger order, with their messages, by rollout.
#[must_use]
pub fn calls_by_rollout(records: &[LedgerRecord]) -> BTreeMap<String, Vec<CallView>> {
    let mut bodies: BTreeMap<&str, &[u8]> = BTreeMap::new();
    let mut by_rollout: BTreeMap<&str, Vec<&CallRecord>> = BTreeMap::new();
    for r in records {
        match r {
            LedgerRecord::Body(b) => {
                bodies.insert(&b.digest, &b.bytes);
            }
            LedgerRecord::Call(c) => by_rollout.entry(&c.rollout).or_default().push(c),
        }
    }
    by_rollout
        .into_iter()
        .map(|(rollout, calls)| (rollout.to_owned(), of_rollout(&bodies, calls)))
        .collect()
}

/// One rollout's calls, in ledger order.
fn of_rollout(bodies: &BTreeMap<&str, &[u8]>, mut calls: Vec<&CallRecord>) -> Vec<CallView> {
    // Ledger order: each attempt's calls by their sequence in its capture key.
    calls.sort_by_key(|c| (c.attempt, c.seq));
    let body = |d: &Option<String>| d.as_deref().and_then(|d| bodies.get(d).copied());
    // How many conversation items each call's request held, for what the next one added.
    let mut items_of: BTreeMap<&str, usize> = BTreeMap::new();
    let mut previous: Option<&str> = None;
    let mut out = Vec::with_capacity(calls.len());
    let mut attempt = None;
    for c in calls {
        if attempt != Some(c.attempt) {
            previous = None;
            attempt = Some(c.attempt);
        }
        let route = route(&c.route);
        let request: Option<Value> =
            body(&c.request_digest).and_then(|b| serde_json::from_slice(b).ok());
        let items = request
            .as_ref()
            .and_then(|r| route.map(|route| conversation(route, r)))
            .unwrap_or_default();
        let before = c
            .parent_call_id
            .as_deref()
            .or(previous)
            .and_then(|p| items_of.get(p).copied())
            // The parent's request, and its answer, which the harness sends back.
            .map_or(0, |n| n + 1);
        items_of.insert(&c.call_id, items.len());
        previous = Some(&c.call_id);
        let reply = match (route, body(&c.response_digest)) {
            (Some(route), Some(bytes)) => Some(reply(route, c.stream, bytes)),
            _ => None,
        };
        let usage = c.usage.as_ref();
        let tokens = |k: &str, alt: &str| {
            usage.and_then(|u| u.get(k).or_else(|| u.get(alt)).and_then(Value::as_u64))
        };
        out.push(CallView {
            call_id: c.call_id.clone(),
            seq: c.seq,
            attempt: c.attempt,
            status: c.status.as_str().to_owned(),
            route: c.route.clone(),
            model: c.model.clone(),
            policy_version: c.policy_version.clone(),
            replayed_from: c.replayed_from.clone(),
            admitted_ms: c.admitted_ms,
            finished_ms: c.finished_ms,
            latency_ms: c
                .finished_ms
                .zip(c.upstream_ms)
                .map(|(f, u)| f.saturating_sub(u)),
            prompt_tokens: tokens("prompt_tokens", "input_tokens"),
            completion_tokens: tokens("completion_tokens", "output_tokens"),
            error: c.error.clone(),
            added: items.into_iter().skip(before).collect(),
            reply,
        });
    }
    out
}

fn route(name: &str) -> Option<Route> {
    match name {
        "chat" => Some(Route::Chat),
        "responses" => Some(Route::Responses),
        "messages" => Some(Route::Messages),
        _ => None,
    }
}

/// The request's conversation as messages, in order.
fn conversation(route: Route, request: &Value) -> Vec<Message> {
    let mut out = Vec::new();
    if route == Route::Messages
        && let Some(system) = request.get("system")
    {
        out.push(message("system", text_of(Some(system)), Vec::new()));
    }
    let items = match route {
        Route::Chat | Route::Messages => request.get("messages"),
        Route::Responses => request.get("input"),
        Route::Models => None,
    };
    match items {
        Some(Value::Array(items)) => {
            for item in items {
                out.push(item_message(item));
            }
        }
        Some(Value::String(s)) => out.push(message("user", s.clone(), Vec::new())),
        _ => {}
    }
    out
}

/// One chat message, Responses input item or Anthropic message.
fn item_message(item: &Value) -> Message {
    let role = item.get("role").and_then(Value::as_str);
    let kind = item.get("type").and_then(Value::as_str);
    match (role, kind) {
        (_, Some("function_call")) => message(
            "assistant",
            String::new(),
            vec![tool_call(item.get("name"), item.get("arguments"))],
        ),
        (_, Some("function_call_output")) => {
            message("tool", text_of(item.get("output")), Vec::new())
        }
        _ => {
            let calls = item
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| {
                    let f = c.get("function");
                    tool_call(
                        f.and_then(|f| f.get("name")),
                        f.and_then(|f| f.get("arguments")),
                    )
                })
                .collect();
            message(
                role.or(kind).unwrap_or("item"),
                text_of(item.get("content")),
                calls,
            )
        }
    }
}

/// The text of a content: a string, or the text of its parts (tool results and uses of an
/// Anthropic content named by what they are).
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for p in parts {
                let piece = match p.get("type").and_then(Value::as_str) {
                    Some("tool_use") => format!(
                        "[tool_use {}] {}",
                        p.get("name").and_then(Value::as_str).unwrap_or("?"),
                        p.get("input").map(Value::to_string).unwrap_or_default()
                    ),
                    Some("tool_result") => text_of(p.get("content")),
                    _ => p
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                };
                if !text.is_empty() && !piece.is_empty() {
                    text.push('\n');
                }
                text.push_str(&piece);
            }
            text
        }
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn tool_call(name: Option<&Value>, arguments: Option<&Value>) -> ToolCall {
    ToolCall {
        name: name.and_then(Value::as_str).unwrap_or("?").to_owned(),
        arguments: cut(match arguments {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        }),
    }
}

fn message(role: &str, text: String, tool_calls: Vec<ToolCall>) -> Message {
    Message {
        role: role.to_owned(),
        text: cut(text),
        tool_calls,
    }
}

/// What the model answered, from the recorded response (streamed or not).
fn reply(route: Route, stream: bool, body: &[u8]) -> Reply {
    let read = rollpoint_gateway::response::read_response(route, stream, body);
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for atom in read.turn.unwrap_or_default() {
        match atom {
            Atom::Text(t) => text.push_str(&t),
            Atom::Call { name, args } => tool_calls.push(ToolCall {
                name,
                arguments: cut(args),
            }),
        }
    }
    let reasoning = (!stream)
        .then(|| serde_json::from_slice::<Value>(body).ok())
        .flatten()
        .and_then(|v| {
            v.pointer("/choices/0/message/reasoning_content")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .map(cut);
    Reply {
        text: cut(text),
        reasoning,
        tool_calls,
    }
}

/// `text` cut to [`TEXT_MAX`] bytes on a character boundary, said when cut.
fn cut(mut text: String) -> String {
    if text.len() > TEXT_MAX {
        let mut end = TEXT_MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let dropped = text.len() - end;
        text.truncate(end);
        text.push_str(&format!("\n[{dropped} more bytes not shown]"));
    }
    text
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use rollpoint_gateway::ledger::record::BodyRecord;
    use serde_json::json;

    use super::*;

    fn call(
        id: &str,
        seq: i64,
        parent: Option<&str>,
        request: &str,
        response: &str,
    ) -> LedgerRecord {
        let c: CallRecord = serde_json::from_value(json!({
            "call_id": id, "capture_key": "r", "rollout": "r", "attempt": 0, "seq": seq,
            "route": "chat", "stream": false, "model": "m", "request_digest": request,
            "conversation_digest": null, "items": [], "model_fp": null, "output_fp": null,
            "parent_call_id": parent, "lineage": "resolved", "lineage_reason": null,
            "status": "ok", "http_status": 200, "content_type": null, "error": null,
            "replayed_from": null, "response_digest": response, "usage": null,
            "admitted_ms": 1, "upstream_ms": 1, "first_byte_ms": null, "finished_ms": 3,
            "delivered_ms": null,
        }))
        .unwrap();
        LedgerRecord::Call(Box::new(c))
    }

    fn body(digest: &str, value: &Value) -> LedgerRecord {
        LedgerRecord::Body(BodyRecord {
            digest: digest.to_owned(),
            bytes: serde_json::to_vec(value).unwrap(),
        })
    }

    #[test]
    fn a_call_shows_what_its_request_added_since_its_parent_and_the_reply() {
        let system = json!({"role": "system", "content": "be brief"});
        let user = json!({"role": "user", "content": "list </script> files"});
        let asked = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}
        ]});
        let result = json!({"role": "tool", "tool_call_id": "t1", "content": "a.txt"});
        let records = vec![
            body("q1", &json!({"model": "m", "messages": [system, user]})),
            body("a1", &json!({"choices": [{"message": asked}]})),
            body(
                "q2",
                &json!({"model": "m", "messages": [system, user, asked, result]}),
            ),
            body(
                "a2",
                &json!({"choices": [{"message": {"role": "assistant", "content": "done"}}]}),
            ),
            // Out of order on purpose: the view orders by sequence.
            call("r#1", 1, Some("r#0"), "q2", "a2"),
            call("r#0", 0, None, "q1", "a1"),
        ];
        let calls = calls_by_rollout(&records).remove("r").unwrap();
        assert_eq!(
            calls.iter().map(|c| c.call_id.as_str()).collect::<Vec<_>>(),
            ["r#0", "r#1"]
        );
        let first: Vec<_> = calls[0].added.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(first, ["system", "user"]);
        assert_eq!(
            calls[0].added[1].text, "list </script> files",
            "text is kept as text"
        );
        let reply = calls[0].reply.as_ref().unwrap();
        assert_eq!(reply.tool_calls.len(), 1);
        assert_eq!(reply.tool_calls[0].name, "bash");
        // The second call added only the tool's result (its parent's request and answer are
        // not shown again).
        assert_eq!(calls[1].added.len(), 1, "{:?}", calls[1].added);
        assert_eq!(calls[1].added[0].role, "tool");
        assert_eq!(calls[1].added[0].text, "a.txt");
        assert_eq!(calls[1].reply.as_ref().unwrap().text, "done");
        assert_eq!(calls[1].latency_ms, Some(2));
    }

    #[test]
    fn a_body_that_is_not_json_shows_nothing_rather_than_failing() {
        let records = vec![
            LedgerRecord::Body(BodyRecord {
                digest: "q".into(),
                bytes: b"\xff not json".to_vec(),
            }),
            call("r#0", 0, None, "q", "missing"),
        ];
        let calls = calls_by_rollout(&records).remove("r").unwrap();
        assert!(calls[0].added.is_empty());
        assert!(calls[0].reply.is_none());
    }
}
