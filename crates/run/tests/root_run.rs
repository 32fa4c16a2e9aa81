//! `rollpoint run` and `rollpoint resume` as processes over real sandboxes
//! (root). A run killed with SIGKILL at a random moment after its first
//! checkpoint, then resumed, finishes every task exactly once: one result row
//! each, every appended line exactly once, no model call sent upstream twice,
//! and nothing left running, mounted or in a cgroup. SIGUSR1 checkpoints and
//! lets the run go on; SIGTERM stops it with exit code 75 after publishing a
//! checkpoint, `rollpoint status` shows where it stands, and a resume
//! finishes it.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_driver::{RolloutResult, Status};
use rollpoint_testkit::{mounts_under, require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);

/// Writes the tasks (`commands` command tasks and one native task, ids
/// prefixed with `tag`), the model script and the config.
fn setup(
    dir: &Path,
    tag: &str,
    commands: usize,
    tick_ms: u32,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut rows: Vec<serde_json::Value> = (0..commands)
        .map(|i| command_task(&format!("{tag}c{i}"), tick_ms))
        .collect();
    rows.push(native_task(&format!("{tag}n")));
    let tasks = dir.join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    std::fs::write(dir.join("model.json"), model_script(400).to_string()).expect("script");
    let config = dir.join("run.toml");
    std::fs::write(
        &config,
        "v = 1\nconcurrency = 8\ncheckpoint_every_s = 2\nmodel_script = \"model.json\"\n",
    )
    .expect("config");
    (tasks, config)
}

fn resume(run_dir: &Path, log: &Path) {
    let mut child = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], log);
    let status = wait(&mut child, LIMIT, log);
    assert!(
        status.success(),
        "resume failed ({status}):\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// Every task exactly once, verified: the lines and steps are whole.
fn check_results(run_dir: &Path, tag: &str, commands: usize, log: &Path) -> Vec<RolloutResult> {
    let rows = rollpoint_run::read_results(run_dir).expect("results");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in &rows {
        *seen.entry(r.rollout.clone()).or_default() += 1;
    }
    let mut want: Vec<String> = (0..commands).map(|i| format!("{tag}c{i}")).collect();
    want.push(format!("{tag}n"));
    want.sort();
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        want,
        "every task has a row:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    assert!(seen.values().all(|n| *n == 1), "one row each: {seen:?}");
    let text = std::fs::read_to_string(log).unwrap_or_default();
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:?}\n{text}");
        assert_eq!(r.reward, Some(1.0), "every line exactly once: {r:?}");
    }
    rows
}

/// No model request reached the scripted model twice.
fn check_model_log(run_dir: &Path) {
    let n = rollpoint_testkit::assert_no_repeated_model_call(&run_dir.join("model-script.log"));
    assert!(n > STEPS as usize, "the worker called the model: {n}");
}

fn check_nothing_left(run_dir: &Path, tag: &str) {
    let end = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let procs = processes_of(tag);
        let mounts = mounts_under(run_dir);
        let groups = cgroups_of(tag);
        if procs.is_empty() && mounts.is_empty() && groups.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "left behind: processes {procs:?}, mounts {mounts:?}, cgroups {groups:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn root_run_killed_at_random_then_resumed_finishes_every_task_exactly_once() {
    require_root();
    // Short names: the anchor's socket path (under the run directory,
    // named by the sandbox id, which holds the rollout id) must fit in 108 bytes.
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("k{:04x}", fastrand::u16(..));
    let commands = 16;
    let (tasks, config) = setup(dir.path(), &tag, commands, 250);
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();

    let mut child = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    wait_file(&run_dir.join("checkpoints/LATEST"), LIMIT, &log);
    let after = fastrand::u64(0..3000);
    std::thread::sleep(Duration::from_millis(after));
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGKILL).expect("kill the run");
    let killed = wait(&mut child, LIMIT, &log);
    assert!(
        !killed.success(),
        "the run was killed {after} ms after its first checkpoint"
    );

    resume(&run_dir, &log);
    let rows = check_results(&run_dir, &tag, commands, &log);
    assert!(
        rows.iter().any(|r| r.attempt > 0),
        "some rollout continued after the kill ({after} ms in):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    check_model_log(&run_dir);
    check_nothing_left(&run_dir, &tag);
}

#[test]
fn root_sigusr1_checkpoints_sigterm_stops_with_exit_75_and_resume_finishes() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("t{:04x}", fastrand::u16(..));
    let commands = 3;
    let (tasks, config) = setup(dir.path(), &tag, commands, 300);
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();

    // No timer: only the signals checkpoint.
    let mut args = run_args(&tasks, &config, &run_dir, &sup);
    args.extend([OsStr::new("--checkpoint-every-s"), OsStr::new("0")]);
    let mut child = spawn(&args, &log);
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    wait_file(&run_dir.join("run.json"), LIMIT, &log);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!run_dir.join("checkpoints/LATEST").exists(), "no timer");
    kill(pid, Signal::SIGUSR1).expect("SIGUSR1");
    wait_file(&run_dir.join("checkpoints/LATEST"), LIMIT, &log);
    let before = std::fs::read_to_string(run_dir.join("checkpoints/LATEST")).expect("LATEST");
    assert!(
        child.try_wait().expect("wait").is_none(),
        "SIGUSR1 lets the run go on"
    );

    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let status = wait(&mut child, LIMIT, &log);
    assert_eq!(
        status.code(),
        Some(rollpoint_run::EXIT_STOPPED),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let after = std::fs::read_to_string(run_dir.join("checkpoints/LATEST")).expect("LATEST");
    assert_ne!(
        before.trim(),
        after.trim(),
        "the stop published its own checkpoint"
    );
    check_nothing_left(&run_dir, &tag);

    let out = std::process::Command::new(rollpoint_bin())
        .arg("status")
        .arg(&run_dir)
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("tasks: {}", commands + 1)), "{text}");
    assert!(
        text.contains(&format!("latest checkpoint: {}", after.trim())),
        "{text}"
    );
    assert!(
        text.contains(&format!("{tag}c0 (attempt 0)")) || text.contains("done: 4"),
        "{text}"
    );

    let out = std::process::Command::new(rollpoint_bin())
        .args(["status", "--json"])
        .arg(&run_dir)
        .output()
        .expect("status --json");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["v"], 1, "{doc}");
    assert_eq!(doc["tasks"], commands + 1, "{doc}");
    assert_eq!(doc["latest"]["id"], after.trim(), "{doc}");
    let done = doc["done"].as_u64().expect("done");
    let unfinished = doc["unfinished"].as_array().expect("unfinished").len();
    assert_eq!(
        usize::try_from(done).expect("done") + unfinished,
        commands + 1,
        "every task is done or unfinished: {doc}"
    );

    resume(&run_dir, &log);
    let rows = check_results(&run_dir, &tag, commands, &log);
    assert!(rows.iter().any(|r| r.attempt == 1), "{rows:?}");
    check_model_log(&run_dir);
    check_nothing_left(&run_dir, &tag);
}

#[test]
fn root_a_second_process_on_a_live_run_is_refused_and_changes_nothing() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rl")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let tag = format!("l{:04x}", fastrand::u16(..));
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &[command_task(&format!("{tag}c0"), 150)]);
    let config = dir.path().join("run.toml");
    std::fs::write(&config, "v = 1\ncheckpoint_every_s = 1\n").expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();
    let mut run = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    wait_file(&run_dir.join("run.json"), LIMIT, &log);
    for args in [
        vec![OsStr::new("resume"), run_dir.as_os_str()],
        vec![OsStr::new("sweep"), run_dir.as_os_str()],
    ] {
        let out = std::process::Command::new(rollpoint_bin())
            .args(&args)
            .env("ROLLPOINT_SUPERVISOR", &sup)
            .output()
            .expect("second process");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} ran beside the live run");
        assert!(
            err.contains("another rollpoint process") && err.contains("lock"),
            "{args:?}: {err}"
        );
    }
    let status = wait(&mut run, LIMIT, &log);
    assert!(
        status.success(),
        "the live run was disturbed ({status}):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].status, Status::Verified, "{results:?}");
}
