//! What every route of this crate shares: the bearer token (the same check
//! as the checkpoint and owner routes), request bodies read to a limit and
//! decoded with the offending field named, and error replies shaped like
//! the control plane's: `{"error": {"code", "message", "field"?}}`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rollpoint_checkpoint::auth::BearerToken;
use rollpoint_proto::FormatError;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Largest request body accepted (a rollout task with its files).
pub const BODY_LIMIT: usize = 16 << 20;

/// The machine-readable kind of an error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body, a field of it or a query parameter is malformed (400).
    BadRequest,
    /// Missing or wrong bearer token (401).
    Unauthorized,
    /// No such rollout or checkpoint (404).
    NotFound,
    /// The id is taken, or the thing asked for is already done (409).
    Conflict,
    /// Another checkpoint or restore is in progress (409).
    Busy,
    /// Some participant was not ready for the cut (409).
    NotPrepared,
    /// The request body is over the limit (413).
    TooLarge,
    /// The run of a rollout ended without a result (500).
    Lost,
    /// A participant or the drivers failed (502).
    Failed,
}

impl ErrorCode {
    pub fn status(self) -> StatusCode {
        match self {
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::Conflict | Self::Busy | Self::NotPrepared => StatusCode::CONFLICT,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Lost => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Failed => StatusCode::BAD_GATEWAY,
        }
    }
}

/// A failed request, as its reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// For a bad request: the path of the field it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// A coordinator failure as a reply: a stage not ready or a published
    /// checkpoint of other participants is a conflict, the rest a failure.
    pub fn from_coordinator(e: &rollpoint_checkpoint::CoordinatorError) -> Self {
        use rollpoint_checkpoint::CoordinatorError as E;
        let code = match e {
            E::NotPrepared { .. } => ErrorCode::NotPrepared,
            E::Members { .. } => ErrorCode::Conflict,
            _ => ErrorCode::Failed,
        };
        Self::new(code, e.to_string())
    }

    pub fn bad(field: impl Into<String>, message: impl std::fmt::Display) -> Self {
        let field = field.into();
        Self {
            code: ErrorCode::BadRequest,
            message: format!("field `{field}`: {message}"),
            field: Some(field),
        }
    }
}

impl From<FormatError> for ApiError {
    fn from(e: FormatError) -> Self {
        let field = match &e {
            FormatError::Json { .. } => ".".to_owned(),
            FormatError::MissingVersion { .. } | FormatError::UnknownVersion { .. } => {
                "v".to_owned()
            }
            FormatError::Field { path, source, .. } => rollpoint_proto::field_path(path, source),
        };
        Self {
            code: ErrorCode::BadRequest,
            message: e.to_string(),
            field: Some(field),
        }
    }
}

impl From<rollpoint_checkpoint::ControlError> for ApiError {
    fn from(e: rollpoint_checkpoint::ControlError) -> Self {
        use rollpoint_checkpoint::Code;
        let code = match e.code {
            Code::BadRequest => ErrorCode::BadRequest,
            Code::Unauthorized => ErrorCode::Unauthorized,
            Code::TooLarge => ErrorCode::TooLarge,
            Code::StaleCheckpoint
            | Code::CheckpointConflict
            | Code::InvalidPhase
            | Code::RestartInScope => ErrorCode::Conflict,
            Code::DeadlineExceeded
            | Code::HookFailed
            | Code::Storage
            | Code::Transport
            | Code::Remote => ErrorCode::Failed,
        };
        Self {
            code,
            message: e.message,
            field: e.field,
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a ApiError,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&ErrorBody { error: &self }).unwrap_or_default();
        (
            self.code.status(),
            [(CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}

/// A JSON reply with `status`.
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (status, [(CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => ApiError::new(
            ErrorCode::Failed,
            format!("reply could not be encoded: {e}"),
        )
        .into_response(),
    }
}

/// Reads a request body up to [`BODY_LIMIT`].
pub async fn bytes(body: axum::body::Body) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, BODY_LIMIT).await.map_err(|_| {
        ApiError::new(
            ErrorCode::TooLarge,
            format!("request body is over the limit of {BODY_LIMIT} bytes"),
        )
    })
}

/// Reads and decodes a versioned body (`v` checked first, then every field).
pub async fn versioned<T: DeserializeOwned>(
    what: &'static str,
    version: u32,
    body: axum::body::Body,
) -> Result<T, ApiError> {
    let bytes = bytes(body).await?;
    Ok(rollpoint_proto::decode(what, version, &bytes)?)
}

/// `router` with every route behind `Authorization: Bearer <token>`. An
/// empty token matches no request.
pub fn authorized(router: Router, token: &str) -> Router {
    let expected = Arc::new(BearerToken::new(token));
    router.layer(axum::middleware::from_fn_with_state(expected, authorize))
}

async fn authorize(State(expected): State<Arc<BearerToken>>, req: Request, next: Next) -> Response {
    if expected.admits(req.headers()) {
        next.run(req).await
    } else {
        ApiError::new(ErrorCode::Unauthorized, "missing or wrong bearer token").into_response()
    }
}

/// Serves `router` on `listener` until the server fails (or the future is
/// dropped).
pub async fn serve(listener: tokio::net::TcpListener, router: Router) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        // Small request/reply exchanges: do not wait to coalesce segments.
        let _ignored = tcp.set_nodelay(true);
    });
    axum::serve(listener, router).await
}
