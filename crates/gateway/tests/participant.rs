//! The gateway as the checkpoint's model participant: closing admission
//! holds a new call (ready, the call waits), export carries the rollout's
//! calls tagged with their attempt key, opening delivers the held call, and
//! installing the records into a fresh gateway makes the next attempt's
//! repeated call a replay the upstream never sees.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use rollpoint_proto::key::AttemptKey;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rollpoint_checkpoint::participant::{Kind, Participant, record_key};
use rollpoint_gateway::ModelParticipant;
use rollpoint_gateway::conversation::Route;

#[tokio::test(flavor = "multi_thread")]
async fn close_export_open_and_install_as_the_model_participant() {
    let route = Route::Chat;
    let upstream = model(script(vec![shell(&["make"]), text("done")])).await;
    let gw = gateway(&upstream.base_url(), &["rp"]).await;
    let model_p = ModelParticipant::new(Arc::new(gw.gateway.clone()), "gw0");
    assert_eq!(model_p.kind(), Kind::Model);
    let client = client();

    let mut conv = Conversation::new(route, false, "build it");
    let first = conv.body();
    let reply = post(&client, &gw.url("rp", path(route)), first.clone()).await;
    assert_eq!(reply.status, 200);
    conv.absorb(&reply.body);
    gw.settled("rp").await;

    let open = model_p.readiness().await;
    assert!(!open.ready, "not ready while admission is open: {open:?}");
    model_p.close_admission("ck1").await.unwrap();
    let second = conv.body();
    let url = gw.url("rp", path(route));
    let (c2, b2) = (client.clone(), second.clone());
    let pending = tokio::spawn(async move { post(&c2, &url, b2).await });
    let waiting = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let r = model_p.readiness().await;
            if r.counts.get("waiting") == Some(&1) {
                return r;
            }
            model_p.changed().await;
        }
    })
    .await
    .unwrap();
    assert!(
        waiting.ready,
        "a waiting call is at a boundary: {waiting:?}"
    );
    assert_eq!(upstream.requests(), 1, "the held call did not go upstream");

    let records = model_p.export("ck1", &[key("rp")]).await.unwrap();
    assert!(
        records.len() >= 3,
        "a call row and its two bodies: {records:?}"
    );
    assert!(
        records
            .iter()
            .all(|r| record_key(r).is_ok_and(|k| k == "rp"))
    );

    model_p.open_admission().await.unwrap();
    let delivered = pending.await.unwrap();
    assert_eq!(delivered.status, 200, "the held call goes on after open");

    // A fresh gateway, as after a crash: the records install as attempt 1.
    let fresh_upstream = model(script(vec![text("fresh")])).await;
    let fresh = gateway(&fresh_upstream.base_url(), &[]).await;
    let fresh_p = ModelParticipant::new(Arc::new(fresh.gateway.clone()), "gw0");
    fresh_p.close_admission("ck1").await.unwrap();
    let next = fresh_p.install("ck1", records, &[key("rp")]).await.unwrap();
    assert_eq!(next, ["rp-a1"]);
    fresh_p.open_admission().await.unwrap();
    let replay = post(&client, &fresh.url("rp-a1", path(route)), first).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.replayed_from.as_deref(), Some("rp#0"));
    assert_eq!(
        fresh_upstream.requests(),
        0,
        "no model call repeated upstream"
    );
    let fenced = post(&client, &fresh.url("rp", path(route)), second).await;
    assert_eq!(fenced.status, 409, "the exported attempt is fenced");

    // Retiring fences the attempt too.
    let retired = fresh_p.retire(&[key("rp-a1")]).await.unwrap();
    assert_eq!(retired, [key("rp-a1")]);
    let refused = post(&client, &fresh.url("rp-a1", path(route)), conv.body()).await;
    assert_eq!(refused.status, 409);
}

#[tokio::test(flavor = "multi_thread")]
async fn install_names_a_bad_record() {
    let upstream = model(script(vec![text("x")])).await;
    let gw = gateway(&upstream.base_url(), &[]).await;
    let p = ModelParticipant::new(Arc::new(gw.gateway.clone()), "gw0");
    let err = p
        .install(
            "ck1",
            vec![serde_json::json!({"key": "rp", "kind": "call", "v": 9})],
            &[key("rp")],
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("rp") && err.to_string().contains('9'),
        "{err}"
    );
    let err = p
        .install("ck1", vec![serde_json::json!({"kind": "body"})], &[])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`key`"), "{err}");
}

fn key(text: &str) -> AttemptKey {
    AttemptKey::parse(text).unwrap()
}
