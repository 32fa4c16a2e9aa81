//! The admission gate: a request made while closed reaches the upstream only after open; a
//! reply that finishes while closed is delivered only after open; streams delivering at close
//! are reported; and under 64 rollouts with the gate closing and opening in a loop nothing is
//! lost or reordered.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use rollpoint_proto::key::AttemptKey;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use rollpoint_gateway::TailPolicy;
use rollpoint_gateway::conversation::{Atom, Route};
use rollpoint_gateway::response::read_response;
use rollpoint_model_script::Step;

#[tokio::test]
async fn request_made_while_closed_reaches_upstream_after_open() {
    let model = model(script(vec![text("hi")])).await;
    let gw = gateway(&model.base_url(), &["g"]).await;
    let report = gw.gateway.close(TailPolicy::Finish);
    assert!(report.delivering.is_empty() && report.held.is_empty());
    let url = gw.url("g", path(Route::Chat));
    let body = Conversation::new(Route::Chat, true, "x").body();
    let pending = tokio::spawn(async move { post(&client(), &url, body).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        model.requests(),
        0,
        "nothing reaches the upstream while closed"
    );
    assert!(!pending.is_finished(), "the caller waits, it gets no error");
    let report = gw.gateway.close(TailPolicy::Finish);
    assert_eq!(report.waiting.len(), 1, "the waiting request is reported");
    gw.gateway.open();
    let reply = pending.await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(model.requests(), 1);
}

async fn held_until_open(stream: bool) {
    let slow = Step {
        text: Some("slow answer".into()),
        delay_ms: 800,
        ..Step::default()
    };
    let model = model(script(vec![slow])).await;
    let gw = gateway(&model.base_url(), &["h"]).await;
    let url = gw.url("h", path(Route::Responses));
    let body = Conversation::new(Route::Responses, stream, "x").body();
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let pending = tokio::spawn(async move {
        let r = post(&client(), &url, body).await;
        flag.store(true, Ordering::SeqCst);
        r
    });
    while model.requests() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let report = gw.gateway.close(TailPolicy::Hold);
    assert_eq!(
        report.held.len(),
        1,
        "the admitted call is reported held: {report:?}"
    );
    let rows = gw.settled("h").await;
    assert_eq!(
        rows[0].status, "ok",
        "the reply finished upstream while closed"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !done.load(Ordering::SeqCst),
        "a reply finished while closed is not delivered"
    );
    assert!(
        gw.gateway.calls(Some("h")).await.unwrap()[0]
            .delivered_ms
            .is_none()
    );
    gw.gateway.open();
    let reply = pending.await.unwrap();
    assert_eq!(reply.status, 200);
    let stored = gw
        .gateway
        .body(rows[0].response_digest.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(stored.unwrap(), reply.body);
}

#[tokio::test]
async fn reply_finished_while_closed_is_delivered_after_open() {
    held_until_open(false).await;
}

#[tokio::test]
async fn stream_finished_while_closed_is_delivered_after_open() {
    held_until_open(true).await;
}

#[tokio::test]
async fn delivering_streams_are_reported_and_can_finish_or_hold() {
    let slow = Step {
        text: Some("one two three four five six seven eight".into()),
        chunks: Some(8),
        chunk_delay_ms: Some(100),
        ..Step::default()
    };
    let model = model(script(vec![slow])).await;
    let gw = gateway(&model.base_url(), &["d"]).await;
    let url = gw.url("d", path(Route::Chat));
    let body = Conversation::new(Route::Chat, true, "x").body();
    // Finish: the closer waits for the stream to end.
    let resp = client().post(&url).body(body.clone()).send().await.unwrap();
    let report = gw.gateway.close(TailPolicy::Finish);
    assert_eq!(report.delivering.len(), 1, "{report:?}");
    assert_eq!(report.delivering[0].capture_key, "d");
    tokio::time::timeout(Duration::from_secs(10), gw.gateway.deliveries_drained())
        .await
        .expect("the stream finishes while closed");
    let whole = resp.bytes().await.unwrap();
    assert!(whole.ends_with(b"data: [DONE]\n\n"));
    gw.gateway.open();
    // Hold: nothing more arrives until open.
    let mut resp = client().post(&url).body(body).send().await.unwrap();
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());
    let report = gw.gateway.close(TailPolicy::Hold);
    assert_eq!(report.delivering.len(), 1);
    // At most the chunk already in hand when the gate closed may still arrive.
    let _ = tokio::time::timeout(Duration::from_millis(100), resp.chunk()).await;
    let held = tokio::time::timeout(Duration::from_millis(600), resp.chunk()).await;
    assert!(held.is_err(), "tail held while closed");
    gw.gateway.open();
    let mut rest = Vec::new();
    while let Some(c) = resp.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    assert!(rest.ends_with(b"data: [DONE]\n\n"));
}

#[tokio::test]
async fn nothing_lost_or_reordered_under_64_rollouts_and_a_flapping_gate() {
    const ROLLOUTS: usize = 64;
    const TURNS: usize = 6;
    let steps = (0..TURNS - 1)
        .map(|i| {
            let mut s = shell(&["echo {step}"]);
            s.chunk_delay_ms = Some(u64::try_from(i % 3).unwrap());
            s
        })
        .chain([text("done")])
        .collect();
    let model = model(script(steps)).await;
    let gw = gateway(&model.base_url(), &[]).await;
    for r in 0..ROLLOUTS {
        gw.gateway
            .register(&AttemptKey::of(&format!("f{r}"), 0).unwrap())
            .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flapper = {
        let gw = gw.gateway.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut cycles = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let tails = if cycles.is_multiple_of(2) {
                    TailPolicy::Hold
                } else {
                    TailPolicy::Finish
                };
                let _ = gw.close(tails);
                tokio::time::sleep(Duration::from_millis(3)).await;
                gw.open();
                tokio::time::sleep(Duration::from_millis(3)).await;
                cycles += 1;
            }
            cycles
        })
    };
    let mut tasks = Vec::new();
    for r in 0..ROLLOUTS {
        let url = gw.url(&format!("f{r}"), path(Route::Chat));
        tasks.push(tokio::spawn(async move {
            let client = client();
            let mut conv =
                Conversation::new(Route::Chat, r.is_multiple_of(2), &format!("rollout {r}"));
            let mut ids = Vec::new();
            for turn in 0..TURNS {
                let body = conv.body();
                let reply = post(&client, &url, body.clone()).await;
                assert_eq!(reply.status, 200, "rollout {r} turn {turn}");
                // The scripted model derives reply ids from the request bytes: the reply
                // belongs to this very request.
                let seed = &sha256(&body)[..12];
                let text = String::from_utf8(reply.body.clone()).unwrap();
                assert!(
                    text.contains(&format!("chatcmpl-{seed}")),
                    "rollout {r} turn {turn} got another reply"
                );
                if turn + 1 < TURNS {
                    let view = read_response(Route::Chat, r.is_multiple_of(2), &reply.body);
                    let args = format!("{{\"command\":\"echo {turn}\"}}");
                    assert!(
                        view.turn
                            .unwrap()
                            .iter()
                            .any(|a| matches!(a, Atom::Call { args: x, .. } if *x == args)),
                        "rollout {r} turn {turn} out of order"
                    );
                }
                conv.absorb(&reply.body);
                ids.push(reply.call_id.unwrap());
            }
            ids
        }));
    }
    let mut all_ids = Vec::new();
    for t in tasks {
        all_ids.push(
            tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    stop.store(true, Ordering::SeqCst);
    let cycles = flapper.await.unwrap();
    assert!(cycles > 5, "the gate flapped ({cycles} cycles)");
    gw.gateway.open();
    assert_eq!(
        model.requests(),
        ROLLOUTS * TURNS,
        "every call reached the upstream once"
    );
    for (r, ids) in all_ids.iter().enumerate() {
        let rows = gw.settled(&format!("f{r}")).await;
        assert_eq!(rows.len(), TURNS);
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(
                row.call_id, ids[i],
                "rollout {r}: ledger order matches call order"
            );
            assert_eq!(row.status, "ok");
            if i > 0 {
                assert_eq!(
                    row.parent_call_id.as_ref(),
                    Some(&ids[i - 1]),
                    "rollout {r} call {i}"
                );
            }
        }
    }
}
