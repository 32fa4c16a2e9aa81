//! The model gateway: every model call of every harness goes through it. It proxies the
//! OpenAI chat completions, OpenAI Responses and Anthropic Messages APIs byte-exact (streams
//! included), records each call in a SQLite ledger with its lineage, holds calls and replies
//! while a checkpoint has its admission gate closed, and after a restore answers a repeated
//! conversation from the ledger instead of the model, so no model call is paid for twice.
#![forbid(unsafe_code)]

pub mod capture;
pub mod config;
pub mod conversation;
pub mod digest;
pub mod errors;
pub mod gate;
mod gateway;
pub mod ledger;
pub mod lineage;
mod participant;
mod proxy;
pub mod response;
pub mod sse;

pub use capture::CaptureKey;
pub use config::{GatewayConfig, UpstreamApi};
pub use errors::GatewayError;
pub use gate::{CloseReport, InFlight, Phase, TailPolicy};
pub use gateway::Gateway;
pub use ledger::record::{CallRecord, LedgerRecord, RECORD_VERSION, decode_jsonl, encode_jsonl};
pub use ledger::{InstallReport, SCHEMA_VERSION};
pub use participant::ModelParticipant;
