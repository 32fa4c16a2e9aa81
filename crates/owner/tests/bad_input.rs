//! Bad requests: a 400 naming the field for bad bodies and queries, 401 for
//! a missing or wrong token on every route, 404 for an unknown session.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use reqwest::Method;
use rollpoint_owner::{Owner, OwnerError};
use support::{Served, TOKEN, raw, simple_task};

/// Every route, with a body that would be accepted.
fn routes(session: &str) -> Vec<(Method, String, Option<&'static str>)> {
    let exec = r#"{"argv":["true"],"cwd":"/","timeout_ms":1000,"output_limit":10}"#;
    let launch = r#"{"launch_id":"l","argv":["x"],"cwd":"/"}"#;
    vec![
        (
            Method::POST,
            "/v1/owner/sessions".into(),
            Some(r#"{"task":{"id":"t","verify":{"command":["true"]}}}"#),
        ),
        (Method::GET, format!("/v1/owner/sessions/{session}"), None),
        (
            Method::POST,
            format!("/v1/owner/sessions/{session}/exec"),
            Some(exec),
        ),
        (
            Method::PUT,
            format!("/v1/owner/sessions/{session}/files?path=f"),
            Some("x"),
        ),
        (
            Method::GET,
            format!("/v1/owner/sessions/{session}/files?path=f"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{session}/launch"),
            Some(launch),
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{session}/verify"),
            None,
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{session}/snapshot"),
            Some(r#"{"checkpoint":"c1"}"#),
        ),
        (
            Method::DELETE,
            format!("/v1/owner/sessions/{session}"),
            None,
        ),
        (Method::POST, "/v1/owner/restore".into(), Some("{}")),
        (Method::DELETE, "/v1/owner/snapshots/snap".into(), None),
        (
            Method::POST,
            "/v1/owner/launches/pause".into(),
            Some(r#"{"launches":[{"session":"s","launch_id":"l"}]}"#),
        ),
        (
            Method::POST,
            "/v1/owner/launches/continue".into(),
            Some(r#"{"launches":[{"session":"s","launch_id":"l"}]}"#),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_wants_the_token() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    for (method, path, body) in routes(&info.session) {
        for token in [None, Some("wrong"), Some(""), Some("s3cret-token-and-more")] {
            let (status, reply) = raw(method.clone(), &s.url(&path), token, body).await;
            assert_eq!(status, 401, "{method} {path} with {token:?}");
            assert_eq!(reply["error"]["code"], "unauthorized");
        }
    }
    // Nothing reached the backend beyond the one seed.
    assert_eq!(s.fake.sandboxes(), vec![info.sandbox.clone()]);
    assert_eq!(s.fake.calls().len(), 1);
    // A client with the wrong token gets the same error back.
    let wrong = rollpoint_owner::HttpOwner::new(&s.base, "nope").unwrap();
    assert!(matches!(
        wrong.access(&info.session).await.unwrap_err(),
        OwnerError::Unauthorized
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_configured_token_admits_nobody() {
    let owner: std::sync::Arc<dyn Owner> = std::sync::Arc::new(rollpoint_owner::LocalOwner::new(
        std::sync::Arc::new(support::FakeBackend::default()),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(rollpoint_owner::serve(listener, owner, ""));
    for token in [None, Some("")] {
        let (status, _) = raw(
            Method::GET,
            &format!("http://{addr}/v1/owner/sessions/x"),
            token,
            None,
        )
        .await;
        assert_eq!(status, 401, "{token:?}");
    }
    server.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_sessions_are_404_on_every_session_route() {
    let s = Served::start().await;
    for (method, path, body) in routes("no-such-session") {
        if !path.contains("no-such-session") {
            continue;
        }
        let (status, reply) = raw(method.clone(), &s.url(&path), Some(TOKEN), body).await;
        assert_eq!(status, 404, "{method} {path}: {reply}");
        assert_eq!(reply["error"]["code"], "not_found");
        assert_eq!(reply["error"]["session"], "no-such-session");
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no-such-session")
        );
    }
    assert!(s.fake.calls().is_empty());
    let err = s.client.verify("no-such-session").await.unwrap_err();
    assert!(matches!(err, OwnerError::NotFound { ref session } if session == "no-such-session"));
}

/// Sends `body` to `path` and returns the field the 400 names.
async fn bad_field(s: &Served, method: Method, path: &str, body: &str) -> String {
    let (status, reply) = raw(method, &s.url(path), Some(TOKEN), Some(body)).await;
    assert_eq!(status, 400, "{path} {body}: {reply}");
    assert_eq!(reply["error"]["code"], "bad_request");
    assert!(!reply["error"]["message"].as_str().unwrap().is_empty());
    reply["error"]["field"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_create_bodies_name_the_field() {
    let s = Served::start().await;
    let cases = [
        (
            r#"{"task":{"id":"t","verify":{"command":["true"],"timeout_s":"long"}}}"#,
            "task.verify.timeout_s",
        ),
        (
            r#"{"task":{"id":"t","verify":{"command":["true"],"grader":1}}}"#,
            "task.verify.grader",
        ),
        (r#"{"task":{"id":"t"}}"#, "task.verify"),
        (r#"{"task":{"verify":{"command":["true"]}}}"#, "task.id"),
        (
            r#"{"task":{"id":"t","verify":{"command":["true"],"reward":"vibes"}}}"#,
            "task.verify.reward",
        ),
        (
            r#"{"task":{"id":"t","setup":[["ok"],"not-an-argv"],"verify":{"command":["true"]}}}"#,
            "task.setup[1]",
        ),
        (
            r#"{"task":{"id":"t","sandbox":{"limits":{"memory_bytes":-1}},"verify":{"command":["true"]}}}"#,
            "task.sandbox.limits.memory_bytes",
        ),
        (
            r#"{"task":{"id":"t","capture":"yes","verify":{"command":["true"]}}}"#,
            "task.capture",
        ),
        (
            r#"{"task":{"id":"t","verify":{"command":["true"]}},"extra":1}"#,
            "extra",
        ),
        (
            r#"{"task":{"id":"a/b","verify":{"command":["true"]}}}"#,
            "task.id",
        ),
        (
            r#"{"task":{"id":"t","verify":{"command":[]}}}"#,
            "task.verify.command",
        ),
        (
            r#"{"task":{"id":"t","files":{"../../etc/passwd":"x"},"verify":{"command":["true"]}}}"#,
            r#"task.files["../../etc/passwd"]"#,
        ),
        ("not json", "."),
    ];
    for (body, field) in cases {
        assert_eq!(
            bad_field(&s, Method::POST, "/v1/owner/sessions", body).await,
            field,
            "{body}"
        );
    }
    assert!(s.fake.calls().is_empty(), "no bad body reached the backend");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_batches_of_launches_name_the_field() {
    let s = Served::start().await;
    let too_many = format!(
        r#"{{"launches":[{}]}}"#,
        vec![r#"{"session":"s","launch_id":"l"}"#; 65_537].join(",")
    );
    let cases = [
        (r#"{"launches":[]}"#.to_owned(), "launches"),
        (too_many, "launches"),
        (r#"{}"#.to_owned(), "launches"),
        (
            r#"{"launches":[{"session":"s","launch_id":"l"},{"session":"s","launch_id":"../x"}]}"#
                .to_owned(),
            "launches[1].launch_id",
        ),
        (
            r#"{"launches":[{"session":"","launch_id":"l"}]}"#.to_owned(),
            "launches[0].session",
        ),
        (
            r#"{"launches":[{"session":"s","launch_id":"l","pid":1}]}"#.to_owned(),
            "launches[0].pid",
        ),
    ];
    for path in ["/v1/owner/launches/pause", "/v1/owner/launches/continue"] {
        for (body, field) in &cases {
            let named = bad_field(&s, Method::POST, path, body).await;
            assert_eq!(&named, field, "{path} {}", &body[..body.len().min(120)]);
        }
    }
    assert!(s.fake.calls().is_empty(), "no bad body reached the backend");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_bodies_and_queries_on_session_routes_name_the_field() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    let id = &info.session;
    let exec = format!("/v1/owner/sessions/{id}/exec");
    let cases = [
        (
            Method::POST,
            exec.clone(),
            r#"{"argv":["true"],"cwd":"/","timeout_ms":"soon","output_limit":1}"#,
            "timeout_ms",
        ),
        (
            Method::POST,
            exec.clone(),
            r#"{"argv":["true"],"cwd":"/","timeout_ms":1,"output_limit":1,"shell":true}"#,
            "shell",
        ),
        (
            Method::POST,
            exec.clone(),
            r#"{"argv":["true"],"timeout_ms":1,"output_limit":1}"#,
            "cwd",
        ),
        (
            Method::POST,
            exec,
            r#"{"argv":[],"cwd":"/","timeout_ms":1,"output_limit":1}"#,
            "argv",
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{id}/launch"),
            r#"{"launch_id":"l","argv":["x"],"cwd":"/","options":"--fast"}"#,
            "options",
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{id}/launch"),
            r#"{"launch_id":"../l","argv":["x"],"cwd":"/"}"#,
            "launch_id",
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{id}/snapshot"),
            r#"{"checkpoint":7}"#,
            "checkpoint",
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{id}/snapshot"),
            r#"{"checkpoint":"c/1"}"#,
            "checkpoint",
        ),
        (
            Method::POST,
            format!("/v1/owner/sessions/{id}/snapshot"),
            r#"{"checkpoint":"c--1"}"#,
            "checkpoint",
        ),
        (
            Method::PUT,
            format!("/v1/owner/sessions/{id}/files"),
            "x",
            "path",
        ),
        (
            Method::PUT,
            format!("/v1/owner/sessions/{id}/files?path=f&mode=rw"),
            "x",
            "mode",
        ),
        (
            Method::PUT,
            format!("/v1/owner/sessions/{id}/files?path=f&owner=root"),
            "x",
            "owner",
        ),
        (
            Method::PUT,
            format!("/v1/owner/sessions/{id}/files?path=../x"),
            "x",
            "path",
        ),
        (
            Method::GET,
            format!("/v1/owner/sessions/{id}/files?path=f&limit=-1"),
            "",
            "limit",
        ),
        (
            Method::GET,
            format!("/v1/owner/sessions/{id}/files?path=a&path=b"),
            "",
            "path",
        ),
    ];
    let before = s.fake.calls().len();
    for (method, path, body, field) in cases {
        assert_eq!(
            bad_field(&s, method, &path, body).await,
            field,
            "{path} {body}"
        );
    }
    assert_eq!(
        s.fake.calls().len(),
        before,
        "no bad request reached the backend"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_come_back_through_the_client_by_name() {
    let s = Served::start().await;
    let mut t = simple_task("t", &["true"]);
    t.verify.timeout_s = 0;
    match s.client.create_session(t).await.unwrap_err() {
        OwnerError::BadRequest { field, .. } => assert_eq!(field, "task.verify.timeout_s"),
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_body_is_413() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    let big = vec![b'x'; rollpoint_owner::BODY_LIMIT + 1];
    match s
        .client
        .upload(&info.session, "big", big, 0o644)
        .await
        .unwrap_err()
    {
        OwnerError::TooLarge { limit } => assert_eq!(limit, rollpoint_owner::BODY_LIMIT),
        other => panic!("{other}"),
    }
    assert!(s.fake.file(&info.sandbox, "/workspace/big").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_routes_and_methods_answer_the_error_object() {
    let s = Served::start().await;
    for (method, path, status, code) in [
        (Method::GET, "/v1/owner/nope", 404, "not_found"),
        (Method::POST, "/nope", 404, "not_found"),
        (
            Method::PATCH,
            "/v1/owner/sessions",
            405,
            "method_not_allowed",
        ),
    ] {
        let (got, reply) = raw(method.clone(), &s.url(path), Some(TOKEN), None).await;
        assert_eq!(got, status, "{method} {path}: {reply}");
        assert_eq!(reply["error"]["code"], code, "{method} {path}: {reply}");
    }
}
