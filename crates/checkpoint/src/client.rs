//! The control plane's HTTP client: [`ParticipantApi`] over the routes of
//! [`crate::router`]. Each call's HTTP timeout is its own deadline plus a
//! margin, so a participant that answers late is seen as a deadline miss
//! and one that never answers does not hang the coordinator. Errors come
//! back as the same [`CallError`] the participant raised.

use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::{CallResult, ParticipantApi};
use crate::decode::decode_json;
use crate::errors::{CallError, Code};
use crate::wire::{
    CommitReply, CommitRequest, ErrorReply, FleetReply, FleetRequest, KeysReply, KeysRequest,
    PrepareReply, PrepareRequest, RestoreReply, RestoreRequest, ResumeReply, ResumeRequest, Status,
};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Added to a call's own deadline for the HTTP round trip.
pub const CALL_MARGIN: Duration = Duration::from_secs(5);
/// Timeout of a status call.
const STATUS_TIMEOUT: Duration = Duration::from_secs(30);

/// A participant's control plane served elsewhere.
#[derive(Debug, Clone)]
pub struct HttpParticipant {
    base: Url,
    token: String,
    client: reqwest::Client,
}

impl HttpParticipant {
    /// A client of the control routes at `base` (`http://host:port`).
    pub fn new(base: &str, token: &str) -> CallResult<Self> {
        let base = Url::parse(base).map_err(|e| CallError::bad("base", format!("{base}: {e}")))?;
        // Built without a TLS backend: control traffic stays on plain http
        // (127.0.0.1 or a private network).
        if base.cannot_be_a_base() || base.scheme() != "http" {
            return Err(CallError::bad("base", format!("{base}: not an http URL")));
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| {
                CallError::new(
                    Code::Transport,
                    format!("{base}: client could not be built: {e}"),
                )
            })?;
        Ok(Self {
            base,
            token: token.to_owned(),
            client,
        })
    }

    fn url(&self, verb: &str) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["v1", "checkpoint", verb]);
        }
        url
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        verb: &str,
        body: Option<&B>,
        timeout: Duration,
    ) -> CallResult<T> {
        let url = self.url(verb);
        let method = if body.is_some() {
            Method::POST
        } else {
            Method::GET
        };
        let mut req = self
            .client
            .request(method, url.clone())
            .bearer_auth(&self.token)
            .timeout(timeout);
        if let Some(body) = body {
            let bytes = serde_json::to_vec(body).map_err(|e| {
                CallError::new(
                    Code::Transport,
                    format!("{url}: request could not be encoded: {e}"),
                )
            })?;
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(bytes);
        }
        let transport = |e: reqwest::Error| {
            if e.is_timeout() {
                CallError::new(
                    Code::DeadlineExceeded,
                    format!("{url}: no reply within {} ms", timeout.as_millis()),
                )
            } else {
                CallError::new(Code::Transport, format!("{url}: {e}"))
            }
        };
        let reply = req.send().await.map_err(transport)?;
        let status = reply.status();
        let bytes = reply.bytes().await.map_err(transport)?;
        if status.is_success() {
            return decode_json(&bytes).map_err(|e| {
                CallError::new(Code::Remote, format!("{url}: reply could not be read: {e}"))
            });
        }
        Err(match decode_json::<ErrorReply>(&bytes) {
            Ok(reply) => reply.error,
            Err(_) => CallError::new(
                Code::Remote,
                format!(
                    "{url} answered {status}: {}",
                    String::from_utf8_lossy(&bytes)
                ),
            ),
        })
    }
}

fn budget(timeout_ms: u64) -> Duration {
    Duration::from_millis(timeout_ms) + CALL_MARGIN
}

impl ParticipantApi for HttpParticipant {
    fn status(&self) -> BoxFuture<'_, CallResult<Status>> {
        self.call::<(), _>("status", None, STATUS_TIMEOUT).boxed()
    }

    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, CallResult<PrepareReply>> {
        async move {
            self.call("prepare", Some(&req), budget(req.timeout_ms))
                .await
        }
        .boxed()
    }

    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, CallResult<CommitReply>> {
        async move {
            self.call("commit", Some(&req), budget(req.timeout_ms))
                .await
        }
        .boxed()
    }

    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, CallResult<RestoreReply>> {
        async move {
            self.call("restore", Some(&req), budget(req.timeout_ms))
                .await
        }
        .boxed()
    }

    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, CallResult<ResumeReply>> {
        async move {
            self.call("resume", Some(&req), budget(req.timeout_ms))
                .await
        }
        .boxed()
    }

    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>> {
        async move {
            self.call("retire", Some(&req), budget(req.timeout_ms))
                .await
        }
        .boxed()
    }

    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>> {
        async move {
            self.call("forget", Some(&req), budget(req.timeout_ms))
                .await
        }
        .boxed()
    }

    fn fleet(&self, req: FleetRequest) -> BoxFuture<'_, CallResult<FleetReply>> {
        async move { self.call("fleet", Some(&req), budget(req.timeout_ms)).await }.boxed()
    }
}
