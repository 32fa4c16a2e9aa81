//! A fleet paused for a weight update, at the gateway: no call goes upstream while paused;
//! a call generating at the pause either finishes under the old version or is dropped before
//! its first byte and asked again under the new one; the ledger keeps one row per call with
//! the version that answered it.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use rollpoint_proto::key::AttemptKey;
use std::time::Duration;

use common::*;
use rollpoint_gateway::conversation::Route;
use rollpoint_gateway::fleet::InFlightCalls;
use rollpoint_model_script::Step;

/// A model whose every answer takes `delay_ms`.
async fn slow(delay_ms: u64) -> rollpoint_model_script::ScriptServer {
    model(script(vec![Step {
        text: Some("answered".into()),
        delay_ms,
        ..Step::default()
    }]))
    .await
}

fn spawn_call(gw: &Gw, key: &str) -> tokio::task::JoinHandle<Reply> {
    let url = gw.url(key, path(Route::Chat));
    let body = Conversation::new(Route::Chat, false, key).body();
    tokio::spawn(async move { post(&client(), &url, body).await })
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}");
}

#[tokio::test]
async fn a_pause_finishes_calls_under_the_old_version_and_holds_new_ones_for_the_new() {
    let m = slow(600).await;
    let gw = gateway_with(&m.base_url(), |c| c.policy_version = Some("1".into())).await;
    for k in ["a", "b"] {
        gw.gateway.register(&AttemptKey::parse(k).unwrap()).unwrap();
    }
    let generating = spawn_call(&gw, "a");
    until("the call reached the model", || m.requests() == 1).await;
    let paused = gw.gateway.fleet_pause(InFlightCalls::Finish);
    assert!(paused.paused);
    let waiting = spawn_call(&gw, "b");
    let first = generating.await.unwrap();
    assert_eq!(
        first.status, 200,
        "the call generating at the pause finishes"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(m.requests(), 1, "nothing went upstream while paused");
    assert!(!waiting.is_finished());
    let resumed = gw.gateway.fleet_continue(Some("2".into()));
    assert_eq!(resumed.version.as_deref(), Some("2"));
    assert_eq!(waiting.await.unwrap().status, 200);
    let a = gw.settled("a").await;
    let b = gw.settled("b").await;
    assert_eq!(
        (a.len(), a[0].policy_version.as_deref()),
        (1, Some("1")),
        "{a:?}"
    );
    assert_eq!(
        (b.len(), b[0].policy_version.as_deref()),
        (1, Some("2")),
        "{b:?}"
    );
}

#[tokio::test]
async fn an_aborting_pause_asks_a_call_again_under_the_new_version_as_one_call() {
    let m = slow(1500).await;
    let gw = gateway_with(&m.base_url(), |c| c.policy_version = Some("1".into())).await;
    gw.gateway
        .register(&AttemptKey::parse("a").unwrap())
        .unwrap();
    let generating = spawn_call(&gw, "a");
    until("the call reached the model", || m.requests() == 1).await;
    gw.gateway.fleet_pause(InFlightCalls::Abort);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(
        !generating.is_finished(),
        "the harness still waits for its answer"
    );
    gw.gateway.fleet_continue(Some("2".into()));
    let reply = generating.await.unwrap();
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(m.requests(), 2, "asked again after the pause");
    let rows = gw.settled("a").await;
    assert_eq!(rows.len(), 1, "one call in the ledger: {rows:?}");
    assert_eq!(rows[0].status, "ok");
    assert_eq!(rows[0].policy_version.as_deref(), Some("2"));
}

#[tokio::test]
async fn an_upstream_s_own_version_header_wins_over_the_announced_one() {
    // An upstream of the test's own that names the weights it answered with.
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            (
                [
                    ("content-type", "application/json"),
                    ("x-policy-version", "step-7"),
                ],
                r#"{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let gw = gateway_with(&format!("http://{addr}"), |c| {
        c.policy_version = Some("1".into());
    })
    .await;
    gw.gateway
        .register(&AttemptKey::parse("h").unwrap())
        .unwrap();
    let reply = spawn_call(&gw, "h").await.unwrap();
    assert_eq!(reply.status, 200);
    let rows = gw.settled("h").await;
    assert_eq!(rows[0].policy_version.as_deref(), Some("step-7"));
    server.abort();
}
