//! Serving a router: one place for the socket options every service wants.

/// Serves `router` on `listener` until the server fails (or the future is
/// dropped).
pub async fn serve(listener: tokio::net::TcpListener, router: axum::Router) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        // Small request/reply exchanges: do not wait to coalesce segments.
        let _ignored = tcp.set_nodelay(true);
    });
    axum::serve(listener, router).await
}
