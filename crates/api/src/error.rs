//! The error reply of the rollout, coordinator and run-control routes:
//! `{"error": {"code", "message", "field"?}}`, the same shape as the
//! checkpoint routes' and the owner routes' replies (the owner adds its
//! own details inside the error object), with a machine-readable code that
//! fixes the HTTP status.

use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use rollpoint_proto::FormatError;
use serde::{Deserialize, Serialize};

use crate::body::{FieldError, TooLarge};

/// The machine-readable kind of an error reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The body, a field of it or a query parameter is malformed (400).
    BadRequest,
    /// Missing or wrong bearer token (401).
    Unauthorized,
    /// No such rollout or checkpoint, or no such route (404).
    NotFound,
    /// The route does not take this method (405).
    MethodNotAllowed,
    /// The id is taken, or the thing asked for is already done (409).
    Conflict,
    /// Another checkpoint or restore is in progress (409).
    Busy,
    /// Some participant was not ready for the cut (409).
    NotPrepared,
    /// The request body is over the limit (413).
    TooLarge,
    /// The request is well formed but names what is not there (422).
    Unprocessable,
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
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict | Self::Busy | Self::NotPrepared => StatusCode::CONFLICT,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Lost => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Failed => StatusCode::BAD_GATEWAY,
        }
    }
}

/// Descriptions of the common error replies, for the OpenAPI description.
pub mod doc {
    pub const BAD_REQUEST: &str =
        "A malformed body, field or query parameter (`bad_request`, naming `field`).";
    pub const UNAUTHORIZED: &str = "A missing or wrong bearer token (`unauthorized`).";
    pub const TOO_LARGE: &str = "The body is over the limit (`too_large`).";
}

/// A failed request, as its reply.
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error, utoipa::ToSchema,
)]
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

    pub fn bad(field: impl Into<String>, message: impl std::fmt::Display) -> Self {
        let field = field.into();
        Self {
            code: ErrorCode::BadRequest,
            message: format!("field `{field}`: {message}"),
            field: Some(field),
        }
    }

    /// The 401 reply.
    pub fn unauthorized() -> Response {
        Self::new(ErrorCode::Unauthorized, "missing or wrong bearer token").into_response()
    }
}

impl From<FormatError> for ApiError {
    fn from(e: FormatError) -> Self {
        let field = match &e {
            FormatError::Json { .. } => ".".to_owned(),
            FormatError::MissingVersion { field, .. } => (*field).to_owned(),
            FormatError::UnknownVersion { .. } => "v".to_owned(),
            FormatError::Field { path, source, .. } => rollpoint_proto::field_path(path, source),
        };
        Self {
            code: ErrorCode::BadRequest,
            message: e.to_string(),
            field: Some(field),
        }
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self::bad(e.field, e.message)
    }
}

impl From<TooLarge> for ApiError {
    fn from(e: TooLarge) -> Self {
        Self::new(ErrorCode::TooLarge, e.to_string())
    }
}

/// What a service's own error needs to be an HTTP reply: its status and its
/// JSON body. Every surface replies through [`Reply`], the one
/// [`IntoResponse`] for errors.
pub trait HttpError {
    fn status(&self) -> StatusCode;
    /// The reply body, JSON.
    fn body(&self) -> Vec<u8>;
}

/// A service error as its reply.
#[derive(Debug)]
pub struct Reply<E>(pub E);

impl<E> From<E> for Reply<E> {
    fn from(e: E) -> Self {
        Self(e)
    }
}

impl<E: HttpError> IntoResponse for Reply<E> {
    fn into_response(self) -> Response {
        (
            self.0.status(),
            [(CONTENT_TYPE, "application/json")],
            self.0.body(),
        )
            .into_response()
    }
}

/// Body of every error reply of the rollout, coordinator, gateway-control
/// and run-control routes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = ApiErrorReply)]
pub struct ErrorBody<'a> {
    pub error: &'a ApiError,
}

impl HttpError for ApiError {
    fn status(&self) -> StatusCode {
        self.code.status()
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&ErrorBody { error: self }).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        Reply(self).into_response()
    }
}

/// A JSON reply with `status`, or the encoding error.
pub fn encoded<T: Serialize>(status: StatusCode, value: &T) -> Result<Response, serde_json::Error> {
    let body = serde_json::to_vec(value)?;
    Ok((status, [(CONTENT_TYPE, "application/json")], body).into_response())
}

/// A JSON reply with `status`.
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    encoded(status, value).unwrap_or_else(|e| {
        ApiError::new(
            ErrorCode::Failed,
            format!("reply could not be encoded: {e}"),
        )
        .into_response()
    })
}

/// Largest request body of the rollout and coordinator routes (a rollout
/// task with its files).
pub const BODY_LIMIT: usize = 16 << 20;

/// `router` with every route behind `Authorization: Bearer <token>`, a
/// missing or wrong token refused with an [`ApiError`] 401. An empty token
/// matches no request.
pub fn authorized(router: axum::Router, token: &str) -> axum::Router {
    crate::auth::require_bearer(router, token, ApiError::unauthorized)
}
