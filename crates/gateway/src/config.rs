//! Gateway configuration: the one upstream, its API family, its TLS roots and credential, the
//! ledger path and limits.

use std::path::PathBuf;

pub use crate::credential::Credential;

/// Most calls a gateway may have upstream at once (`max_upstream_calls`).
pub const MAX_UPSTREAM_CALLS: usize = 65_536;

/// Which API family the upstream speaks; decides which routes are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamApi {
    /// Chat completions and Responses.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// All three (e.g. the scripted model server).
    All,
}

impl UpstreamApi {
    /// Whether a route of `route` is passed to this upstream.
    #[must_use]
    pub fn serves(self, route: crate::conversation::Route) -> bool {
        use crate::conversation::Route;
        match (self, route) {
            (Self::All, _) | (_, Route::Models) => true,
            (Self::OpenAi, r) => matches!(r, Route::Chat | Route::Responses),
            (Self::Anthropic, r) => r == Route::Messages,
        }
    }
}

/// The upstream of the calls whose `model` is `name` (the default upstream takes the rest).
#[derive(Debug, Clone)]
pub struct ModelUpstream {
    pub name: String,
    /// Base URL, `http://` or `https://`.
    pub upstream: String,
    pub api: UpstreamApi,
    pub ca_file: Option<PathBuf>,
    pub credential: Option<Credential>,
    /// Calls to it at once (0: no limit; at most [`MAX_UPSTREAM_CALLS`]).
    pub max_upstream_calls: usize,
}

/// How the gateway runs.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Base URL of the upstream, `http://` or `https://`, e.g. `http://127.0.0.1:8000` (the
    /// `/v1/...` path is appended).
    pub upstream: String,
    pub api: UpstreamApi,
    pub ledger: PathBuf,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Answer repeated conversations of a later attempt from the ledger.
    pub replay: bool,
    /// Accept any well-formed capture key without registration (standalone use).
    pub open_keys: bool,
    /// PEM certificates trusted for an `https://` upstream besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The upstream's credential, sent instead of whatever key a harness sent.
    pub credential: Option<Credential>,
    /// Calls upstream at once; more wait their turn (0: no limit; at most
    /// [`MAX_UPSTREAM_CALLS`]).
    pub max_upstream_calls: usize,
    /// Upstreams by model name, for calls that name one of them.
    pub models: Vec<ModelUpstream>,
}

impl GatewayConfig {
    /// A configuration with defaults: 32 MiB bodies, replay on, keys must be registered.
    #[must_use]
    pub fn new(upstream: impl Into<String>, api: UpstreamApi, ledger: PathBuf) -> Self {
        Self {
            upstream: upstream.into(),
            api,
            ledger,
            max_body_bytes: 32 * 1024 * 1024,
            replay: true,
            open_keys: false,
            ca_file: None,
            credential: None,
            max_upstream_calls: 0,
            models: Vec::new(),
        }
    }
}
