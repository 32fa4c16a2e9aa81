//! Exactly-once after a restore: a rollout's records exported from one gateway and installed
//! into a fresh one make a repeated call of the next attempt a replay (the upstream sees no
//! request), while a changed conversation goes upstream. The record format carries a version.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use rollpoint_gateway::conversation::Route;
use rollpoint_gateway::{GatewayError, decode_jsonl, encode_jsonl};

async fn record_three_turns(route: Route, stream: bool) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<u8>) {
    let model = model(script(vec![
        shell(&["make"]),
        shell(&["make test", "ls"]),
        text("ok"),
    ]))
    .await;
    let gw = gateway(&model.base_url(), &["rp"]).await;
    let client = client();
    let mut conv = Conversation::new(route, stream, "build it");
    let (mut bodies, mut replies) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let body = conv.body();
        let reply = post(&client, &gw.url("rp", path(route)), body.clone()).await;
        assert_eq!(reply.status, 200);
        conv.absorb(&reply.body);
        gw.settled("rp").await;
        bodies.push(body);
        replies.push(reply.body);
    }
    let records = gw.gateway.export("rp").await.unwrap();
    (bodies, replies, encode_jsonl(&records))
}

async fn check(route: Route, stream: bool) {
    let (bodies, replies, wire) = record_three_turns(route, stream).await;
    let records = decode_jsonl(&wire).unwrap();
    let fresh_model = model(script(vec![text("fresh")])).await;
    let gw = gateway(&fresh_model.base_url(), &[]).await;
    let report = gw.gateway.install(records, 1).await.unwrap();
    assert_eq!(report.calls, 3);
    let client = client();
    for (i, body) in bodies.iter().enumerate() {
        let reply = post(&client, &gw.url("rp-a1", path(route)), body.clone()).await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, replies[i], "call {i} replayed byte for byte");
        assert_eq!(
            reply.replayed_from.as_deref(),
            Some(format!("rp#{i}").as_str())
        );
    }
    assert_eq!(
        fresh_model.requests(),
        0,
        "the upstream saw no repeated call"
    );
    let rows = gw.settled("rp").await;
    let replayed: Vec<_> = rows.iter().filter(|r| r.attempt == 1).collect();
    assert_eq!(replayed.len(), 3);
    for (i, r) in replayed.iter().enumerate() {
        assert_eq!(r.status, "replayed");
        assert_eq!(r.replayed_from.as_deref(), Some(format!("rp#{i}").as_str()));
        assert!(r.delivered_ms.is_some());
    }
    // A conversation that differs goes upstream.
    let mut changed: serde_json::Value = serde_json::from_slice(&bodies[1]).unwrap();
    changed["model"] = serde_json::json!("another-model");
    let reply = post(
        &client,
        &gw.url("rp-a1", path(route)),
        serde_json::to_vec(&changed).unwrap(),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert!(reply.replayed_from.is_none());
    assert_eq!(fresh_model.requests(), 1);
    // The dead attempt's key is fenced.
    let old = post(&client, &gw.url("rp", path(route)), bodies[0].clone()).await;
    assert_eq!(old.status, 409);
    assert_eq!(old.json()["error"]["type"], "attempt_fenced");
}

#[tokio::test]
async fn chat_streamed_replays() {
    check(Route::Chat, true).await;
}

#[tokio::test]
async fn responses_streamed_replays() {
    check(Route::Responses, true).await;
}

#[tokio::test]
async fn messages_whole_replays() {
    check(Route::Messages, false).await;
}

#[tokio::test]
async fn replay_can_be_turned_off() {
    let (bodies, _, wire) = record_three_turns(Route::Chat, false).await;
    let fresh_model = model(script(vec![text("fresh")])).await;
    let gw = gateway_with(&fresh_model.base_url(), |c| c.replay = false).await;
    gw.gateway
        .install(decode_jsonl(&wire).unwrap(), 1)
        .await
        .unwrap();
    let reply = post(
        &client(),
        &gw.url("rp-a1", path(Route::Chat)),
        bodies[0].clone(),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert!(reply.replayed_from.is_none());
    assert_eq!(fresh_model.requests(), 1);
}

#[tokio::test]
async fn records_of_unknown_version_or_bad_digest_are_refused() {
    let (_, _, wire) = record_three_turns(Route::Chat, false).await;
    let text = String::from_utf8(wire).unwrap();
    let bumped = text.replacen("\"v\":2", "\"v\":3", 1);
    match decode_jsonl(bumped.as_bytes()) {
        Err(GatewayError::UnknownRecordVersion { line: 1, found, .. }) => assert_eq!(found, "3"),
        other => panic!("version 3 accepted: {other:?}"),
    }
    // Version 1 lines (no tokens) are still read.
    let old = text.replace("\"v\":2", "\"v\":1");
    assert_eq!(
        decode_jsonl(old.as_bytes()).unwrap(),
        decode_jsonl(text.as_bytes()).unwrap()
    );
    let first_body = text
        .lines()
        .find(|l| l.contains("\"kind\":\"body\""))
        .unwrap();
    let tampered = first_body.replacen("\"base64\":\"", "\"base64\":\"AAAA", 1);
    let err = decode_jsonl(tampered.as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("does not match its digest"),
        "{err}"
    );
    // Installing under an attempt not after the records' is refused.
    let fresh = gateway("http://127.0.0.1:9", &[]).await;
    let err = fresh
        .gateway
        .install(decode_jsonl(text.as_bytes()).unwrap(), 0)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not before the continuing attempt 0"),
        "{err}"
    );
}

#[tokio::test]
async fn a_call_in_flight_at_export_is_installed_interrupted_and_asked_again() {
    let slow = rollpoint_model_script::Step {
        text: Some("slow".into()),
        delay_ms: 400,
        ..rollpoint_model_script::Step::default()
    };
    let model = model(script(vec![slow])).await;
    let gw = gateway(&model.base_url(), &["mid"]).await;
    let body = Conversation::new(Route::Chat, true, "x").body();
    let url = gw.url("mid", path(Route::Chat));
    let sent = body.clone();
    let pending = tokio::spawn(async move { post(&client(), &url, sent).await });
    while model.requests() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let records = gw.gateway.export("mid").await.unwrap();
    assert_eq!(pending.await.unwrap().status, 200);
    let fresh_model = self::model(script(vec![text("again")])).await;
    let fresh = gateway(&fresh_model.base_url(), &[]).await;
    fresh.gateway.install(records, 1).await.unwrap();
    let rows = fresh.gateway.calls(Some("mid")).await.unwrap();
    assert_eq!(rows[0].status, "interrupted");
    let reply = post(&client(), &fresh.url("mid-a1", path(Route::Chat)), body).await;
    assert_eq!(reply.status, 200);
    assert!(reply.replayed_from.is_none(), "nothing recorded to replay");
    assert_eq!(fresh_model.requests(), 1);
}

#[tokio::test]
async fn a_call_answered_after_the_export_is_replayed_by_the_next_attempt_in_the_same_ledger() {
    let model = model(script(vec![
        shell(&["make"]),
        shell(&["make test"]),
        text("ok"),
    ]))
    .await;
    let gw = gateway(&model.base_url(), &["rp"]).await;
    let client = client();
    let mut conv = Conversation::new(Route::Chat, false, "build it");
    let url = gw.url("rp", path(Route::Chat));
    // The checkpoint's cut: one answered call.
    let first = conv.body();
    let reply = post(&client, &url, first.clone()).await;
    conv.absorb(&reply.body);
    gw.settled("rp").await;
    let exported = gw.gateway.export("rp").await.unwrap();
    // The execution goes on past the cut, then dies.
    let second = conv.body();
    let answered = post(&client, &url, second.clone()).await;
    assert_eq!(answered.status, 200);
    gw.settled("rp").await;
    assert_eq!(model.requests(), 2);

    let report = gw.gateway.install(exported, 1).await.unwrap();
    assert_eq!(
        report.calls, 0,
        "both calls are still held: nothing inserted twice"
    );
    assert_eq!(report.dropped, 0);
    // The next attempt repeats both calls: both are replays.
    let url1 = gw.url("rp-a1", path(Route::Chat));
    for (i, (body, expected)) in [(first, &reply), (second, &answered)]
        .into_iter()
        .enumerate()
    {
        let again = post(&client, &url1, body).await;
        assert_eq!(again.status, 200);
        assert_eq!(again.body, expected.body, "call {i} replayed byte for byte");
        assert_eq!(
            again.replayed_from.as_deref(),
            Some(format!("rp#{i}").as_str())
        );
    }
    assert_eq!(model.requests(), 2, "the upstream saw no repeated call");
}
