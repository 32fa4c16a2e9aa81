//! The model gateway: every model call of every harness goes through it. It proxies the
//! OpenAI chat completions, OpenAI Responses and Anthropic Messages APIs byte-exact (streams
//! included), records each call in a SQLite ledger with its lineage, holds calls and replies
//! while a checkpoint has its admission gate closed, and after a restore answers a repeated
//! conversation from the ledger instead of the model, so no model call is paid for twice.
//!
//! Modules:
//!
//! - [`attach`]: sandboxes' gateway listeners handed over by their anchors on this node, served
//!   in the sandboxes' own namespaces (no relay).
//! - [`capture`]: capture keys, the attempt keys that name a rollout's attempt in each URL.
//! - [`control`]: the gateway's own control routes (keys, status) and their client, for a
//!   controller in another process.
//! - [`config`]: the upstream, its API family, the ledger path and limits.
//! - [`credential`]: the upstream's key, held by the gateway and never by a sandbox.
//! - [`conversation`]: routes, and reading a request's conversation (digests, fingerprints).
//! - [`digest`]: SHA-256 and canonical JSON.
//! - [`errors`]: the library's error type.
//! - [`gate`]: the admission gate and its registry of requests in flight.
//! - `gateway`: the [`Gateway`] value: its router and the in-process control API.
//! - [`ledger`]: the SQLite call ledger, its writer thread and one file per verb.
//! - [`lineage`]: resolving a call's parent from candidate calls (pure).
//! - `openapi`: [`GatewayApi`], the OpenAPI description of the control and model routes.
//! - `metrics`: the Prometheus metrics served at `GET /metrics`.
//! - `participant`: [`ModelParticipant`], the gateway as a checkpoint participant.
//! - `proxy`: the path of one request: checks, admission, forward or replay, delivery.
//! - [`route_key`]: the run's route key file, from which each attempt's route secret comes.
//! - [`response`]: reading a recorded reply for its usage and model turn.
//! - `shared`: the state every request shares (config, client, ledger, gate, keys).
//! - `upstream`: the upstream's client: TLS roots, HTTP/2, connect retries, the limit of calls.
//! - [`sse`]: reading the events of a recorded server-sent event stream.
//! - [`tokens`]: token capture: the ids and logprobs of each call from a token-returning
//!   upstream, taken out of what the harness sees.
#![forbid(unsafe_code)]

pub mod admin;
pub mod attach;
pub mod capture;
pub mod config;
pub mod conversation;
pub mod credential;
pub mod digest;
pub mod errors;
pub mod fleet;
pub mod gate;
mod gateway;
pub mod ledger;
pub mod lineage;
mod metrics;
mod openapi;
mod participant;
mod proxy;
pub mod response;
pub mod route_key;
mod shared;
pub mod sse;
pub mod stalls;
pub mod tito;
pub mod tokens;
mod upstream;

pub use admin::GatewayClient;
pub use capture::CaptureKey;
pub use config::{GatewayConfig, UpstreamApi};
pub use errors::GatewayError;
pub use gate::{CloseReport, InFlight, Phase, TailPolicy};
pub use gateway::Gateway;
pub use ledger::record::{CallRecord, LedgerRecord, RECORD_VERSION, decode_jsonl, encode_jsonl};
pub use ledger::{CallStatus, InstallReport, SCHEMA_VERSION};
pub use openapi::GatewayApi;
pub use participant::ModelParticipant;
pub use tokens::{CallTokens, TokenFault, TokenSource};
