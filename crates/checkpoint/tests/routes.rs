//! Every control route over real HTTP on 127.0.0.1:0: bad bodies name the
//! field, a stale or conflicting id is refused, a wrong token is 401, and
//! the lease reopens a participant whose controller went silent.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Fake, TOKEN, keys, serve};
use rollpoint_checkpoint::wire::{PrepareRequest, ResumeRequest};
use rollpoint_checkpoint::{
    BLOCKER_CAP, Code, HostConfig, HttpParticipant, Kind, ParticipantApi, ParticipantHost, Phase,
};
use serde_json::{Value, json};

const VERBS: [&str; 6] = ["prepare", "commit", "restore", "resume", "retire", "forget"];

struct Server {
    base: String,
    fake: Arc<Fake>,
    client: HttpParticipant,
    _dir: tempfile::TempDir,
}

async fn server_with(lease_grace: Duration) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::with_records(Kind::Agent, "driver-1", &keys(2), 2);
    let mut config = HostConfig::new(dir.path());
    config.lease_grace = lease_grace;
    let control = ParticipantHost::new(fake.clone(), config).expect("control");
    let base = serve(Arc::new(control)).await;
    let client = HttpParticipant::new(&base, TOKEN).expect("client");
    Server {
        base,
        fake,
        client,
        _dir: dir,
    }
}

async fn server() -> Server {
    server_with(Duration::from_secs(600)).await
}

async fn post(base: &str, verb: &str, token: &str, body: &str) -> (u16, Value) {
    let reply = reqwest::Client::new()
        .post(format!("{base}/v1/checkpoint/{verb}"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("send");
    let status = reply.status().as_u16();
    let body = reply.bytes().await.expect("body");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn valid_body(verb: &str) -> Value {
    match verb {
        "prepare" | "resume" => json!({"checkpoint": "c1", "timeout_ms": 1000}),
        "commit" => json!({"checkpoint": "c1", "timeout_ms": 1000, "scope": ["r0"]}),
        "restore" => json!({"checkpoint": "x1", "source": "c0", "timeout_ms": 1000, "scope": []}),
        _ => json!({"keys": ["r0"], "timeout_ms": 1000}),
    }
}

fn assert_bad(verb: &str, reply: &(u16, Value), field: &str) {
    assert_eq!(reply.0, 400, "{verb}: {}", reply.1);
    assert_eq!(
        reply.1["error"]["code"], "bad_request",
        "{verb}: {}",
        reply.1
    );
    assert_eq!(reply.1["error"]["field"], field, "{verb}: {}", reply.1);
}

#[tokio::test]
async fn bad_bodies_get_400_naming_the_field() {
    let s = server().await;
    for verb in VERBS {
        let valid = valid_body(verb);
        let first_field = if matches!(verb, "retire" | "forget") {
            "keys"
        } else {
            "checkpoint"
        };

        let mut missing = valid.clone();
        missing.as_object_mut().unwrap().remove(first_field);
        let reply = post(&s.base, verb, TOKEN, &missing.to_string()).await;
        assert_bad(verb, &reply, first_field);

        let mut extra = valid.clone();
        extra["surprise"] = json!(true);
        let reply = post(&s.base, verb, TOKEN, &extra.to_string()).await;
        assert_eq!(reply.0, 400, "{verb}: {}", reply.1);
        assert!(
            reply.1["error"]["message"]
                .as_str()
                .unwrap()
                .contains("surprise"),
            "{verb}: {}",
            reply.1
        );

        let mut wrong_type = valid.clone();
        wrong_type["timeout_ms"] = json!("soon");
        let reply = post(&s.base, verb, TOKEN, &wrong_type.to_string()).await;
        assert_bad(verb, &reply, "timeout_ms");

        let mut zero = valid.clone();
        zero["timeout_ms"] = json!(0);
        let reply = post(&s.base, verb, TOKEN, &zero.to_string()).await;
        assert_bad(verb, &reply, "timeout_ms");

        let reply = post(&s.base, verb, TOKEN, "{not json").await;
        assert_eq!(reply.0, 400, "{verb}: {}", reply.1);
    }
    for verb in ["prepare", "commit", "restore", "resume"] {
        let mut bad_id = valid_body(verb);
        bad_id["checkpoint"] = json!("../etc");
        let reply = post(&s.base, verb, TOKEN, &bad_id.to_string()).await;
        assert_bad(verb, &reply, "checkpoint");
    }
    let mut bad_scope = valid_body("commit");
    bad_scope["scope"] = json!(["r0", ""]);
    let reply = post(&s.base, "commit", TOKEN, &bad_scope.to_string()).await;
    assert_bad("commit", &reply, "scope[1]");
    let mut bad_source = valid_body("restore");
    bad_source["source"] = json!("a/b");
    let reply = post(&s.base, "restore", TOKEN, &bad_source.to_string()).await;
    assert_bad("restore", &reply, "source");
    for verb in ["retire", "forget"] {
        let reply = post(
            &s.base,
            verb,
            TOKEN,
            &json!({"keys": [], "timeout_ms": 10}).to_string(),
        )
        .await;
        assert_bad(verb, &reply, "keys");
    }
    assert!(
        s.fake.calls().is_empty(),
        "no hook ran: {:?}",
        s.fake.calls()
    );
}

#[tokio::test]
async fn a_wrong_or_missing_token_gets_401_on_every_route() {
    let s = server().await;
    for verb in VERBS {
        let body = valid_body(verb).to_string();
        for token in ["wrong", "", "s3cret-token-and-more"] {
            let reply = post(&s.base, verb, token, &body).await;
            assert_eq!(reply.0, 401, "{verb} with {token:?}");
            assert_eq!(reply.1["error"]["code"], "unauthorized");
        }
    }
    let reply = reqwest::Client::new()
        .get(format!("{}/v1/checkpoint/status", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status().as_u16(), 401);
    let wrong = HttpParticipant::new(&s.base, "nope").unwrap();
    assert_eq!(
        wrong.status().await.expect_err("401").code,
        Code::Unauthorized
    );
    assert!(
        s.fake.calls().is_empty(),
        "no hook ran: {:?}",
        s.fake.calls()
    );
}

fn prepare(id: &str) -> PrepareRequest {
    PrepareRequest {
        checkpoint: id.to_owned(),
        timeout_ms: 5_000,
    }
}

fn resume(id: &str) -> ResumeRequest {
    ResumeRequest {
        checkpoint: id.to_owned(),
        timeout_ms: 5_000,
    }
}

#[tokio::test]
async fn a_stale_id_is_refused_and_resume_is_idempotent() {
    let s = server().await;
    let reply = s.client.prepare(prepare("c1")).await.expect("prepare");
    assert_eq!(reply.phase, Phase::Prepared);
    assert!(!s.fake.is_open());
    let first = s.client.resume(resume("c1")).await.expect("resume");
    assert!(!first.idempotent);
    assert!(s.fake.is_open());
    let again = s.client.resume(resume("c1")).await.expect("resume again");
    assert!(again.idempotent);
    let err = s.client.prepare(prepare("c1")).await.expect_err("stale");
    assert_eq!(err.code, Code::StaleCheckpoint, "{err}");
    let raw = post(
        &s.base,
        "prepare",
        TOKEN,
        &valid_body("prepare").to_string(),
    )
    .await;
    assert_eq!(raw.0, 409);
    assert_eq!(raw.1["error"]["code"], "stale_checkpoint");
    assert!(
        s.fake.is_open(),
        "a refused prepare does not close admission"
    );
}

#[tokio::test]
async fn a_conflicting_id_is_refused() {
    let s = server().await;
    s.client.prepare(prepare("c1")).await.expect("prepare");
    let err = s.client.prepare(prepare("c2")).await.expect_err("conflict");
    assert_eq!(err.code, Code::CheckpointConflict, "{err}");
    let raw = post(
        &s.base,
        "commit",
        TOKEN,
        &json!({"checkpoint": "c2", "timeout_ms": 1000, "scope": []}).to_string(),
    )
    .await;
    assert_eq!(raw.0, 409);
    assert_eq!(raw.1["error"]["code"], "checkpoint_conflict");
    let err = s
        .client
        .resume(resume("c2"))
        .await
        .expect_err("resume other");
    assert_eq!(err.code, Code::CheckpointConflict);
    assert!(!s.fake.is_open(), "c1 is still open");
    s.client.resume(resume("c1")).await.expect("resume");
}

#[tokio::test]
async fn calls_out_of_phase_are_invalid() {
    let s = server().await;
    let raw = post(&s.base, "commit", TOKEN, &valid_body("commit").to_string()).await;
    assert_eq!(raw.0, 409, "{}", raw.1);
    assert_eq!(raw.1["error"]["code"], "invalid_phase");
    s.client.prepare(prepare("c1")).await.expect("prepare");
    let raw = post(&s.base, "retire", TOKEN, &valid_body("retire").to_string()).await;
    assert_eq!(raw.0, 409, "{}", raw.1);
    assert_eq!(raw.1["error"]["code"], "invalid_phase");
    assert!(!s.fake.calls().contains(&"retire".to_owned()));
}

#[tokio::test]
async fn a_participant_not_ready_reports_capped_blockers_and_stays_closed() {
    let s = server().await;
    s.fake
        .set(|st| st.blockers = (0..250).map(|i| format!("run {i} busy")).collect());
    let reply = s
        .client
        .prepare(PrepareRequest {
            checkpoint: "c1".to_owned(),
            timeout_ms: 200,
        })
        .await
        .expect("prepare");
    assert_eq!(reply.phase, Phase::Preparing);
    assert_eq!(reply.readiness.blockers.len(), BLOCKER_CAP);
    assert_eq!(reply.readiness.blocker_count, 250);
    assert!(!s.fake.is_open(), "admission stays closed until resume");
    let status = s.client.status().await.expect("status");
    assert_eq!(status.phase, Phase::Preparing);
    assert_eq!(status.checkpoint.as_deref(), Some("c1"));
    assert_eq!(status.readiness.blocker_count, 250);
    assert!(status.lease_remaining_ms.is_some());

    // Readiness reached while a second prepare waits: it answers prepared.
    let waiter = {
        let client = s.client.clone();
        tokio::spawn(async move { client.prepare(prepare("c1")).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.fake.set(|st| st.blockers.clear());
    let reply = waiter.await.unwrap().expect("prepare");
    assert_eq!(reply.phase, Phase::Prepared);
    s.client.resume(resume("c1")).await.expect("resume");
    assert!(s.fake.is_open());
}

#[tokio::test]
async fn a_resume_aborts_a_waiting_prepare() {
    let s = server().await;
    s.fake.set(|st| st.blockers = vec!["busy".to_owned()]);
    let waiter = {
        let client = s.client.clone();
        tokio::spawn(async move {
            client
                .prepare(PrepareRequest {
                    checkpoint: "c1".to_owned(),
                    timeout_ms: 60_000,
                })
                .await
        })
    };
    // Wait until the prepare has closed admission.
    for _ in 0..500 {
        if !s.fake.is_open() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!s.fake.is_open());
    s.client.resume(resume("c1")).await.expect("resume");
    let err = waiter.await.unwrap().expect_err("aborted");
    assert_eq!(err.code, Code::StaleCheckpoint, "{err}");
    assert!(s.fake.is_open());
}

#[tokio::test]
async fn the_lease_reopens_a_participant_whose_controller_went_silent() {
    let s = server_with(Duration::from_millis(300)).await;
    let reply = s
        .client
        .prepare(PrepareRequest {
            checkpoint: "c1".to_owned(),
            timeout_ms: 100,
        })
        .await
        .expect("prepare");
    assert_eq!(reply.phase, Phase::Prepared);
    assert!(!s.fake.is_open());
    let mut reopened = false;
    for _ in 0..1000 {
        if s.fake.is_open() {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reopened, "the lease did not reopen admission");
    let status = s.client.status().await.expect("status");
    assert_eq!(status.phase, Phase::Idle);
    assert_eq!(status.checkpoint, None);
    let err = s.client.prepare(prepare("c1")).await.expect_err("stale");
    assert_eq!(err.code, Code::StaleCheckpoint);
}

#[tokio::test]
async fn retire_and_forget_reach_the_participant() {
    let s = server().await;
    let raw = post(
        &s.base,
        "retire",
        TOKEN,
        &json!({"keys": ["r0", "r1"], "timeout_ms": 1000}).to_string(),
    )
    .await;
    assert_eq!(raw.0, 200, "{}", raw.1);
    assert_eq!(raw.1["keys"], json!(["r0", "r1"]));
    assert_eq!(s.fake.get(|st| st.retired.len()), 2);
    let raw = post(
        &s.base,
        "forget",
        TOKEN,
        &json!({"keys": ["r0"], "timeout_ms": 1000}).to_string(),
    )
    .await;
    assert_eq!(raw.0, 200, "{}", raw.1);
    assert!(
        s.fake
            .get(|st| st.forgotten.contains("r0") && !st.retired.contains("r0"))
    );
}

fn commit(id: &str, scope: &[&str], stop: bool) -> rollpoint_checkpoint::wire::CommitRequest {
    rollpoint_checkpoint::wire::CommitRequest {
        checkpoint: id.to_owned(),
        timeout_ms: 5_000,
        scope: scope.iter().map(|k| k.parse().unwrap()).collect(),
        stop,
    }
}

#[tokio::test]
async fn a_repeated_commit_replays_and_another_scope_conflicts() {
    let s = server().await;
    s.client.prepare(prepare("c1")).await.expect("prepare");
    let first = s
        .client
        .commit(commit("c1", &["r0", "r1"], false))
        .await
        .expect("commit");
    assert_eq!(first.phase, Phase::Committed);
    assert_eq!(first.manifest.record_count, 4);
    let again = s
        .client
        .commit(commit("c1", &["r1", "r0"], false))
        .await
        .expect("retry");
    assert_eq!(again, first, "a retry replays the recorded reply");
    let exports = s
        .fake
        .calls()
        .iter()
        .filter(|c| c.starts_with("export"))
        .count();
    assert_eq!(exports, 1, "exported once");
    let err = s
        .client
        .commit(commit("c1", &["r0"], false))
        .await
        .expect_err("other scope");
    assert_eq!(err.code, Code::CheckpointConflict);
    let replay = s
        .client
        .prepare(prepare("c1"))
        .await
        .expect("prepare replay");
    assert_eq!(replay.phase, Phase::Prepared);
    s.client.resume(resume("c1")).await.expect("resume");
}

#[tokio::test]
async fn commit_refuses_regressed_readiness_and_restarts_in_scope() {
    let s = server().await;
    s.client.prepare(prepare("c1")).await.expect("prepare");
    s.fake
        .set(|st| st.blockers = vec!["reply delivered".to_owned()]);
    let err = s
        .client
        .commit(commit("c1", &["r0"], false))
        .await
        .expect_err("regressed");
    assert_eq!(err.code, Code::InvalidPhase, "{err}");
    assert!(err.message.contains("reply delivered"), "{err}");
    s.fake.set(|st| {
        st.blockers.clear();
        st.restarts = vec!["r1".parse().expect("key")];
    });
    let err = s
        .client
        .commit(commit("c1", &["r0", "r1"], false))
        .await
        .expect_err("restart");
    assert_eq!(err.code, Code::RestartInScope, "{err}");
    assert!(err.message.contains("r1"), "{err}");
    let ok = s
        .client
        .commit(commit("c1", &["r0"], true))
        .await
        .expect("commit");
    assert_eq!(ok.manifest.record_count, 2);
    assert!(s.fake.get(|st| st.parked), "stop parks the exported work");
    s.client.resume(resume("c1")).await.expect("resume");
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused() {
    let s = server().await;
    let huge = format!(
        "{{\"keys\": [\"{}\"], \"timeout_ms\": 10}}",
        "k".repeat(rollpoint_checkpoint::BODY_LIMIT)
    );
    let reply = post(&s.base, "retire", TOKEN, &huge).await;
    assert_eq!(reply.0, 413, "{}", reply.1);
    assert_eq!(reply.1["error"]["code"], "too_large");
}

#[tokio::test]
async fn every_call_extends_the_lease() {
    let s = server_with(Duration::from_secs(2)).await;
    s.client
        .prepare(PrepareRequest {
            checkpoint: "c1".to_owned(),
            timeout_ms: 100,
        })
        .await
        .expect("prepare");
    let short = s.client.status().await.unwrap().lease_remaining_ms.unwrap();
    assert!(short <= 2_100, "lease {short} ms");
    s.client
        .prepare(PrepareRequest {
            checkpoint: "c1".to_owned(),
            timeout_ms: 30_000,
        })
        .await
        .expect("prepare again");
    let long = s.client.status().await.unwrap().lease_remaining_ms.unwrap();
    assert!(
        long > 20_000,
        "lease {long} ms after a call with a 30 s deadline"
    );
    s.client.resume(resume("c1")).await.expect("resume");
    assert_eq!(s.client.status().await.unwrap().lease_remaining_ms, None);
}

#[tokio::test]
async fn a_restored_participant_whose_controller_went_silent_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let scope = keys(2);
    let records: Vec<Value> = scope
        .iter()
        .map(|k| json!({"key": k, "bookmark": 1}))
        .collect();
    rollpoint_checkpoint::store::write(dir.path(), "c0", Kind::Agent, "driver-1", &scope, &records)
        .expect("write");
    let fake = Fake::new(Kind::Agent, "driver-1");
    let mut config = HostConfig::new(dir.path());
    config.lease_grace = Duration::from_millis(300);
    let control = ParticipantHost::new(fake.clone(), config).expect("control");
    let base = serve(Arc::new(control)).await;
    let client = HttpParticipant::new(&base, TOKEN).unwrap();
    let reply = client
        .restore(rollpoint_checkpoint::wire::RestoreRequest {
            checkpoint: "x1".to_owned(),
            source: "c0".to_owned(),
            timeout_ms: 100,
            scope: vec!["r1".parse().expect("key")],
            fork: None,
            from_instance: None,
        })
        .await
        .expect("restore");
    assert_eq!(reply.restored, vec!["r1-a1"]);
    assert_eq!(reply.record_count, 1);
    assert_eq!(fake.get(|s| s.installed.clone()), vec![records[1].clone()]);
    assert!(!fake.is_open());
    let mut reopened = false;
    for _ in 0..1000 {
        if fake.is_open() {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        reopened,
        "the lease did not reopen the restored participant"
    );
    assert_eq!(client.status().await.unwrap().phase, Phase::Idle);
}

#[test]
fn a_client_needs_an_http_base() {
    for bad in ["not a url", "https://127.0.0.1:1", "mailto:a@b"] {
        let err = HttpParticipant::new(bad, TOKEN).expect_err(bad);
        assert_eq!(err.field.as_deref(), Some("base"), "{bad}: {err}");
    }
}
