//! The checkpoint entry points: snapshot a session, restore it into a fork
//! (in the same owner and in a fresh one after a restart), delete snapshots,
//! and the session record's format.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use reqwest::Method;
use rollpoint_owner::{Owner, OwnerError, RECORD_VERSION, SessionRecord};
use serde_json::json;
use support::{Call, Served, TOKEN, raw, simple_task, task};

#[tokio::test(flavor = "multi_thread")]
async fn snapshot_then_restore_makes_a_fork_current_and_destroys_the_old_sandbox() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(task(json!({
            "id": "t",
            "sandbox": {"workdir": "/w", "hostname": "h"},
            "files": {"state": "before"},
            "verify": {"command": ["cat", "state"], "reward": "exit_code"},
        })))
        .await
        .unwrap();
    let record = s.client.snapshot(&info.session, "ck-1").await.unwrap();
    assert_eq!(record.v, RECORD_VERSION);
    assert_eq!(record.session, info.session);
    assert_eq!(record.sandbox, info.sandbox);
    assert_eq!(record.workdir, "/w");
    assert_eq!(record.checkpoint, "ck-1");
    assert_eq!(record.spec.hostname, "h");
    assert_eq!(record.task.id, "t");
    assert!(record.snapshot.contains("ck-1") && record.snapshot.contains(&info.session));
    assert_eq!(s.fake.snapshots(), vec![record.snapshot.clone()]);
    assert_eq!(
        s.fake.retained("ck-1"),
        vec![record.snapshot.clone()],
        "the backend records which checkpoint names the snapshot"
    );

    // Repeating the snapshot for the same checkpoint returns the same record
    // without a second backend snapshot.
    let again = s.client.snapshot(&info.session, "ck-1").await.unwrap();
    assert_eq!(again, record);
    let snaps = |calls: &[Call]| {
        calls
            .iter()
            .filter(|c| matches!(c, Call::Snapshot(..)))
            .count()
    };
    assert_eq!(snaps(&s.fake.calls()), 1);

    // The sandbox moves on after the snapshot.
    s.client
        .upload(&info.session, "state", b"after".to_vec(), 0o644)
        .await
        .unwrap();

    // The record round-trips through its JSON.
    let text = serde_json::to_vec(&record).unwrap();
    assert_eq!(SessionRecord::decode(&text).unwrap(), record);

    let access = s.client.restore(record.clone()).await.unwrap();
    assert_eq!(access.session, info.session);
    assert_ne!(access.sandbox, info.sandbox);
    assert_eq!(access.workdir, "/w");
    assert_eq!(s.client.access(&info.session).await.unwrap(), access);
    let calls = s.fake.calls();
    assert!(calls.contains(&Call::Fork(record.snapshot.clone(), access.sandbox.clone())));
    assert!(calls.contains(&Call::Destroy(info.sandbox.clone())));
    assert_eq!(s.fake.sandboxes(), vec![access.sandbox.clone()]);
    // The fork holds the files as they were at the snapshot.
    let state = s
        .client
        .download(&info.session, "state", 100)
        .await
        .unwrap();
    assert_eq!(state, b"before");

    // The restored session works as any other: a new snapshot for a new
    // checkpoint, verify on the fork, and the fork destroyed after.
    let second = s.client.snapshot(&info.session, "ck-2").await.unwrap();
    assert_eq!(second.sandbox, access.sandbox);
    assert_ne!(second.snapshot, record.snapshot);
    let verdict = s.client.verify(&info.session).await.unwrap();
    assert!(verdict.passed);
    assert!(s.fake.sandboxes().is_empty());

    // Snapshots outlive the session until deleted.
    assert_eq!(s.fake.snapshots().len(), 2);
    s.client.delete_snapshot(&record.snapshot).await.unwrap();
    s.client.delete_snapshot(&second.snapshot).await.unwrap();
    assert!(s.fake.snapshots().is_empty());
    assert!(
        s.fake
            .calls()
            .contains(&Call::DeleteSnapshot(record.snapshot.clone()))
    );
    // Deleting it again is answered 404 `not_found`, naming the snapshot.
    let err = s
        .client
        .delete_snapshot(&record.snapshot)
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&record.snapshot), "{err}");
    assert!(
        matches!(
            err,
            OwnerError::Refused {
                status: 404,
                code: "not_found",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_owner_restores_a_record_after_a_restart() {
    let first = Served::start().await;
    let info = first
        .client
        .create_session(simple_task("t", &["cat", "marker"]))
        .await
        .unwrap();
    first
        .client
        .upload(&info.session, "marker", b"m".to_vec(), 0o600)
        .await
        .unwrap();
    let record = first.client.snapshot(&info.session, "ck").await.unwrap();
    let text = serde_json::to_vec(&record).unwrap();
    let fake = std::sync::Arc::clone(&first.fake);
    drop(first);

    // The owner that made the session is gone; a new one over the same
    // backend knows nothing of it until the record is restored.
    let second = Served::over(fake).await;
    assert!(matches!(
        second.client.access(&info.session).await.unwrap_err(),
        OwnerError::NotFound { .. }
    ));
    let record = SessionRecord::decode(&text).unwrap();
    let access = second.client.restore(record).await.unwrap();
    assert_eq!(access.session, info.session);
    assert_ne!(access.sandbox, info.sandbox);
    let verdict = second.client.verify(&info.session).await.unwrap();
    assert!(verdict.passed, "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn records_of_an_unknown_version_are_rejected_by_name() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    let record = s.client.snapshot(&info.session, "ck").await.unwrap();
    let mut value = serde_json::to_value(&record).unwrap();
    value["v"] = json!(2);
    let text = value.to_string();

    match SessionRecord::decode(text.as_bytes()).unwrap_err() {
        OwnerError::BadRequest { field, message } => {
            assert_eq!(field, "v");
            assert!(message.contains("session record"), "{message}");
            assert!(message.contains("unknown version 2"), "{message}");
        }
        other => panic!("{other}"),
    }
    let (status, body) = raw(
        Method::POST,
        &s.url("/v1/owner/restore"),
        Some(TOKEN),
        Some(&text),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "v");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown version 2")
    );

    // Other bad records name their field too.
    value["v"] = json!(1);
    value["task"]["verify"]["timeout_s"] = json!("x");
    let (status, body) = raw(
        Method::POST,
        &s.url("/v1/owner/restore"),
        Some(TOKEN),
        Some(&value.to_string()),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "task.verify.timeout_s");
    value["task"]["verify"]["timeout_s"] = json!(5);
    value.as_object_mut().unwrap().remove("snapshot");
    let (status, body) = raw(
        Method::POST,
        &s.url("/v1/owner/restore"),
        Some(TOKEN),
        Some(&value.to_string()),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["field"], "snapshot");
    // No fork was attempted for any of them.
    assert!(!s.fake.calls().iter().any(|c| matches!(c, Call::Fork(..))));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_that_may_not_be_captured_refuses_snapshots() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(task(
            json!({"id": "nc", "capture": false, "verify": {"command": ["true"]}}),
        ))
        .await
        .unwrap();
    assert!(!info.capturable);
    match s.client.snapshot(&info.session, "ck").await.unwrap_err() {
        OwnerError::NotCapturable { session } => assert_eq!(session, info.session),
        other => panic!("{other}"),
    }
    assert!(s.fake.snapshots().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn restoring_from_a_missing_snapshot_leaves_the_session_as_it_was() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    let mut record = s.client.snapshot(&info.session, "ck").await.unwrap();
    s.client.delete_snapshot(&record.snapshot).await.unwrap();
    record.checkpoint = "ck".into();
    let err = s.client.restore(record.clone()).await.unwrap_err();
    match &err {
        OwnerError::Remote {
            status, message, ..
        } => {
            assert_eq!(*status, 500);
            assert!(message.contains(&info.session), "{message}");
            assert!(message.contains(&record.snapshot), "{message}");
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        s.client.access(&info.session).await.unwrap().sandbox,
        info.sandbox
    );
    assert_eq!(s.fake.sandboxes(), vec![info.sandbox.clone()]);
}
