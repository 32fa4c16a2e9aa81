//! Bad input gets a clear error naming what is wrong, and a ledger row that says so:
//! invalid JSON, an unknown capture key, an oversized body, an upstream that is down, an
//! upstream that answers 500, and an upstream that breaks off mid-stream.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use rollpoint_gateway::conversation::Route;
use rollpoint_model_script::{Fail, Step};
use rollpoint_proto::key::AttemptKey;
use std::time::Duration;

fn chat_body(stream: bool) -> Vec<u8> {
    Conversation::new(Route::Chat, stream, "x").body()
}

#[tokio::test]
async fn invalid_json_is_refused_and_recorded() {
    let model = model(script(vec![text("hi")])).await;
    let gw = gateway(&model.base_url(), &["bad"]).await;
    let reply = post(
        &client(),
        &gw.url("bad", path(Route::Chat)),
        b"{\"model\": ".to_vec(),
    )
    .await;
    assert_eq!(reply.status, 400);
    let err = reply.json();
    assert_eq!(err["error"]["type"], "invalid_json");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    let rows = gw.settled("bad").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, "invalid_json");
    assert_eq!(rows[0].http_status, Some(400));
    assert_eq!(Some(&rows[0].call_id), reply.call_id.as_ref());
    assert_eq!(model.requests(), 0);
}

#[tokio::test]
async fn unknown_capture_key_is_refused_and_recorded() {
    let model = model(script(vec![text("hi")])).await;
    let gw = gateway(&model.base_url(), &["known"]).await;
    let client = client();
    let reply = post(
        &client,
        &gw.url("stranger", path(Route::Chat)),
        chat_body(false),
    )
    .await;
    assert_eq!(reply.status, 404);
    let err = reply.json();
    assert_eq!(err["error"]["type"], "unknown_capture_key");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stranger")
    );
    let malformed = post(
        &client,
        &gw.url("bad%20key", path(Route::Chat)),
        chat_body(false),
    )
    .await;
    assert_eq!(malformed.status, 404);
    assert!(
        malformed.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("malformed")
    );
    let rows = gw.settled("stranger").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, "unknown_capture_key");
    assert_eq!(rows[0].lineage, "none");
    assert!(
        gw.gateway.calls(Some("known")).await.unwrap().is_empty(),
        "nothing written to another rollout"
    );
    assert_eq!(model.requests(), 0);
}

#[tokio::test]
async fn oversized_body_is_refused_and_recorded() {
    let model = model(script(vec![text("hi")])).await;
    let gw = gateway_with(&model.base_url(), |c| {
        c.max_body_bytes = 2048;
        c.open_keys = true;
    })
    .await;
    let mut conv = Conversation::new(Route::Chat, false, &"y".repeat(4096));
    conv.stream = false;
    let reply = post(&client(), &gw.url("big", path(Route::Chat)), conv.body()).await;
    assert_eq!(reply.status, 413);
    let err = reply.json();
    assert_eq!(err["error"]["type"], "body_too_large");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2048 bytes")
    );
    let rows = gw.settled("big").await;
    assert_eq!(rows[0].status, "body_too_large");
    assert_eq!(rows[0].http_status, Some(413));
    assert_eq!(model.requests(), 0);
}

#[tokio::test]
async fn upstream_down_is_a_502_and_recorded() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let gw = gateway_with(&format!("http://127.0.0.1:{port}"), |c| {
        c.outage = rollpoint_gateway::config::OutagePolicy {
            retry: Duration::from_millis(200),
            outage: Duration::from_secs(1),
        };
    })
    .await;
    gw.gateway
        .register(&AttemptKey::of("down", 0).unwrap())
        .unwrap();
    let reply = post(
        &client(),
        &gw.url("down", path(Route::Chat)),
        chat_body(true),
    )
    .await;
    assert_eq!(reply.status, 502);
    let err = reply.json();
    assert_eq!(err["error"]["type"], "upstream_unreachable");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&port.to_string())
    );
    let rows = gw.settled("down").await;
    assert_eq!(rows[0].status, "upstream_unreachable");
    assert!(rows[0].error.as_ref().unwrap().contains("unreachable"));
}

#[tokio::test]
async fn upstream_500_is_passed_on_and_recorded() {
    let fail = Step {
        fail: Some(Fail {
            status: 500,
            body: "{\"error\":{\"message\":\"model crashed\"}}".into(),
        }),
        ..Step::default()
    };
    let model = model(script(vec![fail])).await;
    let gw = gateway(&model.base_url(), &["five"]).await;
    let reply = post(
        &client(),
        &gw.url("five", path(Route::Chat)),
        chat_body(true),
    )
    .await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.body, b"{\"error\":{\"message\":\"model crashed\"}}");
    let rows = gw.settled("five").await;
    assert_eq!(rows[0].status, "upstream_status");
    assert_eq!(rows[0].http_status, Some(500));
    assert!(rows[0].error.as_ref().unwrap().contains("500"));
}

#[tokio::test]
async fn upstream_breaking_mid_stream_ends_with_an_error_event_and_is_recorded() {
    let cut = Step {
        text: Some("a long answer that never finishes".into()),
        chunks: Some(8),
        break_after_events: Some(3),
        chunk_delay_ms: Some(30),
        ..Step::default()
    };
    let model = model(script(vec![cut])).await;
    let gw = gateway(&model.base_url(), &["cut"]).await;
    let reply = post(
        &client(),
        &gw.url("cut", path(Route::Messages)),
        Conversation::new(Route::Messages, true, "x").body(),
    )
    .await;
    assert_eq!(reply.status, 200, "the stream had started");
    let text = String::from_utf8(reply.body).unwrap();
    assert!(text.starts_with("event: message_start"), "{text}");
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(
        last.starts_with("event: error"),
        "stream ends with an error event: {last}"
    );
    assert!(last.contains("upstream_broken"));
    let rows = gw.settled("cut").await;
    assert_eq!(rows[0].status, "upstream_broken");
    assert!(rows[0].error.as_ref().unwrap().contains("broke off"));
    assert!(
        rows[0].output_fp.is_none(),
        "a broken reply is no lineage parent"
    );
}
