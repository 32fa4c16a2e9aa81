//! The services of a run spread over several machines, speaking the same
//! HTTP contract as the embedded default (`rollpoint run`):
//!
//! - [`agent`]: the drivers (`Runs` and their `agent` participant) behind
//!   the checkpoint control routes, plus rollout routes so a trainer can
//!   post a task and fetch its result;
//! - [`coordinator`]: the checkpoint coordinator over participants reached
//!   with `HttpParticipant`, driven over HTTP so a trainer owns the loop.
//!
//! The gateway and the owner already serve their own routes (crates/gateway,
//! crates/owner). Request and reply bodies and the shared HTTP plumbing
//! (bearer token, error replies, body limits) are the HTTP contract's, in
//! crates/api. See docs/design/serve.md.
//!
//! | module | what it is for |
//! |---|---|
//! | [`agent`] | the agent service, one route per file, its rollout table and forgetting |
//! | [`coordinator`] | the coordinator service, one route per file |
//! | `errors` | errors of setting a service up |
#![forbid(unsafe_code)]

pub mod agent;
pub mod coordinator;
mod errors;

pub use agent::{AgentService, AgentSettings};
pub use coordinator::{CoordinatorService, CoordinatorSettings, Target};
pub use errors::ServeError;
pub use rollpoint_api::{ApiError, ErrorCode, wire};
