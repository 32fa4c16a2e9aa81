//! The run's control endpoint, against a real `rollpoint run` (root): a
//! checkpoint asked for over HTTP and held keeps every rollout frozen
//! (no CPU time, no file change, same processes) until it resumes them,
//! and bad requests are refused naming what is wrong.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use common::{
    checkpoint_held, command_task, control, cpu_ticks, processes_of, spawn, wait, wait_file,
    write_jsonl,
};
use rollpoint_driver::Status;
use rollpoint_testkit::{mounts_under, require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);
const TOKEN: &str = "control-test-token";

/// The `lines` file each running sandbox shows (its overlay root).
fn lines_files(run_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(run_dir.join("owner/sandboxes")) else {
        return out;
    };
    for e in entries.flatten() {
        let Some(root) = rollpoint_testkit::sandbox_root(&e.path()) else {
            continue;
        };
        for dir in ["workspace", "root", "tmp"] {
            let p = root.join(dir).join("lines");
            if p.is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn snapshot(pids: &[u32], files: &[PathBuf]) -> (BTreeMap<u32, Option<u64>>, Vec<String>) {
    let cpu = pids.iter().map(|p| (*p, cpu_ticks(*p))).collect();
    let text = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .collect();
    (cpu, text)
}

/// `rollpoint run` of `count` counting tasks (ids `<tag><i>`) with the
/// control endpoint on, once it listens: the child, the run directory and
/// the log.
fn start(dir: &Path, tag: &str, count: usize, tick_ms: u32) -> (Child, PathBuf, PathBuf) {
    let sup = supervisor_bin();
    let rows: Vec<_> = (0..count)
        .map(|i| command_task(&format!("{tag}{i}"), tick_ms))
        .collect();
    let tasks = dir.join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
    let run_dir = dir.join("run");
    let log = dir.join("run.log");
    let child = spawn(
        &[
            OsStr::new("run"),
            tasks.as_os_str(),
            OsStr::new("--run-dir"),
            run_dir.as_os_str(),
            OsStr::new("--supervisor"),
            sup.as_os_str(),
            OsStr::new("--checkpoint-every-s"),
            OsStr::new("0"),
            OsStr::new("--listen"),
            OsStr::new("127.0.0.1:0"),
            OsStr::new("--control-token-file"),
            token_file.as_os_str(),
        ],
        &log,
    );
    wait_file(&run_dir.join("control.json"), LIMIT, &log);
    (child, run_dir, log)
}

#[test]
fn root_a_held_checkpoint_freezes_every_rollout_until_it_resumes_them() {
    require_root();
    let tmp = tempfile::tempdir().expect("tempdir");
    let tag = "ctl";
    let (mut child, run_dir, log) = start(tmp.path(), tag, 3, 600);

    // Refusals name what is wrong, and take no checkpoint.
    let (code, _) = control(&run_dir, "wrong", "GET", "/v1/run/status", None);
    assert_eq!(code, 401);
    let path = "/v1/coordinator/checkpoint";
    for (body, field) in [
        (r#"{"v":1,"hold":5}"#, "hold"),
        (r#"{"v":2}"#, "v"),
        (r#"{"v":1,"hold_ms":"x"}"#, "hold_ms"),
        (r#"{"v":1,"hold_ms":900000}"#, "hold_ms"),
        (r#"{"v":1,"scope":["ctl0"]}"#, "scope"),
        (r#"{"v":1,"id":"../x"}"#, "id"),
        (r#"{"v":1,"stop":true,"hold_ms":5}"#, "hold_ms"),
    ] {
        let (code, reply) = control(&run_dir, TOKEN, "POST", path, Some(body));
        assert_eq!(code, 400, "{body}: {reply}");
        assert_eq!(reply["error"]["code"], "bad_request", "{body}: {reply}");
        assert!(
            reply["error"]["field"]
                .as_str()
                .is_some_and(|f| f.starts_with(field)),
            "{body}: {reply}"
        );
    }
    let (code, reply) = control(&run_dir, TOKEN, "POST", path, Some("not json"));
    assert_eq!(code, 400, "{reply}");
    assert!(!run_dir.join("checkpoints/LATEST").exists());

    // Every rollout is running and has written some lines.
    let end = Instant::now() + LIMIT;
    while lines_files(&run_dir).len() < 3
        || lines_files(&run_dir).iter().any(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .count()
                < 2
        })
    {
        assert!(Instant::now() < end, "the rollouts did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pids = processes_of(tag);
    assert!(!pids.is_empty());

    let asker = {
        let run_dir = run_dir.clone();
        std::thread::spawn(move || checkpoint_held(&run_dir, TOKEN, 3000))
    };
    // Inside the hold: nothing moves for a second.
    std::thread::sleep(Duration::from_millis(1000));
    let files = lines_files(&run_dir);
    let before = snapshot(&pids, &files);
    std::thread::sleep(Duration::from_millis(1000));
    let after = snapshot(&pids, &files);
    assert_eq!(before, after, "a rollout moved while held");
    let (code, status) = control(&run_dir, TOKEN, "GET", "/v1/run/status", None);
    // The loop is busy with the held checkpoint: status answers after it.
    assert_eq!(code, 200, "{status}");

    let report = asker.join().expect("checkpoint thread");
    assert_eq!(report["v"], 1);
    assert_eq!(report["timings"]["held_ms"], 3000, "{report}");
    let kinds: Vec<&str> = report["participants"]
        .as_array()
        .expect("participants")
        .iter()
        .filter_map(|p| p["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"agent") && kinds.contains(&"resources"),
        "{report}"
    );
    assert_eq!(
        report["scope"].as_array().map(Vec::len),
        Some(3),
        "{report}"
    );
    let id = report["id"].as_str().expect("id");
    assert_eq!(
        std::fs::read_to_string(run_dir.join("checkpoints/LATEST"))
            .expect("LATEST")
            .trim(),
        id
    );
    assert!(status["checkpoints"].as_u64() >= Some(1), "{status}");

    // The same processes go on after the hold: every file grows while the
    // rollouts' shells (alive before the hold) are still there.
    let shells: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| cpu_ticks(*p).is_some())
        .collect();
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let grown = files
            .iter()
            .zip(&before.1)
            .filter(|(f, old)| std::fs::read_to_string(f).is_ok_and(|now| now.len() > old.len()))
            .count();
        if grown == files.len() {
            break;
        }
        assert!(Instant::now() < end, "the rollouts did not go on");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        shells.iter().any(|p| cpu_ticks(*p).is_some()),
        "the held processes went on: {shells:?}"
    );

    let status = wait(&mut child, LIMIT, &log);
    assert!(
        status.success(),
        "run failed ({status}):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let rows = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:?}");
        assert_eq!(r.attempt, 0, "{r:?}");
        assert_eq!(r.launches.len(), 1, "launched once: {r:?}");
        assert!(r.launches[0].paused_ms >= 3000, "{r:?}");
    }
    assert!(!run_dir.join("control.json").exists());
    assert!(mounts_under(&run_dir).is_empty());
}

#[test]
fn root_a_checkpoint_with_stop_over_http_ends_the_run_and_resume_finishes_it() {
    require_root();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut child, run_dir, log) = start(tmp.path(), "cst", 2, 300);
    let end = Instant::now() + LIMIT;
    while lines_files(&run_dir).len() < 2 {
        assert!(Instant::now() < end, "the rollouts did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, reply) = control(
        &run_dir,
        TOKEN,
        "POST",
        "/v1/coordinator/checkpoint",
        Some(r#"{"v":1,"id":"ck-stop","stop":true}"#),
    );
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["id"], "ck-stop");
    assert_eq!(reply["scope"].as_array().map(Vec::len), Some(2), "{reply}");
    let status = wait(&mut child, LIMIT, &log);
    assert_eq!(status.code(), Some(rollpoint_run::EXIT_STOPPED), "{status}");
    assert!(mounts_under(&run_dir).is_empty());
    assert!(processes_of("cst").is_empty());

    let mut child = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    let status = wait(&mut child, LIMIT, &log);
    assert!(
        status.success(),
        "resume failed ({status}):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let rows = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:?}");
        assert_eq!(r.attempt, 1, "continued from ck-stop: {r:?}");
    }
}

/// `value` of the sample of `metric` with `label`, from the run's `/metrics`.
fn metric(text: &str, metric: &str, label: (&str, &str)) -> f64 {
    rollpoint_testkit::metric(text, metric, Some(label))
}

fn scrape(run_dir: &Path) -> String {
    let (code, body) = control(run_dir, TOKEN, "GET", "/metrics", None);
    assert_eq!(code, 200, "{body}");
    body.as_str().expect("text").to_owned()
}

#[test]
fn root_the_run_s_metrics_follow_its_checkpoints_and_rollouts_across_a_crash() {
    require_root();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut child, run_dir, log) = start(tmp.path(), "cme", 3, 300);
    let end = Instant::now() + LIMIT;
    while lines_files(&run_dir).len() < 3 {
        assert!(Instant::now() < end, "the rollouts did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = scrape(&run_dir);
    assert_eq!(
        metric(&text, "rollpoint_run_rollouts", ("state", "total")),
        3.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "rollpoint_run_checkpoints_total",
            ("outcome", "published")
        ),
        0.0
    );
    let _report = checkpoint_held(&run_dir, TOKEN, 0);
    let text = scrape(&run_dir);
    assert_eq!(
        metric(
            &text,
            "rollpoint_run_checkpoints_total",
            ("outcome", "published")
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "rollpoint_run_checkpoint_phase_seconds",
            ("phase", "total")
        ),
        1.0,
        "one checkpoint timed: {text}"
    );
    assert_eq!(
        metric(&text, "rollpoint_run_rollouts", ("state", "in_flight")),
        3.0
    );
    let plain = |name: &str| rollpoint_testkit::metric(&text, name, None);
    assert_eq!(plain("rollpoint_run_sandboxes"), 3.0, "{text}");
    assert_eq!(
        plain("rollpoint_run_snapshots_total"),
        3.0,
        "one snapshot per sandbox: {text}"
    );
    assert!(
        plain("rollpoint_run_snapshot_frozen_seconds_total") > 0.0,
        "{text}"
    );
    let confirmed = metric(
        &text,
        "rollpoint_run_pauses_total",
        ("outcome", "confirmed"),
    );
    assert_eq!(confirmed, 3.0, "each launch paused and confirmed: {text}");
    assert_eq!(
        plain("rollpoint_run_pause_confirm_seconds"),
        confirmed,
        "every confirmed pause is timed: {text}"
    );
    assert!(
        plain("rollpoint_run_process_resident_memory_bytes") > 0.0,
        "{text}"
    );
    assert!(
        plain("rollpoint_run_process_cpu_seconds_total") > 0.0,
        "{text}"
    );

    child.kill().expect("kill");
    let _ = wait(&mut child, LIMIT, &log);
    std::fs::remove_file(run_dir.join("control.json")).expect("control.json");
    let token_file = tmp.path().join("token");
    let mut child = spawn(
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
    let text = scrape(&run_dir);
    assert_eq!(
        metric(&text, "rollpoint_run_rollouts", ("state", "total")),
        3.0,
        "{text}"
    );
    let before = metric(
        &text,
        "rollpoint_run_checkpoints_total",
        ("outcome", "published"),
    );
    let _report = checkpoint_held(&run_dir, TOKEN, 0);
    let text = scrape(&run_dir);
    let published = metric(
        &text,
        "rollpoint_run_checkpoints_total",
        ("outcome", "published"),
    );
    assert_eq!(
        published,
        before + 1.0,
        "the resumed process counts its own: {text}"
    );
    assert_eq!(
        metric(
            &text,
            "rollpoint_run_checkpoint_phase_seconds",
            ("phase", "commit")
        ),
        published,
        "every published checkpoint is timed: {text}"
    );
    let status = wait(&mut child, LIMIT, &log);
    assert!(
        status.success(),
        "resume failed ({status}):\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(
        rollpoint_run::read_results(&run_dir)
            .expect("results")
            .len(),
        3
    );
}
