//! Byte-exact passthrough: for each API, streamed and not, the caller gets exactly the bytes
//! the upstream sent, the upstream gets exactly the bytes the caller sent, and the ledger
//! stores both.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use common::*;
use rollpoint_gateway::conversation::Route;

async fn check(route: Route, stream: bool) {
    let model = model(script(vec![
        shell(&["ls -la", "cat README.md"]),
        text("all done, the file is in place"),
    ]))
    .await;
    let gw = gateway(&model.base_url(), &["r1"]).await;
    let client = client();
    let mut conv = Conversation::new(route, stream, "list files");
    for turn in 0..2 {
        let body = conv.body();
        let direct = post(
            &client,
            &format!("{}/{}", model.base_url(), path(route)),
            body.clone(),
        )
        .await;
        let via = post(&client, &gw.url("r1", path(route)), body.clone()).await;
        assert_eq!(via.status, 200, "{route:?} stream={stream} turn {turn}");
        assert_eq!(
            via.body, direct.body,
            "{route:?} stream={stream} turn {turn}: bytes differ"
        );
        assert_eq!(via.content_type, direct.content_type);
        let log = model.log_entries();
        let last = log.last().unwrap();
        assert_eq!(
            last.request_sha256,
            sha256(&body),
            "upstream saw other request bytes"
        );
        assert_eq!(last.stream, stream);
        let rows = gw.settled("r1").await;
        let row = rows
            .iter()
            .find(|r| Some(&r.call_id) == via.call_id.as_ref())
            .unwrap();
        assert_eq!(row.status, "ok");
        assert_eq!(row.http_status, Some(200));
        assert_eq!(row.stream, stream);
        assert!(
            row.usage.is_some(),
            "usage recorded for {route:?} stream={stream}"
        );
        let stored = gw
            .gateway
            .body(row.response_digest.as_ref().unwrap())
            .await
            .unwrap();
        assert_eq!(stored.unwrap(), via.body, "ledger holds the reply bytes");
        let stored = gw
            .gateway
            .body(row.request_digest.as_ref().unwrap())
            .await
            .unwrap();
        assert_eq!(stored.unwrap(), body, "ledger holds the request bytes");
        conv.absorb(&via.body);
    }
    assert_eq!(model.requests(), 4, "two direct and two proxied requests");
}

#[tokio::test]
async fn chat_whole() {
    check(Route::Chat, false).await;
}

#[tokio::test]
async fn chat_streamed() {
    check(Route::Chat, true).await;
}

#[tokio::test]
async fn responses_whole() {
    check(Route::Responses, false).await;
}

#[tokio::test]
async fn responses_streamed() {
    check(Route::Responses, true).await;
}

#[tokio::test]
async fn messages_whole() {
    check(Route::Messages, false).await;
}

#[tokio::test]
async fn messages_streamed() {
    check(Route::Messages, true).await;
}

#[tokio::test]
async fn models_list_passes_through() {
    let model = model(script(vec![])).await;
    let gw = gateway(&model.base_url(), &["r1"]).await;
    let client = client();
    let direct = client
        .get(format!("{}/v1/models", model.base_url()))
        .send()
        .await
        .unwrap();
    let direct = Reply::read(direct).await;
    let via = client.get(gw.url("r1", "v1/models")).send().await.unwrap();
    let via = Reply::read(via).await;
    assert_eq!(via.status, 200);
    assert_eq!(via.body, direct.body);
    let rows = gw.settled("r1").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].route, "models");
    assert_eq!(rows[0].lineage_reason.as_deref(), Some("not_generation"));
}

#[tokio::test]
async fn a_caller_leaving_mid_stream_does_not_stop_the_recording() {
    let slow = rollpoint_model_script::Step {
        text: Some("one two three four five six seven eight".into()),
        chunks: Some(8),
        chunk_delay_ms: Some(50),
        ..rollpoint_model_script::Step::default()
    };
    let model = model(script(vec![slow])).await;
    let gw = gateway(&model.base_url(), &["gone"]).await;
    let body = Conversation::new(Route::Chat, true, "x").body();
    let mut resp = client()
        .post(gw.url("gone", path(Route::Chat)))
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(!resp.chunk().await.unwrap().unwrap().is_empty());
    drop(resp);
    let rows = gw.settled("gone").await;
    assert_eq!(rows[0].status, "ok");
    assert!(rows[0].delivered_ms.is_none(), "never delivered whole");
    let stored = gw
        .gateway
        .body(rows[0].response_digest.as_ref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        stored.ends_with(b"data: [DONE]\n\n"),
        "the whole reply was read and recorded"
    );
}

#[tokio::test]
async fn flushed_rows_are_in_the_ledger_file_for_another_reader() {
    let model = model(script(vec![text("hi")])).await;
    let gw = gateway(&model.base_url(), &["disk"]).await;
    let reply = post(
        &client(),
        &gw.url("disk", path(Route::Chat)),
        Conversation::new(Route::Chat, false, "x").body(),
    )
    .await;
    assert_eq!(reply.status, 200);
    gw.settled("disk").await;
    gw.gateway.flush().await.unwrap();
    let file = gw.dir.path().join("ledger.db");
    let other =
        rusqlite::Connection::open_with_flags(&file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let n: i64 = other
        .query_row(
            "SELECT COUNT(*) FROM calls WHERE status = 'ok' AND rollout = 'disk'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    let version: i64 = other
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, rollpoint_gateway::SCHEMA_VERSION);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[tokio::test]
async fn a_ledger_of_a_newer_schema_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ledger.db");
    let c = rusqlite::Connection::open(&file).unwrap();
    c.pragma_update(None, "user_version", 99).unwrap();
    drop(c);
    let config = rollpoint_gateway::GatewayConfig::new(
        "http://127.0.0.1:9",
        rollpoint_gateway::UpstreamApi::All,
        file,
    );
    let err = rollpoint_gateway::Gateway::new(config).unwrap_err();
    assert!(err.to_string().contains("schema version 99"), "{err}");
}
