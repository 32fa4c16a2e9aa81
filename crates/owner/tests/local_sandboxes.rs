//! The owner over real local sandboxes (root): a session is seeded with its
//! files and setup, graded by its verify command, snapshotted for a
//! checkpoint and restored into a forked sandbox that holds the snapshot's
//! files at the same paths; closing leaves no sandbox behind.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use rollpoint_owner::{HttpOwner, LocalOwner, Owner, OwnerTask};
use rollpoint_proto::anchor::ExecRequest;
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_testkit::{require_root, supervisor_bin};

const TOKEN: &str = "local-sandbox-token";

fn sh(script: &str) -> ExecRequest {
    ExecRequest {
        output_limit: 1 << 16,
        ..rollpoint_testkit::shell(script)
    }
}

/// A local backend in a fresh directory (kept alive by the returned
/// guard), its owner served over HTTP, and a client of it.
async fn owner_over_http() -> (
    tempfile::TempDir,
    Arc<LocalBackend>,
    tokio::task::JoinHandle<std::io::Result<()>>,
    HttpOwner,
) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(
        LocalBackend::open(
            &dir.path().join("owner"),
            LocalOptions::new(supervisor_bin()),
        )
        .unwrap(),
    );
    let owner: Arc<dyn Owner> = Arc::new(LocalOwner::new(Arc::clone(&backend) as Arc<dyn Backend>));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(rollpoint_owner::serve(listener, owner, TOKEN));
    let client = HttpOwner::new(&base, TOKEN).unwrap();
    (dir, backend, server, client)
}

#[tokio::test(flavor = "multi_thread")]
async fn root_sessions_over_local_sandboxes_snapshot_restore_and_verify() {
    let (_dir, backend, server, client) = owner_over_http().await;

    let task: OwnerTask = serde_json::from_value(serde_json::json!({
        "id": "count",
        "sandbox": {"workdir": "/work/repo", "hostname": "count-box"},
        "files": {"lines.txt": "1\n"},
        "setup": [["/bin/sh", "-c", "echo 2 >> lines.txt"]],
        "verify": {
            "command": ["/bin/sh", "-c", "n=$(wc -l < lines.txt); echo \"{\\\"reward\\\": $n}\""],
            "reward": "json"
        }
    }))
    .unwrap();
    let info = client.create_session(task).await.unwrap();
    assert!(info.capturable);
    assert_eq!(info.workdir, "/work/repo");
    let access = client.access(&info.session).await.unwrap();
    assert_eq!(access.sandbox, info.sandbox);
    assert!(access.control.join("anchor.sock").exists());

    client
        .exec(&info.session, sh("echo 3 >> lines.txt"))
        .await
        .unwrap();
    let record = client.snapshot(&info.session, "ck1").await.unwrap();
    client
        .exec(&info.session, sh("echo after >> lines.txt"))
        .await
        .unwrap();

    let restored = client.restore(record).await.unwrap();
    assert_ne!(restored.sandbox, info.sandbox, "a new sandbox is current");
    let listing = backend.list().unwrap();
    assert_eq!(
        listing.sandboxes,
        std::slice::from_ref(&restored.sandbox),
        "the replaced sandbox is destroyed"
    );
    let out = client
        .exec(
            &info.session,
            sh("pwd; hostname; cat lines.txt | tr '\\n' ,"),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout, "/work/repo\ncount-box\n1,2,3,", "{out:?}");

    let verdict = client.verify(&info.session).await.unwrap();
    assert!((verdict.reward - 3.0).abs() < f64::EPSILON, "{verdict:?}");
    assert!(verdict.passed);
    assert!(
        backend.list().unwrap().sandboxes.is_empty(),
        "a graded session's sandbox is gone"
    );
    assert_eq!(backend.sweep_snapshots(&[]).unwrap().len(), 1);
    server.abort();
}

/// A spec field the backend refuses, or a task id at the longest, is the
/// request's matter: a 400 naming the field, or a session, never a 500, and
/// nothing left behind.
#[tokio::test(flavor = "multi_thread")]
async fn root_refused_spec_fields_are_bad_requests_and_long_ids_fit() {
    let (_dir, backend, server, client) = owner_over_http().await;
    for (sandbox, field) in [
        (
            serde_json::json!({"network": {"allow": []}}),
            "task.sandbox.network.allow",
        ),
        (
            serde_json::json!({"network": {"allow": ["nope"]}}),
            "task.sandbox.network.allow[0]",
        ),
        (
            serde_json::json!({"limits": {"pids": 0}}),
            "task.sandbox.limits.pids",
        ),
    ] {
        let task: OwnerTask = serde_json::from_value(serde_json::json!({
            "id": "bad", "sandbox": sandbox, "verify": {"command": ["true"]}
        }))
        .unwrap();
        match client.create_session(task).await {
            Err(rollpoint_owner::OwnerError::BadRequest { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    // The longest task id the owner takes makes sandbox and snapshot ids that fit.
    let id = "x".repeat(rollpoint_proto::limits::MAX_TASK_ID);
    let task: OwnerTask = serde_json::from_value(serde_json::json!({
        "id": id, "verify": {"command": ["true"]}
    }))
    .unwrap();
    let info = client.create_session(task).await.unwrap();
    let record = client
        .snapshot(
            &info.session,
            &"c".repeat(rollpoint_proto::limits::MAX_NAME),
        )
        .await
        .unwrap();
    client.close(&info.session).await.unwrap();
    client.delete_snapshot(&record.snapshot).await.unwrap();
    let left = backend.list().unwrap();
    assert!(left.sandboxes.is_empty(), "{left:?}");
    server.abort();
}

/// Bytes of `/tmp/ticks` in the session's sandbox (0 before the first).
async fn ticks(client: &HttpOwner, session: &str) -> usize {
    client
        .download(session, "/tmp/ticks", 1 << 20)
        .await
        .map_or(0, |b| b.len())
}

/// A checkpoint's batched pause over HTTP: the launches of several sessions
/// are frozen in one call and confirmed per launch, a session not open here
/// is left to its supervisor, and one call continues them.
#[tokio::test(flavor = "multi_thread")]
async fn root_launches_of_many_sessions_pause_and_continue_over_http() {
    use rollpoint_owner::SessionLaunch;
    use rollpoint_proto::receipt::{Method, Outcome};

    let (_dir, _backend, server, client) = owner_over_http().await;
    let mut launches = Vec::new();
    for i in 0..3 {
        let task: OwnerTask = serde_json::from_value(serde_json::json!({
            "id": format!("tick{i}"), "verify": {"command": ["true"]}
        }))
        .unwrap();
        let info = client.create_session(task).await.unwrap();
        let req = rollpoint_proto::anchor::LaunchRequest {
            launch_id: "ticker".into(),
            argv: vec![
                "sh".into(),
                "-c".into(),
                "while :; do echo x >> /tmp/ticks; sleep 0.02; done".into(),
            ],
            env: std::collections::BTreeMap::new(),
            cwd: String::new(),
            freeze: None,
            options: Vec::new(),
        };
        client.launch(&info.session, req).await.unwrap();
        launches.push(SessionLaunch {
            session: info.session,
            launch_id: "ticker".into(),
        });
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for l in &launches {
        while ticks(&client, &l.session).await == 0 {
            assert!(std::time::Instant::now() < deadline, "{l:?} never ticked");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    let mut asked = launches.clone();
    asked.push(SessionLaunch {
        session: "no-such-session".into(),
        launch_id: "ticker".into(),
    });

    let receipts = client.pause_launches(&asked).await.unwrap();
    assert_eq!(receipts.len(), 4);
    for (l, r) in launches.iter().zip(&receipts) {
        let r = r.as_ref().unwrap_or_else(|| panic!("{l:?}: no receipt"));
        assert_eq!(r.outcome, Outcome::Confirmed, "{r:?}");
        assert!(matches!(r.method, Method::CgroupV2 | Method::CgroupV1));
        assert!(!r.members.is_empty() && r.members.iter().all(|m| m.state == 'F'));
    }
    assert!(receipts[3].is_none(), "{:?}", receipts[3]);
    let mut before = Vec::new();
    for l in &launches {
        before.push(ticks(&client, &l.session).await);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for (l, n) in launches.iter().zip(&before) {
        assert_eq!(
            ticks(&client, &l.session).await,
            *n,
            "{l:?} ticked while paused"
        );
    }

    let continued = client.continue_launches(&asked).await.unwrap();
    assert_eq!(continued.len(), 4);
    assert!(
        continued[..3]
            .iter()
            .all(|r| r.outcome == Outcome::Confirmed),
        "{continued:?}"
    );
    assert_eq!(continued[3].outcome, Outcome::AlreadyEnded);
    for (l, n) in launches.iter().zip(&before) {
        while ticks(&client, &l.session).await <= *n {
            assert!(std::time::Instant::now() < deadline + std::time::Duration::from_secs(30));
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    for l in &launches {
        client.close(&l.session).await.unwrap();
    }
    server.abort();
}
