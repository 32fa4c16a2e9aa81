//! The end-to-end scenarios the OpenCode and Pi tests share, run through
//! the real `rollpoint run` and `rollpoint resume` over btrfs sandboxes with
//! the scripted model: a crash after a checkpoint, a crash before the first
//! model response, and two held checkpoints (waiting on the model, then
//! mid-tool). Each prints what it measured (`harness-metric` lines).
#![allow(dead_code, reason = "each test binary uses its part")]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_driver::{RecoveryTier, RolloutResult, Status};
use rollpoint_testkit::{mounts_under, require_root, supervisor_bin};

use crate::common::{
    cgroups_of, checkpoint_holding, cpu_ticks, processes_of, spawn, wait, wait_file, write_jsonl,
};

pub const LIMIT: Duration = Duration::from_secs(300);
const TOKEN: &str = "harness-test-token";
/// The task: one user message, which must stay the only one.
pub const PROMPT: &str = "Append the numbered lines to the file `lines`, one step at a time.";

/// One model step: its shell command appends line `n`, then sleeps.
fn step(n: u32, sleep_ms: u32, delay_ms: u32) -> serde_json::Value {
    let sleep = format!("{}.{:03}", sleep_ms / 1000, sleep_ms % 1000);
    serde_json::json!({"shell": [format!("echo {n} >> lines; sleep {sleep}")], "delay_ms": delay_ms})
}

/// A scripted run of one harness task.
pub struct Case {
    pub kind: &'static str,
    pub rollout: String,
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub run_dir: PathBuf,
    pub log: PathBuf,
    tasks: PathBuf,
    config: PathBuf,
    token: PathBuf,
    pub steps: u32,
}

impl Case {
    /// `steps[i]` = (tool sleep, model delay) of step i + 1.
    pub fn new(kind: &'static str, letter: char, steps: &[(u32, u32)]) -> Self {
        require_root();
        // Short paths: the anchor's socket lives under the run directory.
        let tmp = tempfile::Builder::new()
            .prefix("rp")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let dir = tmp.path().to_owned();
        let rollout = format!("{letter}{:04x}", fastrand::u16(..));
        let n = u32::try_from(steps.len()).expect("steps");
        let script = serde_json::json!({
            "version": 1,
            "steps": steps.iter().zip(1..).map(|(&(s, d), i)| step(i, s, d)).collect::<Vec<_>>(),
            "after_last": {"text": "all lines written"},
            "no_tools_text": "Numbered lines"
        });
        std::fs::write(dir.join("model.json"), script.to_string()).expect("script");
        let mut task = serde_json::json!({
            "v": 1,
            "task": {"id": rollout, "verify": {"command": ["/bin/sh", "-c", format!("seq 1 {n} | cmp -s - lines")]}},
            "adapter": {"kind": kind, "prompt": PROMPT},
            "harness_timeout_s": 240
        });
        if kind == "native" {
            native(&mut task, &rollout);
        }
        let tasks = dir.join("tasks.jsonl");
        write_jsonl(&tasks, &[task]);
        let config = dir.join("run.toml");
        std::fs::write(
            &config,
            "v = 1\nconcurrency = 1\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\nstore = \"btrfs\"\n",
        )
        .expect("config");
        let token = dir.join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
        Self {
            kind,
            rollout,
            run_dir: dir.join("r"),
            log: dir.join("stderr.log"),
            dir,
            _tmp: tmp,
            tasks,
            config,
            token,
            steps: n,
        }
    }

    pub fn start(&self) -> Child {
        let sup = supervisor_bin();
        let args: Vec<&OsStr> = vec![
            OsStr::new("run"),
            self.tasks.as_os_str(),
            OsStr::new("--config"),
            self.config.as_os_str(),
            OsStr::new("--run-dir"),
            self.run_dir.as_os_str(),
            OsStr::new("--supervisor"),
            sup.as_os_str(),
            OsStr::new("--listen"),
            OsStr::new("127.0.0.1:0"),
            OsStr::new("--control-token-file"),
            self.token.as_os_str(),
        ];
        spawn(&args, &self.log)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The scripted model's request log, one JSON object a request.
    pub fn model_log(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.run_dir.join("model-script.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Requests that asked for a tool step (not a title).
    pub fn tool_requests(&self) -> usize {
        self.model_log()
            .iter()
            .filter(|e| e["reply"] == "tool_call")
            .count()
    }

    /// Waits until `f` holds, failing with the run's log past the limit.
    pub fn wait_until(&self, what: &str, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + LIMIT;
        while !f() {
            assert!(Instant::now() < end, "{what}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The sandbox root the rollout runs in now (the newest one).
    pub fn sandbox_root(&self) -> Option<PathBuf> {
        let mut roots: Vec<(std::time::SystemTime, PathBuf)> =
            std::fs::read_dir(self.run_dir.join("owner/sandboxes"))
                .ok()?
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&self.rollout))
                .filter_map(|e| {
                    let root = e.path().join("root");
                    let t = e.metadata().ok()?.modified().ok()?;
                    root.join("workspace").is_dir().then_some((t, root))
                })
                .collect();
        roots.sort();
        roots.pop().map(|(_, r)| r)
    }

    /// Lines the task's file holds in the current sandbox.
    pub fn lines(&self) -> usize {
        self.sandbox_root()
            .and_then(|r| std::fs::read_to_string(r.join("workspace/lines")).ok())
            .map_or(0, |t| t.lines().count())
    }

    /// Every file of the harness's state directory and the task's file,
    /// with its bytes.
    pub fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&p, out);
                } else if let Ok(bytes) = std::fs::read(&p) {
                    out.insert(p, bytes);
                }
            }
        }
        let mut out = BTreeMap::new();
        if let Some(root) = self.sandbox_root() {
            walk(
                &root.join(format!(
                    "var/lib/rollpoint/harness/{}/{}",
                    self.kind, self.rollout
                )),
                &mut out,
            );
            if let Ok(b) = std::fs::read(root.join("workspace/lines")) {
                out.insert(root.join("workspace/lines"), b);
            }
        }
        out
    }

    pub fn signal(&self, child: &Child, sig: Signal) {
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        kill(pid, sig).expect("signal the run");
    }

    /// SIGUSR1, then waits until LATEST names a new checkpoint.
    pub fn checkpoint_by_signal(&self, child: &Child) -> String {
        let latest = self.run_dir.join("checkpoints/LATEST");
        let before = std::fs::read_to_string(&latest).unwrap_or_default();
        let t = Instant::now();
        self.signal(child, Signal::SIGUSR1);
        self.wait_until("no new checkpoint after SIGUSR1", || {
            std::fs::read_to_string(&latest)
                .is_ok_and(|now| !now.trim().is_empty() && now != before)
        });
        metric(
            self.kind,
            "sigusr1_to_published_ms",
            t.elapsed().as_millis(),
        );
        std::fs::read_to_string(&latest)
            .expect("LATEST")
            .trim()
            .to_owned()
    }

    pub fn resume(&self) {
        let mut child = spawn(&[OsStr::new("resume"), self.run_dir.as_os_str()], &self.log);
        let status = wait(&mut child, LIMIT, &self.log);
        assert!(
            status.success(),
            "resume failed ({status}):\n{}",
            self.log_text()
        );
    }

    /// The one result row, verified with reward 1 (every line exactly once).
    pub fn result(&self) -> RolloutResult {
        let rows = rollpoint_run::read_results(&self.run_dir).expect("results");
        assert_eq!(rows.len(), 1, "one row: {rows:?}\n{}", self.log_text());
        let r = rows.into_iter().next().expect("row");
        assert_eq!(r.status, Status::Verified, "{r:?}\n{}", self.log_text());
        assert_eq!(r.reward, Some(1.0), "every line exactly once: {r:?}");
        if self.kind != "native" {
            for l in &r.launches {
                assert_eq!(l.tier, Some(RecoveryTier::Exact), "{l:?}");
            }
        }
        r
    }

    /// The conversation holds the task's message and no other user message.
    pub fn check_one_user_message(&self, r: &RolloutResult) {
        let users: Vec<&str> = r
            .transcript
            .iter()
            .filter(|e| e.role == "user")
            .map(|e| e.text.as_str())
            .collect();
        assert_eq!(users, [PROMPT], "{:#?}", r.transcript);
        let calls = r
            .transcript
            .iter()
            .flat_map(|e| &e.tool_calls)
            .filter(|c| c.starts_with("echo "))
            .count();
        assert!(
            calls >= usize::try_from(self.steps).expect("steps"),
            "{r:#?}"
        );
    }

    /// No request reached the scripted model twice.
    pub fn check_no_repeated_call(&self) {
        let log = self.model_log();
        let mut digests: Vec<&str> = log
            .iter()
            .map(|e| e["request_sha256"].as_str().expect("digest"))
            .collect();
        let n = digests.len();
        digests.sort_unstable();
        digests.dedup();
        assert_eq!(
            digests.len(),
            n,
            "a model call went upstream twice: {log:#?}"
        );
    }

    pub fn check_nothing_left(&self) {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let procs = processes_of(&self.rollout);
            let mounts = mounts_under(&self.run_dir);
            let groups = cgroups_of(&self.rollout);
            if procs.is_empty() && mounts.is_empty() && groups.is_empty() {
                return;
            }
            assert!(
                Instant::now() < end,
                "left behind: processes {procs:?}, mounts {mounts:?}, cgroups {groups:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The first call each attempt made through the gateway (Unix ms), from
    /// the ledger (the sandbox's `sqlite3`, the same one the adapter uses).
    pub fn first_calls(&self) -> BTreeMap<u32, (u64, u64)> {
        let out = std::process::Command::new("sqlite3")
            .arg("-json")
            .arg(self.run_dir.join("gateway/ledger.sqlite"))
            .arg(
                "select attempt, min(admitted_ms) as first, \
                 sum(status = 'replayed') as replayed from calls group by attempt",
            )
            .output()
            .expect("sqlite3");
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        rows.iter()
            .filter_map(|r| {
                Some((
                    u32::try_from(r["attempt"].as_u64()?).ok()?,
                    (r["first"].as_u64()?, r["replayed"].as_u64().unwrap_or(0)),
                ))
            })
            .collect()
    }
}

/// Makes `task` a run of rollpoint's own worker on the same script (the
/// benchmark's baseline).
fn native(task: &mut serde_json::Value, rollout: &str) {
    let wrapper = "#!/bin/sh\nin=\"$1\"; shift\nsed \"s|@MODEL@|$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY/v1|\" \"$in\" > \"$in.live\"\nexec \"$ROLLPOINT_BIN\" worker \"$in.live\" \"$@\"\n";
    let input = serde_json::json!({
        "v": 1,
        "rollout_id": rollout,
        "task": {"prompt": PROMPT},
        "model": {"base_url": "@MODEL@", "api": "chat_completions", "name": "rollpoint-scripted"},
        "workdir": "/workspace"
    });
    task["task"]["files"] =
        serde_json::json!({"input.json": input.to_string(), "run-worker": wrapper});
    task["task"]["setup"] = serde_json::json!([["chmod", "0755", "run-worker"]]);
    task["adapter"] =
        serde_json::json!({"kind": "native", "input": "input.json", "worker": "./run-worker"});
}

pub fn metric(kind: &str, name: &str, value: impl std::fmt::Display) {
    eprintln!("harness-metric {kind} {name} {value}");
}

/// Crash after a checkpoint: SIGUSR1 while a tool of the third step runs,
/// then the run goes on through step 4 (its reply recorded after the
/// checkpoint) and is killed with SIGKILL mid-tool; then `rollpoint resume`.
pub fn crash_after_checkpoint(kind: &'static str, letter: char) {
    let steps = [(1500, 600); 6];
    let case = Case::new(kind, letter, &steps);
    let mut child = case.start();
    case.wait_until("the harness did not run its third step", || {
        case.lines() >= 3
    });
    case.checkpoint_by_signal(&child);
    case.wait_until("the harness did not run its fourth step", || {
        case.lines() >= 4
    });
    case.signal(&child, Signal::SIGKILL);
    let killed = wait(&mut child, LIMIT, &case.log);
    assert!(!killed.success());
    let before_resume = case.model_log().len();

    case.resume();
    let r = case.result();
    assert!(r.attempt >= 1, "{r:?}");
    let last = r.launches.last().expect("launches");
    assert!(last.resumed, "the relaunch continued the session: {last:?}");
    assert!(
        last.reason.starts_with("continue saved session"),
        "{last:?}"
    );
    assert!(last.attempt >= 1, "{last:?}");
    case.check_one_user_message(&r);
    case.check_no_repeated_call();
    case.check_nothing_left();

    let first = case.first_calls();
    let a0 = first.get(&0).expect("attempt 0 calls");
    metric(
        kind,
        "launch_to_first_model_call_ms",
        a0.0.saturating_sub(r.launches[0].started_at_ms),
    );
    if let Some(a1) = first.get(&last.attempt) {
        metric(
            kind,
            "resume_launch_to_first_model_call_ms",
            a1.0.saturating_sub(last.started_at_ms),
        );
        metric(kind, "replayed_calls_after_resume", a1.1);
    }
    metric(
        kind,
        "upstream_calls_after_resume",
        case.model_log().len() - before_resume,
    );
}

/// Crash after a checkpoint taken while the harness waits on the model for
/// step 2: the run goes on until step 2's reply is in and its tool runs,
/// then is killed. The relaunch continues the saved session (for Pi, from
/// its last tool result) and repeats step 2's request byte for byte; the
/// gateway answers it from the ledger, so no request reaches the model
/// twice.
pub fn crash_while_waiting_on_the_model(kind: &'static str, letter: char) {
    let steps = [(1500, 2500); 4];
    let case = Case::new(kind, letter, &steps);
    let mut child = case.start();
    case.wait_until("the harness did not ask for step 2", || {
        case.tool_requests() >= 2
    });
    assert_eq!(case.lines(), 1, "step 2 has not run yet");
    case.checkpoint_by_signal(&child);
    case.wait_until("step 2 did not run", || case.lines() >= 2);
    case.signal(&child, Signal::SIGKILL);
    let killed = wait(&mut child, LIMIT, &case.log);
    assert!(!killed.success());

    case.resume();
    let r = case.result();
    let last = r.launches.last().expect("launches");
    assert!(last.resumed, "{last:?}");
    assert!(
        last.reason.starts_with("continue saved session"),
        "{last:?}"
    );
    case.check_one_user_message(&r);
    case.check_no_repeated_call();
    let replayed = case.first_calls().get(&last.attempt).map_or(0, |a| a.1);
    assert!(
        replayed >= 1,
        "the relaunch's repeat of step 2 was answered from the ledger:\n{}",
        case.log_text()
    );
    metric(kind, "replayed_calls_after_resume", replayed);
    case.check_nothing_left();
}

/// A checkpoint while the first model call is held, then a crash: the saved
/// session has no model response, so the relaunch starts over and says why.
pub fn start_over_without_a_response(kind: &'static str, letter: char) {
    let steps = [(200, 6000), (200, 100), (200, 100)];
    let case = Case::new(kind, letter, &steps);
    let mut child = case.start();
    case.wait_until("the first model call was not sent", || {
        case.tool_requests() >= 1
    });
    std::thread::sleep(Duration::from_millis(300));
    case.checkpoint_by_signal(&child);
    case.signal(&child, Signal::SIGKILL);
    let killed = wait(&mut child, LIMIT, &case.log);
    assert!(!killed.success());

    case.resume();
    let r = case.result();
    let last = r.launches.last().expect("launches");
    assert!(!last.resumed, "{last:?}");
    assert!(last.attempt >= 1, "{last:?}");
    assert!(last.reason.contains("start over"), "{last:?}");
    let why = match kind {
        "pi" => "no saved pi session",
        _ => "holds no completed model response",
    };
    assert!(last.reason.contains(why), "{last:?}");
    case.check_one_user_message(&r);
    case.check_nothing_left();
}

/// utime + stime of each process.
fn cpu(pids: &[u32]) -> BTreeMap<u32, Option<u64>> {
    pids.iter().map(|p| (*p, cpu_ticks(*p))).collect()
}

/// Holds a checkpoint for `hold_ms` and checks, inside the hold, that no
/// file and no process's CPU time changes; returns the report.
fn held_checkpoint(case: &Case, hold_ms: u64) -> serde_json::Value {
    let pids = processes_of(&case.rollout);
    assert!(!pids.is_empty(), "the harness runs");
    let run_dir = case.run_dir.clone();
    let asker = std::thread::spawn(move || checkpoint_holding(&run_dir, TOKEN, hold_ms));
    // The commit happens early in the hold; observe the second half.
    std::thread::sleep(Duration::from_millis(hold_ms / 3));
    let (files, ticks, calls) = (case.files(), cpu(&pids), case.model_log().len());
    std::thread::sleep(Duration::from_millis(hold_ms / 3));
    assert_eq!(cpu(&pids), ticks, "a process used CPU while paused");
    assert_eq!(
        case.model_log().len(),
        calls,
        "a model call went out while paused"
    );
    let now = case.files();
    assert_eq!(
        now.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>(),
        "files appeared or went while paused"
    );
    for (p, b) in &files {
        assert!(now[p] == *b, "{} changed while paused", p.display());
    }
    assert!(
        files.keys().any(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".db") || name.ends_with(".jsonl")
        }),
        "the harness's session is among the watched files: {:?}",
        files.keys().collect::<Vec<_>>()
    );
    let report = asker.join().expect("checkpoint thread");
    for phase in ["prepare_ms", "commit_ms", "resume_ms"] {
        metric(case.kind, phase, &report[phase]);
    }
    report
}

/// Two held checkpoints, one while the harness waits on the model and one
/// while a tool runs: nothing changes while paused, the same processes
/// finish, and no model call is sent twice.
pub fn paused_twice_in_place(kind: &'static str, letter: char) {
    let steps = [(2500, 2500); 4];
    let case = Case::new(kind, letter, &steps);
    let mut child = case.start();
    wait_file(&case.run_dir.join("control.json"), LIMIT, &case.log);

    // Waiting on the model: step 2's request is in, its reply 2.5 s away.
    case.wait_until("the harness did not ask for step 2", || {
        case.tool_requests() >= 2
    });
    let pids = processes_of(&case.rollout);
    assert_eq!(case.lines(), 1, "step 2 has not run yet");
    held_checkpoint(&case, 3000);

    // Mid-tool: step 2's line is written and its `sleep` runs; step 3 has
    // not been asked for.
    case.wait_until("step 2 did not run", || case.lines() >= 2);
    assert_eq!(case.tool_requests(), 2, "step 2's tool runs");
    held_checkpoint(&case, 3000);
    // The processes from before the holds go on (the harness among them).
    let after = processes_of(&case.rollout);
    let kept: Vec<u32> = pids.iter().copied().filter(|p| after.contains(p)).collect();
    let harness: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| matches!(c.trim(), "opencode" | "pi" | "node"))
        })
        .collect();
    assert!(!harness.is_empty(), "the harness process is among {pids:?}");
    assert!(
        harness.iter().all(|p| kept.contains(p)),
        "the harness {harness:?} lived through both holds: {kept:?}"
    );

    let status = wait(&mut child, LIMIT, &case.log);
    assert!(
        status.success(),
        "run failed ({status}):\n{}",
        case.log_text()
    );
    let r = case.result();
    assert_eq!(r.attempt, 0, "{r:?}");
    assert_eq!(r.launches.len(), 1, "launched once: {r:?}");
    let l = &r.launches[0];
    assert_eq!(l.pauses, 2, "{l:?}");
    assert!(l.paused_ms >= 6000, "{l:?}");
    metric(kind, "paused_ms_total", l.paused_ms);
    case.check_one_user_message(&r);
    case.check_no_repeated_call();
    case.check_nothing_left();
}

/// One benchmark round: launch to the first model call; a checkpoint while
/// the harness waits on the model and one mid-tool (pause, snapshot and
/// continue times from the control endpoint's report), then a crash right
/// after the second and `rollpoint resume` (relaunch to the first model
/// call). Milliseconds by name.
pub fn bench_round(kind: &'static str, letter: char) -> BTreeMap<&'static str, u64> {
    let steps = [(2500, 2500); 4];
    let case = Case::new(kind, letter, &steps);
    let mut child = case.start();
    wait_file(&case.run_dir.join("control.json"), LIMIT, &case.log);
    let mut out = BTreeMap::new();
    let ms = |v: &serde_json::Value| v.as_u64().expect("phase time");

    case.wait_until("no step 2 request", || case.tool_requests() >= 2);
    let r1 = checkpoint_holding(&case.run_dir, TOKEN, 0);
    case.wait_until("step 2 did not run", || case.lines() >= 2);
    let r2 = checkpoint_holding(&case.run_dir, TOKEN, 0);
    case.signal(&child, Signal::SIGKILL);
    let killed = wait(&mut child, LIMIT, &case.log);
    assert!(!killed.success());
    out.insert("pause_waiting_on_model", ms(&r1["prepare_ms"]));
    out.insert("pause_mid_tool", ms(&r2["prepare_ms"]));
    out.insert("snapshot_waiting_on_model", ms(&r1["commit_ms"]));
    out.insert("snapshot_mid_tool", ms(&r2["commit_ms"]));
    out.insert("continue", ms(&r1["resume_ms"]).max(ms(&r2["resume_ms"])));

    case.resume();
    let r = case.result();
    let first = case.first_calls();
    let last = r.launches.last().expect("launches");
    out.insert(
        "launch_to_first_model_call",
        first[&0].0.saturating_sub(r.launches[0].started_at_ms),
    );
    if let Some(a) = first.get(&last.attempt) {
        out.insert(
            "resume_to_first_model_call",
            a.0.saturating_sub(last.started_at_ms),
        );
    }
    case.check_nothing_left();
    out
}
