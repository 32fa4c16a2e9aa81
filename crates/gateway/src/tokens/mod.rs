//! Token capture: with `model_tokens = "vllm"` the gateway asks a token-returning upstream
//! for the ids of each call's prompt and completion and their logprobs, records them beside
//! the call, and takes what it asked for out of the reply, so the harness sees the bytes it
//! would have seen without capture. A trainer then trains on the exact tokens the policy saw
//! and produced instead of re-tokenizing chat text.
//!
//! - [`ask`]: the fields added to a request (vLLM's `return_token_ids`, `logprobs`,
//!   `return_tokens_as_token_ids`; `enable_response_messages` on Responses).
//! - [`reply`]: reading the ids out of a reply, whole or streamed, and removing them.
//! - `json_edit`: member edits that keep every other byte of the upstream's JSON.
//!
//! - `doc`: the stored form of a call's tokens.
//!
//! What a call's capture yields is a [`CallTokens`] document, stored content-addressed in
//! the ledger like the bodies, or a [`TokenFault`] that says why there are none: never
//! made-up ids.

pub mod ask;
mod doc;
mod json_edit;
pub mod reply;

use serde::{Deserialize, Serialize};

pub use doc::{DocError, TOKENS_VERSION};

/// The kind of upstream whose token ids are captured (`model_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenSource {
    /// vLLM's OpenAI-compatible server (SGLang takes the same fields).
    Vllm,
    /// Token-in/token-out: the gateway renders and tokenizes chat calls itself and sends
    /// the upstream's completion endpoint token ids (`crate::tito`).
    Tito,
}

impl TokenSource {
    /// The name a config uses.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Tito => "tito",
        }
    }
}

impl std::str::FromStr for TokenSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "vllm" => Ok(Self::Vllm),
            "tito" => Ok(Self::Tito),
            other => Err(format!(
                "{other:?} is not a token source (allowed: \"vllm\", \"tito\")"
            )),
        }
    }
}

/// The tokens of one call as the upstream reported them. Stored with
/// [`CallTokens::encode`]; its fields in this order are the stored form (`doc`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallTokens {
    /// The prompt's ids, as the upstream tokenized the request.
    pub prompt_ids: Vec<u32>,
    /// The ids the model generated.
    pub completion_ids: Vec<u32>,
    /// One log-probability per completion id, when the upstream gave them.
    pub logprobs: Option<Vec<f64>>,
    pub finish_reason: Option<String>,
    /// The model the upstream says answered.
    pub model: Option<String>,
    /// What the upstream reports of its weights (`system_fingerprint`), if anything.
    pub weights_version: Option<String>,
}

/// Why a call has no tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The upstream did not return the fields it was asked for.
    Missing,
    /// It returned them, malformed.
    Malformed,
    /// The reply did not complete (an error status, a broken stream).
    Incomplete,
    /// The route is not one capture covers (Anthropic Messages).
    Unsupported,
}

/// A call's capture marker: why it has no tokens, naming the call and the field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenFault {
    pub kind: FaultKind,
    pub message: String,
}

impl TokenFault {
    #[must_use]
    pub fn new(kind: FaultKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// What a capture ended with.
pub type Captured = Result<CallTokens, TokenFault>;

/// Which fields the gateway added to a request, so the same are taken out of its reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Added {
    /// `return_token_ids` (chat): `prompt_token_ids` and each choice's `token_ids`.
    pub token_ids: bool,
    /// `logprobs` (chat): each choice's `logprobs` is put back to `null`.
    pub logprobs: bool,
    /// `enable_response_messages` (Responses): `input_messages` and `output_messages`.
    pub response_messages: bool,
}

/// What capture does for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Capture is off.
    Off,
    /// Capture is on, but not for this route (Anthropic Messages).
    Unsupported,
    /// The request asked for tokens; these fields were added.
    Asked(Added),
}
