//! The rollout and coordinator routes in process, on 127.0.0.1:0 (no root):
//! a wrong token on every route, bad bodies naming their field, unknown
//! versions by name, unknown ids, a conflicting rollout id, a result
//! delivered by long poll, a checkpoint and restore driven over HTTP
//! whose published checkpoint verifies, and a restore whose moves name
//! participants that are not there refused by field.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use reqwest::{Client, Method, StatusCode};
use rollpoint_checkpoint::{Kind, store};
use rollpoint_owner::HttpOwner;
use rollpoint_serve::wire::{CheckpointReply, CoordinatorStatus, RestoreReply, RolloutList};
use rollpoint_serve::{
    AgentService, AgentSettings, CoordinatorService, CoordinatorSettings, Target,
};
use serde_json::{Value, json};

const TOKEN: &str = "routes-token";
/// Nothing listens here: every owner call fails at once.
const DEAD_OWNER: &str = "http://127.0.0.1:1";

async fn listen(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(rollpoint_api::serve(listener, router));
    base
}

async fn agent(run_dir: &Path) -> String {
    let owner = Arc::new(HttpOwner::new(DEAD_OWNER, TOKEN).unwrap());
    let service = AgentService::new(
        owner,
        AgentSettings {
            run_dir: run_dir.to_owned(),
            instance: "agent0".into(),
            slots: 2,
            env: BTreeMap::new(),
            gateway: None,
            token_breaks: rollpoint_trajectory::BreakPolicy::Split.into(),
            remote: None,
            route_key: None,
        },
    )
    .unwrap();
    listen(service.router(TOKEN)).await
}

async fn coordinator(run_dir: &Path, agent: &str) -> String {
    let service = CoordinatorService::connect(CoordinatorSettings {
        run_dir: run_dir.to_owned(),
        participants: vec![format!("agent={agent}").parse::<Target>().unwrap()],
        participant_token: TOKEN.into(),
        keep: 2,
        timeout: std::time::Duration::from_secs(60),
        remote: None,
    })
    .await
    .unwrap();
    listen(service.router(TOKEN)).await
}

fn fake_task(id: &str) -> Value {
    json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["true"]}},
        "adapter": {"kind": "fake", "steps": 3, "tick_ms": 10}
    })
}

async fn call(
    http: &Client,
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let mut req = http.request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.body(b.to_owned());
    }
    let reply = req.send().await.unwrap();
    let status = reply.status();
    let bytes = reply.bytes().await.unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

/// The `/metrics` text of the service at `base`.
async fn metrics(http: &Client, base: &str) -> String {
    let reply = http
        .get(format!("{base}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    reply.text().await.unwrap()
}

/// Asserts a refusal with `status` and `code`, naming `field`, with `text`
/// in the message.
fn assert_refused(
    reply: &(StatusCode, Value),
    status: StatusCode,
    code: &str,
    field: &str,
    text: &str,
) {
    assert_eq!(reply.0, status, "{}", reply.1);
    assert_eq!(reply.1["error"]["code"], code, "{}", reply.1);
    assert_eq!(reply.1["error"]["field"], field, "{}", reply.1);
    let message = reply.1["error"]["message"].as_str().unwrap();
    assert!(message.contains(text), "{message}");
}

/// Asserts a 400 naming `field`, with `text` in the message.
fn assert_bad(reply: &(StatusCode, Value), field: &str, text: &str) {
    assert_refused(reply, StatusCode::BAD_REQUEST, "bad_request", field, text);
}

/// Asserts a 422 naming `field`, with `text` in the message.
fn assert_unprocessable(reply: &(StatusCode, Value), field: &str, text: &str) {
    assert_refused(
        reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "unprocessable",
        field,
        text,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_refuses_a_wrong_or_missing_token() {
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(dir.path()).await;
    let coord = coordinator(dir.path(), &agent).await;
    let http = Client::new();
    let routes = [
        (Method::POST, format!("{agent}/v1/rollouts")),
        (Method::GET, format!("{agent}/v1/rollouts")),
        (Method::GET, format!("{agent}/v1/rollouts/r1")),
        (Method::GET, format!("{agent}/v1/rollouts/r1/result")),
        (Method::DELETE, format!("{agent}/v1/rollouts/r1")),
        (Method::GET, format!("{agent}/v1/checkpoint/status")),
        (Method::POST, format!("{coord}/v1/coordinator/checkpoint")),
        (Method::POST, format!("{coord}/v1/coordinator/restore")),
        (Method::GET, format!("{coord}/v1/coordinator/status")),
    ];
    for (method, url) in routes {
        for token in [None, Some("wrong"), Some("")] {
            let body = fake_task("r1").to_string();
            let (status, value) = call(&http, method.clone(), &url, token, Some(&body)).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {url} {token:?}");
            assert!(
                value["error"]["code"] == "unauthorized" || url.contains("/checkpoint/"),
                "{value}"
            );
        }
    }
    // Nothing was admitted.
    let (status, list) = call(
        &http,
        Method::GET,
        &format!("{agent}/v1/rollouts"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["rollouts"], json!([]), "{list}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rollout_routes_name_bad_fields_and_unknown_ids() {
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(dir.path()).await;
    let http = Client::new();
    let post = |body: String| {
        let http = http.clone();
        let url = format!("{agent}/v1/rollouts");
        async move { call(&http, Method::POST, &url, Some(TOKEN), Some(&body)).await }
    };
    assert_bad(&post("not json".into()).await, "task", "not valid JSON");
    let mut newer = fake_task("r1");
    newer["v"] = json!(2);
    assert_bad(
        &post(newer.to_string()).await,
        "task.v",
        "unknown version 2",
    );
    let mut missing = fake_task("r1");
    missing.as_object_mut().unwrap().remove("adapter");
    assert_bad(&post(missing.to_string()).await, "task.adapter", "adapter");
    let mut bad_steps = fake_task("r1");
    bad_steps["adapter"]["steps"] = json!(0);
    assert_bad(
        &post(bad_steps.to_string()).await,
        "task.adapter.steps",
        "above 0",
    );
    let mut unknown = fake_task("r1");
    unknown["colour"] = json!("red");
    assert_bad(
        &post(unknown.to_string()).await,
        "task.colour",
        "unknown field",
    );

    for (method, url) in [
        (Method::GET, format!("{agent}/v1/rollouts/nope")),
        (Method::GET, format!("{agent}/v1/rollouts/nope/result")),
        (Method::DELETE, format!("{agent}/v1/rollouts/nope")),
    ] {
        let (status, value) = call(&http, method.clone(), &url, Some(TOKEN), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {url}: {value}");
        assert_eq!(value["error"]["code"], "not_found");
        assert!(value["error"]["message"].as_str().unwrap().contains("nope"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_posted_rollout_conflicts_then_delivers_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let agent = agent(dir.path()).await;
    let http = Client::new();
    let url = format!("{agent}/v1/rollouts");
    let body = fake_task("r1").to_string();
    let (status, accepted) = call(&http, Method::POST, &url, Some(TOKEN), Some(&body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    assert_eq!(accepted["rollout"], "r1");
    assert_eq!(accepted["attempt"], 0);
    assert_eq!(accepted["v"], 1);

    let (status, again) = call(&http, Method::POST, &url, Some(TOKEN), Some(&body)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert_eq!(again["error"]["code"], "conflict");
    assert!(again["error"]["message"].as_str().unwrap().contains("r1"));

    let (status, _) = call(
        &http,
        Method::GET,
        &format!("{url}/r1/result?wait_ms=later"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // The owner cannot be reached, so the rollout fails; its result says so.
    let (status, result) = call(
        &http,
        Method::GET,
        &format!("{url}/r1/result?wait_ms=120000"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["v"], 2);
    assert_eq!(result["rollout"], "r1");
    assert_eq!(result["status"], "infra_error", "{result}");
    assert_eq!(result["infra_class"], "setup_failed", "{result}");
    assert!(result["reward"].is_null(), "{result}");
    assert!(result["error"].as_str().is_some(), "{result}");

    let (status, shown) = call(&http, Method::GET, &format!("{url}/r1"), Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown, result);
    let (_, list) = call(&http, Method::GET, &url, Some(TOKEN), None).await;
    let list: RolloutList = serde_json::from_value(list).unwrap();
    assert_eq!(list.rollouts.len(), 1);
    assert!(!list.rollouts[0].state.in_flight());
    let state = serde_json::to_value(list.rollouts[0].state).unwrap();
    let base = url.trim_end_matches("/v1/rollouts");
    let text = metrics(&http, base).await;
    let line = format!(
        "rollpoint_agent_rollouts{{state=\"{}\"}} 1",
        state.as_str().unwrap()
    );
    assert!(text.contains(&line), "{line} in:\n{text}");
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let rollouts = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "rollpoint_agent_rollouts")
        .count();
    assert_eq!(rollouts, 1, "one state, one rollout: {text}");
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "rollpoint_agent_process_resident_memory_bytes"),
        "the process's own use: {text}"
    );

    let (status, cancel) = call(
        &http,
        Method::DELETE,
        &format!("{url}/r1"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{cancel}");
    let (status, _) = call(&http, Method::POST, &url, Some(TOKEN), Some(&body)).await;
    assert_eq!(status, StatusCode::CONFLICT, "a finished id stays taken");
}

#[tokio::test(flavor = "multi_thread")]
async fn coordinator_routes_check_bodies_and_publish_a_verified_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path();
    let agent = agent(run_dir).await;
    let coord = coordinator(run_dir, &agent).await;
    let http = Client::new();
    let ck = format!("{coord}/v1/coordinator/checkpoint");
    let restore = format!("{coord}/v1/coordinator/restore");
    let post = |url: &str, body: &str| {
        let (http, url, body) = (http.clone(), url.to_owned(), body.to_owned());
        async move { call(&http, Method::POST, &url, Some(TOKEN), Some(&body)).await }
    };

    for url in [&ck, &restore] {
        assert_bad(&post(url, "{").await, ".", "not valid JSON");
        assert_bad(&post(url, "{}").await, "v", "field `v`");
        assert_bad(&post(url, r#"{"v":2}"#).await, "v", "unknown version 2");
        assert_bad(
            &post(url, r#"{"v":1,"colour":1}"#).await,
            "colour",
            "unknown field",
        );
        assert_bad(
            &post(url, r#"{"v":1,"id":"../up"}"#).await,
            "id",
            "letter or digit",
        );
        assert_bad(&post(url, r#"{"v":1,"id":7}"#).await, "id", "");
        assert_bad(
            &post(url, r#"{"v":1,"scope":["a b"]}"#).await,
            "scope[0]",
            "",
        );
    }
    assert_bad(&post(&ck, r#"{"v":1,"stop":"yes"}"#).await, "stop", "");

    // Nothing published yet: a restore of the latest or a named id is 404.
    for body in [r#"{"v":1}"#, r#"{"v":1,"id":"ck-none"}"#] {
        let (status, value) = post(&restore, body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{value}");
        assert_eq!(value["error"]["code"], "not_found");
    }

    let (status, value) = post(&ck, r#"{"v":1,"id":"ck-1"}"#).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    let reply: CheckpointReply = serde_json::from_value(value).unwrap();
    assert_eq!(reply.id, "ck-1");
    assert!(reply.scope.is_empty());
    assert_eq!(reply.participants.len(), 1);
    assert_eq!(reply.participants[0].kind, Kind::Agent);
    assert_eq!(reply.participants[0].instance, "agent0");
    assert_eq!(reply.participants[0].record_count, 0);
    let doc = store::verify(run_dir, "ck-1").unwrap();
    assert_eq!(doc.participants.len(), 1);

    // The same id again is refused by the participant, nothing replaced.
    let (status, value) = post(&ck, r#"{"v":1,"id":"ck-1"}"#).await;
    assert!(
        status.is_client_error() || status.is_server_error(),
        "{value}"
    );

    let (status, value) = call(
        &http,
        Method::GET,
        &format!("{coord}/v1/coordinator/status"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{value}");
    let st: CoordinatorStatus = serde_json::from_value(value).unwrap();
    assert_eq!(st.latest.as_deref(), Some("ck-1"));
    assert!(!st.busy);
    assert_eq!(st.peers.len(), 1);
    assert_eq!(st.peers[0].url, agent);
    assert!(st.peers[0].error.is_none(), "{:?}", st.peers[0]);

    // The coordinator's metrics count the published checkpoint and the refused one.
    let text = metrics(&http, &coord).await;
    let count = |outcome: &str| {
        rollpoint_testkit::metric(
            &text,
            "rollpoint_coordinator_checkpoints_total",
            Some(("outcome", outcome)),
        )
    };
    assert_eq!(count("published"), 1.0, "{text}");
    assert_eq!(count("failed"), 1.0, "{text}");
    let unauthorized = http.get(format!("{coord}/metrics")).send().await.unwrap();
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);

    // A finished rollout is forgotten by the agent: a checkpoint naming it
    // exports nothing of it.
    let (status, _) = call(
        &http,
        Method::POST,
        &format!("{agent}/v1/rollouts"),
        Some(TOKEN),
        Some(&fake_task("gone").to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, result) = call(
        &http,
        Method::GET,
        &format!("{agent}/v1/rollouts/gone/result?wait_ms=120000"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut last = String::new();
    for round in 0.. {
        let body = format!(r#"{{"v":1,"id":"ck-f{round}","scope":["gone"]}}"#);
        let (status, value) = post(&ck, &body).await;
        assert_eq!(status, StatusCode::OK, "{value}");
        let reply: CheckpointReply = serde_json::from_value(value).unwrap();
        last = reply.id;
        if reply.participants[0].record_count == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "the finished rollout was never forgotten"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // A restore of the latest, which holds nothing to continue.
    let (status, value) = post(&restore, r#"{"v":1}"#).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    let restored: RestoreReply = serde_json::from_value(value).unwrap();
    assert_eq!(restored.source, last);
    assert_eq!(restored.restored.len(), 1);
    assert!(restored.restored[0].keys.is_empty());
    let (_, value) = call(
        &http,
        Method::GET,
        &format!("{coord}/v1/coordinator/status"),
        Some(TOKEN),
        None,
    )
    .await;
    assert_eq!(value["continues"], json!(last), "{value}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_moving_participants_that_are_not_there_is_refused_by_field() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path();
    let agent = agent(run_dir).await;
    let coord = coordinator(run_dir, &agent).await;
    let http = Client::new();
    let restore = format!("{coord}/v1/coordinator/restore");
    let post = |url: &str, body: &str| {
        let (http, url, body) = (http.clone(), url.to_owned(), body.to_owned());
        async move { call(&http, Method::POST, &url, Some(TOKEN), Some(&body)).await }
    };
    let (status, value) = post(
        &format!("{coord}/v1/coordinator/checkpoint"),
        r#"{"v":1,"id":"ck-1"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{value}");

    let move_of = |from: &str, to: &str| {
        json!({"v": 1, "scope": ["gone"], "moves": [{"kind": "agent", "from": from, "to": to}]})
            .to_string()
    };
    // No such participant wrote to the checkpoint.
    assert_unprocessable(
        &post(&restore, &move_of("ghost", "agent0")).await,
        "moves[0].from",
        "agent/ghost: it wrote nothing to this checkpoint",
    );
    // The second move is the one named.
    let two = json!({"v": 1, "moves": [
        {"kind": "agent", "from": "agent0", "to": "agent0"},
        {"kind": "agent", "from": "nobody", "to": "agent0"},
    ]});
    assert_unprocessable(
        &post(&restore, &two.to_string()).await,
        "moves[0].from",
        "agent/agent0: it is still a participant here",
    );
    assert_unprocessable(
        &post(
            &restore,
            &json!({"v": 1, "moves": [two["moves"][1].clone()]}).to_string(),
        )
        .await,
        "moves[0].from",
        "agent/nobody: it wrote nothing to this checkpoint",
    );

    // Nothing was changed: the checkpoint is not continued, and restores.
    let status_url = format!("{coord}/v1/coordinator/status");
    let (_, value) = call(&http, Method::GET, &status_url, Some(TOKEN), None).await;
    assert_eq!(value["continues"], Value::Null, "{value}");
    let (status, value) = post(&restore, r#"{"v":1}"#).await;
    assert_eq!(status, StatusCode::OK, "{value}");
    let (_, value) = call(&http, Method::GET, &status_url, Some(TOKEN), None).await;
    assert_eq!(value["continues"], json!("ck-1"), "{value}");
}
