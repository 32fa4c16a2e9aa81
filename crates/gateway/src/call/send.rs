//! Stage 4, send: one call upstream, so that an outage is waited out, not handed to the
//! harness.
//!
//! A 429, a 503, a connection refused or reset before the reply's head, a reply whose body
//! fails before its first byte, or no live replica: none of these has reached the harness
//! nor been answered by the model, so the call is sent again (to another replica where there
//! is one) with a growing wait, or the wait `Retry-After` asks for. Past the retry budget the
//! attempt is reported stalled ([`hold::stall`]) so its launch is paused in place; past the
//! outage bound the call ends `upstream_unreachable`. A reply that has started is never sent
//! again: what the upstream sent from its first byte on is the call's one answer.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, header};
use futures_util::StreamExt as _;

use super::hold;
use super::types::Chunks;
use crate::ledger::CallId;
use crate::shared::Shared;
use crate::stalls::Stall;
use crate::upstream::Upstream;
use crate::upstream::replica::{Failure, Lease, Replicas};

/// First and longest wait between sends of a call.
const FIRST_WAIT: Duration = Duration::from_millis(100);
const MAX_WAIT: Duration = Duration::from_secs(5);

/// The reply header in which an upstream may name the version of the weights that answered.
pub(crate) const POLICY_VERSION_HEADER: &str = "x-policy-version";

/// The request as it goes to every replica.
pub(crate) struct Outbound {
    pub method: Method,
    /// The path after the base URL, with its query.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// How sending ended.
pub(crate) enum Sent {
    /// A reply whose body did not fail before its first byte.
    Reply {
        status: StatusCode,
        headers: HeaderMap,
        chunks: Chunks,
        /// The replica answering, counted outstanding until the reply is read.
        lease: Lease,
        /// The version of the weights that answered: the upstream's own word for it, else
        /// the version announced when it was sent.
        version: Option<String>,
    },
    /// No reply: the outage bound passed, the attempt was given up, the gateway is closing,
    /// or a failure that may have reached the model (a timeout), which is never sent again.
    Failed { message: String },
}

/// Call `id`, sent until it has a reply or the outage bound passes.
pub(crate) async fn send(
    shared: &std::sync::Arc<Shared>,
    upstream: &Upstream,
    out: &Outbound,
    id: &CallId,
) -> Sent {
    let policy = upstream.outage;
    let started = Instant::now();
    // Time the fleet was paused is no outage.
    let mut paused_for = Duration::ZERO;
    let mut wait = FIRST_WAIT;
    let mut stall: Option<Stall> = None;
    let mut last;
    loop {
        if hold::given_up(shared, id) {
            return Sent::Failed {
                message: format!(
                    "call {id}: the model was unreachable for longer than the outage bound \
                     of {}s earlier in this attempt",
                    policy.outage.as_secs()
                ),
            };
        }
        // A paused fleet sends nothing; a gateway closing for good sends nothing more.
        match hold::fleet(shared, id).await {
            Ok(held) => paused_for += held,
            Err(message) => return Sent::Failed { message },
        }
        let mut retry_after = None;
        let version = shared.fleet.version();
        let reason = match upstream.replicas.pick(id.key.rollout()) {
            None => {
                last = format!("no replica of {} is in use", upstream.base);
                "no_replica"
            }
            Some(lease) => {
                match hold::unless_dropped(shared, try_once(upstream, &lease, out)).await {
                    // Dropped before its first byte for a fleet pause: asked again after it.
                    None => continue,
                    Some(Ok((status, headers, chunks))) => {
                        upstream.replicas.answered(&lease);
                        let version = named_version(&headers).or(version);
                        return Sent::Reply {
                            status,
                            headers,
                            chunks,
                            lease,
                            version,
                        };
                    }
                    Some(Err(Tried::Retry {
                        failure,
                        message,
                        after,
                    })) => {
                        upstream.replicas.failed(&lease, failure, upstream.client());
                        last = format!("{}: {message}", lease.base());
                        retry_after = after;
                        failure.as_str()
                    }
                    Some(Err(Tried::Final(message))) => {
                        Replicas::other_failure(&lease);
                        return Sent::Failed {
                            message: format!("upstream {} for call {id}: {message}", lease.base()),
                        };
                    }
                }
            }
        };
        shared.metrics.retried(reason);
        let elapsed = started.elapsed().saturating_sub(paused_for);
        if shared.is_closed() || elapsed >= policy.outage {
            if !shared.is_closed() {
                hold::give_up(shared, id);
            }
            return Sent::Failed {
                message: format!(
                    "upstream unreachable for call {id}: no reply within {:.1}s ({last})",
                    elapsed.as_secs_f64()
                ),
            };
        }
        if elapsed >= policy.retry && stall.is_none() {
            tracing::warn!(call = %id, "the model has not answered for {}s: pausing the attempt in place ({last})", elapsed.as_secs());
            stall = Some(hold::stall(shared, id));
        }
        let pause = retry_after
            .unwrap_or(wait)
            .min(policy.outage.saturating_sub(elapsed));
        wait = (wait * 2).min(MAX_WAIT);
        if upstream.replicas.all_out() {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = upstream.replicas.back() => {}
            }
        } else {
            tokio::time::sleep(pause).await;
        }
    }
}

/// The version of the weights an upstream names in its reply, when it is a valid name.
fn named_version(headers: &HeaderMap) -> Option<String> {
    headers
        .get(POLICY_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| rollpoint_proto::limits::name_problem(v).is_none())
        .map(str::to_owned)
}

/// What one send came to when it was not a usable reply.
enum Tried {
    Retry {
        failure: Failure,
        message: String,
        after: Option<Duration>,
    },
    Final(String),
}

async fn try_once(
    upstream: &Upstream,
    lease: &Lease,
    out: &Outbound,
) -> Result<(StatusCode, HeaderMap, Chunks), Tried> {
    let url = format!("{}/{}", lease.base(), out.path);
    let sent = upstream
        .client()
        .request(out.method.clone(), &url)
        .headers(out.headers.clone())
        .body(out.body.clone())
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        // A certificate the client refuses is the configuration's fault, not an outage.
        Err(e) if e.is_connect() && tls_refused(&e) => return Err(Tried::Final(chain(&e))),
        Err(e) if e.is_connect() => {
            return Err(Tried::Retry {
                failure: Failure::Refused,
                message: chain(&e),
                after: None,
            });
        }
        // Closed before the head: the model has not answered it (a server that had would
        // have sent the head first).
        Err(e) if e.is_request() && !e.is_timeout() => {
            return Err(Tried::Retry {
                failure: Failure::Reset,
                message: chain(&e),
                after: None,
            });
        }
        Err(e) => return Err(Tried::Final(chain(&e))),
    };
    let status = response.status();
    if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
        return Err(Tried::Retry {
            failure: Failure::Busy,
            message: format!("answered {status}"),
            after: retry_after(response.headers()),
        });
    }
    let headers = response.headers().clone();
    let mut body: Chunks = Box::pin(response.bytes_stream());
    match body.next().await {
        Some(Err(e)) => Err(Tried::Retry {
            failure: Failure::Cut,
            message: format!(
                "answered {status} and cut the reply before its first byte: {}",
                chain(&e)
            ),
            after: None,
        }),
        None => Ok((status, headers, Box::pin(futures_util::stream::empty()))),
        Some(Ok(first)) => Ok((
            status,
            headers,
            Box::pin(
                futures_util::stream::once(async move { Ok::<Bytes, reqwest::Error>(first) })
                    .chain(body),
            ),
        )),
    }
}

/// `Retry-After` in seconds, at most a minute (the HTTP-date form is not read: the backoff
/// stands in for it).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: f64 = headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(60.0)))
}

/// Whether `e` failed in the TLS handshake (rustls reports it as an I/O error of kind
/// invalid data, wrapped in another I/O error whose `source` skips it).
fn tls_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::InvalidData {
                return true;
            }
            if let Some(inner) = io.get_ref() {
                cause = Some(inner as &(dyn std::error::Error + 'static));
                continue;
            }
        }
        cause = c.source();
    }
    false
}

/// An error with its causes, so a TLS failure says why (an unknown issuer, say).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
