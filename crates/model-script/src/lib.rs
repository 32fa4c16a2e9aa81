//! A scripted model server that ships with rollpoint, so the product, its tests, benchmarks
//! and quickstart run with no GPU and no network. It speaks OpenAI chat completions, OpenAI
//! Responses and Anthropic Messages, streamed and not, and answers from a versioned script:
//! text, or a call of the harness's own shell tool shaped from that tool's schema.
//!
//! | module | what it is for |
//! |---|---|
//! | [`script`] | the versioned script format |
//! | [`request`] | what is read from a request |
//! | [`answer`] | which step, turn and delays answer a request |
//! | [`tools`] | the harness's shell tool and its arguments |
//! | [`turn`] | one turn: its text and tool calls |
//! | [`render`] | one turn as each API's bytes, streamed or not |
//! | [`server`] | the HTTP routes |
//! | [`tokens`] | token mode: vLLM's token fields from a byte-level tokenizer |
//! | [`completions`] | token-in/token-out: `/v1/completions` on token ids under a real tokenizer |
//! | [`errors`] | loading, binding, completion-request and outage-spec errors |
#![forbid(unsafe_code)]

pub mod answer;
pub mod completions;
pub mod errors;
pub mod render;
pub mod request;
pub mod script;
pub mod server;
pub mod tokens;
pub mod tools;
pub mod turn;

pub use errors::ScriptError;
pub use script::{Fail, Script, Step, StepKey};
pub use server::{LogEntry, Outage, ScriptServer};
