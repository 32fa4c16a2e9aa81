//! The clients of the upstreams (the default one and one per named model): plain http or TLS (rustls, the system's roots plus an
//! optional CA file; no OpenSSL), HTTP/2 where the upstream offers it by ALPN, pooled
//! connections, a connect timeout, bounded retries of connection failures (the request never
//! reached the upstream, so nothing can have started), and an optional limit of calls
//! upstream at once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::{Credential, GatewayConfig, MAX_UPSTREAM_CALLS, UpstreamApi};
use crate::errors::GatewayError;

/// How long a connection (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Waits before each retry of a connection that failed.
const RETRY_WAITS: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];

/// Every upstream of a gateway.
#[derive(Debug)]
pub(crate) struct Upstreams {
    default: Arc<Upstream>,
    by_model: HashMap<String, Arc<Upstream>>,
}

impl Upstreams {
    pub(crate) fn new(config: &GatewayConfig) -> Result<Self, GatewayError> {
        let default = Arc::new(Upstream::new(Spec {
            url: &config.upstream,
            api: config.api,
            ca_file: config.ca_file.as_ref(),
            credential: config.credential.clone(),
            max_calls: config.max_upstream_calls,
        })?);
        let mut by_model = HashMap::new();
        for m in &config.models {
            let upstream = Upstream::new(Spec {
                url: &m.upstream,
                api: m.api,
                ca_file: m.ca_file.as_ref(),
                credential: m.credential.clone(),
                max_calls: m.max_upstream_calls,
            })?;
            if by_model
                .insert(m.name.clone(), Arc::new(upstream))
                .is_some()
            {
                return Err(GatewayError::DuplicateModel {
                    name: m.name.clone(),
                });
            }
        }
        Ok(Self { default, by_model })
    }

    /// The upstream of a call naming `model`: its own, else the default.
    pub(crate) fn for_model(&self, model: Option<&str>) -> &Arc<Upstream> {
        model
            .and_then(|m| self.by_model.get(m))
            .unwrap_or(&self.default)
    }

    /// Whether calls may go elsewhere than the default upstream.
    pub(crate) fn by_model(&self) -> bool {
        !self.by_model.is_empty()
    }

    pub(crate) fn default(&self) -> &Arc<Upstream> {
        &self.default
    }
}

/// What one upstream is built from.
struct Spec<'a> {
    url: &'a str,
    api: UpstreamApi,
    ca_file: Option<&'a PathBuf>,
    credential: Option<Credential>,
    max_calls: usize,
}

/// One upstream: its client, API family, credential and limit.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// Base URL without a trailing slash.
    pub base: String,
    pub api: UpstreamApi,
    pub credential: Option<Credential>,
    client: reqwest::Client,
    limit: Option<Arc<Semaphore>>,
    /// Its last captured chat reply listed `token_ids`: the logprob tokens need not spell
    /// the ids as well (`tokens::ask`).
    pub lists_token_ids: AtomicBool,
}

impl Upstream {
    fn new(spec: Spec<'_>) -> Result<Self, GatewayError> {
        let base = spec.url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(GatewayError::BadUpstream {
                url: spec.url.to_owned(),
            });
        }
        if spec.max_calls > MAX_UPSTREAM_CALLS {
            return Err(GatewayError::UpstreamCalls {
                value: spec.max_calls,
                max: MAX_UPSTREAM_CALLS,
            });
        }
        let mut builder = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            // A proxy passes redirects on; it does not follow them.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(1024);
        if let Some(path) = spec.ca_file {
            let bad = |message: String| GatewayError::CaFile {
                path: path.clone(),
                message,
            };
            let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("holds no PEM certificate".to_owned()));
            }
            builder = builder.tls_certs_merge(certs);
        }
        let client = builder.build().map_err(GatewayError::Client)?;
        let limit = (spec.max_calls > 0).then(|| Arc::new(Semaphore::new(spec.max_calls)));
        Ok(Self {
            base,
            api: spec.api,
            credential: spec.credential,
            client,
            limit,
            lists_token_ids: AtomicBool::new(false),
        })
    }

    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A turn under the limit of calls upstream at once (none without a limit).
    pub(crate) async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        match &self.limit {
            Some(limit) => Arc::clone(limit).acquire_owned().await.ok(),
            None => None,
        }
    }

    /// Sends `request`, retrying a connection that failed (at most twice).
    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, reqwest::Error> {
        for wait in RETRY_WAITS {
            let Some(again) = request.try_clone() else {
                break;
            };
            match again.send().await {
                Err(e) if e.is_connect() => tokio::time::sleep(wait).await,
                other => return other,
            }
        }
        request.send().await
    }
}
