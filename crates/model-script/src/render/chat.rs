//! OpenAI chat completions: `chat.completion` bodies and `chat.completion.chunk` SSE streams
//! ending in `data: [DONE]`.

use serde_json::{Value, json};

use super::{Params, Turn, data_event, split};

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
    json!({"id": format!("chatcmpl-{}", p.id), "object": "chat.completion", "created": 0,
           "model": p.model,
           "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(turn)}],
           "usage": usage(turn, p)})
}

pub(super) fn stream(turn: &Turn, p: &Params) -> Vec<Vec<u8>> {
    let chunk = |delta: Value, finish: Value| {
        let v = json!({"id": format!("chatcmpl-{}", p.id), "object": "chat.completion.chunk",
                       "created": 0, "model": p.model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        data_event(&v.to_string())
    };
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in split(turn.text.as_deref().unwrap_or(""), p.chunks) {
        frames.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (i, c) in turn.calls.iter().enumerate() {
        frames.push(chunk(
            json!({"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in split(&c.arguments, p.chunks) {
            frames.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                Value::Null,
            ));
        }
    }
    frames.push(chunk(json!({}), json!(finish_reason(turn))));
    if p.include_usage {
        let v = json!({"id": format!("chatcmpl-{}", p.id), "object": "chat.completion.chunk",
                       "created": 0, "model": p.model, "choices": [], "usage": usage(turn, p)});
        frames.push(data_event(&v.to_string()));
    }
    frames.push(data_event("[DONE]"));
    frames
}
