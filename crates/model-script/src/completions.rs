//! Token-in/token-out upstream: `POST /v1/completions` with the prompt as token ids, as vLLM
//! serves it, under the model's own tokenizer (`--tokenizer tokenizer.json`). The prompt is
//! read as a Hermes-style template renders a chat (`Request::from_rendered`); the script's
//! step is answered as such a model writes it: a short `<think>` block, then the text, or
//! each call as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, then the end of
//! the turn, `<|im_end|>` (an id the tokenizer must know). The reply carries the completion's
//! `token_ids`, the `prompt_token_ids` it was given, and deterministic logprobs.

use std::path::Path;

use serde_json::{Value, json};
use tokenizers::Tokenizer;

use crate::answer::{Reply, answer};
use crate::errors::{CompletionError, ScriptError};
use crate::request::Request;
use crate::script::Script;

/// The text that ends a turn, which the tokenizer must hold as one token.
pub const END_OF_TURN: &str = "<|im_end|>";

/// The tokenizer the completions are written in.
pub struct Completer {
    tokenizer: Tokenizer,
    end: u32,
}

impl std::fmt::Debug for Completer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completer").field("end", &self.end).finish()
    }
}

/// One completion and what the log says of it.
#[derive(Debug, Clone)]
pub struct Completion {
    pub body: Value,
    pub step: usize,
    pub reply: &'static str,
    pub prompt_ids: Vec<u32>,
    pub completion_ids: Vec<u32>,
}

impl Completer {
    /// Loads `tokenizer.json`, which must know [`END_OF_TURN`].
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let tokenizer = Tokenizer::from_file(path).map_err(|source| ScriptError::Tokenizer {
            path: path.to_owned(),
            source,
        })?;
        let end = tokenizer
            .token_to_id(END_OF_TURN)
            .ok_or_else(|| ScriptError::NoEndToken {
                path: path.to_owned(),
                token: END_OF_TURN,
            })?;
        Ok(Self { tokenizer, end })
    }

    /// The answer to a completion request `body` (`seq`: requests answered before).
    pub fn complete(
        &self,
        script: &Script,
        body: &Value,
        seq: usize,
    ) -> Result<Completion, CompletionError> {
        let prompt_ids: Vec<u32> = body["prompt"]
            .as_array()
            .ok_or(CompletionError::PromptNotList)?
            .iter()
            .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect::<Option<_>>()
            .ok_or(CompletionError::PromptNotIds)?;
        let prompt = self
            .tokenizer
            .decode(&prompt_ids, false)
            .map_err(CompletionError::Decode)?;
        let model = body["model"].as_str().unwrap_or("scripted-model");
        let req = Request::from_rendered(model, &prompt);
        let digest_source = serde_json::to_vec(&prompt_ids).unwrap_or_default();
        let ans = answer(script, &req, &digest_source, seq, 0);
        let Reply::Turn { turn, .. } = ans.reply else {
            return Err(CompletionError::ScriptFails);
        };
        let mut text = format!("<think>step {}</think>\n", ans.step);
        if let Some(t) = &turn.text {
            text.push_str(t);
        }
        for call in &turn.calls {
            text.push_str(&format!(
                "<tool_call>\n{{\"name\": {}, \"arguments\": {}}}\n</tool_call>",
                Value::String(call.name.clone()),
                call.arguments
            ));
        }
        let mut ids = self
            .tokenizer
            .encode(text.as_str(), false)
            .map_err(CompletionError::Encode)?
            .get_ids()
            .to_vec();
        ids.push(self.end);
        let logprobs: Vec<f64> = ids.iter().map(|id| -f64::from(id % 7) / 10.0).collect();
        let reply = if turn.calls.is_empty() {
            "text"
        } else {
            "tool_call"
        };
        let body = json!({
            "id": format!("cmpl-{seq}"),
            "object": "text_completion",
            "model": model,
            "choices": [{"index": 0, "text": text, "token_ids": ids,
                "logprobs": {"token_logprobs": logprobs}, "finish_reason": "stop"}],
            "prompt_token_ids": prompt_ids,
            "usage": {"prompt_tokens": prompt_ids.len(), "completion_tokens": ids.len(),
                "total_tokens": prompt_ids.len() + ids.len()},
        });
        Ok(Completion {
            body,
            step: ans.step,
            reply,
            prompt_ids,
            completion_ids: ids,
        })
    }
}
