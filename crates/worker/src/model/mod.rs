//! Talking to the model: request bodies and reply parsing per API (pure, one file each), and
//! the HTTP client with bounded retries (`client`).

pub mod chat;
pub mod client;
pub mod responses;
pub mod retry;

use serde_json::Value;

use crate::errors::ReplyError;
use crate::input::Api;
use crate::tools::ToolSpec;
use crate::transcript::{AssistantMessage, CallUsage, Message, ToolCall};

/// A parsed model reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub message: AssistantMessage,
    pub usage: CallUsage,
}

/// The URL a request for `api` goes to.
pub fn endpoint(base_url: &str, api: Api) -> String {
    let base = base_url.trim_end_matches('/');
    match api {
        Api::ChatCompletions => format!("{base}/chat/completions"),
        Api::Responses => format!("{base}/responses"),
    }
}

/// The JSON body of a request carrying `messages`.
pub fn request_body(api: Api, model: &str, messages: &[Message], tools: &[ToolSpec]) -> Vec<u8> {
    let value = match api {
        Api::ChatCompletions => chat::request(model, messages, tools),
        Api::Responses => responses::request(model, messages, tools),
    };
    // Serializing a `Value` cannot fail.
    serde_json::to_vec(&value).unwrap_or_default()
}

/// Parses a reply body; `call` numbers generated tool-call ids.
pub fn parse_reply(api: Api, body: &[u8], call: u32) -> Result<Reply, ReplyError> {
    let value: Value = serde_json::from_slice(body).map_err(ReplyError::NotJson)?;
    let mut reply = match api {
        Api::ChatCompletions => chat::parse(&value)?,
        Api::Responses => responses::parse(&value)?,
    };
    normalize_ids(&mut reply.message.tool_calls, call);
    Ok(reply)
}

/// Gives every tool call of one reply a non-empty id unique within the reply, so each output
/// can be matched to its call.
fn normalize_ids(calls: &mut [ToolCall], call: u32) {
    let mut seen: Vec<String> = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter_mut().enumerate() {
        if c.id.is_empty() || seen.contains(&c.id) {
            c.id = format!("call-{call}-{i}");
        }
        seen.push(c.id.clone());
    }
}

/// Reads the `usage` object of a reply; the APIs name the prompt and
/// completion counts differently, and any count may be missing.
fn call_usage(reply: &Value, prompt_key: &str, completion_key: &str) -> CallUsage {
    let usage = reply.get("usage").unwrap_or(&Value::Null);
    let tokens = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    let (prompt, completion) = (tokens(prompt_key), tokens(completion_key));
    CallUsage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: tokens("total_tokens").max(prompt + completion),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_duplicate_ids_are_replaced() {
        let call = |id: &str| ToolCall {
            id: id.to_owned(),
            name: "bash".to_owned(),
            arguments: "{}".to_owned(),
        };
        let mut calls = vec![call(""), call("x"), call("x")];
        normalize_ids(&mut calls, 3);
        let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call-3-0", "x", "call-3-2"]);
        assert_eq!(
            endpoint("http://h/v1/", Api::Responses),
            "http://h/v1/responses"
        );
    }
}
