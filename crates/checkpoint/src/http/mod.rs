//! The control plane over HTTP: `/v1/checkpoint/{status,prepare,commit,
//! restore,resume,retire,forget,fleet}` over any [`ParticipantApi`] (usually a
//! [`crate::ParticipantHost`] around a participant), behind a bearer token
//! compared in constant time. Every body is taken through `rollpoint_api::Body`
//! with this surface's limit and error, decoded and checked field by field
//! (`body`), so a bad body gets a 400 naming the field. One route per file:
//! each handler is its OpenAPI annotation and one line (call, reply), which is
//! where the routes look alike; the reply is the shared `json` below.

mod body;
mod commit;
mod fleet;
mod forget;
mod prepare;
mod restore;
mod resume;
mod retire;
mod status;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rollpoint_api::{HttpError, Reply};
use serde::Serialize;
use tokio::net::TcpListener;

use crate::api::ParticipantApi;
use crate::errors::{CallError, Code};
use crate::wire::ErrorReply;

pub use body::BODY_LIMIT;

/// The OpenAPI description of these routes.
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(
        status::handle,
        prepare::handle,
        commit::handle,
        restore::handle,
        resume::handle,
        retire::handle,
        fleet::handle,
        forget::handle,
    ),
    tags((
        name = "checkpoint",
        description = "The participant control plane, served by the owner, the agent and the \
            gateway (the model participant, also in `rollpoint run`). Every route needs the \
            bearer token; bodies refuse unknown fields."
    )),
)]
pub struct CheckpointApi;

/// Descriptions of the error replies in the OpenAPI description.
mod doc {
    pub(super) const BAD_REQUEST: &str =
        "A malformed body or field (`bad_request`, naming `field`).";
    pub(super) const UNAUTHORIZED: &str = "A missing or wrong bearer token (`unauthorized`).";
    pub(super) const CONFLICT: &str = "Refused in the current phase, or by the participant's \
        state (`stale_checkpoint`, `checkpoint_conflict`, `invalid_phase`, `restart_in_scope`).";
    pub(super) const TOO_LARGE: &str = "The body is over the limit (`too_large`).";
    pub(super) const NOT_FOUND: &str =
        "The checkpoint, or this participant's share of it, is not there (`not_found`).";
    pub(super) const FAILED: &str =
        "A hook or the checkpoint storage failed (`hook_failed`, `storage`, `remote`).";
    pub(super) const DEADLINE: &str =
        "The call did not finish within `timeout_ms` (`deadline_exceeded`).";
}

/// The error replies of every checkpoint route but status.
struct CallErrors;

impl utoipa::IntoResponses for CallErrors {
    fn responses()
    -> std::collections::BTreeMap<String, utoipa::openapi::RefOr<utoipa::openapi::Response>> {
        rollpoint_api::responses::error_replies::<ErrorReply>(&[
            (400, doc::BAD_REQUEST),
            (401, doc::UNAUTHORIZED),
            (404, doc::NOT_FOUND),
            (409, doc::CONFLICT),
            (413, doc::TOO_LARGE),
            (500, doc::FAILED),
            (504, doc::DEADLINE),
        ])
    }
}

type Shared = State<Arc<dyn ParticipantApi>>;

/// The control routes of `control`, every one behind
/// `Authorization: Bearer <token>`. An empty `token` matches no request.
pub fn router(control: Arc<dyn ParticipantApi>, token: &str) -> Router {
    let routes = Router::new()
        .route("/v1/checkpoint/status", get(status::handle))
        .route("/v1/checkpoint/prepare", post(prepare::handle))
        .route("/v1/checkpoint/commit", post(commit::handle))
        .route("/v1/checkpoint/restore", post(restore::handle))
        .route("/v1/checkpoint/resume", post(resume::handle))
        .route("/v1/checkpoint/retire", post(retire::handle))
        .route("/v1/checkpoint/forget", post(forget::handle))
        .route("/v1/checkpoint/fleet", post(fleet::handle))
        .with_state(control);
    rollpoint_api::require_bearer(routes, token, unauthorized)
}

/// Serves `control` on `listener` until the server fails.
pub async fn serve(
    listener: TcpListener,
    control: Arc<dyn ParticipantApi>,
    token: &str,
) -> std::io::Result<()> {
    rollpoint_api::serve(listener, router(control, token)).await
}

fn unauthorized() -> Response {
    Reply(CallError::new(
        Code::Unauthorized,
        "missing or wrong bearer token",
    ))
    .into_response()
}

/// A control error as an HTTP reply.
type ApiError = Reply<CallError>;

impl HttpError for CallError {
    fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&ErrorReply {
            error: self.clone(),
        })
        .unwrap_or_default()
    }
}

/// A JSON reply.
fn json<T: Serialize>(value: &T) -> Result<Response, ApiError> {
    rollpoint_api::encoded(StatusCode::OK, value).map_err(|e| {
        Reply(CallError::new(
            Code::Remote,
            format!("reply could not be encoded: {e}"),
        ))
    })
}
