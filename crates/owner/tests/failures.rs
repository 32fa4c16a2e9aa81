//! Backend failures: a 500 naming the session and sandbox, and sessions
//! left in a state a caller can recover from.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::collections::BTreeMap;

use reqwest::Method;
use rollpoint_owner::{Owner, OwnerError};
use rollpoint_proto::anchor::ExecRequest;
use support::{Call, Served, TOKEN, raw, simple_task};

#[tokio::test(flavor = "multi_thread")]
async fn a_backend_failure_is_500_with_the_message() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    s.fake.fail_next("exec");
    let body = serde_json::to_string(&ExecRequest {
        argv: vec!["true".into()],
        env: BTreeMap::new(),
        cwd: "/".into(),
        timeout_ms: 1000,
        output_limit: 10,
        stdin: None,
    })
    .unwrap();
    let (status, reply) = raw(
        Method::POST,
        &s.url(&format!("/v1/owner/sessions/{}/exec", info.session)),
        Some(TOKEN),
        Some(&body),
    )
    .await;
    assert_eq!(status, 500);
    assert_eq!(reply["error"]["code"], "backend");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains(&info.session), "{message}");
    assert!(message.contains(&info.sandbox), "{message}");
    assert!(message.contains("injected exec failure"), "{message}");
    // The session is still there and works.
    let out = s
        .client
        .exec(&info.session, serde_json::from_str(&body).unwrap())
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_create_leaves_no_session() {
    let s = Served::start().await;
    s.fake.fail_next("create");
    let err = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, OwnerError::Remote { status: 500, message, .. } if message.contains("injected create failure")),
        "{err}"
    );
    assert!(s.fake.sandboxes().is_empty());
    // A failed upload at seed destroys the sandbox it made.
    s.fake.fail_next("upload");
    let mut t = simple_task("t", &["true"]);
    t.files.insert("f".into(), "x".into());
    s.client.create_session(t).await.unwrap_err();
    assert!(s.fake.sandboxes().is_empty());
    assert!(matches!(s.fake.calls().last().unwrap(), Call::Destroy(_)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_close_keeps_the_session_for_a_retry() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    s.fake.fail_next("destroy");
    let err = s.client.close(&info.session).await.unwrap_err();
    assert!(
        err.to_string().contains("injected destroy failure"),
        "{err}"
    );
    assert_eq!(
        s.client.access(&info.session).await.unwrap().sandbox,
        info.sandbox
    );
    s.client.close(&info.session).await.unwrap();
    assert!(s.fake.sandboxes().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_verify_whose_cleanup_fails_still_returns_the_verdict() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    s.fake.fail_next("destroy");
    let verdict = s.client.verify(&info.session).await.unwrap();
    assert!(verdict.passed);
    let cleanup = verdict.cleanup_error.unwrap();
    assert!(cleanup.contains(&info.sandbox), "{cleanup}");
    // The session is over either way; the sandbox is left to the sweep.
    assert!(matches!(
        s.client.access(&info.session).await.unwrap_err(),
        OwnerError::NotFound { .. }
    ));
    assert_eq!(s.fake.sandboxes(), vec![info.sandbox.clone()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_verify_keeps_the_session() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    s.fake.fail_next("exec");
    s.client.verify(&info.session).await.unwrap_err();
    let verdict = s.client.verify(&info.session).await.unwrap();
    assert!(verdict.passed);
}
