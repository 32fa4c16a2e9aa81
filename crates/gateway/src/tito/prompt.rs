//! The ids of a turn: the first turn's whole conversation rendered with the chat template
//! and tokenized; each later turn's is its parent's prompt and completion ids followed by the
//! tokens of the messages added since, rendered as they follow an assistant turn.
//!
//! The messages added since are rendered after a fixed stand-in conversation (a user and an
//! assistant turn, with the request's tools) and the stand-in's own rendering is cut off the
//! front: a template renders a message from the messages before it (a tool result after an
//! assistant turn opens a new block), so the added messages come out as they would after the
//! parent's answer, without re-rendering (and re-tokenizing) the turns before it.

use std::path::Path;

use serde_json::{Value, json};
use tokenizers::Tokenizer;

/// A template or tokenizer that does not load, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct LoadError {
    pub path: String,
    pub message: String,
}

/// Why a prompt could not be rendered or tokenized, or ids not decoded.
#[derive(Debug, thiserror::Error)]
pub enum TitoError {
    #[error("the chat template failed: {0:#}")]
    Template(#[source] minijinja::Error),
    #[error("the tokenizer failed: {0}")]
    Tokenizer(#[source] tokenizers::Error),
}

/// The model's tokenizer and chat template.
pub struct Tito {
    tokenizer: Tokenizer,
    env: minijinja::Environment<'static>,
    /// The tokenizer's beginning-of-sequence and end-of-sequence texts, for templates that
    /// name `bos_token` / `eos_token`.
    bos: String,
    eos: String,
    pub tool_parser: super::chat::ToolParser,
}

impl std::fmt::Debug for Tito {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tito").finish_non_exhaustive()
    }
}

/// The parent turn a call extends: its ids (prompt then completion) and how many messages
/// its request held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentTurn {
    pub call_id: String,
    pub ids: Vec<u32>,
    pub messages: usize,
}

/// A turn's prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub ids: Vec<u32>,
    /// Why the prompt is a whole rendering although the call has a parent (the trajectory
    /// then shows a token break there).
    pub rerendered: Option<String>,
}

fn load_err(path: &Path, message: impl std::fmt::Display) -> LoadError {
    LoadError {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

impl Tito {
    /// Loads the tokenizer and the template of `config`.
    pub fn load(config: &super::TitoConfig) -> Result<Self, LoadError> {
        let tokenizer =
            Tokenizer::from_file(&config.tokenizer).map_err(|e| load_err(&config.tokenizer, e))?;
        let text =
            std::fs::read_to_string(&config.template).map_err(|e| load_err(&config.template, e))?;
        // A tokenizer_config.json carries the template as a string (some as a list of named
        // templates: the `default` one).
        let (source, bos, eos) = match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.is_object() => {
                let template = match &v["chat_template"] {
                    Value::String(s) => s.clone(),
                    Value::Array(list) => list
                        .iter()
                        .find(|t| t["name"] == "default")
                        .and_then(|t| t["template"].as_str())
                        .map(str::to_owned)
                        .ok_or_else(|| load_err(&config.template, "no `default` chat_template"))?,
                    _ => return Err(load_err(&config.template, "no `chat_template` string")),
                };
                let special = |k: &str| match &v[k] {
                    Value::String(s) => s.clone(),
                    o => o["content"].as_str().unwrap_or_default().to_owned(),
                };
                (template, special("bos_token"), special("eos_token"))
            }
            _ => (text, String::new(), String::new()),
        };
        let mut env = minijinja::Environment::new();
        env.add_function(
            "raise_exception",
            |msg: String| -> Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template_owned("chat", source)
            .map_err(|e| load_err(&config.template, e))?;
        Ok(Self {
            tokenizer,
            env,
            bos,
            eos,
            tool_parser: config.tool_parser,
        })
    }

    /// `messages` (and `tools`) rendered with the template.
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TitoError> {
        let template = self.env.get_template("chat").map_err(TitoError::Template)?;
        let ctx = json!({
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos,
            "eos_token": self.eos,
        });
        template
            .render(minijinja::value::Serde(&ctx))
            .map_err(TitoError::Template)
    }

    /// `text`'s ids, special tokens written in it included, none added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TitoError> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(TitoError::Tokenizer)
    }

    /// `ids` as text, special tokens kept.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TitoError> {
        self.tokenizer
            .decode(ids, false)
            .map_err(TitoError::Tokenizer)
    }

    /// The prompt of a call with `messages` and `tools` that extends `parent`, if any.
    pub fn prompt(
        &self,
        messages: &[Value],
        tools: Option<&Value>,
        parent: Option<&ParentTurn>,
    ) -> Result<Prompt, TitoError> {
        let whole = |why: Option<String>| -> Result<Prompt, TitoError> {
            Ok(Prompt {
                ids: self.encode(&self.render(messages, tools, true)?)?,
                rerendered: why,
            })
        };
        let Some(parent) = parent else {
            return whole(None);
        };
        // The parent's messages, its answer, then what was added.
        let answered = messages.get(parent.messages);
        if messages.len() <= parent.messages + 1
            || answered.and_then(|m| m["role"].as_str()) != Some("assistant")
        {
            return whole(Some(format!(
                "the conversation does not continue call {} with its answer",
                parent.call_id
            )));
        }
        let added = &messages[parent.messages + 1..];
        let stand_in = [
            json!({"role": "user", "content": "."}),
            json!({"role": "assistant", "content": "."}),
        ];
        let before = self.render(&stand_in, tools, false)?;
        let mut all = stand_in.to_vec();
        all.extend(added.iter().cloned());
        let after = self.render(&all, tools, true)?;
        let Some(delta) = after.strip_prefix(&before) else {
            return whole(Some(format!(
                "the template renders the messages after call {} differently from the \
                 conversation before them",
                parent.call_id
            )));
        };
        let mut ids = parent.ids.clone();
        ids.extend(self.encode(delta)?);
        Ok(Prompt {
            ids,
            rerendered: None,
        })
    }
}
