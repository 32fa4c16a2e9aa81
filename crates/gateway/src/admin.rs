//! The gateway's own control routes, for a run controller in another process: registering
//! the attempts whose calls it takes, and reading its state (the controller waits on
//! `recording` before it lets a gateway go). Served behind the same bearer token as the
//! checkpoint routes; [`GatewayClient`] is their client.
//!
//! - `POST /v1/gateway/keys` `{v: 1, keys: [capture key]}`: registers each key in order (a
//!   later attempt fences the earlier ones); 409 `conflict` naming `keys[i]` for an attempt
//!   older than the registered one. Reply `{v: 1, registered: [...]}`.
//! - `GET /v1/gateway/status`: `{v: 1, pid, open, in_flight, recording}`.
//! - `POST /v1/gateway/fleet/pause` `{v: 1, calls: "finish"|"abort"}` and
//!   `POST /v1/gateway/fleet/continue` `{v: 1, version?}`: no call goes upstream while paused
//!   (`crate::fleet`); a continue names the policy version later calls are tagged with.
//!   Reply `{v: 1, paused, calls, version, recording}`.
//! - `GET /v1/gateway/stalls?after=G&wait_ms=N`: the attempts whose calls wait out an outage
//!   past the retry budget (`stalled`: pause them in place) and those given up past the
//!   outage bound, once the registry's generation is past `G` (or after `N` ms, at most
//!   [`MAX_STALLS_WAIT_MS`]): `{v: 1, generation, stalled, given_up}`.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use rollpoint_api::error::{ApiError, ErrorCode, authorized, json};
use rollpoint_api::extract::{Body, Versioned, VersionedBody};
use serde::{Deserialize, Serialize};

use rollpoint_api::wire::{FleetContinueRequest, FleetPauseRequest};

use crate::errors::GatewayError;
use crate::gateway::Gateway;
use rollpoint_proto::key::AttemptKey;

/// Version of the admin bodies.
pub const ADMIN_VERSION: u32 = 1;

/// `POST /v1/gateway/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = GatewayKeysRequest)]
#[serde(deny_unknown_fields)]
pub struct KeysRequest {
    pub v: u32,
    pub keys: Vec<AttemptKey>,
}

impl VersionedBody for KeysRequest {
    const WHAT: &'static str = "gateway keys request";
    const VERSION: u32 = ADMIN_VERSION;
}

/// The reply to [`KeysRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = GatewayKeysReply)]
#[serde(deny_unknown_fields)]
pub struct KeysReply {
    pub v: u32,
    pub registered: Vec<AttemptKey>,
}

/// `GET /v1/gateway/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayStatus {
    pub v: u32,
    pub pid: u32,
    /// Whether the admission gate is open.
    pub open: bool,
    /// Requests waiting, upstream or delivering.
    pub in_flight: usize,
    /// Calls sent upstream whose reply is not yet committed.
    pub recording: usize,
}

/// The fleet's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetReply {
    pub v: u32,
    pub paused: bool,
    /// While paused: what calls generating at the pause do.
    pub calls: Option<crate::fleet::InFlightCalls>,
    /// The policy version calls are tagged with.
    pub version: Option<String>,
    /// Calls sent (or held before sending) whose reply is not yet recorded.
    pub recording: usize,
}

impl FleetReply {
    fn of(s: crate::fleet::FleetState) -> Self {
        Self {
            v: ADMIN_VERSION,
            paused: s.paused,
            calls: s.calls,
            version: s.version,
            recording: s.recording,
        }
    }
}

/// `GET /v1/gateway/stalls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StallsReply {
    pub v: u32,
    /// Bumped by every change; ask again with `after` set to it to wait for the next.
    pub generation: u64,
    /// Attempts with a call waiting out an outage past the retry budget.
    pub stalled: Vec<AttemptKey>,
    /// Attempts with a call that outlasted the outage bound.
    pub given_up: Vec<AttemptKey>,
}

/// The query of `GET /v1/gateway/stalls`.
#[derive(Debug, Clone, Copy, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[expect(dead_code, reason = "describes the query for the API document")]
struct StallsQuery {
    /// Answer once the generation is past this (default 0: at once).
    after: Option<u64>,
    /// The longest wait, in ms (default and most 25000).
    wait_ms: Option<u64>,
}

/// The longest a stalls query waits for a change.
pub const MAX_STALLS_WAIT_MS: u64 = 25_000;

/// The OpenAPI description of the control routes.
#[derive(Debug, utoipa::OpenApi)]
#[openapi(paths(keys, status, records, stalls, fleet_pause, fleet_continue))]
pub struct AdminApi;

/// The control routes of `gateway`, behind `Authorization: Bearer <token>`.
pub fn router(gateway: Gateway, token: &str) -> Router {
    let routes = Router::new()
        .route("/v1/gateway/keys", post(keys))
        .route("/v1/gateway/status", get(status))
        .route("/v1/gateway/rollouts/{id}/records", get(records))
        .route("/v1/gateway/stalls", get(stalls))
        .route("/v1/gateway/fleet/pause", post(fleet_pause))
        .route("/v1/gateway/fleet/continue", post(fleet_continue))
        .with_state(gateway);
    authorized(routes, token)
}

/// Register attempts whose calls the gateway takes, in order.
///
/// A later attempt of a rollout fences its earlier ones.
#[utoipa::path(
    post,
    path = "/v1/gateway/keys",
    operation_id = "gateway_keys",
    tag = "gateway",
    request_body = KeysRequest,
    responses(
        (status = 200, description = "Every key is registered.", body = KeysReply),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 409, description = "A key is older than its rollout's registered attempt (`conflict`, naming `keys[i]`).", body = rollpoint_api::error::ErrorBody),
        (status = 413, description = rollpoint_api::error::doc::TOO_LARGE, body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn keys(
    State(gateway): State<Gateway>,
    Body(req, _): Versioned<KeysRequest>,
) -> Result<Response, ApiError> {
    for (i, key) in req.keys.iter().enumerate() {
        gateway.register(key).map_err(|e| {
            let mut error = ApiError::new(ErrorCode::Conflict, e.to_string());
            error.field = Some(format!("keys[{i}]"));
            error
        })?;
    }
    Ok(json(
        StatusCode::OK,
        &KeysReply {
            v: ADMIN_VERSION,
            registered: req.keys,
        },
    ))
}

/// The gateway's state: whether its gate is open and what is in flight.
///
/// A run controller waits for `recording` to reach 0 before it lets a gateway go.
#[utoipa::path(
    get,
    path = "/v1/gateway/status",
    operation_id = "gateway_status",
    tag = "gateway",
    responses(
        (status = 200, description = "The gateway's state.", body = GatewayStatus),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn status(State(gateway): State<Gateway>) -> Response {
    json(
        StatusCode::OK,
        &GatewayStatus {
            v: ADMIN_VERSION,
            pid: std::process::id(),
            open: gateway.is_open(),
            in_flight: gateway.in_flight().len(),
            recording: gateway.recording(),
        },
    )
}

/// The attempts stalled by the model, and those given up.
///
/// Long-polled: answers once the registry changed after generation `after`, or after
/// `wait_ms`. Whoever runs the rollouts pauses each stalled attempt's launch in place and
/// continues it once it is no longer listed.
#[utoipa::path(
    get,
    path = "/v1/gateway/stalls",
    operation_id = "gateway_stalls",
    tag = "gateway",
    params(StallsQuery),
    responses(
        (status = 200, description = "The registry now.", body = StallsReply),
        (status = 400, description = "`wait_ms` over the limit (`bad_request`, naming it).", body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn stalls(
    State(gateway): State<Gateway>,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> Result<Response, ApiError> {
    use rollpoint_api::query::{number, params};
    let bad = |(field, message): (String, String)| ApiError::bad(field, message);
    let query = params(raw.as_deref(), &["after", "wait_ms"]).map_err(bad)?;
    let after = number(&query, "after", 0).map_err(bad)?;
    let wait_ms = number(&query, "wait_ms", MAX_STALLS_WAIT_MS).map_err(bad)?;
    if wait_ms > MAX_STALLS_WAIT_MS {
        return Err(ApiError::bad(
            "wait_ms",
            format!("{wait_ms} is outside 0..={MAX_STALLS_WAIT_MS}"),
        ));
    }
    let view = gateway.stalls(after, Duration::from_millis(wait_ms)).await;
    let reply = StallsReply {
        v: ADMIN_VERSION,
        generation: view.generation,
        stalled: view.stalled,
        given_up: view.given_up,
    };
    Ok(json(StatusCode::OK, &reply))
}

/// Pause the fleet for a weight update: no call goes upstream until it continues.
#[utoipa::path(
    post,
    path = "/v1/gateway/fleet/pause",
    operation_id = "gateway_fleet_pause",
    tag = "gateway",
    request_body = FleetPauseRequest,
    responses(
        (status = 200, description = "Paused.", body = FleetReply),
        (status = 400, description = rollpoint_api::error::doc::BAD_REQUEST, body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 413, description = rollpoint_api::error::doc::TOO_LARGE, body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn fleet_pause(
    State(gateway): State<Gateway>,
    Body(req, _): Versioned<FleetPauseRequest>,
) -> Result<Response, ApiError> {
    let state = gateway.fleet_pause(req.calls.unwrap_or_default());
    Ok(json(StatusCode::OK, &FleetReply::of(state)))
}

/// Continue the fleet, under a new policy version when one is given.
#[utoipa::path(
    post,
    path = "/v1/gateway/fleet/continue",
    operation_id = "gateway_fleet_continue",
    tag = "gateway",
    request_body = FleetContinueRequest,
    responses(
        (status = 200, description = "Going on.", body = FleetReply),
        (status = 400, description = "A bad `version` (`bad_request`, naming it).", body = rollpoint_api::error::ErrorBody),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 413, description = rollpoint_api::error::doc::TOO_LARGE, body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn fleet_continue(
    State(gateway): State<Gateway>,
    Body(req, _): Versioned<FleetContinueRequest>,
) -> Result<Response, ApiError> {
    req.check()?;
    let state = gateway.fleet_continue(req.version);
    Ok(json(StatusCode::OK, &FleetReply::of(state)))
}

/// How long a control call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The ledger records a trajectory reads: the rollout's calls, their answers and tokens.
///
/// One ledger record per line, in the export format (each line carries its version).
#[utoipa::path(
    get,
    path = "/v1/gateway/rollouts/{id}/records",
    operation_id = "gateway_records",
    tag = "gateway",
    params(("id" = String, Path, description = "The rollout whose records to read.")),
    responses(
        (status = 200, description = "JSONL ledger records (version 2).", content_type = "application/x-ndjson", body = String),
        (status = 401, description = rollpoint_api::error::doc::UNAUTHORIZED, body = rollpoint_api::error::ErrorBody),
        (status = 502, description = "The ledger could not be read (`failed`).", body = rollpoint_api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
async fn records(
    State(gateway): State<Gateway>,
    axum::extract::Path(rollout): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let path = gateway.ledger_path().to_owned();
    let read = tokio::task::spawn_blocking(move || {
        crate::ledger::read_for_trajectories(&path, Some(&rollout))
    })
    .await
    .map_err(|e| ApiError::new(ErrorCode::Failed, e.to_string()))?
    .map_err(|e| ApiError::new(ErrorCode::Failed, e.to_string()))?;
    let mut resp = Response::new(axum::body::Body::from(crate::ledger::record::encode_jsonl(
        &read,
    )));
    resp.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(resp)
}

/// A client of a gateway's control routes.
#[derive(Debug, Clone)]
pub struct GatewayClient {
    base: String,
    token: String,
    client: reqwest::Client,
}

impl GatewayClient {
    /// A client of the routes at `base` (`http://host:port`).
    pub fn new(base: &str, token: &str) -> Result<Self, GatewayError> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(GatewayError::Client)?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            client,
        })
    }

    fn failed(&self, route: &str, source: impl Into<rollpoint_proto::Cause>) -> GatewayError {
        GatewayError::Admin {
            url: format!("{}{route}", self.base),
            source: source.into(),
        }
    }

    /// The body of a successful reply; an error reply's message otherwise.
    async fn fetch(
        &self,
        route: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<bytes::Bytes, GatewayError> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.failed(route, e))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| self.failed(route, e))?;
        if !status.is_success() {
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
            return Err(self.failed(route, format!("{status}: {message}")));
        }
        Ok(bytes)
    }

    async fn reply<T: serde::de::DeserializeOwned>(
        &self,
        route: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<T, GatewayError> {
        let bytes = self.fetch(route, request).await?;
        rollpoint_proto::decode("gateway control reply", ADMIN_VERSION, &bytes)
            .map_err(|e| self.failed(route, e))
    }

    /// Registers `keys` in order.
    pub async fn register(&self, keys: &[AttemptKey]) -> Result<(), GatewayError> {
        let route = "/v1/gateway/keys";
        let body = KeysRequest {
            v: ADMIN_VERSION,
            keys: keys.to_vec(),
        };
        let _reply: KeysReply = self.post(route, &body).await?;
        Ok(())
    }

    /// The records a trajectory of `rollout` reads.
    pub async fn records(
        &self,
        rollout: &str,
    ) -> Result<Vec<crate::ledger::record::LedgerRecord>, GatewayError> {
        let route = format!("/v1/gateway/rollouts/{rollout}/records");
        let request = self.client.get(format!("{}{route}", self.base));
        let bytes = self.fetch(&route, request).await?;
        crate::ledger::record::decode_jsonl(&bytes)
    }

    /// The stalled and given-up attempts once the generation is past `after` (or after
    /// `wait`, at most [`MAX_STALLS_WAIT_MS`]).
    pub async fn stalls(&self, after: u64, wait: Duration) -> Result<StallsReply, GatewayError> {
        let route = "/v1/gateway/stalls";
        let wait_ms = u64::try_from(wait.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_STALLS_WAIT_MS);
        let request = self.client.get(format!(
            "{}{route}?after={after}&wait_ms={wait_ms}",
            self.base
        ));
        self.reply(route, request).await
    }

    /// Pauses the fleet (`POST /v1/gateway/fleet/pause`).
    pub async fn fleet_pause(
        &self,
        calls: crate::fleet::InFlightCalls,
    ) -> Result<FleetReply, GatewayError> {
        let body = FleetPauseRequest {
            v: ADMIN_VERSION,
            calls: Some(calls),
        };
        self.post("/v1/gateway/fleet/pause", &body).await
    }

    /// Continues the fleet (`POST /v1/gateway/fleet/continue`).
    pub async fn fleet_continue(
        &self,
        version: Option<String>,
    ) -> Result<FleetReply, GatewayError> {
        let body = FleetContinueRequest {
            v: ADMIN_VERSION,
            version,
        };
        self.post("/v1/gateway/fleet/continue", &body).await
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        route: &str,
        body: &impl Serialize,
    ) -> Result<T, GatewayError> {
        let body = serde_json::to_vec(body).map_err(|e| self.failed(route, e))?;
        let request = self
            .client
            .post(format!("{}{route}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        self.reply(route, request).await
    }

    /// The gateway's state.
    pub async fn status(&self) -> Result<GatewayStatus, GatewayError> {
        let route = "/v1/gateway/status";
        let request = self.client.get(format!("{}{route}", self.base));
        self.reply(route, request).await
    }
}
