//! The rollout a route is about: its `{id}`, described once for the OpenAPI
//! description ([`RolloutId`]), and what the table holds of it (`seen`,
//! [`Known`]), so a route on one rollout starts with it in hand or answers
//! 404.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::response::{IntoResponse as _, Response};

use super::table::Seen;
use super::{Shared, unknown};
use rollpoint_api::error::ApiError;

impl Shared {
    /// Rollout `id` as the table holds it; 404 when it is not known here.
    pub(super) fn seen(&self, id: &str) -> Result<Seen, ApiError> {
        self.table.get(id).ok_or_else(|| unknown(id))
    }
}

/// The `{id}` of a rollout route: `params(RolloutId)` in its OpenAPI
/// description.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct RolloutId {
    /// The rollout id.
    pub id: String,
}

/// A rollout known here: its id and what the table holds of it, read when
/// the request arrives.
#[derive(Debug)]
pub(super) struct Known {
    pub id: String,
    pub seen: Seen,
}

impl FromRequestParts<Arc<Shared>> for Known {
    /// A path that is not a rollout id answers as axum's `Path` does; an
    /// unknown rollout answers 404.
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, Response> {
        let Path(RolloutId { id }) = Path::<RolloutId>::from_request_parts(parts, shared)
            .await
            .map_err(|e| e.into_response())?;
        let seen = shared.seen(&id).map_err(|e| e.into_response())?;
        Ok(Self { id, seen })
    }
}
