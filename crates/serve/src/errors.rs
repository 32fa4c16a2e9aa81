//! Errors of setting a service up. Errors of a request are
//! [`rollpoint_api::ApiError`], which carries its HTTP status and the field
//! it is about.

use rollpoint_checkpoint::{CallError, CoordinatorError, Kind};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("drivers: {0}")]
    Drivers(#[from] rollpoint_driver::DriverError),
    #[error("checkpoint call: {0}")]
    Call(#[from] CallError),
    #[error("participant {url}: {source}")]
    Participant { url: String, source: CallError },
    #[error("participant {url} is a {found} participant, named as {declared}")]
    WrongKind {
        url: String,
        declared: Kind,
        found: Kind,
    },
    #[error("coordinator: {0}")]
    Coordinator(#[from] CoordinatorError),
    #[error("http client: {0}")]
    Client(String),
}
