//! The owner's HTTP client: the [`Owner`] contract over the routes of
//! [`crate::router`], so a driver on another machine works a sandbox as if
//! the owner were in process. Errors come back as the same variants.

use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use reqwest::{Method, Url};
use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};
use rollpoint_proto::receipt::Receipt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::decode::decode_json;
use crate::errors::OwnerError;
use crate::http::wire::{
    ContinuedReply, CreateBody, ErrorReply, LaunchesBody, PausedReply, SnapshotBody, client_code,
};
use crate::owner::{Access, Launched, Owner, OwnerResult, SessionInfo, SessionLaunch};
use crate::record::SessionRecord;
use crate::task::OwnerTask;
use crate::verdict::Verdict;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An owner served elsewhere.
#[derive(Debug, Clone)]
pub struct HttpOwner {
    base: Url,
    token: String,
    client: reqwest::Client,
}

enum Payload {
    None,
    Json(Vec<u8>),
    Raw(Vec<u8>),
}

impl HttpOwner {
    /// A client of the owner at `base` (`http://host:port`).
    pub fn new(base: &str, token: &str) -> OwnerResult<Self> {
        let base = Url::parse(base).map_err(|e| OwnerError::bad("base", format!("{base}: {e}")))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(OwnerError::bad("base", format!("{base}: not an http URL")));
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| OwnerError::Transport {
                url: base.to_string(),
                source: format!("client could not be built: {e}").into(),
            })?;
        Ok(Self {
            base,
            token: token.to_owned(),
            client,
        })
    }

    /// `base/v1/owner/<segments...>`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["v1", "owner"]).extend(segments);
        }
        url
    }

    async fn call(&self, method: Method, url: Url, payload: Payload) -> OwnerResult<bytes::Bytes> {
        let mut req = self
            .client
            .request(method, url.clone())
            .bearer_auth(&self.token);
        req = match payload {
            Payload::None => req,
            Payload::Json(body) => req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body),
            Payload::Raw(body) => req
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(body),
        };
        let transport = |e: reqwest::Error| OwnerError::Transport {
            url: url.to_string(),
            source: e.into(),
        };
        let reply = req.send().await.map_err(transport)?;
        let status = reply.status();
        let body = reply.bytes().await.map_err(transport)?;
        if status.is_success() {
            return Ok(body);
        }
        Err(match decode_json::<ErrorReply>(&body) {
            Ok(err) => err.into_error(url.as_str(), status.as_u16()),
            Err(_) => unreadable(&url, status, &body),
        })
    }

    async fn call_json<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        payload: Payload,
    ) -> OwnerResult<T> {
        let body = self.call(method, url.clone(), payload).await?;
        decode_json(&body).map_err(|e| OwnerError::Remote {
            url: url.to_string(),
            status: 200,
            message: format!("reply could not be read: {e}"),
        })
    }

    /// `POST launches/<verb>` with `launches`; the URL (for errors) and the reply.
    async fn batch<T: DeserializeOwned>(
        &self,
        verb: &str,
        launches: &[SessionLaunch],
    ) -> OwnerResult<(Url, T)> {
        let payload = Self::body(&LaunchesBody {
            launches: launches.to_vec(),
        })?;
        let url = self.url(&["launches", verb]);
        let reply = self.call_json(Method::POST, url.clone(), payload).await?;
        Ok((url, reply))
    }

    fn body<T: Serialize>(value: &T) -> OwnerResult<Payload> {
        serde_json::to_vec(value)
            .map(Payload::Json)
            .map_err(|e| OwnerError::Internal {
                message: format!("request could not be encoded: {e}"),
            })
    }
}

/// The error for a failed reply that is not an owner's error reply (a
/// route that does not exist, a proxy, another service at the URL): a
/// client error keeps its kind and status, anything else is remote.
fn unreadable(url: &Url, status: reqwest::StatusCode, body: &[u8]) -> OwnerError {
    let text = String::from_utf8_lossy(body);
    let message = match text.trim() {
        "" => status
            .canonical_reason()
            .unwrap_or("no reason given")
            .to_owned(),
        t => t.to_owned(),
    };
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return OwnerError::Unauthorized;
    }
    if status.is_client_error() {
        return OwnerError::Refused {
            url: url.to_string(),
            status: status.as_u16(),
            code: client_code(None, status.as_u16()),
            message,
        };
    }
    OwnerError::Remote {
        url: url.to_string(),
        status: status.as_u16(),
        message,
    }
}

impl Owner for HttpOwner {
    fn create_session(&self, task: OwnerTask) -> BoxFuture<'_, OwnerResult<SessionInfo>> {
        async move {
            let payload = Self::body(&CreateBody { task })?;
            self.call_json(Method::POST, self.url(&["sessions"]), payload)
                .await
        }
        .boxed()
    }

    fn access<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<Access>> {
        self.call_json(Method::GET, self.url(&["sessions", session]), Payload::None)
            .boxed()
    }

    fn exec<'a>(
        &'a self,
        session: &'a str,
        req: ExecRequest,
    ) -> BoxFuture<'a, OwnerResult<ExecOutput>> {
        async move {
            let payload = Self::body(&req)?;
            self.call_json(
                Method::POST,
                self.url(&["sessions", session, "exec"]),
                payload,
            )
            .await
        }
        .boxed()
    }

    fn upload<'a>(
        &'a self,
        session: &'a str,
        path: &'a str,
        bytes: Vec<u8>,
        mode: u32,
    ) -> BoxFuture<'a, OwnerResult<()>> {
        let mut url = self.url(&["sessions", session, "files"]);
        url.query_pairs_mut()
            .append_pair("path", path)
            .append_pair("mode", &format!("{mode:o}"));
        async move {
            self.call(Method::PUT, url, Payload::Raw(bytes)).await?;
            Ok(())
        }
        .boxed()
    }

    fn download<'a>(
        &'a self,
        session: &'a str,
        path: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, OwnerResult<Vec<u8>>> {
        let mut url = self.url(&["sessions", session, "files"]);
        url.query_pairs_mut()
            .append_pair("path", path)
            .append_pair("limit", &limit.to_string());
        async move {
            let body = self.call(Method::GET, url, Payload::None).await?;
            Ok(body.to_vec())
        }
        .boxed()
    }

    fn launch<'a>(
        &'a self,
        session: &'a str,
        req: LaunchRequest,
    ) -> BoxFuture<'a, OwnerResult<Launched>> {
        async move {
            let payload = Self::body(&req)?;
            self.call_json(
                Method::POST,
                self.url(&["sessions", session, "launch"]),
                payload,
            )
            .await
        }
        .boxed()
    }

    fn usage<'a>(
        &'a self,
        session: &'a str,
    ) -> BoxFuture<'a, OwnerResult<rollpoint_sandbox::ResourceUsage>> {
        self.call_json(
            Method::GET,
            self.url(&["sessions", session, "usage"]),
            Payload::None,
        )
        .boxed()
    }

    fn verify<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<Verdict>> {
        self.call_json(
            Method::POST,
            self.url(&["sessions", session, "verify"]),
            Payload::None,
        )
        .boxed()
    }

    fn close<'a>(&'a self, session: &'a str) -> BoxFuture<'a, OwnerResult<()>> {
        async move {
            self.call(
                Method::DELETE,
                self.url(&["sessions", session]),
                Payload::None,
            )
            .await?;
            Ok(())
        }
        .boxed()
    }

    fn snapshot<'a>(
        &'a self,
        session: &'a str,
        checkpoint: &'a str,
    ) -> BoxFuture<'a, OwnerResult<SessionRecord>> {
        async move {
            let payload = Self::body(&SnapshotBody {
                checkpoint: checkpoint.to_owned(),
            })?;
            let url = self.url(&["sessions", session, "snapshot"]);
            let body = self.call(Method::POST, url.clone(), payload).await?;
            SessionRecord::decode(&body).map_err(|e| OwnerError::Remote {
                url: url.to_string(),
                status: 200,
                message: format!("reply could not be read: {e}"),
            })
        }
        .boxed()
    }

    fn restore(&self, record: SessionRecord) -> BoxFuture<'_, OwnerResult<Access>> {
        async move {
            let payload = Self::body(&record)?;
            self.call_json(Method::POST, self.url(&["restore"]), payload)
                .await
        }
        .boxed()
    }

    fn delete_snapshot<'a>(&'a self, snapshot: &'a str) -> BoxFuture<'a, OwnerResult<()>> {
        async move {
            self.call(
                Method::DELETE,
                self.url(&["snapshots", snapshot]),
                Payload::None,
            )
            .await?;
            Ok(())
        }
        .boxed()
    }

    fn pause_launches<'a>(
        &'a self,
        launches: &'a [SessionLaunch],
    ) -> BoxFuture<'a, OwnerResult<Vec<Option<Receipt>>>> {
        async move {
            let (url, reply) = self.batch::<PausedReply>("pause", launches).await?;
            same_length(&url, launches.len(), reply.receipts)
        }
        .boxed()
    }

    fn continue_launches<'a>(
        &'a self,
        launches: &'a [SessionLaunch],
    ) -> BoxFuture<'a, OwnerResult<Vec<Receipt>>> {
        async move {
            let (url, reply) = self.batch::<ContinuedReply>("continue", launches).await?;
            same_length(&url, launches.len(), reply.receipts)
        }
        .boxed()
    }
}

/// A batch's reply must answer every launch asked, in order.
fn same_length<T>(url: &Url, asked: usize, receipts: Vec<T>) -> OwnerResult<Vec<T>> {
    if receipts.len() == asked {
        return Ok(receipts);
    }
    Err(OwnerError::Remote {
        url: url.to_string(),
        status: 200,
        message: format!(
            "{} receipts for {asked} launches: a batch answers each launch",
            receipts.len()
        ),
    })
}
