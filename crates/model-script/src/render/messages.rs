//! Anthropic Messages: a `message` object, or the SSE sequence `message_start`,
//! content blocks, `message_delta`, `message_stop` that Claude Code reads.

use serde_json::{Value, json};

use super::{Params, Turn, named_event, split};

fn blocks(turn: &Turn) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(text) = &turn.text {
        out.push(json!({"type": "text", "text": text}));
    }
    for c in &turn.calls {
        let input: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
        out.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
    }
    out
}

fn stop_reason(turn: &Turn) -> &'static str {
    if turn.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

pub(super) fn whole(turn: &Turn, p: &Params) -> Value {
    json!({"id": format!("msg_{}", p.id), "type": "message", "role": "assistant",
           "model": p.model, "content": blocks(turn), "stop_reason": stop_reason(turn),
           "stop_sequence": null,
           "usage": {"input_tokens": p.input_tokens, "output_tokens": p.output_tokens(turn)}})
}

pub(super) fn stream(turn: &Turn, p: &Params) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut push = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        frames.push(named_event(name, &data));
    };
    push(
        "message_start",
        json!({"message": {
        "id": format!("msg_{}", p.id), "type": "message", "role": "assistant", "model": p.model,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": p.input_tokens, "output_tokens": 1}}}),
    );
    for (index, block) in blocks(turn).iter().enumerate() {
        if block["type"] == "text" {
            push(
                "content_block_start",
                json!({"index": index, "content_block": {"type": "text", "text": ""}}),
            );
            for piece in split(block["text"].as_str().unwrap_or_default(), p.chunks) {
                push(
                    "content_block_delta",
                    json!({"index": index, "delta": {"type": "text_delta", "text": piece}}),
                );
            }
        } else {
            let mut start = block.clone();
            start["input"] = json!({});
            push(
                "content_block_start",
                json!({"index": index, "content_block": start}),
            );
            let args = block["input"].to_string();
            for piece in split(&args, p.chunks) {
                push(
                    "content_block_delta",
                    json!({"index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece}}),
                );
            }
        }
        push("content_block_stop", json!({"index": index}));
    }
    push(
        "message_delta",
        json!({"delta": {"stop_reason": stop_reason(turn), "stop_sequence": null},
                                 "usage": {"output_tokens": p.output_tokens(turn)}}),
    );
    push("message_stop", json!({}));
    frames
}
