//! Token mode: the scripted model answers in vLLM's shapes with deterministic token ids and
//! logprobs, so capture and trajectories run with no GPU. The tokenizer is byte-level (a
//! byte is its own id) with four special ids, and the chat template is ChatML-like:
//!
//! ```text
//! <|im_start|>tools\n{tools as JSON}<|im_end|>\n          (when tools are offered)
//! <|im_start|>{role}\n{content}<|im_end|>\n               (each message)
//! <|im_start|>assistant\n{text}<|tool|>{name}\n{args}<|/tool|>...<|im_end|>\n
//! <|im_start|>assistant\n                                 (the generation prompt)
//! ```
//!
//! A completion is the assistant body and `<|im_end|>`, so a harness that sends the
//! conversation back as it got it gives a prompt that starts with the previous prompt and
//! completion: no token break. `template_change_at` renders the earlier assistant turns'
//! tool calls as plain text from that position on (as templates that rewrite history do),
//! to force one.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::request::{Api, is_model_item};
use crate::turn::Turn;

pub const IM_START: u32 = 256;
pub const IM_END: u32 = 257;
pub const TOOL_START: u32 = 258;
pub const TOOL_END: u32 = 259;

/// The script's `tokens` settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenMode {
    /// From this conversation position on, earlier tool calls are rendered as plain text:
    /// the prompt no longer extends the previous one (a token break).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_change_at: Option<usize>,
}

/// What the request asked for, and its prompt's ids.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenAsk {
    pub prompt_ids: Vec<u32>,
    /// `return_token_ids` (chat) or `enable_response_messages` (Responses).
    pub ids: bool,
    /// `logprobs` (chat).
    pub logprobs: bool,
    /// `return_tokens_as_token_ids`: logprob tokens as `token_id:N`.
    pub as_ids: bool,
}

impl TokenAsk {
    /// Reads what a request of `api` asks for and renders its prompt.
    #[must_use]
    pub fn read(mode: &TokenMode, api: Api, body: &Value, position: usize) -> Option<Self> {
        let flag = |k: &str| body.get(k).and_then(Value::as_bool).unwrap_or(false);
        let changed = mode.template_change_at.is_some_and(|at| position >= at);
        let prompt_ids = match api {
            Api::Chat => chat_prompt(body, changed),
            Api::Responses => responses_prompt(body, changed),
            Api::Messages => return None,
        };
        Some(Self {
            prompt_ids,
            ids: flag("return_token_ids") || flag("enable_response_messages"),
            logprobs: api == Api::Chat && flag("logprobs"),
            as_ids: flag("return_tokens_as_token_ids"),
        })
    }

    /// A logprob of completion token `id` at completion index `i`: deterministic in the
    /// prompt's length, the index and the id.
    #[must_use]
    pub fn logprob(&self, i: usize, id: u32) -> f64 {
        let pos = (self.prompt_ids.len() + i) as u64;
        let h = (u64::from(id) * 2_654_435_761 + pos * 40_503) % 1000;
        -((h + 1) as f64) / 1000.0
    }

    /// vLLM's `logprobs` of a choice for `ids`, the `i`-th onwards of the completion.
    #[must_use]
    pub fn logprobs_json(&self, start: usize, ids: &[u32]) -> Value {
        let content: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(k, &id)| {
                let token = if self.as_ids {
                    format!("token_id:{id}")
                } else {
                    token_text(id)
                };
                json!({"token": token, "logprob": self.logprob(start + k, id),
                       "bytes": token.as_bytes(), "top_logprobs": []})
            })
            .collect();
        json!({"content": content})
    }
}

fn token_text(id: u32) -> String {
    match id {
        IM_START => "<|im_start|>".into(),
        IM_END => "<|im_end|>".into(),
        TOOL_START => "<|tool|>".into(),
        TOOL_END => "<|/tool|>".into(),
        b => char::from(u8::try_from(b).unwrap_or(b'?')).to_string(),
    }
}

fn push_text(out: &mut Vec<u32>, text: &str) {
    out.extend(text.bytes().map(u32::from));
}

/// The ids of one tool call in an assistant body (`plain`: the changed template's, with
/// no special ids).
fn push_call(out: &mut Vec<u32>, name: &str, arguments: &str, plain: bool) {
    if plain {
        push_text(out, "<tool>");
    } else {
        out.push(TOOL_START);
    }
    push_text(out, name);
    push_text(out, "\n");
    push_text(out, arguments);
    if plain {
        push_text(out, "</tool>");
    } else {
        out.push(TOOL_END);
    }
}

/// The ids of a whole assistant body as generated: text, calls, `<|im_end|>`.
#[must_use]
pub fn completion_ids(turn: &Turn) -> Vec<u32> {
    let mut out = Vec::new();
    push_text(&mut out, turn.text.as_deref().unwrap_or(""));
    for c in &turn.calls {
        push_call(&mut out, &c.name, &c.arguments, false);
    }
    out.push(IM_END);
    out
}

fn block(out: &mut Vec<u32>, role: &str, body: &[u32]) {
    out.push(IM_START);
    push_text(out, role);
    push_text(out, "\n");
    out.extend_from_slice(body);
    out.push(IM_END);
    push_text(out, "\n");
}

/// The text of a message content: a string, or its text parts joined.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn tools_block(out: &mut Vec<u32>, tools: Option<&Value>) {
    if let Some(tools) = tools.filter(|t| t.as_array().is_some_and(|a| !a.is_empty())) {
        let mut body = Vec::new();
        push_text(&mut body, &tools.to_string());
        block(out, "tools", &body);
    }
}

fn chat_prompt(body: &Value, changed: bool) -> Vec<u32> {
    let mut out = Vec::new();
    tools_block(&mut out, body.get("tools"));
    for m in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        let mut text = Vec::new();
        push_text(&mut text, &content_text(m.get("content")));
        if role == "assistant" {
            for c in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = c.pointer("/function/name").and_then(Value::as_str);
                let args = c.pointer("/function/arguments").and_then(Value::as_str);
                push_call(&mut text, name.unwrap_or(""), args.unwrap_or(""), changed);
            }
        }
        block(&mut out, role, &text);
    }
    out.push(IM_START);
    push_text(&mut out, "assistant\n");
    out
}

fn responses_prompt(body: &Value, changed: bool) -> Vec<u32> {
    let mut out = Vec::new();
    tools_block(&mut out, body.get("tools"));
    if let Some(i) = body.get("instructions").and_then(Value::as_str) {
        let mut text = Vec::new();
        push_text(&mut text, i);
        block(&mut out, "system", &text);
    }
    let items: Vec<Value> = match body.get("input") {
        Some(Value::String(s)) => vec![json!({"type": "message", "role": "user", "content": s})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    // Consecutive model items are one assistant turn.
    let mut assistant: Option<Vec<u32>> = None;
    for item in &items {
        if is_model_item(item) {
            let body = assistant.get_or_insert_with(Vec::new);
            match item.get("type").and_then(Value::as_str) {
                Some("function_call") => push_call(
                    body,
                    item.get("name").and_then(Value::as_str).unwrap_or(""),
                    item.get("arguments").and_then(Value::as_str).unwrap_or(""),
                    changed,
                ),
                Some("reasoning") => {}
                _ => push_text(body, &content_text(item.get("content"))),
            }
            continue;
        }
        if let Some(body) = assistant.take() {
            block(&mut out, "assistant", &body);
        }
        let (role, text) = match item.get("type").and_then(Value::as_str) {
            Some("function_call_output") => {
                let output = item.get("output");
                let text = match output {
                    Some(Value::String(s)) => s.clone(),
                    other => content_text(other),
                };
                ("tool".to_owned(), text)
            }
            _ => (
                item.get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("user")
                    .to_owned(),
                content_text(item.get("content")),
            ),
        };
        let mut ids = Vec::new();
        push_text(&mut ids, &text);
        block(&mut out, &role, &ids);
    }
    if let Some(body) = assistant.take() {
        block(&mut out, "assistant", &body);
    }
    out.push(IM_START);
    push_text(&mut out, "assistant\n");
    out
}

/// The raw message tokens vLLM's Responses server returns with `enable_response_messages`.
#[must_use]
pub fn raw_messages(ids: &[u32]) -> Value {
    let text: String = ids.iter().map(|&id| token_text(id)).collect();
    json!([{"type": "raw_message_tokens", "message": text, "tokens": ids}])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turn::Call;

    #[test]
    fn a_conversation_sent_back_extends_the_previous_prompt_and_completion() {
        let turn = Turn {
            text: None,
            calls: vec![Call {
                id: "c1".into(),
                name: "bash".into(),
                arguments: r#"{"command":"ls"}"#.into(),
            }],
        };
        let first = json!({"messages": [{"role": "user", "content": "go"}],
                           "tools": [{"type": "function", "function": {"name": "bash"}}]});
        let second = json!({"messages": [{"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "a b"}]}],
            "tools": [{"type": "function", "function": {"name": "bash"}}]});
        let mode = TokenMode::default();
        let p1 = TokenAsk::read(&mode, Api::Chat, &first, 0).map(|a| a.prompt_ids);
        let p2 = TokenAsk::read(&mode, Api::Chat, &second, 1).map(|a| a.prompt_ids);
        let (Some(p1), Some(p2)) = (p1, p2) else {
            panic!("chat is tokenized");
        };
        let mut prefix = p1.clone();
        prefix.extend(completion_ids(&turn));
        assert!(p2.starts_with(&prefix));
        let changed = TokenMode {
            template_change_at: Some(1),
        };
        let p2b = TokenAsk::read(&changed, Api::Chat, &second, 1).map(|a| a.prompt_ids);
        assert!(p2b.is_some_and(|p| !p.starts_with(&prefix)));
    }
}
