//! The HTTP contract of every rollpoint service, beneath the services that
//! speak it (checkpoint participants, the owner, `rollpoint serve`, the run's
//! control endpoint), so no service imports another to talk like it.
//!
//! | module | what it holds |
//! |---|---|
//! | [`auth`] | bearer tokens compared in constant time, and the layer that requires one |
//! | [`body`] | request bodies read to a limit and decoded with the bad field named by its path |
//! | [`extract`] | [`Body`]: the extractor every route takes its body through, read to its surface's limit, each rejection that surface's error reply |
//! | [`error`] | [`ApiError`] and [`ErrorCode`]: the one error reply, `{"error": {code, message, field?}}` |
//! | [`metrics`] | the OpenMetrics reply of `GET /metrics` and the checkpoint metrics |
//! | [`responses`] | a surface's error replies for the OpenAPI description, named once |
//! | [`process_metrics`] | the process's own CPU, memory, descriptors and threads, per scrape |
//! | [`serve()`] | serving a router on a listener, with 404/405 error replies for what no route takes |
//! | [`vocab`] | the checkpoint's words: participant [`Kind`] and [`Phase`] |
//! | [`wire`] | versioned bodies of the coordinator and rollout routes |
#![forbid(unsafe_code)]

pub mod auth;
pub mod body;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod process_metrics;
pub mod query;
pub mod responses;
mod serving;
pub mod vocab;
pub mod wire;

pub use auth::{BearerToken, require_bearer};
pub use body::{FieldError, TooLarge, decode_json, read_limited, read_with};
pub use error::{ApiError, ErrorCode, HttpError, Reply, encoded, json};
pub use extract::{Body, Format, Json, Raw, Surface, VersionFirst, Versioned, VersionedBody};
pub use serving::{serve, with_fallbacks};
pub use vocab::{Kind, Phase};
