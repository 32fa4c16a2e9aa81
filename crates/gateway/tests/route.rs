//! Route secrets: with a route key, a call reaches the model only on its
//! own attempt's route (`<key>@<secret>`). Another rollout's key, with no
//! secret, with a made-up one or with the caller's own, is refused 403,
//! counted, and written to no ledger.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use rollpoint_gateway::conversation::Route;
use rollpoint_proto::route::RouteKey;

#[tokio::test]
async fn only_the_attempts_own_secret_opens_its_route() {
    let model = model(script(vec![text("one"), text("two")])).await;
    let key = RouteKey::from_bytes([42; 32]);
    let upstream = format!("http://{}", model.addr());
    let gw = gateway_with(&upstream, |c| c.route_key = Some(key.clone())).await;
    for r in ["victim", "attacker"] {
        gw.gateway.register(&r.parse().unwrap()).unwrap();
    }
    let body = || Conversation::new(Route::Chat, false, "x").body();
    let client = client();
    let refused = [
        "victim".to_owned(),
        format!("victim@{}", "0".repeat(32)),
        format!("victim@{}", key.secret("attacker")),
        format!("victim@{}", &key.secret("victim")[..31]),
        format!("victim-a1@{}", key.secret("victim")),
    ];
    for segment in &refused {
        let reply = post(&client, &gw.url(segment, path(Route::Chat)), body()).await;
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        assert_eq!(reply.status, 403, "{segment}: {text}");
        assert!(text.contains("route_forbidden"), "{text}");
        assert!(
            !text.contains(&key.secret("victim")),
            "no secret echoed: {text}"
        );
    }
    let named = post(
        &client,
        &gw.url(
            &format!("victim@{}", key.secret("attacker")),
            path(Route::Chat),
        ),
        body(),
    )
    .await;
    assert!(
        String::from_utf8_lossy(&named.body).contains("attempt attacker"),
        "the sender is named"
    );
    assert_eq!(model.requests(), 0, "nothing refused reached the model");
    assert!(gw.gateway.calls(Some("victim")).await.unwrap().is_empty());
    assert!(gw.gateway.calls(Some("attacker")).await.unwrap().is_empty());

    let own = post(
        &client,
        &gw.url(&key.segment("victim"), path(Route::Chat)),
        body(),
    )
    .await;
    assert_eq!(own.status, 200, "{}", String::from_utf8_lossy(&own.body));
    let rows = gw.settled("victim").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].capture_key, "victim",
        "the key is recorded without its secret"
    );

    let metrics = client
        .get(format!("http://{}/metrics", gw.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("rollpoint_gateway_forbidden_total"))
        .unwrap_or_default();
    assert!(line.ends_with(" 6"), "{line}");
}
