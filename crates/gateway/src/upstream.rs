//! The client of the upstream: plain http or TLS (rustls, the system's roots plus an
//! optional CA file; no OpenSSL), HTTP/2 where the upstream offers it by ALPN, pooled
//! connections, a connect timeout, bounded retries of connection failures (the request never
//! reached the upstream, so nothing can have started), and an optional limit of calls
//! upstream at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::{GatewayConfig, MAX_UPSTREAM_CALLS};
use crate::errors::GatewayError;

/// How long a connection (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Waits before each retry of a connection that failed.
const RETRY_WAITS: [Duration; 2] = [Duration::from_millis(100), Duration::from_millis(400)];

/// The upstream's client and its limit.
#[derive(Debug)]
pub(crate) struct Upstream {
    /// Base URL without a trailing slash.
    pub base: String,
    client: reqwest::Client,
    limit: Option<Arc<Semaphore>>,
}

impl Upstream {
    pub(crate) fn new(config: &GatewayConfig) -> Result<Self, GatewayError> {
        let base = config.upstream.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(GatewayError::BadUpstream {
                url: config.upstream.clone(),
            });
        }
        if config.max_upstream_calls > MAX_UPSTREAM_CALLS {
            return Err(GatewayError::UpstreamCalls {
                value: config.max_upstream_calls,
                max: MAX_UPSTREAM_CALLS,
            });
        }
        let mut builder = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            // A proxy passes redirects on; it does not follow them.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(1024);
        if let Some(path) = &config.ca_file {
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
        let limit = (config.max_upstream_calls > 0)
            .then(|| Arc::new(Semaphore::new(config.max_upstream_calls)));
        Ok(Self {
            base,
            client,
            limit,
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
