//! What every dashboard serves alike: `GET /`, the page (code only: it holds no data, so it
//! is served without the token and asks for the token itself), and `GET /v1/run/live`,
//! server-sent events saying when the run changed, so the page refetches the documents
//! (at most once a second, whatever the number of rollouts). What changed is the service's
//! to say: a fingerprint it computes, compared every half second.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use futures_util::stream::Stream;
use rollpoint_api::error::{ApiError, ErrorCode};

use crate::page::{Mode, render};

/// How often a change stream compares its fingerprint.
const POLL: Duration = Duration::from_millis(500);

/// `GET /`: the live page titled `title`, served without the token.
pub fn page_route(title: &str) -> Router {
    let page = render(title, Mode::Live);
    Router::new().route(
        "/",
        get(move || {
            let page = page.clone();
            async move {
                (
                    [
                        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                        (header::CACHE_CONTROL, "no-store"),
                    ],
                    page,
                )
                    .into_response()
            }
        }),
    )
}

/// The change stream of `GET /v1/run/live`: a `changed` event (`{"v":1,"seq":N}`) each time
/// `fingerprint` differs from the last one seen, and a keep-alive comment every 15 s.
pub fn changes<F, Fut, T>(fingerprint: F) -> Sse<impl Stream<Item = Result<Event, Infallible>>>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + Send,
    T: PartialEq + Send + 'static,
{
    let stream = futures_util::stream::unfold(
        (fingerprint, None::<T>, 0u64),
        |(fingerprint, last, seq)| async move {
            let mut last = last;
            loop {
                let now = fingerprint().await;
                if last.as_ref() != Some(&now) {
                    let seq = seq + 1;
                    let event = Event::default()
                        .event("changed")
                        .data(format!("{{\"v\":{},\"seq\":{seq}}}", crate::VIEW_VERSION));
                    return Some((Ok(event), (fingerprint, Some(now), seq)));
                }
                last = Some(now);
                tokio::time::sleep(POLL).await;
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// Runs `read` on a blocking thread (it reads files or a ledger); a failure is `failed`, its
/// message prefixed with `what`.
pub async fn blocking<T: Send + 'static, E: std::fmt::Display + Send + 'static>(
    what: String,
    read: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Failed, format!("{what}: {e}")))?
        .map_err(|e| ApiError::new(ErrorCode::Failed, format!("{what}: {e}")))
}

/// A `not_found` for a rollout the service does not know.
#[must_use]
pub fn unknown(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("rollout {id} is not part of this run"),
    )
}
