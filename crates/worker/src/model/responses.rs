//! The Responses API (`POST {base}/responses`), non-streaming and stateless: every request
//! carries the whole conversation (`store: false`), so a relaunch needs no server-side state.

use serde_json::{Value, json};

use super::{Reply, call_usage};
use crate::errors::ReplyError;
use crate::tools::ToolSpec;
use crate::transcript::{AssistantMessage, Message, ToolCall};

pub fn request(model: &str, messages: &[Message], tools: &[ToolSpec]) -> Value {
    let mut input = Vec::with_capacity(messages.len());
    for m in messages {
        match m {
            Message::System(t) => input.push(json!({"role": "system", "content": t.content})),
            Message::User(t) => input.push(json!({"role": "user", "content": t.content})),
            Message::Assistant(a) => {
                if let Some(text) = &a.content {
                    input.push(json!({"role": "assistant", "content": text}));
                }
                for c in &a.tool_calls {
                    input.push(json!({
                        "type": "function_call",
                        "call_id": c.id,
                        "name": c.name,
                        "arguments": c.arguments,
                    }));
                }
            }
            Message::Tool(t) => input.push(json!({
                "type": "function_call_output",
                "call_id": t.call_id,
                "output": t.content,
            })),
        }
    }
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            })
        })
        .collect();
    json!({"model": model, "input": input, "tools": tools, "store": false, "stream": false})
}

pub fn parse(value: &Value) -> Result<Reply, ReplyError> {
    let output = value
        .get("output")
        .and_then(Value::as_array)
        .ok_or(ReplyError::Absent {
            field: "output list",
        })?;
    let mut text = String::new();
    let mut has_text = false;
    let mut tool_calls = Vec::new();
    for (i, item) in output.iter().enumerate() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                        has_text = true;
                    }
                }
            }
            Some("function_call") => {
                let name = item.get("name").and_then(Value::as_str).ok_or_else(|| {
                    ReplyError::Missing {
                        field: format!("output[{i}].name"),
                    }
                })?;
                tool_calls.push(ToolCall {
                    id: item
                        .get("call_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    name: name.to_owned(),
                    arguments: item
                        .get("arguments")
                        .and_then(Value::as_str)
                        .unwrap_or("{}")
                        .to_owned(),
                });
            }
            // Reasoning and other items do not go back to the model.
            _ => {}
        }
    }
    Ok(Reply {
        message: AssistantMessage {
            content: has_text.then_some(text),
            tool_calls,
        },
        usage: call_usage(value, "input_tokens", "output_tokens"),
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::transcript::{TextMessage, ToolMessage, ToolStatus};

    #[test]
    fn round_trip_of_a_tool_step() {
        let reply = parse(&json!({
            "output": [
                {"type": "reasoning", "summary": []},
                {"type": "function_call", "call_id": "f1", "name": "bash", "arguments": "{\"command\":\"true\"}"}
            ],
            "usage": {"input_tokens": 4, "output_tokens": 2}
        }))
        .unwrap();
        assert_eq!(reply.message.content, None);
        assert_eq!(reply.usage.total_tokens, 6);
        let messages = vec![
            Message::User(TextMessage {
                content: "go".to_owned(),
            }),
            Message::Assistant(reply.message),
            Message::Tool(ToolMessage {
                call_id: "f1".to_owned(),
                content: "done".to_owned(),
                status: ToolStatus::Ok,
            }),
        ];
        let body = request("m", &messages, &[]);
        assert_eq!(body["input"][1]["type"], "function_call");
        assert_eq!(body["input"][2]["call_id"], "f1");
        assert_eq!(body["store"], false);
        let text = parse(&json!({"output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}]}))
            .unwrap();
        assert_eq!(text.message.content.as_deref(), Some("ok"));
    }
}
