//! Gateway configuration: the upstreams (each one or several replicas), their API family,
//! TLS roots and credential, how long a call waits out an outage, the ledger path and limits.

use std::path::PathBuf;
use std::time::Duration;

pub use crate::credential::Credential;

/// Most calls a gateway may have upstream at once (`max_upstream_calls`).
pub const MAX_UPSTREAM_CALLS: usize = 65_536;

/// Which API family the upstream speaks; decides which routes are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamApi {
    /// Chat completions and Responses.
    #[serde(rename = "openai")]
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

/// Most replicas one upstream may have.
pub const MAX_REPLICAS: usize = 256;

/// Longest `retry_s` and `outage_s`: a day.
pub const MAX_OUTAGE_S: u64 = 86_400;

/// How a call waits out an upstream that answers 429 or 503, refuses or resets the connection
/// before replying, cuts a reply before its first byte, or has no live replica
/// (docs/design/models.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutagePolicy {
    /// Retried with backoff this long while the harness waits; past it the call's attempt is
    /// reported stalled so its rollout is paused in place until the call gets a reply.
    pub retry: Duration,
    /// Past this the call ends `upstream_unreachable` (503 to the harness), never as a
    /// model answer, and the attempt's later calls end so at once.
    pub outage: Duration,
}

impl Default for OutagePolicy {
    fn default() -> Self {
        Self {
            retry: Duration::from_secs(30),
            outage: Duration::from_secs(600),
        }
    }
}

/// The upstream of the calls whose `model` is `name` (the default upstream takes the rest).
#[derive(Debug, Clone)]
pub struct ModelUpstream {
    pub name: String,
    /// Base URL, `http://` or `https://`.
    pub upstream: String,
    /// Further replicas of the same model (base URLs).
    pub replicas: Vec<String>,
    /// Keep each rollout on one replica while it is up (its prefix cache).
    pub sticky: bool,
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
    /// Further replicas of the default upstream (base URLs).
    pub replicas: Vec<String>,
    /// Keep each rollout on one replica of the default upstream while it is up.
    pub sticky: bool,
    /// How calls wait out an outage of any upstream.
    pub outage: OutagePolicy,
    /// The policy version calls are tagged with until a fleet continue names another.
    pub policy_version: Option<String>,
    /// Start with the fleet paused, its calls generating at the pause having done this.
    pub fleet_paused: Option<crate::fleet::InFlightCalls>,
    pub api: UpstreamApi,
    pub ledger: PathBuf,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Answer repeated conversations of a later attempt from the ledger.
    pub replay: bool,
    /// Accept any well-formed capture key without registration (standalone use).
    pub open_keys: bool,
    /// When set, every model route must carry its attempt's secret
    /// (`/r/<key>@<secret>/...`, `rollpoint_proto::route`); a route without
    /// it, or with another attempt's, is refused 403 and never recorded.
    pub route_key: Option<rollpoint_proto::route::RouteKey>,
    /// PEM certificates trusted for an `https://` upstream besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The upstream's credential, sent instead of whatever key a harness sent.
    pub credential: Option<Credential>,
    /// Calls upstream at once; more wait their turn (0: no limit; at most
    /// [`MAX_UPSTREAM_CALLS`]).
    pub max_upstream_calls: usize,
    /// Upstreams by model name, for calls that name one of them.
    pub models: Vec<ModelUpstream>,
    /// Capture each call's token ids from a token-returning upstream (`model_tokens`).
    pub tokens: Option<crate::tokens::TokenSource>,
    /// With `tokens`: ask for each generated token's logprob too (`model_logprobs`).
    pub token_logprobs: bool,
    /// Token-in/token-out for chat calls (`model_tokens = "tito"`): the model's tokenizer
    /// and chat template.
    pub tito: Option<crate::tito::TitoConfig>,
}

impl GatewayConfig {
    /// A configuration with defaults: 32 MiB bodies, replay on, keys must be registered.
    #[must_use]
    pub fn new(upstream: impl Into<String>, api: UpstreamApi, ledger: PathBuf) -> Self {
        Self {
            upstream: upstream.into(),
            replicas: Vec::new(),
            sticky: true,
            outage: OutagePolicy::default(),
            policy_version: None,
            fleet_paused: None,
            api,
            ledger,
            max_body_bytes: 32 * 1024 * 1024,
            replay: true,
            open_keys: false,
            route_key: None,
            ca_file: None,
            credential: None,
            max_upstream_calls: 0,
            models: Vec::new(),
            tokens: None,
            token_logprobs: true,
            tito: None,
        }
    }
}

/// Version of a models file (`rollpoint gateway --models`).
pub const MODELS_VERSION: u32 = 1;

/// Longest model name.
pub const MAX_MODEL_NAME: usize = 128;

/// One upstream by model name as a file or a run config names it: no key, only where the key
/// is (an environment variable or a 0600 file).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// The `model` of the calls it takes.
    pub name: String,
    /// Base URL, `http://` or `https://`; a list names replicas of the same model.
    pub upstream: Urls,
    pub api: UpstreamApi,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_file: Option<PathBuf>,
    /// Calls to it at once (0: no limit; 0..=[`MAX_UPSTREAM_CALLS`]).
    #[serde(default)]
    pub max_calls: usize,
    /// Keep each rollout on one replica while it is up, for the replica's prefix cache
    /// (default); false sends every call to the replica with the fewest calls outstanding.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub sticky: bool,
}

fn yes() -> bool {
    true
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if"
)]
fn is_true(b: &bool) -> bool {
    *b
}

/// One base URL, or several replicas of one model: `"http://a"` or `["http://a", "http://b"]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Urls(pub Vec<String>);

impl Urls {
    /// The first URL and the further replicas.
    #[must_use]
    pub fn split(&self) -> (String, Vec<String>) {
        match self.0.split_first() {
            Some((first, rest)) => (first.clone(), rest.to_vec()),
            None => (String::new(), Vec::new()),
        }
    }
}

impl From<&str> for Urls {
    fn from(url: &str) -> Self {
        Self(vec![url.to_owned()])
    }
}

impl serde::Serialize for Urls {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Urls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged, expecting = "a URL or a list of URLs")]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(url) => Self(vec![url]),
            OneOrMany::Many(urls) => Self(urls),
        })
    }
}

/// Whether `name` is an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
#[must_use]
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks the settings of one upstream, named `{prefix}upstream`, `{prefix}credential_env`,
/// `{prefix}credential_file` and `{prefix}max_calls`: 1 to [`MAX_REPLICAS`] distinct http(s)
/// URLs (none when `urls` is `None`), at most one place for the key, a variable name that is
/// one, and the limit in range. The error names the field (`{prefix}upstream[i]` in a list).
pub fn check_upstream(
    prefix: &str,
    urls: Option<&[String]>,
    credential_env: Option<&str>,
    credential_file: bool,
    max_calls: usize,
) -> Result<(), (String, String)> {
    if let Some(urls) = urls {
        if urls.is_empty() || urls.len() > MAX_REPLICAS {
            return Err((
                format!("{prefix}upstream"),
                format!(
                    "lists {} URLs: give 1 to {MAX_REPLICAS} replicas",
                    urls.len()
                ),
            ));
        }
        for (i, url) in urls.iter().enumerate() {
            let field = if urls.len() == 1 {
                format!("{prefix}upstream")
            } else {
                format!("{prefix}upstream[{i}]")
            };
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err((field, format!("{url}: must be an http:// or https:// URL")));
            }
            if urls[..i].contains(url) {
                return Err((field, format!("{url} is listed twice")));
            }
        }
    }
    if credential_env.is_some() && credential_file {
        return Err((
            format!("{prefix}credential_file"),
            format!("give {prefix}credential_env or {prefix}credential_file, not both"),
        ));
    }
    if let Some(name) = credential_env
        && !is_env_name(name)
    {
        return Err((
            format!("{prefix}credential_env"),
            format!("{name:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"),
        ));
    }
    if max_calls > MAX_UPSTREAM_CALLS {
        return Err((
            format!("{prefix}max_calls"),
            format!("{max_calls} is outside 0..={MAX_UPSTREAM_CALLS}"),
        ));
    }
    Ok(())
}

impl ModelSpec {
    /// Checks every field; the error names the field (`name`, `upstream`, ...).
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.name.is_empty() || self.name.len() > MAX_MODEL_NAME {
            return Err((
                "name".to_owned(),
                format!(
                    "must be 1 to {MAX_MODEL_NAME} bytes, not {}",
                    self.name.len()
                ),
            ));
        }
        check_upstream(
            "",
            Some(&self.upstream.0),
            self.credential_env.as_deref(),
            self.credential_file.is_some(),
            self.max_calls,
        )
    }

    /// The upstream it names, its credential read now.
    pub fn resolve(&self) -> Result<ModelUpstream, crate::errors::GatewayError> {
        let credential = Credential::named(
            self.credential_env.as_deref(),
            self.credential_file.as_deref(),
        )?;
        let (upstream, replicas) = self.upstream.split();
        Ok(ModelUpstream {
            name: self.name.clone(),
            upstream,
            replicas,
            sticky: self.sticky,
            api: self.api,
            ca_file: self.ca_file.clone(),
            credential,
            max_upstream_calls: self.max_calls,
        })
    }
}

/// A models file: `{"v": 1, "models": [ModelSpec, ...]}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsFile {
    pub v: u32,
    pub models: Vec<ModelSpec>,
}
