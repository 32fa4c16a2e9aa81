//! Grading and seeding outcomes over HTTP: exit-code and JSON rewards, a
//! timed-out verify, and a failing setup.
#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use rollpoint_owner::{Owner, OwnerError};
use serde_json::json;
use support::{Call, Served, task};

async fn grade(verify: serde_json::Value) -> rollpoint_owner::Verdict {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(task(json!({"id": "g", "verify": verify})))
        .await
        .unwrap();
    s.client.verify(&info.session).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_code_rewards() {
    let pass = grade(json!({"command": ["true"]})).await;
    assert!((pass.reward - 1.0).abs() < f64::EPSILON);
    assert!(pass.passed);
    let fail =
        grade(json!({"command": ["fail", "3", "tests failed"], "reward": "exit_code"})).await;
    assert!(fail.reward.abs() < f64::EPSILON);
    assert!(!fail.passed);
    assert_eq!(fail.exit_code, Some(3));
    assert_eq!(fail.stderr_tail, "tests failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn json_rewards_take_the_last_reward_line() {
    let v = grade(json!({
        "command": ["echo", "{\"reward\": 0.25}"],
        "reward": "json",
        "timeout_s": 5,
    }))
    .await;
    assert!((v.reward - 0.25).abs() < f64::EPSILON, "{v:?}");
    assert!(v.passed);
    assert!(v.reward_error.is_none());

    // No reward line: 0, with the reason.
    let v = grade(json!({"command": ["echo", "no json here"], "reward": "json"})).await;
    assert!(v.reward.abs() < f64::EPSILON);
    assert!(!v.passed);
    assert!(v.reward_error.unwrap().contains("reward"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_verify_scores_zero() {
    let v = grade(json!({"command": ["hang"], "reward": "json"})).await;
    assert!(v.timed_out);
    assert!(v.reward.abs() < f64::EPSILON);
    assert_eq!(v.exit_code, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_verify_command_runs_in_the_workdir_with_its_timeout() {
    let s = Served::start().await;
    let info = s
        .client
        .create_session(task(json!({
            "id": "w",
            "sandbox": {"workdir": "/repo"},
            "files": {"result.json": "{\"reward\": 0.5}"},
            "verify": {"command": ["cat", "result.json"], "reward": "json"},
        })))
        .await
        .unwrap();
    let v = s.client.verify(&info.session).await.unwrap();
    assert!((v.reward - 0.5).abs() < f64::EPSILON, "{v:?}");
    assert!(s.fake.calls().contains(&Call::Exec(
        info.sandbox.clone(),
        vec!["cat".into(), "result.json".into()],
        "/repo".into()
    )));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_setup_fails_the_seed_with_its_stderr_and_destroys_the_sandbox() {
    let s = Served::start().await;
    let err = s
        .client
        .create_session(task(json!({
            "id": "broken",
            "setup": [["true"], ["fail", "2", "pip: no such package"], ["true"]],
            "verify": {"command": ["true"]},
        })))
        .await
        .unwrap_err();
    match &err {
        OwnerError::Setup {
            session,
            index,
            argv,
            status,
            stderr_tail,
        } => {
            assert!(session.starts_with("broken-"), "{session}");
            assert_eq!(*index, 1);
            assert_eq!(argv, "fail 2 pip: no such package");
            assert_eq!(status, "exit code 2");
            assert_eq!(stderr_tail, "pip: no such package");
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("pip: no such package"), "{err}");
    // The third command never ran, and the sandbox is gone.
    let calls = s.fake.calls();
    let execs = calls.iter().filter(|c| matches!(c, Call::Exec(..))).count();
    assert_eq!(execs, 2, "{calls:?}");
    assert!(matches!(calls.last().unwrap(), Call::Destroy(_)));
    assert!(s.fake.sandboxes().is_empty());

    // The same through the raw route: 422 with the setup failure.
    let (status, body) = support::raw(
        reqwest::Method::POST,
        &s.url("/v1/owner/sessions"),
        Some(support::TOKEN),
        Some(r#"{"task":{"id":"b","setup":[["nope"]],"verify":{"command":["true"]}}}"#),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "setup");
    assert_eq!(body["error"]["setup"]["stderr_tail"], "nope: not found\n");
}
