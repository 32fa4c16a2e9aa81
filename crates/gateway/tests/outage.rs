//! Upstream outages as replicas have them: 429 with `Retry-After`, 503, a stream cut before
//! its first byte, a replica killed, every replica down. The harness sees none of them; each
//! call is answered by the model once; an attempt is reported stalled past the retry budget
//! and given up past the outage bound.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use rollpoint_proto::key::AttemptKey;
use std::time::Duration;

use common::*;
use rollpoint_gateway::config::OutagePolicy;
use rollpoint_gateway::conversation::Route;
use rollpoint_model_script::{Outage, ScriptServer};

fn policy(retry_ms: u64, outage_ms: u64) -> OutagePolicy {
    OutagePolicy {
        retry: Duration::from_millis(retry_ms),
        outage: Duration::from_millis(outage_ms),
    }
}

async fn replica() -> ScriptServer {
    model(script(vec![text("answered")])).await
}

/// One streamed chat call of a fresh conversation under `key`.
async fn ask(gw: &Gw, key: &str) -> Reply {
    post(
        &client(),
        &gw.url(key, path(Route::Chat)),
        Conversation::new(Route::Chat, true, key).body(),
    )
    .await
}

fn register(gw: &Gw, keys: &[&str]) {
    for k in keys {
        gw.gateway.register(&AttemptKey::parse(k).unwrap()).unwrap();
    }
}

#[tokio::test]
async fn replicas_share_the_calls_and_wait_out_busy_cut_and_killed_ones() {
    let a = replica().await;
    let b = replica().await;
    a.queue_outages([
        Outage::Status {
            status: 429,
            retry_after_s: Some(1),
        },
        Outage::Status {
            status: 503,
            retry_after_s: None,
        },
        Outage::Status {
            status: 503,
            retry_after_s: None,
        },
    ]);
    b.queue_outages([Outage::Cut]);
    let b_base = b.base_url();
    let gw = gateway_with(&a.base_url(), |c| {
        c.replicas = vec![b.base_url()];
        c.sticky = false;
        c.outage = policy(10_000, 60_000);
    })
    .await;
    let keys: Vec<String> = (0..6).map(|i| format!("r{i}")).collect();
    register(&gw, &keys.iter().map(String::as_str).collect::<Vec<_>>());
    let replies = futures_util::future::join_all(keys.iter().map(|k| ask(&gw, k))).await;
    for (k, r) in keys.iter().zip(&replies) {
        assert_eq!(r.status, 200, "{k}: {}", String::from_utf8_lossy(&r.body));
        let mut c = Conversation::new(Route::Chat, true, k);
        c.absorb(&r.body);
    }
    assert_eq!(a.outaged() + b.outaged(), 4, "every outage was met");
    assert_eq!(
        a.requests() + b.requests(),
        6,
        "the model answered each call once"
    );
    assert!(
        a.requests() > 0 && b.requests() > 0,
        "both replicas answered"
    );
    for k in &keys {
        let rows = gw.settled(k).await;
        assert_eq!(rows.len(), 1, "{k}: one ledger row per call: {rows:?}");
        assert_eq!(rows[0].status, "ok", "{k}: {rows:?}");
    }

    // A replica killed: its calls go to the other, none fails.
    let a_before = a.requests();
    b.shutdown().await;
    let more: Vec<String> = (0..4).map(|i| format!("k{i}")).collect();
    register(&gw, &more.iter().map(String::as_str).collect::<Vec<_>>());
    for k in &more {
        let r = ask(&gw, k).await;
        assert_eq!(r.status, 200, "{k}: {}", String::from_utf8_lossy(&r.body));
    }
    assert_eq!(a.requests(), a_before + 4, "the live replica answered them");
    let metrics = client()
        .get(format!("http://{}/metrics", gw.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let down = format!("rollpoint_gateway_replica_up{{model=\"default\",replica=\"{b_base}\"}} 0");
    assert!(metrics.contains(&down), "{down} in\n{metrics}");
    assert!(
        metrics.contains("rollpoint_gateway_retries_total{reason=\"busy\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_sticky_rollout_keeps_its_replica() {
    let a = replica().await;
    let b = replica().await;
    let gw = gateway_with(&a.base_url(), |c| {
        c.replicas = vec![b.base_url()];
    })
    .await;
    register(&gw, &["s"]);
    let mut c = Conversation::new(Route::Chat, false, "s");
    for _ in 0..4 {
        let r = post(&client(), &gw.url("s", path(Route::Chat)), c.body()).await;
        assert_eq!(r.status, 200);
        c.absorb(&r.body);
    }
    let counts = (a.requests(), b.requests());
    assert!(
        counts == (4, 0) || counts == (0, 4),
        "every call of the rollout on one replica: {counts:?}"
    );
}

#[tokio::test]
async fn a_long_outage_stalls_the_attempt_and_a_longer_one_gives_it_up() {
    let first = replica().await;
    let addr = first.addr();
    first.shutdown().await;
    let gw = gateway_with(&format!("http://{addr}"), |c| {
        c.outage = policy(300, 8_000);
    })
    .await;
    register(&gw, &["w", "g", "n"]);

    // Down past the retry budget: the attempt is reported stalled, then the replica comes
    // back and the call is answered.
    let waiting = {
        let gw_url = gw.url("w", path(Route::Chat));
        tokio::spawn(async move {
            post(
                &client(),
                &gw_url,
                Conversation::new(Route::Chat, true, "w").body(),
            )
            .await
        })
    };
    let mut generation = 0;
    loop {
        let s = gw.gateway.stalls(generation, Duration::from_secs(5)).await;
        assert!(s.generation > generation, "the attempt is reported stalled");
        generation = s.generation;
        if s.stalled.iter().any(|k| k.rollout().as_str() == "w") {
            break;
        }
    }
    let back = ScriptServer::start(script(vec![text("answered")]), addr, None)
        .await
        .unwrap();
    let reply = waiting.await.unwrap();
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(back.requests(), 1);
    let s = gw.gateway.stalls(0, Duration::ZERO).await;
    assert!(s.stalled.is_empty(), "no stall once answered: {s:?}");

    // Down past the bound: the call ends unreachable, never as an answer, and so does the
    // attempt's next call; another attempt is not given up.
    back.shutdown().await;
    let gone = ask(&gw, "g").await;
    assert_eq!(gone.status, 502, "{}", String::from_utf8_lossy(&gone.body));
    assert_eq!(gone.json()["error"]["type"], "upstream_unreachable");
    let s = gw.gateway.stalls(0, Duration::ZERO).await;
    assert_eq!(
        s.given_up
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["g"]
    );
    let again = ScriptServer::start(script(vec![text("answered")]), addr, None)
        .await
        .unwrap();
    let next = ask(&gw, "g").await;
    assert_eq!(next.status, 502);
    assert!(
        String::from_utf8_lossy(&next.body).contains("earlier in this attempt"),
        "{}",
        String::from_utf8_lossy(&next.body)
    );
    assert_eq!(again.requests(), 0, "a given-up attempt sends nothing more");
    let fresh = ask(&gw, "n").await;
    assert_eq!(fresh.status, 200);
    let rows = gw.settled("g").await;
    assert!(
        rows.iter().all(|r| r.status == "upstream_unreachable"),
        "{rows:?}"
    );
}
