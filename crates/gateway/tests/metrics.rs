//! `GET /metrics` on the gateway: OpenMetrics text a Prometheus parser reads, whose counters
//! follow the calls (answered, refused), the upstream's time and the tokens it reported.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use rollpoint_gateway::conversation::Route;
use rollpoint_testkit::metric as value;

/// The gateway's metrics text.
async fn scrape(gw: &Gw) -> String {
    let reply = client()
        .get(format!("http://{}/metrics", gw.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let kind = reply.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    let text = reply.text().await.unwrap();
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    text
}

#[tokio::test]
async fn the_counters_follow_the_calls() {
    let model = model(script(vec![text("one"), text("two")])).await;
    let gw = gateway(&model.base_url(), &["m1"]).await;
    let before = scrape(&gw).await;
    assert_eq!(
        value(
            &before,
            "rollpoint_gateway_calls_total",
            Some(("status", "ok"))
        ),
        0.0
    );
    let mut conv = Conversation::new(Route::Chat, false, "count");
    for _ in 0..2 {
        let reply = post(&client(), &gw.url("m1", path(Route::Chat)), conv.body()).await;
        assert_eq!(reply.status, 200);
        conv.absorb(&reply.body);
    }
    let refused = post(&client(), &gw.url("nobody", path(Route::Chat)), conv.body()).await;
    assert_eq!(refused.status, 404);
    gw.settled("m1").await;
    let after = scrape(&gw).await;
    assert_eq!(
        value(
            &after,
            "rollpoint_gateway_calls_total",
            Some(("status", "ok"))
        ),
        2.0
    );
    assert_eq!(
        value(
            &after,
            "rollpoint_gateway_calls_total",
            Some(("status", "unknown_capture_key"))
        ),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "rollpoint_gateway_upstream_duration_seconds_count",
            None
        )
        .max(value(
            &after,
            "rollpoint_gateway_upstream_duration_seconds",
            None
        )),
        2.0,
        "two replies timed"
    );
    let rows = gw.gateway.calls(Some("m1")).await.unwrap();
    let reported: u64 = rows
        .iter()
        .filter_map(|r| r.usage.as_ref())
        .filter_map(|u| u["prompt_tokens"].as_u64())
        .sum();
    assert!(reported > 0, "the scripted model reports usage");
    assert_eq!(
        value(
            &after,
            "rollpoint_gateway_tokens_total",
            Some(("kind", "input"))
        ),
        reported as f64
    );
    assert_eq!(
        value(&after, "rollpoint_gateway_calls_in_flight", None),
        0.0
    );
    assert_eq!(
        value(&after, "rollpoint_gateway_calls_recording", None),
        0.0
    );
}
