//! A fleet paused for a weight update through `rollpoint run` (root): two native-worker
//! rollouts against the scripted model in token mode. The trainer announces policy version
//! 1, pauses the fleet (every rollout parked in place, nothing sent to the model, no CPU
//! time), takes a checkpoint during the pause, and the runner is killed while paused. The
//! resumed run starts paused; the trainer continues it under version 2. Every rollout
//! verifies, no answered call was asked twice, and each trajectory says which calls version 1
//! answered and which version 2; `version_breaks = "split"` starts a segment where the
//! version changes.

mod common;

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);
const TOKEN: &str = "fleet-token";

fn answered(run_dir: &std::path::Path) -> usize {
    std::fs::read_to_string(run_dir.join("model-script.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn fleet(run_dir: &std::path::Path, verb: &str, body: &serde_json::Value) -> serde_json::Value {
    let (status, reply) = control(
        run_dir,
        TOKEN,
        "POST",
        &format!("/v1/fleet/{verb}"),
        Some(&body.to_string()),
    );
    assert_eq!(status, 200, "fleet {verb}: {reply}");
    reply
}

#[test]
fn root_a_weight_update_pauses_the_fleet_and_tags_every_call_with_its_version() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rf")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let d = dir.path();
    let tag = format!("w{:04x}", fastrand::u16(..));
    let ids = [format!("{tag}a"), format!("{tag}b")];
    let tasks = d.join("tasks.jsonl");
    write_jsonl(&tasks, &[native_task(&ids[0]), native_task(&ids[1])]);
    std::fs::write(d.join("model.json"), model_script(400).to_string()).expect("script");
    let config = d.join("run.toml");
    std::fs::write(
        &config,
        "v = 1\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\nmodel_tokens = \"vllm\"\nversion_breaks = \"split\"\n",
    )
    .expect("config");
    let token_file = d.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
    let run_dir = d.join("r");
    let log = d.join("stderr.log");
    let args = run_args_listening(&tasks, &config, &run_dir, &supervisor_bin(), &token_file);
    let argv: Vec<&OsStr> = args.iter().map(std::ffi::OsString::as_os_str).collect();
    let mut child = spawn(&argv, &log);
    wait_file(&run_dir.join("control.json"), LIMIT, &log);
    let text = || std::fs::read_to_string(&log).unwrap_or_default();

    // The trainer announces the version its replicas serve.
    let v1 = fleet(
        &run_dir,
        "continue",
        &serde_json::json!({"v": 1, "version": "1"}),
    );
    assert_eq!(v1["version"], "1", "{v1}");
    let end = Instant::now() + LIMIT;
    while answered(&run_dir) < 4 {
        assert!(Instant::now() < end, "no calls:\n{}", text());
        std::thread::sleep(Duration::from_millis(20));
    }

    // Paused: both rollouts parked in place, nothing reaches the model, nothing runs.
    let paused = fleet(&run_dir, "pause", &serde_json::json!({"v": 1}));
    assert_eq!(paused["paused"], true, "{paused}");
    assert_eq!(paused["calls"], "finish", "{paused}");
    assert_eq!(paused["going_on"], serde_json::json!([]), "{paused}");
    std::thread::sleep(Duration::from_millis(500));
    let pids: Vec<u32> = ids.iter().flat_map(|id| processes_of(id)).collect();
    let (calls, ticks) = (
        answered(&run_dir),
        pids.iter().map(|p| cpu_ticks(*p)).collect::<Vec<_>>(),
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        answered(&run_dir),
        calls,
        "a call reached the model while paused"
    );
    assert_eq!(
        pids.iter().map(|p| cpu_ticks(*p)).collect::<Vec<_>>(),
        ticks,
        "CPU time moved while paused"
    );

    // A checkpoint during the pause; the rollouts stay paused after it.
    let (status, ck) = control(
        &run_dir,
        TOKEN,
        "POST",
        "/v1/coordinator/checkpoint",
        Some(r#"{"v": 1}"#),
    );
    assert_eq!(status, 200, "{ck}");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        answered(&run_dir),
        calls,
        "the checkpoint's resume ended the pause"
    );

    // The runner dies during the pause; the resumed run starts paused.
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGKILL).expect("kill the run");
    assert!(!wait(&mut child, LIMIT, &log).success());
    let _ = std::fs::remove_file(run_dir.join("control.json"));
    let mut resume = spawn(
        &[
            OsStr::new("resume"),
            run_dir.as_os_str(),
            OsStr::new("--listen"),
            OsStr::new("127.0.0.1:0"),
            OsStr::new("--control-token-file"),
            token_file.as_os_str(),
        ],
        &log,
    );
    wait_file(&run_dir.join("control.json"), LIMIT, &log);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        answered(&run_dir),
        calls,
        "the resumed run sent a call while paused"
    );
    let v2 = fleet(
        &run_dir,
        "continue",
        &serde_json::json!({"v": 1, "version": "2"}),
    );
    assert_eq!(
        (v2["paused"].clone(), v2["version"].clone()),
        (false.into(), "2".into())
    );
    let status = wait(&mut resume, LIMIT, &log);
    assert!(status.success(), "resume:\n{}", text());

    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(
            r.status,
            rollpoint_driver::Status::Verified,
            "{r:?}\n{}",
            text()
        );
    }
    rollpoint_testkit::assert_no_repeated_model_call(&run_dir.join("model-script.log"));
    let trajectories = rollpoint_run::export::trajectories(&run_dir, None).expect("export");
    assert_eq!(trajectories.len(), 2);
    for t in &trajectories {
        assert!(t.trainable, "{t:?}");
        let versions: Vec<Option<&str>> = t
            .calls
            .iter()
            .map(|c| c.policy_version.as_deref())
            .collect();
        let first_two = versions.iter().position(|v| *v == Some("2"));
        let Some(first_two) = first_two else {
            panic!("{}: no call answered by version 2: {versions:?}", t.rollout);
        };
        assert!(
            versions[..first_two].iter().all(|v| *v == Some("1")),
            "{}: version 1, then 2: {versions:?}",
            t.rollout
        );
        assert!(
            versions[first_two..].iter().all(|v| *v == Some("2")),
            "{}: version 1, then 2: {versions:?}",
            t.rollout
        );
        assert!(
            first_two > 0,
            "{}: calls before the pause: {versions:?}",
            t.rollout
        );
        let per_segment: Vec<Vec<String>> = t
            .segments
            .iter()
            .map(|s| s.policy_versions.clone())
            .collect();
        assert_eq!(
            per_segment,
            [vec!["1".to_owned()], vec!["2".to_owned()]],
            "{}: split where the version changes",
            t.rollout
        );
    }
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).expect("events");
    assert!(
        events.contains("\"fleet_paused\"") && events.contains("\"fleet_continued\""),
        "{events}"
    );
}
