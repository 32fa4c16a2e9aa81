//! The owner over HTTP: every [`Owner`] call as a route under `/v1/owner/`,
//! behind a bearer token. Every body is taken through `rollpoint_api::Body`
//! with the owner's limit and error (`body`), so a bad body gets a 400
//! naming the field path rather than a framework message. One route per
//! file: a handler is its OpenAPI annotation and a line or two, so the
//! session routes look alike; taking a body (`body`) and replying
//! (`wire::json`) are shared.

mod access;
mod body;
mod close;
mod continue_launches;
mod create;
mod delete_snapshot;
mod download;
mod exec;
mod launch;
mod pause;
mod restore;
mod snapshot;
mod upload;
mod usage;
mod verify;
pub(crate) mod wire;

pub use body::BODY_LIMIT;
pub use wire::LAUNCHES_MAX;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use rollpoint_api::Reply;
use tokio::net::TcpListener;
use utoipa::openapi::RefOr;

use crate::errors::OwnerError;
use crate::owner::Owner;

/// The OpenAPI description of these routes (`GET /metrics` is described
/// with every service's).
#[derive(Debug, utoipa::OpenApi)]
#[openapi(
    paths(
        create::handle,
        access::handle,
        close::handle,
        exec::handle,
        download::handle,
        upload::handle,
        launch::handle,
        usage::handle,
        verify::handle,
        snapshot::handle,
        restore::handle,
        delete_snapshot::handle,
        pause::handle,
        continue_launches::handle,
    ),
    tags((
        name = "owner",
        description = "The owner (`rollpoint owner`): lends sandboxes to rollouts as sessions, \
            grades them, and snapshots and forks them for checkpoints. Every route needs the \
            bearer token; JSON bodies refuse unknown fields."
    )),
)]
pub struct OwnerApi;

/// Descriptions of the error replies in the OpenAPI description.
mod doc {
    pub(super) const BAD_REQUEST: &str =
        "A malformed body, field or query parameter (`bad_request`, naming `field`).";
    pub(super) const UNAUTHORIZED: &str = "A missing or wrong bearer token (`unauthorized`).";
    pub(super) const NOT_FOUND: &str = "No such session (`not_found`, naming `session`).";
    pub(super) const NOT_CAPTURABLE: &str =
        "The task has `capture: false` (`not_capturable`, naming `session`).";
    pub(super) const TOO_LARGE: &str = "The body is over the limit (`too_large`, with `limit`).";
    pub(super) const SETUP: &str = "A setup command failed (`setup`, with `session` and `setup`).";
    pub(super) const UNPROCESSABLE: &str = "Well formed, but not for this sandbox or host: a \
        path that is not there or is a directory, a launch the anchor refuses (`unprocessable`, \
        naming `field` when one is at fault).";
    pub(super) const FAILED: &str =
        "The sandbox backend or the owner failed (`backend`, `internal`, `remote`).";
}

/// The error replies of a route on one session.
struct SessionErrors;

impl utoipa::IntoResponses for SessionErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        rollpoint_api::responses::error_replies::<wire::ErrorReply>(&[
            (401, doc::UNAUTHORIZED),
            (404, doc::NOT_FOUND),
            (500, doc::FAILED),
        ])
    }
}

/// The error replies of a batch of launches.
struct BatchErrors;

impl utoipa::IntoResponses for BatchErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        rollpoint_api::responses::error_replies::<wire::ErrorReply>(&[
            (400, doc::BAD_REQUEST),
            (401, doc::UNAUTHORIZED),
            (413, doc::TOO_LARGE),
            (500, doc::FAILED),
        ])
    }
}

/// The error replies of a route on one session that takes a body.
struct SessionBodyErrors;

impl utoipa::IntoResponses for SessionBodyErrors {
    fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
        rollpoint_api::responses::error_replies::<wire::ErrorReply>(&[
            (400, doc::BAD_REQUEST),
            (401, doc::UNAUTHORIZED),
            (404, doc::NOT_FOUND),
            (413, doc::TOO_LARGE),
            (422, doc::UNPROCESSABLE),
            (500, doc::FAILED),
        ])
    }
}

pub(crate) type Shared = State<Arc<dyn Owner>>;

/// The routes of `owner`, every one behind `Authorization: Bearer <token>`.
/// An empty `token` matches no request.
pub fn router(owner: Arc<dyn Owner>, token: &str) -> Router {
    let routes = Router::new()
        .route("/v1/owner/sessions", post(create::handle))
        .route(
            "/v1/owner/sessions/{id}",
            get(access::handle).delete(close::handle),
        )
        .route("/v1/owner/sessions/{id}/exec", post(exec::handle))
        .route(
            "/v1/owner/sessions/{id}/files",
            get(download::handle).put(upload::handle),
        )
        .route("/v1/owner/sessions/{id}/launch", post(launch::handle))
        .route("/v1/owner/sessions/{id}/usage", get(usage::handle))
        .route("/v1/owner/sessions/{id}/verify", post(verify::handle))
        .route("/v1/owner/sessions/{id}/snapshot", post(snapshot::handle))
        .route("/v1/owner/restore", post(restore::handle))
        .route("/v1/owner/snapshots/{id}", delete(delete_snapshot::handle))
        .route("/v1/owner/launches/pause", post(pause::handle))
        .route(
            "/v1/owner/launches/continue",
            post(continue_launches::handle),
        )
        .route("/metrics", get(metrics))
        .with_state(owner);
    rollpoint_api::require_bearer(routes, token, unauthorized)
}

/// Serves `owner` on `listener` until the server fails.
pub async fn serve(
    listener: TcpListener,
    owner: Arc<dyn Owner>,
    token: &str,
) -> std::io::Result<()> {
    rollpoint_api::serve(listener, router(owner, token)).await
}

/// `GET /metrics` (behind the token): `rollpoint_owner_sessions`,
/// `rollpoint_owner_sessions_seeding`, the snapshot totals and the process's own use, now.
async fn metrics(State(owner): Shared) -> Response {
    use prometheus_client::metrics::gauge::Gauge;
    let counts = owner.counts();
    let sessions = Gauge::<i64>::default();
    sessions.set(i64::try_from(counts.sessions).unwrap_or(i64::MAX));
    let seeding = Gauge::<i64>::default();
    seeding.set(i64::try_from(counts.seeding).unwrap_or(i64::MAX));
    let mut registry = prometheus_client::registry::Registry::with_prefix("rollpoint_owner");
    rollpoint_api::process_metrics::register_process(&mut registry);
    registry.register("sessions", "Sessions open", sessions);
    registry.register("sessions_seeding", "Sessions being seeded", seeding);
    let snapshots = counts.snapshot_totals();
    rollpoint_api::metrics::register_snapshots(&mut registry, move || snapshots);
    rollpoint_api::metrics::reply(&registry)
}

fn unauthorized() -> Response {
    Reply(OwnerError::Unauthorized).into_response()
}
