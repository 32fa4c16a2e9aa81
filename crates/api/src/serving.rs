//! Serving a router: one place for the socket options every service wants and
//! for the reply to a request no route takes (the one error object, never an
//! empty body).

use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};

/// Serves `router` on `listener` until the server fails (or the future is
/// dropped). A path no route serves answers 404 and a method the path does not
/// take answers 405, each with the [`ApiError`] body.
pub async fn serve(listener: tokio::net::TcpListener, router: axum::Router) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        // Small exchanges and streamed replies: without TCP_NODELAY, Nagle holds each small
        // write behind the peer's delayed ACK (about 40 ms).
        let _ignored = tcp.set_nodelay(true);
    });
    axum::serve(listener, with_fallbacks(router)).await
}

/// `router` answering unknown paths and methods with the error object.
pub fn with_fallbacks(router: axum::Router) -> axum::Router {
    router
        .fallback(no_route)
        .method_not_allowed_fallback(no_method)
}

async fn no_route(method: Method, uri: Uri) -> Response {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no route {method} {}", uri.path()),
    )
    .into_response()
}

async fn no_method(method: Method, uri: Uri) -> Response {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!("{} does not take {method}", uri.path()),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// One request to a served router; the status line and the JSON body.
    async fn ask(
        addr: std::net::SocketAddr,
        method: &str,
        path: &str,
    ) -> (String, serde_json::Value) {
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!("{method} {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).await.expect("write");
        let mut reply = String::new();
        conn.read_to_string(&mut reply).await.expect("read");
        let (head, body) = reply.split_once("\r\n\r\n").expect("a reply");
        let status = head.lines().next().unwrap_or_default().to_owned();
        (status, serde_json::from_str(body).expect("a JSON body"))
    }

    #[tokio::test]
    async fn unknown_paths_and_methods_answer_the_error_object() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let router = axum::Router::new().route("/v1/x", axum::routing::get(|| async { "x" }));
        let server = tokio::spawn(serve(listener, router));
        let (status, body) = ask(addr, "GET", "/nope").await;
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        assert_eq!(body["error"]["code"], "not_found");
        assert_eq!(body["error"]["message"], "no route GET /nope");
        let (status, body) = ask(addr, "DELETE", "/v1/x").await;
        assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
        assert_eq!(body["error"]["code"], "method_not_allowed");
        server.abort();
    }
}
