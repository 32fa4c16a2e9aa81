//! The owner's error replies over real HTTP: one shape for every error,
//! `{"error": {"code", "message", "field"?, ...details}}`, the shape of the
//! checkpoint and serve routes; and a client error (bad request, not found,
//! conflict, too large) keeps its kind and status through `HttpOwner` and
//! through an owner that relays another one, instead of becoming a 500.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use reqwest::Method;
use rollpoint_api::HttpError as _;
use rollpoint_owner::{HttpOwner, Owner, OwnerError};
use serde_json::Value;
use support::{Served, TOKEN, raw, simple_task};

/// Serves `router` on 127.0.0.1:0; returns its base URL.
async fn serve(router: axum::Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        rollpoint_api::serve(listener, router).await.unwrap();
    });
    (base, task)
}

/// An owner served over HTTP whose every call goes to `upstream` through
/// `HttpOwner`: a relay, as a driver or `serve agent` relays the owner.
async fn relay(upstream: &str) -> (String, tokio::task::JoinHandle<()>) {
    let client: Arc<dyn Owner> = Arc::new(HttpOwner::new(upstream, TOKEN).unwrap());
    serve(rollpoint_owner::router(client, TOKEN)).await
}

/// The reply is the one error shape; returns its error object.
fn error_object(status: u16, reply: &Value) -> &serde_json::Map<String, Value> {
    let top = reply
        .as_object()
        .unwrap_or_else(|| panic!("{status}: {reply}"));
    assert_eq!(
        top.keys().collect::<Vec<_>>(),
        ["error"],
        "{status}: only `error` at the top: {reply}"
    );
    let error = top["error"]
        .as_object()
        .unwrap_or_else(|| panic!("{status}: `error` is an object: {reply}"));
    assert!(error["code"].is_string(), "{reply}");
    assert!(
        !error["message"].as_str().unwrap_or_default().is_empty(),
        "{reply}"
    );
    for key in error.keys() {
        assert!(
            ["code", "message", "field", "session", "limit", "setup"].contains(&key.as_str()),
            "{status}: unexpected `{key}`: {reply}"
        );
    }
    error
}

/// A request (method, path, body, token) and the status and code it gets.
type Case = (
    Method,
    String,
    Option<String>,
    Option<&'static str>,
    u16,
    &'static str,
);

#[tokio::test(flavor = "multi_thread")]
async fn every_error_reply_has_the_one_shape() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    let mut no_capture = simple_task("nc", &["true"]);
    no_capture.capture = false;
    let nc = s.client.create_session(no_capture).await.unwrap();
    let exec = r#"{"argv":["true"],"cwd":"/","timeout_ms":1000,"output_limit":10}"#;
    let big = "x".repeat(rollpoint_owner::BODY_LIMIT + 1);
    let sessions = format!("/v1/owner/sessions/{}", info.session);
    let cases: Vec<Case> = vec![
        (
            Method::GET,
            sessions.clone(),
            None,
            None,
            401,
            "unauthorized",
        ),
        (
            Method::GET,
            "/v1/owner/sessions/nope".into(),
            None,
            Some(TOKEN),
            404,
            "not_found",
        ),
        (
            Method::POST,
            "/v1/owner/sessions".into(),
            Some(r#"{"task":{"id":"t","verify":{"command":["true"],"timeout_s":"x"}}}"#.into()),
            Some(TOKEN),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{}/snapshot", nc.session),
            Some(r#"{"checkpoint":"ck1"}"#.into()),
            Some(TOKEN),
            409,
            "not_capturable",
        ),
        (
            Method::PUT,
            format!("{sessions}/files?path=big"),
            Some(big),
            Some(TOKEN),
            413,
            "too_large",
        ),
        (
            Method::POST,
            "/v1/owner/sessions".into(),
            Some(r#"{"task":{"id":"b","setup":[["nope"]],"verify":{"command":["true"]}}}"#.into()),
            Some(TOKEN),
            422,
            "setup",
        ),
        (
            Method::POST,
            format!("{sessions}/exec"),
            Some(exec.into()),
            Some(TOKEN),
            500,
            "backend",
        ),
    ];
    for (method, path, body, token, status, code) in cases {
        if code == "backend" {
            s.fake.fail_next("exec");
        }
        let (got, reply) = raw(method.clone(), &s.url(&path), token, body.as_deref()).await;
        assert_eq!(got, status, "{method} {path}: {reply}");
        let error = error_object(got, &reply);
        assert_eq!(error["code"], code, "{method} {path}: {reply}");
        match code {
            "not_found" => assert_eq!(error["session"], "nope"),
            "bad_request" => {
                assert_eq!(error["field"], "task.verify.timeout_s");
                assert!(
                    error["message"]
                        .as_str()
                        .unwrap()
                        .contains("task.verify.timeout_s")
                );
            }
            "not_capturable" => assert_eq!(error["session"], nc.session.as_str()),
            "too_large" => assert_eq!(error["limit"], rollpoint_owner::BODY_LIMIT),
            "setup" => assert_eq!(error["setup"]["index"], 0, "{reply}"),
            "backend" => assert_eq!(error["session"], info.session.as_str()),
            _ => {}
        }
    }
}

/// Asserts `err` is a client error of `code` with HTTP `status`.
fn assert_client_error(what: &str, err: &OwnerError, code: &str, status: u16) {
    assert_eq!(err.kind(), code, "{what}: {err:?}");
    assert_eq!(err.status().as_u16(), status, "{what}: {err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn client_errors_keep_their_kind_through_the_client_and_a_relay() {
    let s = Served::start().await;
    let (relayed, _server) = relay(&s.base).await;
    let via = HttpOwner::new(&relayed, TOKEN).unwrap();
    let mut no_capture = simple_task("nc", &["true"]);
    no_capture.capture = false;
    let nc = s.client.create_session(no_capture).await.unwrap();
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    let mut bad = simple_task("t", &["true"]);
    bad.verify.timeout_s = 0;
    for (name, owner) in [("direct", &s.client), ("relayed", &via)] {
        let err = owner.access("nope").await.unwrap_err();
        assert_client_error(name, &err, "not_found", 404);
        assert!(matches!(err, OwnerError::NotFound { ref session } if session == "nope"));

        let err = owner.create_session(bad.clone()).await.unwrap_err();
        assert_client_error(name, &err, "bad_request", 400);
        match &err {
            OwnerError::BadRequest { field, message } => {
                assert_eq!(field, "task.verify.timeout_s");
                assert!(!message.contains("bad request"), "{message}");
            }
            other => panic!("{name}: {other:?}"),
        }

        let err = owner.snapshot(&nc.session, "ck1").await.unwrap_err();
        assert_client_error(name, &err, "not_capturable", 409);
        assert!(matches!(err, OwnerError::NotCapturable { .. }), "{err:?}");

        let big = vec![b'x'; rollpoint_owner::BODY_LIMIT + 1];
        let err = owner
            .upload(&info.session, "big", big, 0o644)
            .await
            .unwrap_err();
        assert_client_error(name, &err, "too_large", 413);

        let err = owner.delete_snapshot("a/b").await.unwrap_err();
        assert_client_error(name, &err, "bad_request", 400);
    }
    // The relay's own replies carry the kind on the wire, not a 500.
    let (status, reply) = raw(
        Method::GET,
        &format!("{relayed}/v1/owner/sessions/nope"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 404, "{reply}");
    assert_eq!(reply["error"]["code"], "not_found", "{reply}");
    assert_eq!(reply["error"]["session"], "nope", "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_the_client_cannot_read_stays_a_client_error() {
    // Not an owner at that path: the server's own 404, 405 and 400.
    let s = Served::start().await;
    let elsewhere = HttpOwner::new(&format!("{}/not-the-owner", s.base), TOKEN).unwrap();
    let err = elsewhere.access("s").await.unwrap_err();
    assert_client_error("wrong base", &err, "not_found", 404);
    assert!(
        matches!(err, OwnerError::Refused { status: 404, .. }),
        "{err:?}"
    );
    let err = s.client.access("").await.unwrap_err();
    assert_client_error("no session id", &err, "not_found", 404);

    // Through a relay, the same kind and status again.
    let (relayed, _server) = relay(&format!("{}/not-the-owner", s.base)).await;
    let (status, reply) = raw(
        Method::GET,
        &format!("{relayed}/v1/owner/sessions/s"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 404, "{reply}");
    assert_eq!(reply["error"]["code"], "not_found", "{reply}");

    // Replies of the one shape without the details a variant needs, and
    // replies that are not JSON at all.
    let canned = |status: StatusCode, body: &'static str| {
        move || async move { (status, body).into_response() }
    };
    let router = axum::Router::new()
        .route(
            "/v1/owner/sessions/gone",
            axum::routing::get(canned(
                StatusCode::NOT_FOUND,
                r#"{"error":{"code":"not_found","message":"gone"}}"#,
            )),
        )
        .route(
            "/v1/owner/sessions/taken",
            axum::routing::get(canned(
                StatusCode::CONFLICT,
                r#"{"error":{"code":"conflict","message":"taken"}}"#,
            )),
        )
        .route(
            "/v1/owner/sessions/huge",
            axum::routing::get(canned(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too large, says a proxy",
            )),
        )
        .route(
            "/v1/owner/sessions/odd",
            axum::routing::get(canned(StatusCode::BAD_REQUEST, "<html>bad</html>")),
        )
        .route(
            "/v1/owner/sessions/down",
            axum::routing::get(canned(StatusCode::SERVICE_UNAVAILABLE, "down")),
        );
    let (base, _canned) = serve(router).await;
    let client = HttpOwner::new(&base, TOKEN).unwrap();
    for (session, code, status) in [
        ("gone", "not_found", 404),
        ("taken", "conflict", 409),
        ("huge", "too_large", 413),
        ("odd", "bad_request", 400),
    ] {
        let err = client.access(session).await.unwrap_err();
        assert_client_error(session, &err, code, status);
        assert!(
            matches!(err, OwnerError::Refused { .. }),
            "{session}: {err:?}"
        );
        assert!(err.to_string().contains(&base), "names the owner: {err}");
    }
    let err = client.access("down").await.unwrap_err();
    assert!(
        matches!(err, OwnerError::Remote { status: 503, ref message, .. } if message == "down"),
        "{err:?}"
    );
    assert_eq!(err.status().as_u16(), 503, "relayed as it came");
}
