//! OpenAI Responses: a `response` object, or the SSE event sequence `response.created` ...
//! `response.completed` that Codex reads.

use serde_json::{Value, json};

use super::{Params, Turn, named_event, split};
use crate::tokens::{completion_ids, raw_messages};

fn items(turn: &Turn, p: &Params) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(text) = &turn.text {
        out.push(
            json!({"id": format!("msg_{}", p.id), "type": "message", "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        );
    }
    for c in &turn.calls {
        out.push(
            json!({"id": format!("fc_{}", c.id), "type": "function_call",
                        "status": "completed", "call_id": c.id, "name": c.name,
                        "arguments": c.arguments}),
        );
    }
    out
}

fn response(turn: &Turn, p: &Params, status: &str, output: Vec<Value>, usage: bool) -> Value {
    let out = p.output_tokens(turn);
    let usage = if usage {
        json!({"input_tokens": p.input_tokens, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": out, "output_tokens_details": {"reasoning_tokens": 0},
               "total_tokens": p.input_tokens + out})
    } else {
        Value::Null
    };
    let mut r = json!({"id": format!("resp_{}", p.id), "object": "response", "created_at": 0,
           "status": status, "model": p.model, "output": output, "usage": usage});
    // vLLM's raw message tokens, on the finished response when asked for.
    if let Some(t) = p.tokens.as_ref().filter(|t| t.ids && status == "completed") {
        r["input_messages"] = raw_messages(&t.prompt_ids);
        r["output_messages"] = raw_messages(&completion_ids(turn));
    }
    r
}

pub(super) fn whole(turn: &Turn, p: &Params) -> Value {
    response(turn, p, "completed", items(turn, p), true)
}

pub(super) fn stream(turn: &Turn, p: &Params) -> Vec<Vec<u8>> {
    let mut seq = 0u64;
    let mut frames = Vec::new();
    let mut push = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        frames.push(named_event(name, &data));
    };
    let pending = response(turn, p, "in_progress", Vec::new(), false);
    push("response.created", json!({"response": pending}));
    push("response.in_progress", json!({"response": pending}));
    let done = items(turn, p);
    for (index, item) in done.iter().enumerate() {
        let id = item["id"].clone();
        if item["type"] == "message" {
            let text = item["content"][0]["text"].as_str().unwrap_or_default();
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["content"] = json!([]);
            push(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            );
            let empty = json!({"type": "output_text", "text": "", "annotations": []});
            push(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0, "part": empty}),
            );
            for piece in split(text, p.chunks) {
                push(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                            "delta": piece}),
                );
            }
            push(
                "response.output_text.done",
                json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
            );
            push(
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                        "part": item["content"][0]}),
            );
        } else {
            let args = item["arguments"].as_str().unwrap_or_default();
            let mut added = item.clone();
            added["status"] = json!("in_progress");
            added["arguments"] = json!("");
            push(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            );
            for piece in split(args, p.chunks) {
                push(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": piece}),
                );
            }
            push(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "arguments": args}),
            );
        }
        push(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }
    push(
        "response.completed",
        json!({"response": response(turn, p, "completed", done, true)}),
    );
    frames
}
