//! The wire shapes shared by the routes and the client: request bodies and
//! the JSON error every failed call answers with.

use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use rollpoint_api::{HttpError, Reply};
use serde::{Deserialize, Serialize};

use rollpoint_proto::receipt::Receipt;

use crate::errors::OwnerError;
use crate::owner::SessionLaunch;
use crate::task::OwnerTask;

/// Body of `POST /v1/owner/sessions`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = OwnerCreateBody)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBody {
    pub task: OwnerTask,
}

/// Body of `POST /v1/owner/sessions/{id}/snapshot`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = OwnerSnapshotBody)]
#[serde(deny_unknown_fields)]
pub(crate) struct SnapshotBody {
    pub checkpoint: String,
}

/// Most launches one batched pause or continue names.
pub const LAUNCHES_MAX: usize = 65_536;

/// Body of `POST /v1/owner/launches/pause` and `/continue`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = OwnerLaunchesBody)]
#[serde(deny_unknown_fields)]
pub(crate) struct LaunchesBody {
    /// 1 to 65,536 launches, each of a session of this owner.
    pub launches: Vec<SessionLaunch>,
}

impl LaunchesBody {
    /// The launches, refused by field when there are none, too many, or
    /// one names an empty session or a launch id the anchor would refuse.
    pub(crate) fn checked(self) -> Result<Vec<SessionLaunch>, OwnerError> {
        let n = self.launches.len();
        if n == 0 || n > LAUNCHES_MAX {
            return Err(OwnerError::bad(
                "launches",
                format!("{n} launches: must be 1 to {LAUNCHES_MAX}"),
            ));
        }
        for (i, l) in self.launches.iter().enumerate() {
            if l.session.is_empty() {
                return Err(OwnerError::bad(
                    format!("launches[{i}].session"),
                    "must not be empty",
                ));
            }
            rollpoint_proto::anchor::check_launch_id(&l.launch_id)
                .map_err(|e| OwnerError::bad(format!("launches[{i}].launch_id"), e))?;
        }
        Ok(self.launches)
    }
}

/// Reply of `POST /v1/owner/launches/pause`: per launch, in order, its
/// receipt, or `null` for one left to its supervisor.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = OwnerPausedReply)]
#[serde(deny_unknown_fields)]
pub(crate) struct PausedReply {
    pub receipts: Vec<Option<Receipt>>,
}

/// Reply of `POST /v1/owner/launches/continue`: a receipt per launch, in
/// order.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = OwnerContinuedReply)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContinuedReply {
    pub receipts: Vec<Receipt>,
}

/// A setup command that failed, in an error body.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub(crate) struct SetupFailure {
    pub index: usize,
    pub argv: String,
    pub status: String,
    pub stderr_tail: String,
}

/// Body of every error reply, the one shape of every rollpoint surface:
/// `{"error": {"code", "message", "field"?, ...}}`, with the owner's own
/// details inside the error object.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = OwnerErrorReply)]
pub(crate) struct ErrorReply {
    pub error: ErrorObject,
}

/// The error object of an [`ErrorReply`].
#[derive(Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = OwnerErrorObject)]
pub(crate) struct ErrorObject {
    /// The error's kind, snake_case ([`OwnerError::kind`]): `bad_request`,
    /// `unauthorized`, `not_found`, `too_large`, `not_capturable`, `setup`,
    /// `backend`, `internal`, `transport`, `remote`, or the code of a relayed
    /// refusal.
    pub code: String,
    /// The error's text.
    pub message: String,
    /// For a bad request: the field path it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The session it is about (not found, not capturable, setup, backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// For a body over the limit: the limit, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// For a failed seed: the setup command that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupFailure>,
}

/// The codes of client errors (4xx) a reply may carry.
const CLIENT_CODES: [&str; 9] = [
    "bad_request",
    "unauthorized",
    "not_found",
    "conflict",
    "not_capturable",
    "too_large",
    "setup",
    "unprocessable",
    "refused",
];

/// The kind of a client error (4xx) the owner refused a request with: the
/// reply's own code when it is a client-error code, else the status's.
pub(crate) fn client_code(code: Option<&str>, status: u16) -> &'static str {
    if let Some(known) = code.and_then(|c| CLIENT_CODES.iter().find(|k| **k == c)) {
        return known;
    }
    match status {
        400 => "bad_request",
        401 => "unauthorized",
        404 => "not_found",
        409 => "conflict",
        413 => "too_large",
        422 => "unprocessable",
        _ => "refused",
    }
}

impl ErrorReply {
    pub fn of(err: &OwnerError) -> Self {
        let mut body = ErrorObject {
            code: err.kind().to_owned(),
            message: err.to_string(),
            ..ErrorObject::default()
        };
        match err {
            OwnerError::NotFound { session } | OwnerError::NotCapturable { session } => {
                body.session = Some(session.clone());
            }
            OwnerError::Backend { session, .. } | OwnerError::Join { session, .. } => {
                body.session = Some(session.clone()).filter(|s| !s.is_empty());
            }
            OwnerError::BadRequest { field, .. } => body.field = Some(field.clone()),
            OwnerError::Unprocessable { session, field, .. } => {
                body.session = Some(session.clone());
                body.field.clone_from(field);
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
            | OwnerError::NoSnapshot { .. }
            | OwnerError::SnapshotBackend { .. }
            | OwnerError::Batch { .. }
            | OwnerError::Internal { .. }
            | OwnerError::Transport { .. }
            | OwnerError::Refused { .. }
            | OwnerError::Remote { .. } => {}
        }
        Self { error: body }
    }

    /// The error a client reports for this reply from `url` with HTTP
    /// `status`: the variant the server had, when the reply carries what
    /// it needs; else, for a client error (4xx), [`OwnerError::Refused`]
    /// with its kind and status; else [`OwnerError::Remote`].
    pub fn into_error(self, url: &str, status: u16) -> OwnerError {
        let ErrorObject {
            code,
            message,
            field,
            session,
            limit,
            setup,
        } = self.error;
        match (code.as_str(), session, field, setup, limit) {
            ("not_found", Some(session), ..) => OwnerError::NotFound { session },
            ("not_capturable", Some(session), ..) => OwnerError::NotCapturable { session },
            ("bad_request", _, Some(field), ..) => {
                // The text is the error's whole display; the variant holds
                // what follows the field.
                let prefix = format!("bad request: field `{field}`: ");
                let message = message
                    .strip_prefix(&prefix)
                    .map_or_else(|| message.clone(), str::to_owned);
                OwnerError::BadRequest { field, message }
            }
            ("unauthorized", ..) => OwnerError::Unauthorized,
            ("too_large", .., Some(limit)) => OwnerError::TooLarge { limit },
            ("setup", Some(session), _, Some(s), _) => OwnerError::Setup {
                session,
                index: s.index,
                argv: s.argv,
                status: s.status,
                stderr_tail: s.stderr_tail,
            },
            (code, ..) if (400..500).contains(&status) => OwnerError::Refused {
                url: url.to_owned(),
                status,
                code: client_code(Some(code), status),
                message,
            },
            _ => OwnerError::Remote {
                url: url.to_owned(),
                status,
                message,
            },
        }
    }
}

/// An owner error as an HTTP reply.
pub(crate) type ApiError = Reply<OwnerError>;

impl HttpError for OwnerError {
    fn status(&self) -> StatusCode {
        match self {
            OwnerError::NotFound { .. } | OwnerError::NoSnapshot { .. } => StatusCode::NOT_FOUND,
            OwnerError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            OwnerError::Unauthorized => StatusCode::UNAUTHORIZED,
            OwnerError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            OwnerError::NotCapturable { .. } => StatusCode::CONFLICT,
            OwnerError::Setup { .. } | OwnerError::Unprocessable { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            // Relayed as the owner that refused it answered.
            OwnerError::Refused { status, .. } => StatusCode::from_u16(*status)
                .ok()
                .filter(StatusCode::is_client_error)
                .unwrap_or(StatusCode::BAD_REQUEST),
            OwnerError::Remote { status, .. } => StatusCode::from_u16(*status)
                .ok()
                .filter(StatusCode::is_server_error)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            OwnerError::Backend { .. }
            | OwnerError::SnapshotBackend { .. }
            | OwnerError::Batch { .. }
            | OwnerError::Join { .. }
            | OwnerError::Internal { .. }
            | OwnerError::Transport { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&ErrorReply::of(self)).unwrap_or_default()
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

/// The empty reply (204) of a call that answers nothing.
pub(crate) fn no_content() -> Result<Response, ApiError> {
    Ok(StatusCode::NO_CONTENT.into_response())
}
