//! The completion's text read as a chat turn and written as the chat completion (or its
//! stream) a harness expects.
//!
//! Tool-call parsers, one per template family:
//!
//! - `hermes` (Hermes, Qwen2.5, Qwen3 and the templates that copy them): each call is
//!   `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; a leading
//!   `<think>...</think>` is the turn's reasoning (`reasoning_content`); the rest, trimmed,
//!   is its content. A call whose JSON does not read is left in the content, as text.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How a model family writes tool calls in its text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolParser {
    #[default]
    Hermes,
}

impl std::str::FromStr for ToolParser {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hermes" => Ok(Self::Hermes),
            other => Err(format!(
                "{other:?} is not a tool-call parser (allowed: \"hermes\")"
            )),
        }
    }
}

/// One assistant turn read from a completion's text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Turn {
    pub reasoning: Option<String>,
    pub content: Option<String>,
    /// Each call's name and its arguments as a JSON string.
    pub calls: Vec<(String, String)>,
}

impl ToolParser {
    /// `text` read as a turn.
    #[must_use]
    pub fn parse(self, text: &str) -> Turn {
        match self {
            Self::Hermes => hermes(text),
        }
    }
}

fn hermes(text: &str) -> Turn {
    let mut rest = text.trim_start();
    let mut turn = Turn::default();
    if let Some(after) = rest.strip_prefix("<think>")
        && let Some(end) = after.find("</think>")
    {
        turn.reasoning = Some(after[..end].trim().to_owned());
        rest = &after[end + "</think>".len()..];
    }
    let mut content = String::new();
    while let Some(start) = rest.find("<tool_call>") {
        let inner = &rest[start + "<tool_call>".len()..];
        let Some(end) = inner.find("</tool_call>") else {
            break;
        };
        let call: Option<(String, String)> = serde_json::from_str::<Value>(inner[..end].trim())
            .ok()
            .and_then(|v| {
                let name = v["name"].as_str()?.to_owned();
                let args = match &v["arguments"] {
                    Value::String(s) => s.clone(),
                    Value::Null => "{}".to_owned(),
                    other => other.to_string(),
                };
                Some((name, args))
            });
        match call {
            Some(c) => {
                content.push_str(&rest[..start]);
                turn.calls.push(c);
            }
            None => {
                content.push_str(&rest[..start + "<tool_call>".len() + end + "</tool_call>".len()])
            }
        }
        rest = &inner[end + "</tool_call>".len()..];
    }
    content.push_str(rest);
    let content = content.trim();
    turn.content = (!content.is_empty()).then(|| content.to_owned());
    turn
}

/// What the chat reply says besides the turn.
#[derive(Debug, Clone)]
pub struct ReplyMeta<'a> {
    pub id: &'a str,
    pub model: &'a str,
    pub created: u64,
    pub finish_reason: &'a str,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Stream it as server-sent events (with a usage chunk when asked).
    pub stream: bool,
    pub include_usage: bool,
}

/// The chat completion of `turn`: its content type and bytes.
#[must_use]
pub fn write(turn: &Turn, meta: &ReplyMeta<'_>) -> (&'static str, Vec<u8>) {
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"id": format!("call_{}_{i}", meta.id), "type": "function",
                   "function": {"name": name, "arguments": args}})
        })
        .collect();
    let finish = if calls.is_empty() {
        meta.finish_reason
    } else {
        "tool_calls"
    };
    let usage = json!({"prompt_tokens": meta.prompt_tokens,
        "completion_tokens": meta.completion_tokens,
        "total_tokens": meta.prompt_tokens + meta.completion_tokens});
    let mut message = json!({"role": "assistant", "content": turn.content});
    if let Some(r) = &turn.reasoning {
        message["reasoning_content"] = json!(r);
    }
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    if !meta.stream {
        let body = json!({"id": meta.id, "object": "chat.completion", "created": meta.created,
            "model": meta.model, "choices": [{"index": 0, "message": message,
            "finish_reason": finish}], "usage": usage});
        return ("application/json", body.to_string().into_bytes());
    }
    let chunk = |choices: Value, usage: Option<&Value>| {
        let mut c = json!({"id": meta.id, "object": "chat.completion.chunk",
            "created": meta.created, "model": meta.model, "choices": choices});
        if let Some(u) = usage {
            c["usage"] = u.clone();
        }
        format!("data: {c}\n\n")
    };
    let mut delta = message;
    if let Some(list) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (i, c) in list.iter_mut().enumerate() {
            c["index"] = json!(i);
        }
    }
    let mut out = chunk(
        json!([{"index": 0, "delta": delta, "finish_reason": null}]),
        None,
    );
    out.push_str(&chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
        None,
    ));
    if meta.include_usage {
        out.push_str(&chunk(json!([]), Some(&usage)));
    }
    out.push_str("data: [DONE]\n\n");
    ("text/event-stream", out.into_bytes())
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn hermes_reads_reasoning_calls_and_content_and_keeps_a_broken_call_as_text() {
        let t = ToolParser::Hermes.parse(
            "<think>\nlook first\n</think>\nRunning it.<tool_call>\n{\"name\": \"bash\", \
             \"arguments\": {\"command\": \"ls\"}}\n</tool_call><tool_call>{oops}</tool_call>",
        );
        assert_eq!(t.reasoning.as_deref(), Some("look first"));
        assert_eq!(
            t.calls,
            [("bash".to_owned(), r#"{"command":"ls"}"#.to_owned())]
        );
        assert_eq!(
            t.content.as_deref(),
            Some("Running it.<tool_call>{oops}</tool_call>")
        );
        let plain = ToolParser::Hermes.parse("  all done ");
        assert_eq!(plain.content.as_deref(), Some("all done"));
        assert!(plain.calls.is_empty() && plain.reasoning.is_none());
    }

    #[test]
    fn a_turn_is_written_as_a_chat_completion_or_its_stream() {
        let turn = Turn {
            reasoning: None,
            content: None,
            calls: vec![("bash".into(), r#"{"command":"ls"}"#.into())],
        };
        let meta = ReplyMeta {
            id: "c1",
            model: "m",
            created: 1,
            finish_reason: "stop",
            prompt_tokens: 5,
            completion_tokens: 3,
            stream: false,
            include_usage: false,
        };
        let (ct, body) = write(&turn, &meta);
        assert_eq!(ct, "application/json");
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            r#"{"command":"ls"}"#
        );
        assert_eq!(v["usage"]["total_tokens"], 8);
        let (ct, body) = write(
            &turn,
            &ReplyMeta {
                stream: true,
                include_usage: true,
                ..meta
            },
        );
        assert_eq!(ct, "text/event-stream");
        let text = String::from_utf8(body).unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert_eq!(text.matches("data: ").count(), 4, "{text}");
    }
}
