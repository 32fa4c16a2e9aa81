//! The chat completions API (`POST {base}/chat/completions`), non-streaming.

use serde_json::{Value, json};

use super::{Reply, call_usage};
use crate::errors::ReplyError;
use crate::tools::ToolSpec;
use crate::transcript::{AssistantMessage, Message, ToolCall};

pub fn request(model: &str, messages: &[Message], tools: &[ToolSpec]) -> Value {
    let messages: Vec<Value> = messages
        .iter()
        .map(|m| match m {
            Message::System(t) => json!({"role": "system", "content": t.content}),
            Message::User(t) => json!({"role": "user", "content": t.content}),
            Message::Assistant(a) => {
                let mut out = json!({"role": "assistant", "content": a.content});
                if !a.tool_calls.is_empty() {
                    out["tool_calls"] = a
                        .tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            })
                        })
                        .collect();
                }
                out
            }
            Message::Tool(t) => {
                json!({"role": "tool", "tool_call_id": t.call_id, "content": t.content})
            }
        })
        .collect();
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            })
        })
        .collect();
    json!({"model": model, "messages": messages, "tools": tools, "stream": false})
}

pub fn parse(value: &Value) -> Result<Reply, ReplyError> {
    let message = value
        .pointer("/choices/0/message")
        .ok_or(ReplyError::Absent {
            field: "choices[0].message",
        })?;
    let content = match message.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(ReplyError::NotText {
                field: "choices[0].message.content",
                value: other.clone(),
            });
        }
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").filter(|v| !v.is_null()) {
        let calls = calls.as_array().ok_or(ReplyError::NotList {
            field: "choices[0].message.tool_calls",
        })?;
        for (i, call) in calls.iter().enumerate() {
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .ok_or_else(|| ReplyError::Missing {
                    field: format!("tool_calls[{i}].function.name"),
                })?;
            let arguments = match call.pointer("/function/arguments") {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => "{}".to_owned(),
                Some(other) => other.to_string(),
            };
            tool_calls.push(ToolCall {
                id: call
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                name: name.to_owned(),
                arguments,
            });
        }
    }
    Ok(Reply {
        message: AssistantMessage {
            content,
            tool_calls,
        },
        usage: call_usage(value, "prompt_tokens", "completion_tokens"),
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::transcript::{TextMessage, ToolMessage, ToolStatus};

    #[test]
    fn request_carries_tool_calls_and_outputs() {
        let messages = vec![
            Message::User(TextMessage {
                content: "hi".to_owned(),
            }),
            Message::Assistant(AssistantMessage {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "c1".to_owned(),
                    name: "bash".to_owned(),
                    arguments: "{\"command\":\"ls\"}".to_owned(),
                }],
            }),
            Message::Tool(ToolMessage {
                call_id: "c1".to_owned(),
                content: "a\n".to_owned(),
                status: ToolStatus::Ok,
            }),
        ];
        let body = request("m", &messages, &crate::tools::specs());
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["name"],
            "bash"
        );
        assert_eq!(body["messages"][2]["tool_call_id"], "c1");
        assert_eq!(body["tools"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn parses_text_and_tool_calls() {
        let reply = parse(&json!({
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        }))
        .unwrap();
        assert_eq!(reply.message.tool_calls[0].name, "read");
        assert_eq!(reply.usage.total_tokens, 10);
        assert!(parse(&json!({"choices": []})).is_err());
    }
}
