//! The upstreams (the default one and one per named model), each one or several replicas of
//! one model: plain http or TLS (rustls, the system's roots plus an optional CA file; no
//! OpenSSL), HTTP/2 where a replica offers it by ALPN, pooled connections, a connect timeout
//! and an optional limit of calls upstream at once. Which replica a call goes to is
//! [`replica`]'s; how a call waits out an outage is the call pipeline's (`call::send`).

pub(crate) mod replica;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use self::replica::Replicas;
use crate::config::{Credential, GatewayConfig, MAX_UPSTREAM_CALLS, OutagePolicy, UpstreamApi};
use crate::errors::GatewayError;
use crate::metrics::Metrics;

/// How long a connection (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The metrics name of the default upstream.
const DEFAULT_NAME: &str = "default";

/// Every upstream of a gateway.
#[derive(Debug)]
pub(crate) struct Upstreams {
    default: Arc<Upstream>,
    by_model: HashMap<String, Arc<Upstream>>,
}

impl Upstreams {
    pub(crate) fn new(config: &GatewayConfig, metrics: &Metrics) -> Result<Self, GatewayError> {
        let default = Arc::new(Upstream::new(
            Spec {
                name: DEFAULT_NAME,
                url: &config.upstream,
                replicas: &config.replicas,
                sticky: config.sticky,
                api: config.api,
                ca_file: config.ca_file.as_ref(),
                credential: config.credential.clone(),
                max_calls: config.max_upstream_calls,
                outage: config.outage,
            },
            metrics,
        )?);
        let mut by_model = HashMap::new();
        for m in &config.models {
            let upstream = Upstream::new(
                Spec {
                    name: &m.name,
                    url: &m.upstream,
                    replicas: &m.replicas,
                    sticky: m.sticky,
                    api: m.api,
                    ca_file: m.ca_file.as_ref(),
                    credential: m.credential.clone(),
                    max_calls: m.max_upstream_calls,
                    outage: config.outage,
                },
                metrics,
            )?;
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
    name: &'a str,
    url: &'a str,
    replicas: &'a [String],
    sticky: bool,
    api: UpstreamApi,
    ca_file: Option<&'a PathBuf>,
    credential: Option<Credential>,
    max_calls: usize,
    outage: OutagePolicy,
}

/// One upstream: its replicas, client, API family, credential and limit.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// The first replica's base URL without a trailing slash, to name the upstream.
    pub base: String,
    pub api: UpstreamApi,
    pub credential: Option<Credential>,
    pub replicas: Replicas,
    pub outage: OutagePolicy,
    client: reqwest::Client,
    limit: Option<Arc<Semaphore>>,
    /// Its last captured chat reply listed `token_ids`: the logprob tokens need not spell
    /// the ids as well (`tokens::ask`).
    pub lists_token_ids: AtomicBool,
}

impl Upstream {
    fn new(spec: Spec<'_>, metrics: &Metrics) -> Result<Self, GatewayError> {
        let mut bases = Vec::with_capacity(1 + spec.replicas.len());
        for url in std::iter::once(spec.url).chain(spec.replicas.iter().map(String::as_str)) {
            let base = url.trim_end_matches('/').to_owned();
            if !(base.starts_with("http://") || base.starts_with("https://")) {
                return Err(GatewayError::BadUpstream {
                    url: url.to_owned(),
                });
            }
            bases.push(base);
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
            base: bases[0].clone(),
            api: spec.api,
            credential: spec.credential,
            replicas: Replicas::new(spec.name, bases, spec.sticky, metrics),
            outage: spec.outage,
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
}
