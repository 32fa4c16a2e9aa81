//! OpenAI chat completions: `chat.completion` bodies and `chat.completion.chunk` SSE streams
//! ending in `data: [DONE]`.

use serde_json::{Value, json};

use super::{Params, Turn, data_event, split};
use crate::tokens::{IM_END, TOOL_END, TOOL_START, completion_ids};

fn usage(turn: &Turn, p: &Params) -> Value {
    let out = p.output_tokens(turn);
    json!({"prompt_tokens": p.input_tokens, "completion_tokens": out,
           "total_tokens": p.input_tokens + out})
}

fn finish_reason(turn: &Turn) -> &'static str {
    if turn.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

/// Adds token mode's fields to a choice for completion ids `ids` from index `start`:
/// `logprobs` (`null` unless asked, as vLLM answers) and `token_ids` when asked.
fn token_fields(choice: &mut Value, p: &Params, start: usize, ids: &[u32]) {
    let Some(t) = &p.tokens else { return };
    choice["logprobs"] = if t.logprobs {
        t.logprobs_json(start, ids)
    } else {
        Value::Null
    };
    if t.ids {
        choice["token_ids"] = json!(ids);
    }
}

pub(super) fn whole(turn: &Turn, p: &Params) -> Value {
    let mut message = json!({"role": "assistant", "content": turn.text});
    if !turn.calls.is_empty() {
        message["tool_calls"] = turn
            .calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
    }
    let mut choice = json!({"index": 0, "message": message, "finish_reason": finish_reason(turn)});
    token_fields(&mut choice, p, 0, &completion_ids(turn));
    let mut body = json!({"id": format!("chatcmpl-{}", p.id), "object": "chat.completion",
           "created": 0, "model": p.model, "choices": [choice], "usage": usage(turn, p)});
    if let Some(t) = p.tokens.as_ref().filter(|t| t.ids) {
        body["prompt_token_ids"] = json!(t.prompt_ids);
    }
    body
}

pub(super) fn stream(turn: &Turn, p: &Params) -> Vec<Vec<u8>> {
    // In token mode each chunk carries the ids of its piece; they add up to the completion.
    let mut sent = 0usize;
    let mut chunk = |delta: Value, finish: Value, ids: Vec<u32>| {
        let mut choice = json!({"index": 0, "delta": delta, "finish_reason": finish});
        token_fields(&mut choice, p, sent, &ids);
        sent += ids.len();
        let mut v = json!({"id": format!("chatcmpl-{}", p.id), "object": "chat.completion.chunk",
                       "created": 0, "model": p.model, "choices": [choice]});
        if sent == 0
            && let Some(t) = p.tokens.as_ref().filter(|t| t.ids)
        {
            v["prompt_token_ids"] = json!(t.prompt_ids);
        }
        data_event(&v.to_string())
    };
    let bytes = |s: &str| s.bytes().map(u32::from).collect::<Vec<u32>>();
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        Vec::new(),
    )];
    for piece in split(turn.text.as_deref().unwrap_or(""), p.chunks) {
        frames.push(chunk(json!({"content": piece}), Value::Null, bytes(piece)));
    }
    for (i, c) in turn.calls.iter().enumerate() {
        let mut ids = if i > 0 { vec![TOOL_END] } else { Vec::new() };
        ids.push(TOOL_START);
        ids.extend(bytes(&c.name));
        ids.extend(bytes("\n"));
        frames.push(chunk(
            json!({"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": ""}}]}),
            Value::Null,
            ids,
        ));
        for piece in split(&c.arguments, p.chunks) {
            frames.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                Value::Null,
                bytes(piece),
            ));
        }
    }
    let mut last = if turn.calls.is_empty() {
        Vec::new()
    } else {
        vec![TOOL_END]
    };
    last.push(IM_END);
    frames.push(chunk(json!({}), json!(finish_reason(turn)), last));
    if p.include_usage {
        let v = json!({"id": format!("chatcmpl-{}", p.id), "object": "chat.completion.chunk",
                       "created": 0, "model": p.model, "choices": [], "usage": usage(turn, p)});
        frames.push(data_event(&v.to_string()));
    }
    frames.push(data_event("[DONE]"));
    frames
}
