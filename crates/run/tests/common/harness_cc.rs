//! End-to-end checks of one real harness (Codex CLI, Claude Code) through
//! `rollpoint run` and `rollpoint resume` with the scripted model and the
//! btrfs store: a crash after a checkpoint, a crash before the first model
//! response, and two held checkpoints (waiting on the model, mid-tool).
//! The harness test files only name the harness; everything else is here.
#![allow(dead_code, reason = "each harness test uses its part")]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_driver::{LaunchEnd, RecoveryTier, RolloutResult, Status};
use rollpoint_testkit::{mounts_under, require_root, sandbox_cgroups, supervisor_bin};

use crate::common::{checkpoint_holding, cpu_ticks, processes_of, spawn, wait, write_jsonl};

pub const LIMIT: Duration = Duration::from_secs(420);
const TOKEN: &str = "harness-test-token";
/// Lines the task appends, one per tool call.
pub const LINES: usize = 5;
const PROMPT: &str = "Append the numbered lines to the file `lines`, one shell call per line.";

/// One harness under test.
#[derive(Debug, Clone, Copy)]
pub struct Harness {
    /// The task's `adapter.kind`.
    pub kind: &'static str,
    /// Its recovery tier.
    pub tier: RecoveryTier,
    /// The user turns a relaunch adds (none for the `exact` tier).
    pub continue_turns: &'static [&'static str],
}

/// The scripted model: one shell call per line. The call of line 2 sleeps
/// (a crash lands mid-tool), the answer asking for line 3 comes after a
/// long delay (a pause lands while the harness waits on the model), the
/// call of line 4 sleeps again (a pause lands mid-tool). `first_delay_ms`
/// holds the first answer.
fn script(first_delay_ms: u64) -> serde_json::Value {
    let step = |n: usize, sleep: &str, delay: u64| serde_json::json!({"shell": [format!("echo {n} >> lines{sleep}")], "delay_ms": delay});
    serde_json::json!({
        "version": 1,
        "steps": [
            step(1, "; sleep 1", first_delay_ms),
            step(2, "; sleep 6", 300),
            step(3, "", 6000),
            step(4, "; sleep 6", 300),
            step(5, "", 300),
            {"text": "all lines written"}
        ],
        "after_last": {"text": "done"}
    })
}

/// A scratch directory with short paths (the anchor socket path is
/// bounded), the task, script and config.
pub struct Setup {
    pub tmp: tempfile::TempDir,
    pub tag: String,
    pub run_dir: PathBuf,
    pub log: PathBuf,
    tasks: PathBuf,
    config: PathBuf,
    token: PathBuf,
}

impl Setup {
    pub fn new(h: Harness, prefix: &str, first_delay_ms: u64) -> Self {
        require_root();
        let tmp = tempfile::Builder::new()
            .prefix("rp")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let dir = tmp.path();
        let tag = format!("{prefix}{:04x}", fastrand::u16(..));
        let check = format!("seq 1 {LINES} | cmp -s - lines");
        let task = serde_json::json!({
            "v": 1,
            "task": {"id": tag, "verify": {"command": ["/bin/sh", "-c", check]}},
            "adapter": {"kind": h.kind, "prompt": PROMPT},
            "harness_timeout_s": 300
        });
        let tasks = dir.join("tasks.jsonl");
        write_jsonl(&tasks, &[task]);
        std::fs::write(dir.join("model.json"), script(first_delay_ms).to_string()).expect("script");
        let config = dir.join("run.toml");
        std::fs::write(
            &config,
            "v = 1\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\nstore = \"btrfs\"\n",
        )
        .expect("config");
        let token = dir.join("token");
        std::fs::write(&token, TOKEN).expect("token");
        Self {
            run_dir: dir.join("r"),
            log: dir.join("stderr.log"),
            tmp,
            tag,
            tasks,
            config,
            token,
        }
    }

    pub fn run(&self) -> Child {
        let sup = supervisor_bin();
        spawn(
            &[
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
            ],
            &self.log,
        )
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `f` to hold, failing with the run's log past [`LIMIT`].
    pub fn until(&self, what: &str, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + LIMIT;
        while !f() {
            assert!(Instant::now() < end, "{what}:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The sandbox roots of the run (a resume forks new ones).
    pub fn roots(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(self.run_dir.join("owner/sandboxes"))
            .map(|d| d.flatten().map(|e| e.path().join("root")).collect())
            .unwrap_or_default();
        out.sort();
        out
    }

    /// Lines of the task's file in the newest sandbox that has one.
    pub fn lines(&self) -> usize {
        self.roots()
            .iter()
            .filter_map(|r| std::fs::read_to_string(r.join("workspace/lines")).ok())
            .map(|t| t.lines().count())
            .max()
            .unwrap_or(0)
    }

    /// The scripted model's request log, one JSON object a request.
    pub fn model_log(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.run_dir.join("model-script.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("model log line"))
            .collect()
    }

    pub fn results(&self) -> Vec<RolloutResult> {
        rollpoint_run::read_results(&self.run_dir).expect("results")
    }

    pub fn resume(&self) -> Child {
        spawn(&[OsStr::new("resume"), self.run_dir.as_os_str()], &self.log)
    }

    pub fn wait_ok(&self, child: &mut Child, what: &str) {
        let status = wait(child, LIMIT, &self.log);
        assert!(
            status.success(),
            "{what} failed ({status}):\n{}",
            self.log_text()
        );
    }

    /// The checkpoint LATEST names, if any.
    pub fn latest(&self) -> Option<String> {
        std::fs::read_to_string(self.run_dir.join("checkpoints/LATEST")).ok()
    }

    /// SIGUSR1, then waits until LATEST names a new checkpoint.
    pub fn checkpoint_by_signal(&self, child: &Child) -> String {
        let before = self.latest();
        kill(pid_of(child), Signal::SIGUSR1).expect("SIGUSR1");
        let mut now = None;
        self.until("a checkpoint after SIGUSR1", || {
            now = self.latest();
            now.is_some() && now != before
        });
        now.expect("LATEST")
    }

    /// Nothing of the rollout left: processes, mounts, cgroups.
    pub fn check_nothing_left(&self) {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let procs = processes_of(&self.tag);
            let mounts = mounts_under(&self.run_dir);
            let groups = sandbox_cgroups(|name| name.contains(&self.tag));
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
}

fn pid_of(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).expect("pid"))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One figure for the report.
pub fn figure(h: Harness, what: &str, ms: u64) {
    eprintln!("figure harness={} {what}_ms={ms}", h.kind);
}

/// The one result row, verified with every line exactly once.
fn verified(s: &Setup) -> RolloutResult {
    let rows = s.results();
    assert_eq!(rows.len(), 1, "one row: {rows:?}\n{}", s.log_text());
    let row = rows.into_iter().next().expect("row");
    assert_eq!(row.status, Status::Verified, "{row:?}\n{}", s.log_text());
    assert_eq!(row.reward, Some(1.0), "every line exactly once: {row:?}");
    row
}

/// No request reached the scripted model twice (the gateway replays
/// answered calls to a relaunched harness); `skip_first` leaves out the
/// first request, which a crash can leave unanswered.
fn check_no_repeat(s: &Setup, skip_first: bool) {
    let log = s.model_log();
    let mut digests: Vec<&str> = log
        .iter()
        .skip(usize::from(skip_first))
        .map(|v| v["request_sha256"].as_str().expect("digest"))
        .collect();
    let n = digests.len();
    digests.sort_unstable();
    digests.dedup();
    assert_eq!(
        digests.len(),
        n,
        "a model call went upstream twice: {log:?}"
    );
}

/// The user turns of the transcript: the task, then what the tier allows
/// for each relaunch.
fn check_user_turns(h: Harness, row: &RolloutResult, relaunches: usize) {
    let users: Vec<&str> = row
        .transcript
        .iter()
        .filter(|e| e.role == "user")
        .map(|e| e.text.as_str())
        .collect();
    let mut want = vec![PROMPT];
    for _ in 0..relaunches {
        want.extend(h.continue_turns);
    }
    assert_eq!(users, want, "user turns: {:?}", row.transcript);
    assert!(
        row.transcript
            .iter()
            .any(|e| e.role == "assistant" && !e.tool_calls.is_empty()),
        "tool calls recorded: {:?}",
        row.transcript
    );
    let usage = row.usage.as_ref().expect("usage");
    assert!(usage.model_calls >= LINES as u64, "{usage:?}");
    assert!(usage.total_tokens > 0, "{usage:?}");
}

/// Launch start to the first request the model saw.
fn first_call_after(s: &Setup, since: Instant, seen: usize) -> Duration {
    let mut at = None;
    s.until("a model call", || {
        if s.model_log().len() > seen {
            at = Some(since.elapsed());
            true
        } else {
            false
        }
    });
    at.expect("time")
}

/// (a) SIGUSR1 while a tool runs, SIGKILL the runner, resume: the saved
/// session continues (with the documented continue turn, if its tier has
/// one) and nothing repeats.
pub fn crash_after_checkpoint(h: Harness) {
    let s = Setup::new(h, "a", 300);
    let mut child = s.run();
    first_call_after(&s, Instant::now(), 0);
    let first_call_ms = now_ms();
    // Line 2's tool is sleeping: the checkpoint lands mid-tool.
    s.until("line 2", || s.lines() >= 2);
    s.checkpoint_by_signal(&child);
    kill(pid_of(&child), Signal::SIGKILL).expect("SIGKILL");
    let _ = wait(&mut child, LIMIT, &s.log);
    let saved = s.lines();
    assert!((2..LINES).contains(&saved), "{saved} lines at the crash");

    let before = s.model_log().len();
    let start = Instant::now();
    let mut resumed = s.resume();
    let took = first_call_after(&s, start, before);
    figure(h, "resume_to_first_model_call", ms(took));
    s.wait_ok(&mut resumed, "resume");

    let row = verified(&s);
    assert!(row.attempt > 0, "continued after the crash: {row:?}");
    figure(
        h,
        "launch_to_first_model_call",
        first_call_ms.saturating_sub(row.launches[0].started_at_ms),
    );
    let last = row.launches.last().expect("a launch");
    assert!(
        last.resumed,
        "the last launch continued: {:?}",
        row.launches
    );
    assert!(
        last.reason.contains("continue saved session"),
        "{}",
        last.reason
    );
    assert!(
        row.launches.iter().all(|l| l.tier == Some(h.tier)),
        "{:?}",
        row.launches
    );
    check_user_turns(h, &row, 1);
    check_no_repeat(&s, false);
    s.check_nothing_left();
}

/// (b) A checkpoint while the first model call is held, then a crash: the
/// session holds no response, so the resumed rollout starts over and says
/// why.
pub fn crash_before_first_response(h: Harness) {
    let s = Setup::new(h, "b", 15_000);
    let mut child = s.run();
    s.until("the first model call", || !s.model_log().is_empty());
    std::thread::sleep(Duration::from_millis(500));
    s.checkpoint_by_signal(&child);
    kill(pid_of(&child), Signal::SIGKILL).expect("SIGKILL");
    let _ = wait(&mut child, LIMIT, &s.log);
    assert_eq!(s.lines(), 0);

    let mut resumed = s.resume();
    s.wait_ok(&mut resumed, "resume");
    let row = verified(&s);
    let last = row.launches.last().expect("a launch");
    assert!(!last.resumed, "started over: {:?}", row.launches);
    assert!(
        last.reason.contains("no completed model response") || last.reason.contains("no saved"),
        "the launch log says why: {}",
        last.reason
    );
    check_user_turns(h, &row, 0);
    check_no_repeat(&s, true);
    s.check_nothing_left();
}

/// Every file under `dir`: path -> (length, modification time, contents
/// digest).
fn tree_state(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime, Vec<u8>)> {
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
    walk(dir, &mut out);
    out
}

/// What must not change while held: the harness's state directory and
/// the workdir, and every sandbox process's CPU time.
type Frozen = (
    BTreeMap<PathBuf, (u64, SystemTime, Vec<u8>)>,
    BTreeMap<u32, Option<u64>>,
);

fn frozen(s: &Setup, h: Harness, pids: &[u32]) -> Frozen {
    let mut files = BTreeMap::new();
    for root in s.roots() {
        files.extend(tree_state(
            &root.join(format!("var/lib/rollpoint/harness/{}", h.kind)),
        ));
        files.extend(tree_state(&root.join("workspace")));
    }
    let cpu = pids.iter().map(|p| (*p, cpu_ticks(*p))).collect();
    (files, cpu)
}

/// A checkpoint held 3.5 s: compares the sandbox 0.8 s and 2.3 s into the
/// hold; returns the checkpoint's report.
fn held_checkpoint(s: &Setup, h: Harness, what: &str) -> serde_json::Value {
    let hold_ms = 3500;
    let pids = processes_of(&s.tag);
    assert!(!pids.is_empty(), "the harness runs ({what})");
    let published = s.latest();
    let asker = {
        let run_dir = s.run_dir.clone();
        std::thread::spawn(move || checkpoint_holding(&run_dir, TOKEN, hold_ms))
    };
    // The hold starts once LATEST names it; both looks are well inside it.
    s.until("the held checkpoint is published", || {
        let now = s.latest();
        now.is_some() && now != published
    });
    std::thread::sleep(Duration::from_millis(800));
    let before = frozen(s, h, &pids);
    std::thread::sleep(Duration::from_millis(1500));
    let after = frozen(s, h, &pids);
    let report = asker.join().expect("checkpoint thread");
    assert_eq!(
        before.0.keys().collect::<Vec<_>>(),
        after.0.keys().collect::<Vec<_>>(),
        "files appeared or went while held ({what})"
    );
    for (path, a) in &before.0 {
        assert!(
            after.0.get(path) == Some(a),
            "{} changed while held ({what})",
            path.display()
        );
    }
    assert_eq!(before.1, after.1, "CPU time moved while held ({what})");
    assert!(
        before.1.values().all(Option::is_some),
        "every process lived through the hold ({what}): {:?}",
        before.1
    );
    for (key, name) in [
        ("prepare_ms", "pause"),
        ("commit_ms", "snapshot"),
        ("resume_ms", "continue"),
    ] {
        figure(
            h,
            &format!("{what}_{name}"),
            report[key].as_u64().unwrap_or(0),
        );
    }
    report
}

/// (c) Held at two checkpoints, waiting on the model and mid-tool: nothing
/// of the rollout moves while held, the same processes finish, no model
/// call is sent twice, verify passes.
pub fn paused_twice(h: Harness) {
    let s = Setup::new(h, "c", 300);
    let mut child = s.run();
    s.until("control.json", || s.run_dir.join("control.json").exists());

    // Step 3's answer is delayed: once its request is in, the harness waits
    // on the model.
    s.until("the delayed model call", || {
        s.model_log().iter().any(|v| v["step"] == 2)
    });
    // The harness itself (not its tools, which come and go).
    let harness_pids: Vec<u32> = processes_of(&s.tag)
        .into_iter()
        .filter(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            !matches!(comm.trim(), "bash" | "sh" | "sleep" | "")
        })
        .collect();
    assert!(!harness_pids.is_empty(), "the harness runs");
    let first = held_checkpoint(&s, h, "waiting_on_model");
    // Line 4's tool sleeps: the second checkpoint lands mid-tool.
    s.until("line 4", || s.lines() >= 4);
    let calls_before = s.model_log().len();
    let second = held_checkpoint(&s, h, "mid_tool");
    assert_ne!(first["id"], second["id"]);
    assert_eq!(
        s.model_log().len(),
        calls_before,
        "no model call while held"
    );
    let running = processes_of(&s.tag);
    assert!(
        harness_pids.iter().all(|p| running.contains(p)),
        "the harness processes of the first checkpoint go on: {harness_pids:?}, now {running:?}"
    );
    s.wait_ok(&mut child, "run");
    let row = verified(&s);
    assert_eq!(row.attempt, 0, "no crash, no new attempt: {row:?}");
    assert_eq!(row.launches.len(), 1, "one launch: {:?}", row.launches);
    let launch = &row.launches[0];
    assert!(launch.pauses >= 2, "{launch:?}");
    assert_eq!(launch.end, Some(LaunchEnd::Finished), "{launch:?}");
    assert_eq!(launch.exit_code, Some(0), "{launch:?}");
    assert_eq!(launch.tier, Some(h.tier));
    figure(h, "launch_paused", launch.paused_ms);
    check_user_turns(h, &row, 0);
    check_no_repeat(&s, false);
    s.check_nothing_left();
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
