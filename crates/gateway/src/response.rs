//! What the gateway reads from a recorded response: the model's turn (for lineage) and the
//! usage. Streams are read from their complete recorded bytes after they were passed on.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::conversation::{
    Route, Turn, anthropic_turn, canonical_args, chat_turn, push_responses_item,
};
use crate::sse;

/// The turn and usage found in a response body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResponseView {
    pub turn: Option<Turn>,
    pub usage: Option<Value>,
}

/// Reads a response body of `route`, streamed (SSE) or not.
#[must_use]
pub fn read_response(route: Route, stream: bool, body: &[u8]) -> ResponseView {
    if stream {
        let events = sse::parse(body);
        let data: Vec<Value> = events
            .iter()
            .filter(|e| e.data != "[DONE]")
            .filter_map(|e| serde_json::from_str(&e.data).ok())
            .collect();
        match route {
            Route::Chat => chat_stream(&data),
            Route::Responses => responses_stream(&data),
            Route::Messages => messages_stream(&data),
            Route::Models => ResponseView::default(),
        }
    } else {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return ResponseView::default();
        };
        let usage = v.get("usage").filter(|u| !u.is_null()).cloned();
        let turn = match route {
            Route::Chat => v.pointer("/choices/0/message").map(chat_turn),
            Route::Responses => v
                .get("output")
                .and_then(Value::as_array)
                .map(|items| responses_output(items)),
            Route::Messages => v
                .get("content")
                .is_some()
                .then(|| anthropic_turn(v.get("content"))),
            Route::Models => None,
        };
        ResponseView { turn, usage }
    }
}

/// A Responses `output` (every item is the model's) as one turn.
fn responses_output(items: &[Value]) -> Turn {
    let mut turn = Vec::new();
    for item in items {
        push_responses_item(&mut turn, item);
    }
    turn
}

#[derive(Default)]
struct PartialCall {
    name: String,
    args: String,
}

fn finish_calls(turn: &mut Turn, calls: BTreeMap<u64, PartialCall>) {
    for c in calls.into_values() {
        turn.push(crate::conversation::Atom::Call {
            name: c.name,
            args: canonical_args(&Value::String(c.args)),
        });
    }
}

fn chat_stream(chunks: &[Value]) -> ResponseView {
    let mut text = String::new();
    let mut calls: BTreeMap<u64, PartialCall> = BTreeMap::new();
    let mut usage = None;
    let mut seen = false;
    for c in chunks {
        if let Some(u) = c.get("usage").filter(|u| !u.is_null()) {
            usage = Some(u.clone());
        }
        let Some(delta) = c.pointer("/choices/0/delta") else {
            continue;
        };
        seen = true;
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            text.push_str(t);
        }
        for tc in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
            let entry = calls.entry(index).or_default();
            if let Some(n) = tc.pointer("/function/name").and_then(Value::as_str) {
                entry.name.push_str(n);
            }
            if let Some(a) = tc.pointer("/function/arguments").and_then(Value::as_str) {
                entry.args.push_str(a);
            }
        }
    }
    let turn = seen.then(|| {
        let mut turn = Vec::new();
        let t = text.trim();
        if !t.is_empty() {
            turn.push(crate::conversation::Atom::Text(t.to_owned()));
        }
        finish_calls(&mut turn, calls);
        turn
    });
    ResponseView { turn, usage }
}

fn responses_stream(events: &[Value]) -> ResponseView {
    let done = events.iter().rev().find(|e| {
        matches!(
            e.get("type").and_then(Value::as_str),
            Some("response.completed" | "response.incomplete" | "response.done")
        )
    });
    if let Some(resp) = done.and_then(|e| e.get("response")) {
        let usage = resp.get("usage").filter(|u| !u.is_null()).cloned();
        let turn = resp
            .get("output")
            .and_then(Value::as_array)
            .map(|items| responses_output(items));
        return ResponseView { turn, usage };
    }
    let items: Vec<Value> = events
        .iter()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("response.output_item.done"))
        .filter_map(|e| e.get("item").cloned())
        .collect();
    ResponseView {
        turn: (!items.is_empty()).then(|| responses_output(&items)),
        usage: None,
    }
}

fn messages_stream(events: &[Value]) -> ResponseView {
    let mut blocks: BTreeMap<u64, (Value, String)> = BTreeMap::new();
    let mut usage: Option<Map<String, Value>> = None;
    let mut merge = |u: &Value| {
        if let Some(obj) = u.as_object() {
            let target = usage.get_or_insert_with(Map::new);
            for (k, v) in obj {
                target.insert(k.clone(), v.clone());
            }
        }
    };
    for e in events {
        let index = e.get("index").and_then(Value::as_u64).unwrap_or(0);
        match e.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(u) = e.pointer("/message/usage") {
                    merge(u);
                }
            }
            Some("message_delta") => {
                if let Some(u) = e.get("usage") {
                    merge(u);
                }
            }
            Some("content_block_start") => {
                let block = e.get("content_block").cloned().unwrap_or(Value::Null);
                blocks.insert(index, (block, String::new()));
            }
            Some("content_block_delta") => {
                if let Some((block, json)) = blocks.get_mut(&index) {
                    let d = e.get("delta");
                    if let Some(t) = d.and_then(|d| d.get("text")).and_then(Value::as_str) {
                        let prev = block.get("text").and_then(Value::as_str).unwrap_or("");
                        block["text"] = Value::String(format!("{prev}{t}"));
                    }
                    if let Some(p) = d
                        .and_then(|d| d.get("partial_json"))
                        .and_then(Value::as_str)
                    {
                        json.push_str(p);
                    }
                }
            }
            _ => {}
        }
    }
    if blocks.is_empty() && usage.is_none() {
        return ResponseView::default();
    }
    let content: Vec<Value> = blocks
        .into_values()
        .map(|(mut block, json)| {
            if !json.is_empty() {
                block["input"] = serde_json::from_str(&json).unwrap_or(Value::String(json));
            }
            block
        })
        .collect();
    ResponseView {
        turn: Some(anthropic_turn(Some(&Value::Array(content)))),
        usage: usage.map(Value::Object),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Atom;

    #[test]
    fn chat_stream_reassembles_parallel_calls() {
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"comm\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"name\":\"bash\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"and\\\":\\\"ls\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\n",
            "data: [DONE]\n\n"
        );
        let v = read_response(Route::Chat, true, body.as_bytes());
        assert_eq!(
            v.turn,
            Some(vec![
                Atom::Call {
                    name: "bash".into(),
                    args: r#"{"command":"ls"}"#.into()
                },
                Atom::Call {
                    name: "bash".into(),
                    args: "{}".into()
                },
            ])
        );
        assert_eq!(v.usage, Some(serde_json::json!({"prompt_tokens": 3})));
    }
}
