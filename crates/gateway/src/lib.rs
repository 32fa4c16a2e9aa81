//! The model gateway: every model call of every harness goes through it. It proxies the
//! OpenAI chat completions, OpenAI Responses and Anthropic Messages APIs byte-exact (streams
//! included), records each call in a SQLite ledger with its lineage, holds calls and replies
//! while a checkpoint has its admission gate closed, and after a restore answers a repeated
//! conversation from the ledger instead of the model, so no model call is paid for twice.
//!
//! Modules, from the ground up: each imports only modules listed before it (the structure
//! test in `crates/cli/tests/structure.rs` keeps them free of circles).
//!
//! - [`digest`]: SHA-256 and canonical JSON; [`sse`]: reading the events of a recorded
//!   server-sent event stream; [`lineage`]: resolving a call's parent from candidate calls
//!   (pure).
//! - [`tito`]: the model's chat template, tokenizer and tool-call parser, for token-in/token-out
//!   (a leaf).
//! - [`conversation`]: routes, and reading a request's conversation (digests, fingerprints);
//!   [`response`]: reading a recorded reply for its usage and model turn.
//! - [`tokens`]: token capture: the ids and logprobs of each call from a token-returning
//!   upstream, taken out of what the harness sees.
//! - [`errors`]: the library's error type; [`route_key`]: the run's route key file, from which
//!   each attempt's route secret comes; [`credential`]: the upstream's key, held by the gateway
//!   and never by a sandbox; [`fleet`]: the policy version and the fleet's pause.
//! - [`config`]: the upstreams, their API family, the ledger path and limits.
//! - [`ledger`]: the SQLite call ledger, its writer thread, one file per verb, and the
//!   [`CallId`](ledger::CallId) that names a call from its admission to its row.
//! - [`gate`]: the admission gate and its registry of requests in flight; [`stalls`]: attempts
//!   whose model is away; `metrics`: the Prometheus metrics served at `GET /metrics`;
//!   [`attach`]: sandboxes' gateway listeners handed over by their anchors on this node,
//!   served in the sandboxes' own namespaces (no relay).
//! - `upstream`: the upstreams' clients and replicas: TLS roots, HTTP/2, stickiness, the limit
//!   of calls.
//! - `shared`: the state every call shares (config, upstreams, ledger, gate, registered keys).
//! - `call`: the pipeline of one model call, one stage per file: route, admit, hold, send,
//!   forward or tito, record, deliver, reply.
//! - `gateway`: the [`Gateway`] value: its router and the in-process admin API;
//!   [`admin`]: the gateway's admin routes (`/v1/gateway/*`: keys, status, records, fleet) and
//!   their client, for a run in another process; `participant`: [`ModelParticipant`], the
//!   gateway as a checkpoint participant; `openapi`: [`GatewayApi`], the OpenAPI description
//!   of the admin and model routes.
#![forbid(unsafe_code)]

pub mod admin;
pub mod attach;
mod call;
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
pub mod response;
pub mod route_key;
mod shared;
pub mod sse;
pub mod stalls;
pub mod tito;
pub mod tokens;
mod upstream;

pub use admin::GatewayClient;
pub use config::{GatewayConfig, UpstreamApi};
pub use errors::GatewayError;
pub use gate::{CloseReport, InFlight, Phase, TailPolicy};
pub use gateway::Gateway;
pub use ledger::record::{CallRecord, LedgerRecord, RECORD_VERSION, decode_jsonl, encode_jsonl};
pub use ledger::{CallId, CallStatus, InstallReport, SCHEMA_VERSION};
pub use openapi::GatewayApi;
pub use participant::ModelParticipant;
pub use tokens::{CallTokens, TokenFault, TokenSource};
