//! Every owner route through `HttpOwner` against a `LocalOwner` over the
//! recording fake backend, on real HTTP.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::collections::BTreeMap;

use rollpoint_owner::{Owner, OwnerError};
use rollpoint_proto::anchor::{ExecRequest, LaunchRequest};
use serde_json::json;
use support::{Call, Served, simple_task, task};

fn exec(argv: &[&str], cwd: &str) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        env: BTreeMap::new(),
        cwd: cwd.into(),
        timeout_ms: 10_000,
        output_limit: 1 << 16,
        stdin: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn create_uploads_files_and_runs_setup_in_the_workdir() {
    let s = Served::start().await;
    let t = task(json!({
        "id": "repo-1",
        "sandbox": {"workdir": "/src", "hostname": "box"},
        "files": {"a.txt": "alpha", "/etc/motd": "hi"},
        "setup": [["write", "setup.log", "done"], ["true"]],
        "verify": {"command": ["true"]},
    }));
    let info = s.client.create_session(t).await.unwrap();
    assert!(info.session.starts_with("repo-1-"), "{info:?}");
    assert_eq!(info.workdir, "/src");
    assert!(info.capturable);
    assert_eq!(s.fake.sandboxes(), vec![info.sandbox.clone()]);
    assert_eq!(s.fake.file(&info.sandbox, "/src/a.txt").unwrap(), b"alpha");
    assert_eq!(s.fake.file(&info.sandbox, "/etc/motd").unwrap(), b"hi");
    assert_eq!(
        s.fake.file(&info.sandbox, "/src/setup.log").unwrap(),
        b"done"
    );
    let calls = s.fake.calls();
    assert_eq!(calls[0], Call::Create(info.sandbox.clone()));
    assert!(calls.contains(&Call::Exec(
        info.sandbox.clone(),
        vec!["true".into()],
        "/src".into()
    )));
    // Files go up before setup runs.
    let first_exec = calls
        .iter()
        .position(|c| matches!(c, Call::Exec(..)))
        .unwrap();
    let last_upload = calls
        .iter()
        .rposition(|c| matches!(c, Call::Upload(..)))
        .unwrap();
    assert!(last_upload < first_exec, "{calls:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn access_exec_files_and_launch_pass_through() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();

    let access = s.client.access(&info.session).await.unwrap();
    assert_eq!(access.session, info.session);
    assert_eq!(access.sandbox, info.sandbox);
    assert_eq!(access.workdir, "/workspace");
    assert_eq!(
        access.root.to_str().unwrap(),
        format!("/fake/{}/root", info.sandbox)
    );
    assert_eq!(
        access.control.to_str().unwrap(),
        format!("/fake/{}/control", info.sandbox)
    );
    // The in-process owner says the same.
    assert_eq!(s.local.access(&info.session).await.unwrap(), access);

    let out = s
        .client
        .exec(&info.session, exec(&["echo", "hello", "world"], "/"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, "hello world\n");

    // Binary bytes round-trip; a relative path lands under the workdir;
    // the mode goes through as given.
    let bytes: Vec<u8> = (0..=255u8).collect();
    s.client
        .upload(&info.session, "bin/blob", bytes.clone(), 0o750)
        .await
        .unwrap();
    assert!(s.fake.calls().contains(&Call::Upload(
        info.sandbox.clone(),
        "/workspace/bin/blob".into(),
        0o750
    )));
    let back = s
        .client
        .download(&info.session, "/workspace/bin/blob", 1024)
        .await
        .unwrap();
    assert_eq!(back, bytes);
    // A relative cwd is under the workdir too.
    let out = s
        .client
        .exec(&info.session, exec(&["cat", "blob"], "bin"))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");

    // Over the limit: the backend refuses, the error names the session.
    let err = s
        .client
        .download(&info.session, "bin/blob", 10)
        .await
        .unwrap_err();
    // The caller's limit refuses the file: unprocessable, as it stands.
    match err {
        OwnerError::Refused {
            status: 422,
            code: "unprocessable",
            message,
            ..
        } => assert!(message.contains("over the limit"), "{message}"),
        other => panic!("{other}"),
    }

    let launched = s
        .client
        .launch(
            &info.session,
            LaunchRequest {
                launch_id: "l1".into(),
                argv: vec!["agent".into()],
                env: BTreeMap::new(),
                cwd: String::new(),
                freeze: None,
                options: Vec::new(),
            },
        )
        .await
        .unwrap();
    assert_eq!(launched.launch_id, "l1");
    assert_eq!(
        launched.session_dir.to_str().unwrap(),
        format!("/fake/{}/control/launches/l1", info.sandbox)
    );
    assert!(
        s.fake
            .calls()
            .contains(&Call::Launch(info.sandbox.clone(), "l1".into()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_grades_then_ends_the_session() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["echo", "ok"]))
        .await
        .unwrap();
    let verdict = s.client.verify(&info.session).await.unwrap();
    assert!((verdict.reward - 1.0).abs() < f64::EPSILON);
    assert!(verdict.passed);
    assert_eq!(verdict.exit_code, Some(0));
    assert_eq!(verdict.stdout_tail, "ok\n");
    assert!(
        s.fake
            .calls()
            .contains(&Call::Destroy(info.sandbox.clone()))
    );
    assert!(s.fake.sandboxes().is_empty());
    let err = s.client.access(&info.session).await.unwrap_err();
    assert!(matches!(err, OwnerError::NotFound { ref session } if *session == info.session));
}

#[tokio::test(flavor = "multi_thread")]
async fn close_destroys_the_sandbox_and_forgets_the_session() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    s.client.close(&info.session).await.unwrap();
    assert_eq!(
        s.fake.calls().last().unwrap(),
        &Call::Destroy(info.sandbox.clone())
    );
    assert!(s.fake.sandboxes().is_empty());
    for err in [
        s.client.access(&info.session).await.unwrap_err(),
        s.client.close(&info.session).await.unwrap_err(),
    ] {
        assert!(
            matches!(err, OwnerError::NotFound { ref session } if *session == info.session),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_are_independent() {
    let s = Served::start().await;
    let a = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    let b = s
        .client
        .create_session(simple_task("t", &["true"]))
        .await
        .unwrap();
    assert_ne!(a.session, b.session);
    assert_ne!(a.sandbox, b.sandbox);
    s.client
        .upload(&a.session, "f", b"a".to_vec(), 0o600)
        .await
        .unwrap();
    // b's sandbox has no such file: unprocessable.
    let err = s.client.download(&b.session, "f", 10).await.unwrap_err();
    assert!(
        matches!(&err, OwnerError::Refused { status: 422, .. }),
        "{err}"
    );
    s.client.close(&a.session).await.unwrap();
    assert_eq!(s.fake.sandboxes(), vec![b.sandbox.clone()]);
    assert_eq!(
        s.client.access(&b.session).await.unwrap().sandbox,
        b.sandbox
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn many_sessions_at_once_each_get_their_own_sandbox() {
    let s = Served::start().await;
    let client = std::sync::Arc::new(s.client.clone());
    let seeds = (0..16).map(|i| {
        let client = std::sync::Arc::clone(&client);
        tokio::spawn(async move {
            let mut t = simple_task(&format!("task-{i}"), &["cat", "id"]);
            t.files.insert("id".into(), i.to_string());
            client.create_session(t).await.unwrap()
        })
    });
    let mut infos = Vec::new();
    for seed in seeds {
        infos.push(seed.await.unwrap());
    }
    let mut sandboxes: Vec<String> = infos.iter().map(|i| i.sandbox.clone()).collect();
    sandboxes.sort();
    sandboxes.dedup();
    assert_eq!(sandboxes.len(), 16);
    assert_eq!(s.fake.sandboxes().len(), 16);
    let verdicts = infos.iter().map(|info| {
        let client = std::sync::Arc::clone(&client);
        let session = info.session.clone();
        tokio::spawn(async move { client.verify(&session).await.unwrap() })
    });
    for (i, v) in verdicts.enumerate() {
        let v = v.await.unwrap();
        assert!(v.passed);
        assert_eq!(v.stdout_tail, i.to_string());
    }
    assert!(s.fake.sandboxes().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_the_open_sessions() {
    let s = Served::start().await;
    let scrape = |s: &Served| {
        let url = format!("{}/metrics", s.base);
        async move {
            let reply = reqwest::Client::new()
                .get(url)
                .bearer_auth(support::TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(reply.status(), 200);
            reply.text().await.unwrap()
        }
    };
    let text = scrape(&s).await;
    assert!(text.contains("rollpoint_owner_sessions 0"), "{text}");
    let info = s
        .client
        .create_session(simple_task("m1", &["true"]))
        .await
        .unwrap();
    let _other = s
        .client
        .create_session(simple_task("m2", &["true"]))
        .await
        .unwrap();
    let text = scrape(&s).await;
    assert!(text.contains("rollpoint_owner_sessions 2"), "{text}");
    assert!(
        text.contains("rollpoint_owner_sessions_seeding 0"),
        "{text}"
    );
    s.client.close(&info.session).await.unwrap();
    let text = scrape(&s).await;
    assert!(text.contains("rollpoint_owner_sessions 1"), "{text}");
    let unauthorized = reqwest::Client::new()
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorized.status(), 401);
}
