//! The end-to-end scenarios every real harness goes through, run with the
//! real `rollpoint run` and `rollpoint resume` over btrfs sandboxes and the
//! scripted model: a crash after a mid-tool checkpoint, a crash after a
//! checkpoint taken while the harness waits on the model, a start over when
//! the saved session holds no model response, and two held checkpoints
//! (waiting on the model, mid-tool) during which nothing moves. One
//! [`Harness`] names the kind and its recovery tier; the test files only
//! pick it. Each scenario prints what it measured (`harness-metric` lines),
//! and [`bench_round`] is the benchmark's round.
#![allow(dead_code, reason = "each test binary uses its part")]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_driver::adapter::claude_code::RESUME_USER_TURNS;
use rollpoint_driver::{LaunchEnd, RecoveryTier, RolloutResult, Status};
use rollpoint_testkit::{mounts_under, require_root, supervisor_bin};

use crate::common::{
    cgroups_of, checkpoint_held, cpu_ticks, processes_of, spawn, wait, wait_file, write_jsonl,
};

pub const LIMIT: Duration = Duration::from_secs(420);
const TOKEN: &str = "harness-test-token";
/// The task's one user message.
pub const PROMPT: &str = "Append the numbered lines to the file `lines`, one shell call per line.";
/// How long each held checkpoint keeps the rollout paused.
const HOLD_MS: u64 = 3500;

/// One harness under test.
#[derive(Debug, Clone, Copy)]
pub struct Harness {
    /// The task's `adapter.kind`.
    pub kind: &'static str,
    /// First letter of its rollout ids.
    pub letter: char,
    /// Its recovery tier (`None` for rollpoint's own worker).
    pub tier: Option<RecoveryTier>,
    /// The user turns each relaunch adds (none for the `exact` tier).
    pub continue_turns: &'static [&'static str],
    /// Beginnings of the harness's own process names (`/proc/PID/comm`).
    pub processes: &'static [&'static str],
    /// What the launch log says when the saved session holds no model
    /// response (any of these).
    pub no_response: &'static [&'static str],
    /// How long after a tool has started the harness may take to write the
    /// call into its session: a mid-tool checkpoint waits this long, so the
    /// snapshot holds the call (docs/design/harness-claude-code.md).
    pub session_lag_ms: u64,
    /// Its tool results carry something new on every run (Codex's exec output has a random
    /// chunk id), so two runs of a task never send the model the same conversation.
    pub tool_output_varies: bool,
}

/// Rollpoint's own worker on the same script: the benchmark's baseline.
pub const NATIVE: Harness = Harness {
    kind: "native",
    letter: 'n',
    tier: None,
    continue_turns: &[],
    processes: &["rollpoint"],
    no_response: &[],
    session_lag_ms: 0,
    tool_output_varies: false,
};

/// OpenCode: continues its saved session with no message added.
pub const OPENCODE: Harness = Harness {
    kind: "opencode",
    letter: 'o',
    tier: Some(RecoveryTier::Exact),
    continue_turns: &[],
    processes: &["opencode"],
    no_response: &["holds no completed model response"],
    session_lag_ms: 0,
    tool_output_varies: false,
};

/// Pi: continues from its last tool result with no message added.
pub const PI: Harness = Harness {
    kind: "pi",
    letter: 'p',
    tier: Some(RecoveryTier::Exact),
    continue_turns: &[],
    processes: &["pi", "node"],
    no_response: &["no saved pi session"],
    session_lag_ms: 0,
    tool_output_varies: false,
};

/// Codex CLI: continues its saved session with no message added.
pub const CODEX: Harness = Harness {
    kind: "codex",
    letter: 'x',
    tier: Some(RecoveryTier::Exact),
    continue_turns: &[],
    processes: &["codex", "node"],
    no_response: &[
        "holds no completed model response",
        "no saved codex session",
    ],
    session_lag_ms: 0,
    tool_output_varies: true,
};

/// Claude Code: one documented continue turn per relaunch.
pub const CLAUDE_CODE: Harness = Harness {
    kind: "claude-code",
    letter: 'c',
    tier: Some(RecoveryTier::ContinueTurn),
    continue_turns: &RESUME_USER_TURNS,
    processes: &["claude", "node"],
    no_response: &[
        "holds no completed model response",
        "no saved claude-code session",
    ],
    session_lag_ms: 300,
    tool_output_varies: false,
};

/// One model step: its shell command appends line `n`, then sleeps.
fn step(n: u32, sleep_ms: u32, delay_ms: u32) -> serde_json::Value {
    let sleep = format!("{}.{:03}", sleep_ms / 1000, sleep_ms % 1000);
    serde_json::json!({"shell": [format!("echo {n} >> lines; sleep {sleep}")], "delay_ms": delay_ms})
}

/// A scripted run of one harness task in a scratch directory with short
/// paths (the anchor's socket lives under the run directory).
pub struct Case {
    pub h: Harness,
    pub rollout: String,
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub run_dir: PathBuf,
    pub log: PathBuf,
    tasks: PathBuf,
    config: PathBuf,
    token: PathBuf,
    pub steps: u32,
    /// Request logs of replicas started by the test, read with the run's own.
    pub replica_logs: Vec<PathBuf>,
}

impl Case {
    /// `steps[i]` = (tool sleep, model delay) of step i + 1, in ms;
    /// `scenario` tells the rollout ids of one test apart.
    pub fn new(h: Harness, scenario: char, steps: &[(u32, u32)]) -> Self {
        require_root();
        let tmp = tempfile::Builder::new()
            .prefix("rp")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let dir = tmp.path().to_owned();
        let rollout = format!("{}{scenario}{:04x}", h.letter, fastrand::u16(..));
        let n = u32::try_from(steps.len()).expect("steps");
        // The strict model: it moves on only once a call's result is in the
        // conversation and asks for the call again when a harness drops it.
        let script = serde_json::json!({
            "version": 1,
            "key": "tool_results",
            "steps": steps.iter().zip(1..).map(|(&(s, d), i)| step(i, s, d)).collect::<Vec<_>>(),
            "after_last": {"text": "all lines written"},
            "no_tools_text": "Numbered lines"
        });
        std::fs::write(dir.join("model.json"), script.to_string()).expect("script");
        let mut task = serde_json::json!({
            "v": 1,
            "task": {"id": rollout, "verify": {"command": ["/bin/sh", "-c", format!("seq 1 {n} | cmp -s - lines")]}},
            "adapter": {"kind": h.kind, "prompt": PROMPT},
            "harness_timeout_s": 300
        });
        if h.kind == NATIVE.kind {
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
            h,
            rollout,
            run_dir: dir.join("r"),
            log: dir.join("stderr.log"),
            dir,
            _tmp: tmp,
            tasks,
            config,
            token,
            steps: n,
            replica_logs: Vec::new(),
        }
    }

    /// The same case with its model at `urls` (replicas the test starts) and `extra` config
    /// lines, instead of the run's own scripted model.
    pub fn on_replicas(mut self, urls: &[String], extra: &str) -> Self {
        let list = urls
            .iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ");
        std::fs::write(
            &self.config,
            format!(
                "v = 1\nconcurrency = 1\ncheckpoint_every_s = 0\nstore = \"btrfs\"\nmodel_upstream = [{list}]\n{extra}"
            ),
        )
        .expect("config");
        self.replica_logs = urls
            .iter()
            .enumerate()
            .map(|(i, _)| self.dir.join(format!("replica{i}.log")))
            .collect();
        self
    }

    /// The same case with its sandbox on `base` and the harness at `bin`
    /// (a path inside the sandbox).
    #[must_use]
    pub fn on_base(self, base: serde_json::Value, bin: Option<&str>) -> Self {
        let text = std::fs::read_to_string(&self.tasks).expect("tasks");
        let mut task: serde_json::Value = serde_json::from_str(text.trim()).expect("task");
        task["task"]["sandbox"] = serde_json::json!({"base": base, "workdir": "/workspace"});
        if let Some(bin) = bin {
            task["adapter"]["bin"] = bin.into();
        }
        write_jsonl(&self.tasks, &[task]);
        self
    }

    /// Verify also checks that the harness's file is owned by `uid`: the
    /// harness ran as that user.
    pub fn written_by(self, uid: u32) -> Self {
        let text = std::fs::read_to_string(&self.tasks).expect("tasks");
        let mut task: serde_json::Value = serde_json::from_str(text.trim()).expect("task");
        crate::common::also_verify(&mut task, &format!("test \"$(stat -c %u lines)\" = {uid}"));
        write_jsonl(&self.tasks, &[task]);
        self
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
        std::iter::once(self.run_dir.join("model-script.log"))
            .chain(self.replica_logs.iter().cloned())
            .flat_map(|p| {
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect::<Vec<serde_json::Value>>()
            })
            .filter(|e: &serde_json::Value| e["reply"] != "outage")
            .collect()
    }

    /// Whether the harness has asked for step `n` (1-based) with its tools.
    pub fn asked_for(&self, n: u32) -> bool {
        self.model_log()
            .iter()
            .any(|e| e["reply"] == "tool_call" && e["step"].as_u64() >= Some(u64::from(n - 1)))
    }

    /// Waits until `f` holds, failing with the run's log past the limit.
    pub fn wait_until(&self, what: &str, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + LIMIT;
        while !f() {
            assert!(Instant::now() < end, "{what}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The rollout's sandbox roots, oldest first (a resume forks new ones).
    pub fn sandbox_roots(&self) -> Vec<PathBuf> {
        let mut roots: Vec<(SystemTime, PathBuf)> =
            std::fs::read_dir(self.run_dir.join("owner/sandboxes"))
                .map(|d| {
                    d.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with(&self.rollout))
                        .filter_map(|e| {
                            let root = rollpoint_testkit::sandbox_root(&e.path())?;
                            let t = e.metadata().ok()?.modified().ok()?;
                            root.join("workspace").is_dir().then_some((t, root))
                        })
                        .collect()
                })
                .unwrap_or_default();
        roots.sort();
        roots.into_iter().map(|(_, r)| r).collect()
    }

    /// Lines the task's file holds in the newest sandbox.
    pub fn lines(&self) -> usize {
        self.sandbox_roots()
            .last()
            .and_then(|r| std::fs::read_to_string(r.join("workspace/lines")).ok())
            .map_or(0, |t| t.lines().count())
    }

    /// Every file of the harness's state directory and of the workdir:
    /// path -> (length, modification time, bytes).
    pub fn files(&self) -> BTreeMap<PathBuf, (u64, SystemTime, Vec<u8>)> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, (u64, SystemTime, Vec<u8>)>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                let Ok(meta) = std::fs::symlink_metadata(&p) else {
                    continue;
                };
                if meta.is_dir() {
                    walk(&p, out);
                } else if meta.is_file() {
                    let bytes = std::fs::read(&p).unwrap_or_default();
                    let modified = meta.modified().unwrap_or(UNIX_EPOCH);
                    out.insert(p, (meta.len(), modified, bytes));
                }
            }
        }
        let mut out = BTreeMap::new();
        for root in self.sandbox_roots() {
            walk(
                &root.join(format!("var/lib/rollpoint/harness/{}", self.h.kind)),
                &mut out,
            );
            walk(&root.join("workspace"), &mut out);
        }
        out
    }

    pub fn signal(&self, child: &Child, sig: Signal) {
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        kill(pid, sig).expect("signal the run");
    }

    /// The checkpoint LATEST names, if any.
    pub fn latest(&self) -> Option<String> {
        std::fs::read_to_string(self.run_dir.join("checkpoints/LATEST"))
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }

    /// SIGUSR1, then waits until LATEST names a new checkpoint.
    pub fn checkpoint_by_signal(&self, child: &Child) -> String {
        let before = self.latest();
        let t = Instant::now();
        self.signal(child, Signal::SIGUSR1);
        let mut now = None;
        self.wait_until("no new checkpoint after SIGUSR1", || {
            now = self.latest();
            now.is_some() && now != before
        });
        metric(
            self.h.kind,
            "sigusr1_to_published_ms",
            t.elapsed().as_millis(),
        );
        now.expect("LATEST")
    }

    /// SIGKILL of the runner; it must not end well.
    pub fn crash(&self, child: &mut Child) {
        self.signal(child, Signal::SIGKILL);
        let killed = wait(child, LIMIT, &self.log);
        assert!(!killed.success(), "the runner survived SIGKILL");
    }

    /// `rollpoint resume`, which must succeed.
    pub fn resume(&self) {
        let mut child = spawn(&[OsStr::new("resume"), self.run_dir.as_os_str()], &self.log);
        let status = wait(&mut child, LIMIT, &self.log);
        assert!(
            status.success(),
            "resume failed ({status}):\n{}",
            self.log_text()
        );
    }

    /// The one result row, verified with reward 1 (every line exactly
    /// once), every launch in the harness's tier.
    pub fn result(&self) -> RolloutResult {
        let rows = rollpoint_run::read_results(&self.run_dir).expect("results");
        assert_eq!(rows.len(), 1, "one row: {rows:?}\n{}", self.log_text());
        let r = rows.into_iter().next().expect("row");
        assert_eq!(r.status, Status::Verified, "{r:?}\n{}", self.log_text());
        assert_eq!(r.reward, Some(1.0), "every line exactly once: {r:?}");
        if let Some(tier) = self.h.tier {
            for l in &r.launches {
                assert_eq!(l.tier, Some(tier), "{l:?}");
            }
        }
        r
    }

    /// The user turns are the task's message, then exactly the documented
    /// ones for each of `relaunches` continued sessions; the shell calls
    /// and the usage are recorded.
    pub fn check_user_turns(&self, r: &RolloutResult, relaunches: usize) {
        let users: Vec<&str> = r
            .transcript
            .iter()
            .filter(|e| e.role == "user")
            .map(|e| e.text.as_str())
            .collect();
        let mut want = vec![PROMPT];
        for _ in 0..relaunches {
            want.extend(self.h.continue_turns);
        }
        assert_eq!(users, want, "user turns: {:#?}", r.transcript);
        let calls = r
            .transcript
            .iter()
            .filter(|e| e.role == "assistant")
            .flat_map(|e| &e.tool_calls)
            .filter(|c| c.contains("echo "))
            .count();
        assert!(
            calls >= usize::try_from(self.steps).expect("steps"),
            "every step's shell call recorded: {:#?}",
            r.transcript
        );
        let usage = r.usage.as_ref().expect("usage");
        assert!(usage.model_calls >= u64::from(self.steps), "{usage:?}");
        assert!(usage.total_tokens > 0, "{usage:?}");
    }

    /// No request reached the scripted model twice (the gateway answers a
    /// relaunched harness's repeats from its ledger). The first `skip`
    /// requests, sent before a crash and never answered, may repeat.
    pub fn check_no_repeated_call(&self, skip: usize) {
        let log = self.model_log();
        let mut digests: Vec<&str> = log
            .iter()
            .skip(skip)
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

    /// Nothing of the rollout left: processes, mounts, cgroups.
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

    /// The first call each attempt made through the gateway (Unix ms) and
    /// how many of its calls the ledger replayed, from the ledger (the
    /// sandbox's `sqlite3`, the same one the adapters use).
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

    /// The harness's own processes (not its tools, which come and go).
    fn harness_processes(&self) -> Vec<u32> {
        processes_of(&self.rollout)
            .into_iter()
            .filter(|p| {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                !matches!(comm.trim(), "bash" | "sh" | "sleep" | "")
            })
            .collect()
    }
}

/// Makes `task` a run of rollpoint's own worker on the same script.
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

/// Checks common to the two crash scenarios, after `rollpoint resume`:
/// the last launch continued the saved session in a new attempt, the user
/// turns are the tier's, and nothing repeated or was left behind.
fn check_continued(case: &Case) -> RolloutResult {
    let r = case.result();
    assert!(r.attempt >= 1, "continued after the crash: {r:?}");
    let last = r.launches.last().expect("launches");
    assert!(last.resumed, "the relaunch continued the session: {last:?}");
    assert!(
        last.reason.starts_with("continue saved session"),
        "{last:?}"
    );
    assert!(last.attempt >= 1, "{last:?}");
    case.check_user_turns(&r, 1);
    case.check_no_repeated_call(0);
    case.check_nothing_left();
    r
}

/// Crash after a mid-tool checkpoint: SIGUSR1 while the third step's tool
/// runs, then the run goes on through step 4 (its reply recorded after the
/// checkpoint) and is killed with SIGKILL mid-tool; then `rollpoint
/// resume` continues the saved session from the snapshot.
pub fn crash_after_mid_tool_checkpoint(h: Harness) {
    crash_after_mid_tool_checkpoint_of(Case::new(h, 'a', &[(1500, 600); 6]));
}

/// [`crash_after_mid_tool_checkpoint`] of a case already set up (on an image, say).
pub fn crash_after_mid_tool_checkpoint_of(case: Case) {
    let h = case.h;
    let mut child = case.start();
    case.wait_until("the harness did not run its third step", || {
        case.lines() >= 3
    });
    std::thread::sleep(std::time::Duration::from_millis(h.session_lag_ms));
    case.checkpoint_by_signal(&child);
    case.wait_until("the harness did not run its fourth step", || {
        case.lines() >= 4
    });
    case.crash(&mut child);
    let saved = case.lines();
    assert!(
        (4..6).contains(&saved),
        "{saved} lines at the crash: the task was not done"
    );
    let before_resume = case.model_log().len();

    case.resume();
    let r = check_continued(&case);
    let last = r.launches.last().expect("launches");
    assert_ne!(
        last.sandbox, r.launches[0].sandbox,
        "the relaunch runs in a sandbox forked from the snapshot: {:?}",
        r.launches
    );
    let upstream = case.model_log().len() - before_resume;
    assert!(
        upstream >= 1,
        "the relaunch asked the model for what is left"
    );
    metric(h.kind, "upstream_calls_after_resume", upstream);

    let first = case.first_calls();
    let a0 = first.get(&0).expect("attempt 0 calls");
    metric(
        h.kind,
        "launch_to_first_model_call_ms",
        a0.0.saturating_sub(r.launches[0].started_at_ms),
    );
    let a1 = first.get(&last.attempt).expect("calls of the relaunch");
    metric(
        h.kind,
        "resume_launch_to_first_model_call_ms",
        a1.0.saturating_sub(last.started_at_ms),
    );
    metric(h.kind, "replayed_calls_after_resume", a1.1);
}

/// Crash after a checkpoint taken while the harness waits on the model for
/// step 2: the run goes on until step 2's reply is in and its tool runs,
/// then is killed. The relaunch continues the saved session and, in the
/// `exact` tier, repeats step 2's request byte for byte; the gateway
/// answers it from the ledger, so no request reaches the model twice.
pub fn crash_after_waiting_checkpoint(h: Harness) {
    let case = Case::new(h, 'w', &[(1500, 2500); 4]);
    let mut child = case.start();
    case.wait_until("the harness did not ask for step 2", || case.asked_for(2));
    assert_eq!(case.lines(), 1, "step 2 has not run yet");
    case.checkpoint_by_signal(&child);
    case.wait_until("step 2 did not run", || case.lines() >= 2);
    case.crash(&mut child);

    case.resume();
    let r = check_continued(&case);
    let last = r.launches.last().expect("launches");
    let replayed = case.first_calls().get(&last.attempt).map_or(0, |a| a.1);
    if h.tier == Some(RecoveryTier::Exact) {
        assert!(
            replayed >= 1,
            "the relaunch's repeat of step 2 was answered from the ledger:\n{}",
            case.log_text()
        );
    }
    metric(h.kind, "replayed_calls_after_resume", replayed);
}

/// A checkpoint while the first model call is held, then a crash: the saved
/// session has no model response, so the relaunch starts over and the
/// launch log says why.
pub fn start_over_without_a_response(h: Harness) {
    let case = Case::new(h, 's', &[(200, 8000), (200, 100), (200, 100)]);
    let mut child = case.start();
    case.wait_until("the first model call was not sent", || case.asked_for(1));
    std::thread::sleep(Duration::from_millis(500));
    case.checkpoint_by_signal(&child);
    case.crash(&mut child);
    assert_eq!(case.lines(), 0, "no step ran before the crash");
    // Sent before the crash and never answered: the relaunch may send them
    // again.
    let unanswered = case.model_log().len();

    case.resume();
    let r = case.result();
    let last = r.launches.last().expect("launches");
    assert!(!last.resumed, "started over: {:?}", r.launches);
    assert!(last.attempt >= 1, "{last:?}");
    assert!(last.reason.contains("start over"), "{last:?}");
    assert!(
        h.no_response.iter().any(|why| last.reason.contains(why)),
        "the launch log says why ({:?}): {last:?}",
        h.no_response
    );
    case.check_user_turns(&r, 0);
    case.check_no_repeated_call(unanswered);
    case.check_nothing_left();
}

/// utime + stime of each process.
fn cpu(pids: &[u32]) -> BTreeMap<u32, Option<u64>> {
    pids.iter().map(|p| (*p, cpu_ticks(*p))).collect()
}

/// Holds a checkpoint for [`HOLD_MS`] and checks, well inside the hold,
/// that no file, no process's CPU time and the model's request log
/// change; returns the checkpoint's report.
fn held_checkpoint(case: &Case, what: &str) -> serde_json::Value {
    let pids = processes_of(&case.rollout);
    assert!(!pids.is_empty(), "the harness runs ({what})");
    let published = case.latest();
    let asker = {
        let run_dir = case.run_dir.clone();
        std::thread::spawn(move || checkpoint_held(&run_dir, TOKEN, HOLD_MS))
    };
    // The hold starts once LATEST names it; both looks are well inside it.
    case.wait_until("the held checkpoint was not published", || {
        let now = case.latest();
        now.is_some() && now != published
    });
    std::thread::sleep(Duration::from_millis(800));
    let (files, ticks, calls) = (case.files(), cpu(&pids), case.model_log().len());
    std::thread::sleep(Duration::from_millis(1500));
    let (now, ticks_now) = (case.files(), cpu(&pids));
    assert_eq!(
        case.model_log().len(),
        calls,
        "a model call went out while held ({what})"
    );
    let report = asker.join().expect("checkpoint thread");
    assert_eq!(
        now.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>(),
        "files appeared or went while held ({what})"
    );
    for (p, b) in &files {
        assert!(
            now.get(p) == Some(b),
            "{} changed while held ({what})",
            p.display()
        );
    }
    assert_eq!(ticks_now, ticks, "CPU time moved while held ({what})");
    assert!(
        ticks.values().all(Option::is_some),
        "every process lived through the hold ({what}): {ticks:?}"
    );
    assert!(
        files.keys().any(|p| {
            let name = p.to_string_lossy();
            name.ends_with(".db") || name.ends_with(".jsonl")
        }),
        "the harness's session is among the watched files: {:?}",
        files.keys().collect::<Vec<_>>()
    );
    for (key, name) in [
        ("prepare_ms", "pause"),
        ("commit_ms", "snapshot"),
        ("resume_ms", "continue"),
    ] {
        metric(
            case.h.kind,
            &format!("{what}_{name}_ms"),
            &report["timings"][key],
        );
    }
    report
}

/// The script of the held scenario and the benchmark: step 2's reply comes
/// 4 s after its request (a checkpoint lands while the harness waits on the
/// model), its tool then sleeps 4 s (one lands mid-tool).
const HELD_STEPS: [(u32, u32); 4] = [(300, 300), (4000, 4000), (300, 300), (300, 300)];

/// Two held checkpoints, one while the harness waits on the model and one
/// while a tool runs: nothing changes while held, the same processes
/// finish, no model call is sent twice, verify passes.
pub fn paused_twice_in_place(h: Harness) {
    let case = Case::new(h, 'p', &HELD_STEPS);
    let mut child = case.start();
    wait_file(&case.run_dir.join("control.json"), LIMIT, &case.log);

    // Waiting on the model: step 2's request is in, its reply 4 s away.
    case.wait_until("the harness did not ask for step 2", || case.asked_for(2));
    assert_eq!(case.lines(), 1, "step 2 has not run yet");
    let pids = case.harness_processes();
    let own: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            h.processes.iter().any(|n| comm.trim().starts_with(n))
        })
        .collect();
    assert!(
        !own.is_empty(),
        "a {:?} process is among {pids:?}",
        h.processes
    );
    let first = held_checkpoint(&case, "waiting_on_model");

    // Mid-tool: step 2's line is written and its `sleep` runs; step 3 has
    // not been asked for.
    case.wait_until("step 2 did not run", || case.lines() >= 2);
    assert!(!case.asked_for(3), "step 2's tool runs");
    let second = held_checkpoint(&case, "mid_tool");
    assert_ne!(first["id"], second["id"], "two checkpoints");
    let running = processes_of(&case.rollout);
    assert!(
        pids.iter().all(|p| running.contains(p)),
        "the harness processes from before the holds go on: {pids:?}, now {running:?}"
    );

    let status = wait(&mut child, LIMIT, &case.log);
    assert!(
        status.success(),
        "run failed ({status}):\n{}",
        case.log_text()
    );
    let r = case.result();
    assert_eq!(r.attempt, 0, "no crash, no new attempt: {r:?}");
    assert_eq!(r.launches.len(), 1, "launched once: {r:?}");
    let l = &r.launches[0];
    assert_eq!(l.pauses, 2, "{l:?}");
    assert!(l.paused_ms >= 2 * HOLD_MS, "{l:?}");
    assert_eq!(l.end, Some(LaunchEnd::Finished), "{l:?}");
    assert_eq!(l.exit_code, Some(0), "{l:?}");
    metric(h.kind, "paused_ms_total", l.paused_ms);
    case.check_user_turns(&r, 0);
    case.check_no_repeated_call(0);
    case.check_nothing_left();
}

/// The benchmark's metrics, in the order its table prints them.
pub const BENCH_METRICS: [&str; 7] = [
    "launch_to_first_model_call",
    "pause_waiting_on_model",
    "pause_mid_tool",
    "snapshot_waiting_on_model",
    "snapshot_mid_tool",
    "continue",
    "resume_to_first_model_call",
];

/// One benchmark round: launch to the first model call; a checkpoint while
/// the harness waits on the model and one mid-tool (pause, snapshot and
/// continue times from the control endpoint's report), then a crash right
/// after the second and `rollpoint resume` (relaunch to the first model
/// call). Milliseconds by name.
pub fn bench_round(h: Harness) -> BTreeMap<&'static str, u64> {
    let case = Case::new(h, 'b', &HELD_STEPS);
    let mut child = case.start();
    wait_file(&case.run_dir.join("control.json"), LIMIT, &case.log);
    let mut out = BTreeMap::new();
    let ms = |v: &serde_json::Value| v.as_u64().expect("phase time");

    case.wait_until("no step 2 request", || case.asked_for(2));
    let r1 = checkpoint_held(&case.run_dir, TOKEN, 0);
    case.wait_until("step 2 did not run", || case.lines() >= 2);
    let r2 = checkpoint_held(&case.run_dir, TOKEN, 0);
    case.crash(&mut child);
    out.insert("pause_waiting_on_model", ms(&r1["timings"]["prepare_ms"]));
    out.insert("pause_mid_tool", ms(&r2["timings"]["prepare_ms"]));
    out.insert("snapshot_waiting_on_model", ms(&r1["timings"]["commit_ms"]));
    out.insert("snapshot_mid_tool", ms(&r2["timings"]["commit_ms"]));
    out.insert(
        "continue",
        ms(&r1["timings"]["resume_ms"]).max(ms(&r2["timings"]["resume_ms"])),
    );

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

/// Forks the harness's rollout 8 ways from a checkpoint taken mid-tool, over the run's control
/// endpoint: every branch continues the saved session in its own sandbox forked from the
/// snapshot, finishes and verifies; no model call answered before the checkpoint is sent
/// again (only the one in flight there, if any, is asked once per branch); no branch sees a
/// file written after the checkpoint; the source's row is undisturbed.
pub fn fork_mid_rollout(h: Harness) {
    const BRANCHES: usize = 8;
    let case = Case::new(h, 'f', &[(900, 300); 5]);
    std::fs::write(
        &case.config,
        "v = 1\nconcurrency = 9\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\nstore = \"btrfs\"\n",
    )
    .expect("config");
    let mut child = case.start();
    wait_file(&case.run_dir.join("control.json"), LIMIT, &case.log);
    case.wait_until("the harness did not run its second step", || {
        case.lines() >= 2
    });
    std::thread::sleep(Duration::from_millis(h.session_lag_ms));
    let report = checkpoint_held(&case.run_dir, TOKEN, 0);
    let checkpoint = report["id"].as_str().expect("id").to_owned();
    let asked_before: Vec<String> = case
        .model_log()
        .iter()
        .filter_map(|e| e["request_sha256"].as_str().map(str::to_owned))
        .collect();
    for root in case.sandbox_roots() {
        std::fs::write(root.join("workspace/after-the-checkpoint"), "source only\n")
            .expect("marker");
    }
    let body = serde_json::json!({"v": 1, "checkpoint": checkpoint, "rollout": case.rollout, "n": BRANCHES});
    let (code, reply) = crate::common::fork(&case.run_dir, TOKEN, &body);
    assert_eq!(code, 200, "fork: {reply}\n{}", case.log_text());
    let branches = crate::common::branch_ids(&reply);
    assert_eq!(branches.len(), BRANCHES, "{reply}");
    crate::common::check_branches_start_from_the_snapshot(
        &case.run_dir,
        BRANCHES,
        "lines",
        "after-the-checkpoint",
    );
    let status = wait(&mut child, LIMIT, &case.log);
    assert!(
        status.success(),
        "the run failed ({status}):\n{}",
        case.log_text()
    );

    let rows = rollpoint_run::read_results(&case.run_dir).expect("results");
    assert_eq!(rows.len(), 1 + BRANCHES, "{rows:?}");
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:?}\n{}", case.log_text());
        if r.rollout == case.rollout {
            assert!(r.forked_from.is_none(), "{r:?}");
            assert_eq!(r.attempt, 0, "the source is undisturbed: {r:?}");
            continue;
        }
        assert!(branches.contains(&r.rollout), "{r:?}");
        let from = r.forked_from.as_ref().expect("forked_from");
        assert_eq!(
            (from.rollout.as_str(), from.checkpoint.as_str()),
            (case.rollout.as_str(), checkpoint.as_str())
        );
        let last = r.launches.last().expect("launches");
        if h.tier.is_some() {
            assert!(
                last.resumed,
                "the branch continued the saved session: {last:?}"
            );
        }
        assert_eq!(last.attempt, 1, "{last:?}");
    }
    let mut asked: BTreeMap<String, usize> = BTreeMap::new();
    for e in case.model_log() {
        *asked
            .entry(e["request_sha256"].as_str().expect("sha").to_owned())
            .or_default() += 1;
    }
    for d in &asked_before {
        let n = asked[d];
        assert!(
            n == 1 || n >= BRANCHES,
            "a call answered before the checkpoint went upstream {n} times: {d}"
        );
    }
    metric(h.kind, "fork_upstream_calls", asked.values().sum::<usize>());
}

/// `rollpoint export RUN_DIR --out F` of the case's run, its one trajectory.
fn exported(case: &Case) -> rollpoint_trajectory::Trajectory {
    let out = case.dir.join("trajectories.jsonl");
    let mut child = spawn(
        &[
            OsStr::new("export"),
            case.run_dir.as_os_str(),
            OsStr::new("--out"),
            out.as_os_str(),
        ],
        &case.log,
    );
    assert!(
        wait(&mut child, LIMIT, &case.log).success(),
        "export:\n{}",
        case.log_text()
    );
    let text = std::fs::read_to_string(&out).expect("export file");
    let mut all = rollpoint_trajectory::jsonl::read(&text).expect("trajectories");
    assert_eq!(all.len(), 1, "{text}");
    all.remove(0)
}

/// Trainable, no break, one segment whose mask is 1 exactly on the completions.
fn check_trajectory(t: &rollpoint_trajectory::Trajectory, what: &str) {
    assert!(t.trainable, "{what}: {:?}", t.not_trainable);
    assert!(t.token_breaks.is_empty(), "{what}: {:?}", t.token_breaks);
    assert_eq!(t.segments.len(), 1, "{what}");
    let mut mask = Vec::new();
    let mut at = 0;
    for c in &t.calls {
        mask.extend(std::iter::repeat_n(0u8, c.prompt_ids.len() - at));
        mask.extend(std::iter::repeat_n(1u8, c.completion_ids.len()));
        at = c.prompt_ids.len() + c.completion_ids.len();
    }
    assert_eq!(t.segments[0].loss_mask, mask, "{what}");
}

/// With token capture on: two checkpoints that pause the harness in place while it waits on
/// the model, then a crash and a resume. The exported trajectory has no token break and no
/// repeated model call, its loss mask covers exactly the completion tokens, and it is the
/// trajectory (ids, mask, logprobs) of the same task run with no checkpoint and no crash
/// (for a harness whose tool output varies from run to run, the same completions).
pub fn trajectory_through_pauses_and_a_crash(h: Harness) {
    let steps = [(100, 1500); 4];
    let tokens = "v = 1\nconcurrency = 1\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\nstore = \"btrfs\"\nmodel_tokens = \"vllm\"\n";
    let clean = Case::new(h, 't', &steps);
    std::fs::write(&clean.config, tokens).expect("config");
    let mut child = clean.start();
    assert!(
        wait(&mut child, LIMIT, &clean.log).success(),
        "{}",
        clean.log_text()
    );
    clean.result();
    let reference = exported(&clean);
    check_trajectory(&reference, "untouched run");

    let case = Case::new(h, 't', &steps);
    std::fs::write(&case.config, tokens).expect("config");
    let mut child = case.start();
    for step in [2, 3] {
        case.wait_until("the harness did not ask for its step", || {
            case.asked_for(step)
        });
        case.checkpoint_by_signal(&child);
    }
    case.wait_until("the harness did not ask for step 4", || case.asked_for(4));
    case.crash(&mut child);
    case.resume();
    case.result();
    case.check_no_repeated_call(0);
    let t = exported(&case);
    check_trajectory(&t, "paused, crashed and resumed run");
    assert!(t.attempt >= 1, "the crash came before the end");
    assert_eq!(t.calls.len(), reference.calls.len());
    // What the model generated is the same call for call.
    for (a, b) in reference.calls.iter().zip(&t.calls) {
        assert_eq!(b.completion_ids, a.completion_ids, "call {}", b.call_id);
    }
    if h.tool_output_varies {
        // Its conversations differ between any two runs: only the structure can match.
        metric(h.kind, "trajectory_tokens", t.segments[0].tokens.len());
        return;
    }
    let (a, b) = (&reference.segments[0], &t.segments[0]);
    assert_eq!(b.tokens, a.tokens, "the same tokens");
    assert_eq!(b.loss_mask, a.loss_mask, "the same mask");
    assert_eq!(b.logprobs, a.logprobs, "the same logprobs");
    metric(h.kind, "trajectory_tokens", b.tokens.len());
}

/// A replica of the scripted model as a process of its own (`rollpoint model-script`),
/// killed when dropped.
pub struct Replica {
    child: Child,
    pub port: u16,
}

impl Replica {
    /// Starts a replica of `case`'s script on `port` (0: any), logging to `log`, answering
    /// `outages` (`--outages`) first.
    pub fn start(case: &Case, port: u16, log: &Path, outages: &str) -> Self {
        let port_file = log.with_extension("port");
        let _ = std::fs::remove_file(&port_file);
        let mut cmd = std::process::Command::new(crate::common::rollpoint_bin());
        cmd.arg("model-script")
            .arg("--script")
            .arg(case.dir.join("model.json"))
            .arg("--log")
            .arg(log)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if port == 0 {
            cmd.arg("--port-file").arg(&port_file);
        } else {
            cmd.arg("--port").arg(port.to_string());
        }
        if !outages.is_empty() {
            cmd.arg("--outages").arg(outages);
        }
        let child = cmd.spawn().expect("replica");
        let port = if port == 0 {
            wait_file(&port_file, LIMIT, &case.log);
            std::thread::sleep(Duration::from_millis(100));
            std::fs::read_to_string(&port_file)
                .expect("port")
                .trim()
                .parse()
                .expect("port number")
        } else {
            port
        };
        // Up once it answers.
        let end = Instant::now() + LIMIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < end,
                "the replica on port {port} never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, as a preempted node.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Lines of `log` that are outages the replica answered instead of the model.
fn outages_in(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("\"reply\":\"outage\""))
        .count()
}

/// Step 3's tool sleeps long enough for both replicas to be killed meanwhile.
const OUTAGE_STEPS: [(u32, u32); 5] = [(300, 0), (300, 0), (3000, 0), (300, 0), (300, 0)];

/// The model as trainers serve it: two replicas of their own, one answering 429 with
/// `Retry-After` and then 503 twice, the other cutting its first stream before its first
/// byte; then both killed while a tool runs, for longer than the retry budget, and one
/// brought back. The harness sees none of it: the rollout is paused in place while the model
/// is away (its files and CPU time do not move), continues in the same processes, verifies,
/// and no answered call went upstream twice.
pub fn outage_waited_out_in_place(h: Harness) {
    let case = Case::new(h, 'o', &OUTAGE_STEPS);
    let (log_a, log_b) = (case.dir.join("replica0.log"), case.dir.join("replica1.log"));
    let mut a = Replica::start(&case, 0, &log_a, "429:1,503,503");
    let mut b = Replica::start(&case, 0, &log_b, "cut");
    let case = case.on_replicas(
        &[a.url(), b.url()],
        "model_sticky = false\nmodel_retry_s = 1\nmodel_outage_s = 300\n",
    );
    let mut child = case.start();
    case.wait_until("step 3 did not run", || case.lines() >= 3);
    assert_eq!(outages_in(&log_a), 3, "replica a's outages were met");
    assert_eq!(outages_in(&log_b), 1, "replica b's cut was met");
    let port = a.port;
    // The busy replies may have outlasted the budget already: count the parks from here.
    let parks = || {
        case.log_text()
            .matches("parking the rollout in place")
            .count()
    };
    let before = parks();
    a.kill();
    b.kill();
    case.wait_until("the rollout was not paused for the model", || {
        parks() > before
    });
    std::thread::sleep(Duration::from_millis(800));
    let pids = case.harness_processes();
    assert!(!pids.is_empty(), "the harness runs");
    let (files, ticks) = (case.files(), cpu(&pids));
    std::thread::sleep(Duration::from_millis(1500));
    let (now, ticks_now) = (case.files(), cpu(&pids));
    assert_eq!(
        now.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>(),
        "files appeared or went while the model was away"
    );
    for (p, before) in &files {
        assert!(
            now.get(p) == Some(before),
            "{} changed while paused",
            p.display()
        );
    }
    assert_eq!(ticks_now, ticks, "CPU time moved while paused");
    assert!(ticks.values().all(Option::is_some), "{ticks:?}");

    // A replica is back on its port: the call is answered, the same processes go on.
    let _back = Replica::start(&case, port, &case.replica_logs[0], "");
    let status = wait(&mut child, LIMIT, &case.log);
    assert!(
        status.success(),
        "run failed ({status}):\n{}",
        case.log_text()
    );
    let r = case.result();
    assert_eq!(r.status, Status::Verified, "{r:?}\n{}", case.log_text());
    assert_eq!(r.attempt, 0, "no new attempt: {r:?}");
    assert_eq!(
        r.launches.len(),
        1,
        "launched once, continued in place: {r:?}"
    );
    assert!(r.launches[0].pauses >= 1, "{:?}", r.launches[0]);
    let running = processes_of(&case.rollout);
    assert!(running.is_empty() || pids.iter().all(|p| !running.contains(p)));
    // Every call the harness made was answered by the model, once.
    let out = std::process::Command::new("sqlite3")
        .arg(case.run_dir.join("gateway/ledger.sqlite"))
        .arg("select status, count(*) from calls group by status")
        .output()
        .expect("sqlite3");
    let statuses = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        statuses.lines().all(|l| l.starts_with("ok|")),
        "every call ended ok: {statuses}"
    );
    case.check_no_repeated_call(0);
    // The native worker keeps no transcript of its own.
    if h.tier.is_some() {
        case.check_user_turns(&r, 0);
    }
    case.check_nothing_left();
}
