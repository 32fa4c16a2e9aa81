//! Token-in/token-out (`model_tokens = "tito"`): the gateway renders each chat request itself
//! with the model's chat template (Jinja, as models ship it, through `minijinja`) and its
//! tokenizer (`tokenizer.json`, through `tokenizers`), sends the upstream token ids on its
//! completion endpoint, and answers the harness an ordinary chat completion. Every turn's
//! prompt is the previous turn's exact prompt and completion ids followed by the tokens of
//! the messages added since, so a rollout is one token sequence even when the template would
//! render earlier turns differently (a Qwen3-style template drops earlier reasoning). The
//! previous turn is found through the ledger's lineage, so checkpoints, forks and resumes
//! keep the sequence (docs/design/tokens.md).
//!
//! - [`prompt`]: the template, the tokenizer, and the ids of a turn.
//! - [`chat`]: the completion's text read as a chat turn (a documented tool-call parser per
//!   template family) and written as the chat reply the harness expects.
//!
//! One call through it is a stage of the call pipeline (`call::tito`); this module is a leaf
//! that imports nothing of the gateway.

pub mod chat;
pub mod prompt;

use std::path::PathBuf;

/// Where the model's tokenizer and chat template are, and how its tool calls are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TitoConfig {
    /// A `tokenizer.json` (the Hugging Face tokenizers format).
    pub tokenizer: PathBuf,
    /// The chat template: a Jinja file, or a `tokenizer_config.json` whose `chat_template` is
    /// read.
    pub template: PathBuf,
    /// How tool calls are written in the model's text.
    pub tool_parser: chat::ToolParser,
}
