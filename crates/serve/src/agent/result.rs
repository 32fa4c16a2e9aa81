//! `GET /v1/rollouts/{id}/result?wait_ms=N`: waits up to N ms (default 0,
//! at most [`MAX_WAIT_MS`]) for the rollout's result. 200 with the
//! `RolloutResult` v1 when done; 202 with its status when not yet; 500
//! when its run was lost; 404 for an unknown id; 400 naming `wait_ms`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::Shared;
use super::known::RolloutId;
use super::table::{Outcome, Seen};
use rollpoint_api::error::{ApiError, ErrorCode, json};

/// Longest wait one request may ask for: ten minutes.
pub const MAX_WAIT_MS: u64 = 600_000;

fn wait_ms(query: Option<&str>) -> Result<u64, ApiError> {
    let mut wait = 0;
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match name.as_ref() {
            "wait_ms" => {
                wait = value
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| *ms <= MAX_WAIT_MS)
                    .ok_or_else(|| {
                        ApiError::bad(
                            "wait_ms",
                            format!("{value:?} is not a whole number in 0..={MAX_WAIT_MS}"),
                        )
                    })?;
            }
            other => return Err(ApiError::bad(other, "unknown query parameter")),
        }
    }
    Ok(wait)
}

/// Wait for a rollout's result.
#[utoipa::path(
    get,
    path = "/v1/rollouts/{id}/result",
    operation_id = "agent_result",
    tag = "agent",
    params(
        RolloutId,
        ("wait_ms" = Option<u64>, Query, maximum = 600_000, description = "How long to wait for the result, ms (default 0)."),
    ),
    responses(
        (status = 200, description = "The rollout's result.", body = rollpoint_driver::RolloutResult),
        (status = 202, description = "Not done yet: the rollout's status.", body = rollpoint_api::wire::RolloutStatus),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 404, description = "No such rollout here (`not_found`).", body = rollpoint_api::error::ErrorBody),
        (status = 500, description = "The rollout's run ended without a result (`lost`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub(super) async fn handle(
    State(shared): State<Arc<Shared>>,
    Path(RolloutId { id }): Path<RolloutId>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let wait = Duration::from_millis(wait_ms(query.as_deref())?);
    let mut seen = shared.seen(&id)?;
    if seen.outcome.is_none() {
        // A restore may replace the attempt meanwhile; the wait goes on for
        // whichever attempt is current.
        let _arrived = tokio::time::timeout(wait, seen.changes.wait_for(Option::is_some))
            .await
            .is_ok_and(|r| r.is_ok());
        seen = shared.seen(&id)?;
    }
    ended(&id, &seen).unwrap_or_else(|| Ok(json(StatusCode::ACCEPTED, &shared.status(&id, &seen))))
}

/// The reply of a rollout that has ended: its result, or `lost` when its
/// run ended without one; `None` while it has not.
pub(super) fn ended(id: &str, seen: &Seen) -> Option<Result<Response, ApiError>> {
    match &seen.outcome {
        Some(Outcome::Done(result)) => Some(Ok(json(StatusCode::OK, result.as_ref()))),
        Some(Outcome::Lost(e)) => Some(Err(ApiError::new(
            ErrorCode::Lost,
            format!("rollout {id} attempt {}: {e}", seen.attempt),
        ))),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_ms_is_bounded_and_named() {
        assert_eq!(wait_ms(None).ok(), Some(0));
        assert_eq!(wait_ms(Some("wait_ms=250")).ok(), Some(250));
        for bad in ["wait_ms=-1", "wait_ms=soon", "wait_ms=600001"] {
            let err = wait_ms(Some(bad)).expect_err(bad);
            assert_eq!(err.field.as_deref(), Some("wait_ms"), "{bad}");
        }
        let err = wait_ms(Some("wait=1")).expect_err("unknown parameter");
        assert_eq!(err.field.as_deref(), Some("wait"));
    }

    #[test]
    fn the_described_bound_is_the_bound() {
        use utoipa::Path as _;
        let operation = __path_handle::operation();
        let param = operation
            .parameters
            .iter()
            .flatten()
            .find(|p| p.name == "wait_ms")
            .expect("wait_ms is described");
        let schema = serde_json::to_value(&param.schema).expect("schema as JSON");
        assert_eq!(schema["maximum"], MAX_WAIT_MS, "{schema}");
    }
}
