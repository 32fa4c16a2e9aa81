//! The gateway outlives a crash of the runner (root): `rollpoint run` is
//! SIGKILLed while the native worker's model call is still generating
//! upstream. The run's gateway process reads that reply to its end, records
//! it and exits by itself; `rollpoint resume` waits for it, and the resumed
//! worker gets the reply from the ledger. Checked: the task is verified, the
//! scripted model saw every request exactly once, and no gateway of the run
//! is left running.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_driver::Status;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);

/// The scripted model's log lines.
fn log_lines(run_dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run_dir.join("model-script.log"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("a log line is JSON"))
        .collect()
}

/// Requests the scripted model logged, by body digest.
fn requests(run_dir: &Path) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for v in log_lines(run_dir) {
        let digest = v["request_sha256"].as_str().expect("request_sha256");
        *out.entry(digest.to_owned()).or_default() += 1;
    }
    out
}

#[test]
fn root_a_call_generating_when_the_runner_dies_is_recorded_and_never_sent_again() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rg")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("g{:04x}", fastrand::u16(..));
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &[native_task(&format!("{tag}n"))]);
    // Step 3's answer takes 5 s: the kill lands while it is generating, and the resume
    // reaches the gateway before it has recorded it.
    let mut script = model_script(0);
    script["steps"][2]["delay_ms"] = serde_json::json!(5000);
    std::fs::write(dir.path().join("model.json"), script.to_string()).expect("script");
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "v = 1\nconcurrency = 1\ncheckpoint_every_s = 1\nmodel_script = \"model.json\"\n",
    )
    .expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();
    let text = || {
        format!(
            "{}\ngateway log:\n{}\nmodel log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default(),
            std::fs::read_to_string(run_dir.join("gateway/gateway.log")).unwrap_or_default(),
            std::fs::read_to_string(run_dir.join("model-script.log")).unwrap_or_default()
        )
    };

    let mut run = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    let end = Instant::now() + LIMIT;
    while requests(&run_dir).values().sum::<usize>() < 3 {
        assert!(
            run.try_wait().expect("try_wait").is_none(),
            "the run ended before the slow call:\n{}",
            text()
        );
        assert!(
            Instant::now() < end,
            "the third call never came:\n{}",
            text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let pid = Pid::from_raw(i32::try_from(run.id()).expect("pid"));
    kill(pid, Signal::SIGKILL).expect("kill");
    let _ = wait(&mut run, LIMIT, &log);
    // The gateway is still there, recording the call it has upstream.
    let ledger = run_dir.join("gateway/ledger.sqlite");
    let needle = ledger.display().to_string();
    assert!(
        !rollpoint_testkit::processes_naming(&needle).is_empty(),
        "the gateway died with the runner:\n{}",
        text()
    );

    let mut resume = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    let status = wait(&mut resume, LIMIT, &log);
    assert!(status.success(), "resume failed ({status}):\n{}", text());

    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(
        results[0].status,
        Status::Verified,
        "{results:?}\n{}",
        text()
    );
    let seen = requests(&run_dir);
    let repeated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "requests sent upstream more than once: {repeated:?}\n{}",
        text()
    );
    // Every step answered, and the last answer. A step may be answered twice: when the
    // checkpoint the resume starts from caught its tool call running, the worker reports it
    // interrupted and the model (keyed by finished tool results) asks for it again, in a
    // request of its own.
    let steps: std::collections::BTreeSet<u64> = log_lines(&run_dir)
        .iter()
        .map(|v| v["step"].as_u64().expect("step"))
        .collect();
    assert_eq!(
        steps,
        (0..=u64::from(STEPS)).collect(),
        "every step and the last answer: {seen:?}\n{}",
        text()
    );
    assert!(
        text().contains("the previous gateway"),
        "the resume waited for the gateway recording the call:\n{}",
        text()
    );
    let end = Instant::now() + Duration::from_secs(30);
    while !rollpoint_testkit::processes_naming(&needle).is_empty() {
        assert!(
            Instant::now() < end,
            "a gateway of the run is left: {:?}",
            rollpoint_testkit::processes_naming(&needle)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
