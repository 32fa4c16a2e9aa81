//! The run's control endpoint and what it serves: a trainer, a test or an operator asks
//! the running loop for a checkpoint over HTTP and gets its id and timings back, instead of
//! sending SIGUSR1 and reading stderr. The checkpoint route and its bodies are the HTTP
//! coordinator's (`rollpoint serve coordinator`, crates/serve), so a trainer drives either
//! the same way; a checkpoint may hold every rollout paused for a while after it is
//! published, so a frozen rollout can be inspected. `stop` ends the run after the
//! checkpoint, as SIGTERM does. Beside it: the live dashboard, and a command or a terminal in
//! a live rollout's sandbox.
//!
//! | file | what it is for |
//! |---|---|
//! | `start` | binds, records `control.json`, mounts the routes |
//! | `file` | `control.json` |
//! | `ask` | the routes that hand a request to the loop and wait for its answer |
//! | `status` | `GET /v1/run/status` |
//! | `trajectory` | `GET /v1/rollouts/{id}/trajectory` |
//! | `api` | the OpenAPI description of the run's routes |
//! | [`dashboard`] | the live dashboard's page, documents and change stream |
//! | [`exec`] | a command in a live rollout's sandbox, or in a fork of its snapshot |
//! | [`shell`] | a terminal in a live rollout's sandbox over a WebSocket |

mod api;
mod ask;
pub mod dashboard;
pub mod exec;
mod file;
pub mod shell;
pub(crate) mod start;
mod status;
mod trajectory;

pub use api::RunApi;
pub use file::{CONTROL_FILE, ENDPOINT_VERSION, EndpointFile};
pub use start::Listen;
pub use status::StatusReport;
