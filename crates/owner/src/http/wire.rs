//! The wire shapes shared by the routes and the client: request bodies and
//! the JSON error every failed call answers with.

use axum::http::StatusCode;
use axum::response::Response;
use rollpoint_api::{HttpError, Reply};
use serde::{Deserialize, Serialize};

use crate::errors::OwnerError;
use crate::task::OwnerTask;

/// Body of `POST /v1/owner/sessions`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    pub task: OwnerTask,
}

/// Body of `POST /v1/owner/sessions/{id}/snapshot`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SnapshotBody {
    pub checkpoint: String,
}

/// A setup command that failed, in an error body.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SetupFailure {
    pub index: usize,
    pub argv: String,
    pub status: String,
    pub stderr_tail: String,
}

/// Body of every error reply.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct ErrorBody {
    pub error: String,
    pub kind: String,
    /// For a bad request: the field path it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For a bad request: what is wrong with the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupFailure>,
}

impl ErrorBody {
    pub fn of(err: &OwnerError) -> Self {
        let mut body = Self {
            error: err.to_string(),
            kind: err.kind().to_owned(),
            ..Self::default()
        };
        match err {
            OwnerError::NotFound { session } | OwnerError::NotCapturable { session } => {
                body.session = Some(session.clone());
            }
            OwnerError::Backend { session, .. } | OwnerError::Join { session, .. } => {
                body.session = Some(session.clone()).filter(|s| !s.is_empty());
            }
            OwnerError::BadRequest { field, message } => {
                body.field = Some(field.clone());
                body.message = Some(message.clone());
            }
            OwnerError::TooLarge { limit } => body.limit = Some(*limit),
            OwnerError::Setup {
                session,
                index,
                argv,
                status,
                stderr_tail,
            } => {
                body.session = Some(session.clone());
                body.setup = Some(SetupFailure {
                    index: *index,
                    argv: argv.clone(),
                    status: status.clone(),
                    stderr_tail: stderr_tail.clone(),
                });
            }
            OwnerError::Unauthorized
            | OwnerError::SnapshotBackend { .. }
            | OwnerError::Internal { .. }
            | OwnerError::Transport { .. }
            | OwnerError::Remote { .. } => {}
        }
        body
    }

    /// The error a client reports for this reply from `url`.
    pub fn into_error(self, url: &str, status: u16) -> OwnerError {
        match (
            self.kind.as_str(),
            self.session,
            self.field,
            self.setup,
            self.limit,
        ) {
            ("not_found", Some(session), ..) => OwnerError::NotFound { session },
            ("not_capturable", Some(session), ..) => OwnerError::NotCapturable { session },
            ("bad_request", _, Some(field), ..) => OwnerError::BadRequest {
                field,
                message: self.message.unwrap_or(self.error),
            },
            ("unauthorized", ..) => OwnerError::Unauthorized,
            ("too_large", .., Some(limit)) => OwnerError::TooLarge { limit },
            ("setup", Some(session), _, Some(s), _) => OwnerError::Setup {
                session,
                index: s.index,
                argv: s.argv,
                status: s.status,
                stderr_tail: s.stderr_tail,
            },
            _ => OwnerError::Remote {
                url: url.to_owned(),
                status,
                message: self.error,
            },
        }
    }
}

/// An owner error as an HTTP reply.
pub(crate) type ApiError = Reply<OwnerError>;

impl HttpError for OwnerError {
    fn status(&self) -> StatusCode {
        match self {
            OwnerError::NotFound { .. } => StatusCode::NOT_FOUND,
            OwnerError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            OwnerError::Unauthorized => StatusCode::UNAUTHORIZED,
            OwnerError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            OwnerError::NotCapturable { .. } => StatusCode::CONFLICT,
            OwnerError::Setup { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            OwnerError::Backend { .. }
            | OwnerError::SnapshotBackend { .. }
            | OwnerError::Join { .. }
            | OwnerError::Internal { .. }
            | OwnerError::Transport { .. }
            | OwnerError::Remote { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&ErrorBody::of(self)).unwrap_or_default()
    }
}

/// A JSON reply.
pub(crate) fn json<T: Serialize>(value: &T) -> Result<Response, ApiError> {
    rollpoint_api::encoded(StatusCode::OK, value).map_err(|e| {
        Reply(OwnerError::Internal {
            message: format!("reply could not be encoded: {e}"),
        })
    })
}
