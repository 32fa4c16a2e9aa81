//! What keeps a reply from being lost or asked again: the end of a reply reaches the caller
//! only once the ledger has committed it; a caller that leaves before the reply starts does
//! not cancel the call; a draining gateway takes no new call (nor one admitted earlier that
//! has not gone upstream yet) and waits for every call it sent upstream to be recorded.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use std::time::Duration;

use common::*;
use rollpoint_gateway::TailPolicy;
use rollpoint_gateway::conversation::Route;

/// The status of `call_id` as another connection to the ledger file sees it (committed
/// rows only).
fn committed_status(gw: &Gw, call_id: &str) -> Option<String> {
    let file = gw.dir.path().join("ledger.db");
    let other =
        rusqlite::Connection::open_with_flags(&file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    other
        .query_row(
            "SELECT status FROM calls WHERE call_id = ?1",
            [call_id],
            |r| r.get(0),
        )
        .ok()
}

#[tokio::test]
async fn the_end_of_a_reply_is_delivered_only_once_it_is_committed() {
    let streamed = rollpoint_model_script::Step {
        text: Some("one two three four five six".into()),
        chunks: Some(6),
        chunk_delay_ms: Some(5),
        ..rollpoint_model_script::Step::default()
    };
    // Every conversation is new, so each is answered by the one step (whole or streamed,
    // as asked).
    let model = model(script(vec![streamed])).await;
    let gw = gateway(&model.base_url(), &["c1"]).await;
    let client = client();
    for (i, route) in [Route::Chat, Route::Responses, Route::Messages]
        .into_iter()
        .enumerate()
    {
        for stream in [true, false] {
            let key = format!("c{i}{}", u8::from(stream));
            gw.gateway.register(&key.parse().unwrap()).unwrap();
            let reply = post(
                &client,
                &gw.url(&key, path(route)),
                Conversation::new(route, stream, "x").body(),
            )
            .await;
            assert_eq!(reply.status, 200, "{route:?} stream={stream}");
            let call_id = reply.call_id.unwrap();
            // No flush and no wait: the caller holding the whole reply means the row is
            // already on disk.
            assert_eq!(
                committed_status(&gw, &call_id).as_deref(),
                Some("ok"),
                "{route:?} stream={stream}: {call_id} is delivered but not committed"
            );
        }
    }
}

#[tokio::test]
async fn a_caller_leaving_before_the_reply_starts_does_not_cancel_the_call() {
    let slow = rollpoint_model_script::Step {
        delay_ms: 800,
        ..text("worth the wait")
    };
    let model = model(script(vec![slow])).await;
    let gw = gateway(&model.base_url(), &["left"]).await;
    let body = Conversation::new(Route::Chat, false, "x").body();
    let url = gw.url("left", path(Route::Chat));
    let asked = tokio::spawn(async move { client().post(url).body(body).send().await });
    // The call is upstream; the caller goes away before any byte of the reply.
    while model.requests() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    asked.abort();
    assert!(asked.await.unwrap_err().is_cancelled());
    let rows = gw.settled("left").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].status, "ok", "the reply was read and recorded");
    assert!(rows[0].delivered_ms.is_none(), "nobody took it");
    assert_eq!(model.requests(), 1);
}

#[tokio::test]
async fn a_draining_gateway_refuses_new_calls_and_waits_for_the_calls_upstream() {
    let slow = rollpoint_model_script::Step {
        delay_ms: 800,
        ..text("late")
    };
    let model = model(script(vec![slow])).await;
    let gw = gateway(&model.base_url(), &["d1", "d2"]).await;
    let body = Conversation::new(Route::Chat, false, "x").body();
    let url = gw.url("d1", path(Route::Chat));
    let first = tokio::spawn({
        let body = body.clone();
        async move { post(&client(), &url, body).await }
    });
    while gw.gateway.recording() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drained = tokio::spawn({
        let gateway = gw.gateway.clone();
        async move { gateway.drain().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!drained.is_finished(), "a call is still upstream");
    let refused = post(&client(), &gw.url("d2", path(Route::Chat)), body).await;
    assert_eq!(refused.status, 503, "a new call is refused while draining");
    assert!(
        String::from_utf8_lossy(&refused.body).contains("gateway_closed"),
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    drained.await.unwrap();
    assert_eq!(gw.gateway.recording(), 0);
    let rows = gw.gateway.calls(Some("d1")).await.unwrap();
    assert_eq!(rows[0].status, "ok", "recorded before the drain ended");
    let reply = first.await.unwrap();
    assert_eq!(
        reply.status, 200,
        "the call in flight still reached its caller"
    );
    assert_eq!(model.requests(), 1, "the refused call never went upstream");
}

#[tokio::test]
async fn a_call_waiting_at_the_gate_when_the_drain_begins_never_goes_upstream() {
    let model = model(script(vec![text("never asked")])).await;
    let gw = gateway(&model.base_url(), &["w1"]).await;
    let _ = gw.gateway.close(TailPolicy::Finish);
    let url = gw.url("w1", path(Route::Chat));
    let body = Conversation::new(Route::Chat, false, "x").body();
    let waiting = tokio::spawn(async move { post(&client(), &url, body).await });
    while gw.gateway.close(TailPolicy::Finish).waiting.is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Nothing is upstream, so the drain ends at once, and the process holding this gateway
    // may exit: the waiting call must not go upstream after that.
    tokio::time::timeout(Duration::from_secs(5), gw.gateway.drain())
        .await
        .expect("a drain with nothing upstream ends at once");
    gw.gateway.open();
    let reply = waiting.await.unwrap();
    assert_eq!(
        reply.status,
        503,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert!(
        String::from_utf8_lossy(&reply.body).contains("gateway_closed"),
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(gw.gateway.recording(), 0);
    assert_eq!(model.requests(), 0, "the waiting call never went upstream");
    assert!(
        gw.gateway.calls(Some("w1")).await.unwrap().is_empty(),
        "a refused drain call has no row"
    );
}
