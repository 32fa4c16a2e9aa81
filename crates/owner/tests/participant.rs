//! The owner as the checkpoint's resources participant, over the recording
//! fake backend: seeds wait while admission is closed, restarts are the
//! sessions not to be captured, export snapshots exactly the sessions in
//! scope, a commit with stop frees their sandboxes, install forks them as
//! the next attempt in a fresh owner, and retire closes an attempt.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use rollpoint_checkpoint::participant::{Kind, Participant, record_key};
use rollpoint_owner::{LocalOwner, Owner, ResourcesParticipant};
use rollpoint_sandbox::Backend;
use serde_json::json;
use support::{Call, FakeBackend, task};

fn key_task(key: &str, capture: bool) -> rollpoint_owner::OwnerTask {
    task(json!({
        "id": key,
        "files": {"state": key},
        "verify": {"command": ["true"]},
        "capture": capture,
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn seeds_wait_restarts_are_named_and_export_snapshots_the_scope() {
    let fake = Arc::new(FakeBackend::default());
    let owner = Arc::new(LocalOwner::new(Arc::clone(&fake) as Arc<dyn Backend>));
    let p = ResourcesParticipant::new(Arc::clone(&owner), "owner0");
    assert_eq!(p.kind(), Kind::Resources);
    let r1 = owner.create_session(key_task("r1", true)).await.unwrap();
    let r2 = owner.create_session(key_task("r2", true)).await.unwrap();
    owner.create_session(key_task("r3", false)).await.unwrap();

    p.close_admission("ck1").await.unwrap();
    let o = Arc::clone(&owner);
    let late = tokio::spawn(async move { o.create_session(key_task("r4", true)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !late.is_finished(),
        "a seed waits while admission is closed"
    );
    let ready = p.readiness().await;
    assert!(ready.ready, "{ready:?}");
    assert_eq!(
        ready.restarts,
        ["r3"],
        "the session not to capture restarts"
    );
    assert_eq!(ready.counts["sessions"], 3);

    let records = p.export("ck1", &[key("r1"), key("r3")]).await.unwrap();
    assert_eq!(records.len(), 1, "only the capturable session in scope");
    assert_eq!(record_key(&records[0]), Ok(key("r1")));
    assert_eq!(records[0]["session"], r1.session.as_str());
    assert_eq!(fake.retained("ck1").len(), 1);

    p.park_exported().await.unwrap();
    assert!(fake.calls().contains(&Call::Destroy(r1.sandbox.clone())));
    assert!(!fake.sandboxes().contains(&r1.sandbox));
    assert!(
        fake.sandboxes().contains(&r2.sandbox),
        "out of scope: untouched"
    );

    p.open_admission().await.unwrap();
    let seeded = tokio::time::timeout(Duration::from_secs(10), late)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(seeded.session.starts_with("r4-"));

    // A fresh owner over the same backend, as after a crash.
    let fresh = Arc::new(LocalOwner::new(Arc::clone(&fake) as Arc<dyn Backend>));
    let q = ResourcesParticipant::new(Arc::clone(&fresh), "owner0");
    q.close_admission("ck1").await.unwrap();
    let next = q.install("ck1", records, &[key("r1")]).await.unwrap();
    assert_eq!(next, ["r1-a1"]);
    let live = fresh.live_sessions();
    assert_eq!(live.len(), 1);
    assert_eq!(
        live[0].attempt.to_string(),
        "r1-a1",
        "the session serves the next attempt"
    );
    let access = fresh.access(&r1.session).await.unwrap();
    assert_ne!(access.sandbox, r1.sandbox, "a fork with a new id");
    assert_eq!(
        fresh.download(&r1.session, "state", 100).await.unwrap(),
        b"r1",
        "the fork holds the snapshot's files"
    );

    assert_eq!(q.retire(&[key("r1-a1")]).await.unwrap(), [key("r1-a1")]);
    assert!(
        fresh.live_sessions().is_empty(),
        "the retired attempt is closed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn install_names_bad_records_and_forks_nothing_on_failure() {
    let fake = Arc::new(FakeBackend::default());
    let owner = Arc::new(LocalOwner::new(Arc::clone(&fake) as Arc<dyn Backend>));
    let p = ResourcesParticipant::new(Arc::clone(&owner), "owner0");
    let err = p
        .install("ck", vec![json!({"v": 1})], &[key("r1")])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`key`"), "{err}");
    let err = p
        .install("ck", vec![json!({"key": "r1", "v": 7})], &[key("r1")])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("r1") && err.to_string().contains('7'),
        "{err}"
    );

    let a = owner.create_session(key_task("a", true)).await.unwrap();
    let b = owner.create_session(key_task("b", true)).await.unwrap();
    let scope = [key("a"), key("b")];
    let records = p.export("ck", &scope).await.unwrap();
    owner.close(&a.session).await.unwrap();
    owner.close(&b.session).await.unwrap();
    let fresh = Arc::new(LocalOwner::new(Arc::clone(&fake) as Arc<dyn Backend>));
    let q = ResourcesParticipant::new(Arc::clone(&fresh), "owner0");
    fake.fail_next("fork");
    let err = q.install("ck", records, &scope).await.unwrap_err();
    assert!(err.to_string().contains("-a1"), "{err}");
    assert!(
        fresh.live_sessions().is_empty(),
        "all or nothing: {:?}",
        fresh.live_sessions()
    );
    assert!(fake.sandboxes().is_empty(), "{:?}", fake.sandboxes());
}

fn key(text: &str) -> rollpoint_checkpoint::AttemptKey {
    text.parse().unwrap()
}
