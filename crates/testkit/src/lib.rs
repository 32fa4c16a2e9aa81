//! Helpers for tests that drive real processes: locating the binaries,
//! running a launch under the supervisor, asking it over its clients, and
//! checking what is left alive.
#![expect(
    clippy::unwrap_used,
    clippy::missing_panics_doc,
    reason = "test support panics with context"
)]

pub mod fuzz;
pub mod images;
pub mod netns;
pub mod s3;
pub mod services;
pub mod tito;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rollpoint_proctree::ProcId;
use rollpoint_proctree::scan::Table;
use rollpoint_proto::launch::LaunchRecord;
use rollpoint_proto::session::LAUNCH_FILE;
use rollpoint_proto::supervisor::Reply;

/// The directory holding the workspace's built binaries (`target/debug`).
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> or target/<profile>/examples/<example>
    // -> target/<profile>
    let mut dir = exe.parent().unwrap().to_owned();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    dir
}

/// The workspace's `rollpoint` build beside this test (or example).
pub fn rollpoint_bin() -> PathBuf {
    let p = bin_dir().join("rollpoint");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

/// The supervisor under test: `ROLLPOINT_SUPERVISOR` (a static build, in
/// CI) or the workspace's own debug build.
pub fn supervisor_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ROLLPOINT_SUPERVISOR") {
        return PathBuf::from(p);
    }
    let p = bin_dir().join("rollpoint-supervisor");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

/// The fake harness binary.
pub fn fake_harness_bin() -> PathBuf {
    let p = bin_dir().join("fake-harness");
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --bins` first",
        p.display()
    );
    p
}

/// An exec of `/bin/sh -c script` in the sandbox's workdir, with the
/// sandbox's environment, 60 s and 1 MiB of output each.
pub fn shell(script: &str) -> rollpoint_proto::anchor::ExecRequest {
    command(&["/bin/sh", "-c", script])
}

/// An exec of `argv` in the sandbox's workdir, with the sandbox's
/// environment, 60 s and 1 MiB of output.
pub fn command(argv: &[&str]) -> rollpoint_proto::anchor::ExecRequest {
    rollpoint_proto::anchor::ExecRequest {
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        env: std::collections::BTreeMap::new(),
        cwd: String::new(),
        timeout_ms: 60_000,
        output_limit: 1 << 20,
        stdin: None,
    }
}

/// Fails the test loudly unless it runs as root: tests of mounts and
/// cgroups must not pass without exercising them.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root (cgroups, mounts); run the suite as root"
    );
}

/// Polls `f` until it returns `Some`, or panics naming `what`.
pub fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < end,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A launch running under a real supervisor in a temporary session dir.
#[derive(Debug)]
pub struct Supervised {
    pub session: PathBuf,
    pub launch_id: String,
    pub child: Child,
    _dir: tempfile::TempDir,
}

impl Supervised {
    /// Starts `fake-harness STEPS...` under the supervisor with `opts`.
    pub fn fake(launch_id: &str, opts: &[&str], steps: &[&str]) -> Self {
        let mut argv = vec![fake_harness_bin().display().to_string()];
        argv.extend(steps.iter().map(|s| (*s).to_owned()));
        Self::start(launch_id, opts, &argv, |_| {})
    }

    /// Starts `argv` under the supervisor; `prepare` may put stop or pause
    /// files into the session dir first.
    pub fn start(
        launch_id: &str,
        opts: &[&str],
        argv: &[String],
        prepare: impl FnOnce(&Path),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let session = dir.path().join("session");
        std::fs::create_dir(&session).unwrap();
        prepare(&session);
        let child = Command::new(supervisor_bin())
            .arg("run")
            .arg("--session")
            .arg(&session)
            .args(["--launch", launch_id])
            .args(opts)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let s = Self {
            session,
            launch_id: launch_id.to_owned(),
            child,
            _dir: dir,
        };
        // Started (or deliberately held): requests then act on the harness.
        let held = s.session.join(rollpoint_proto::session::PAUSE_FILE);
        wait_for(Duration::from_secs(10), "the launch to start", || {
            s.try_record()
                .filter(|r| r.phase != rollpoint_proto::launch::LaunchPhase::Held || held.exists())
        });
        s
    }

    pub fn try_record(&self) -> Option<LaunchRecord> {
        let bytes = std::fs::read(self.session.join(LAUNCH_FILE)).ok()?;
        LaunchRecord::decode(&bytes).ok()
    }

    pub fn record(&self) -> LaunchRecord {
        self.try_record().unwrap()
    }

    /// Runs a client verb (`pause`, `continue`, `stop`, `status`) and
    /// returns its exit code and reply.
    pub fn ask(&self, verb: &str, opts: &[&str]) -> (i32, Reply) {
        ask(&self.session, verb, opts)
    }

    /// Waits for the supervisor to exit.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let child = &mut self.child;
        wait_for(timeout, "the supervisor to exit", || {
            child.try_wait().unwrap()
        })
    }

    /// Every process below the supervisor now.
    pub fn tree(&self) -> Vec<ProcId> {
        descendants(self.child.id())
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // Leave nothing behind even when a test fails half-way.
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = ask(&self.session, "stop", &["--stop-grace", "0"]);
            // Let the supervisor finish its cleanup (cgroups) and exit.
            let end = Instant::now() + Duration::from_secs(30);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a supervisor client against `session`.
pub fn ask(session: &Path, verb: &str, opts: &[&str]) -> (i32, Reply) {
    let out = Command::new(supervisor_bin())
        .arg(verb)
        .arg("--session")
        .arg(session)
        .args(opts)
        .output()
        .unwrap();
    let reply = Reply::decode(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{verb}: bad reply ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), reply)
}

/// Every descendant of `pid`, by identity.
pub fn descendants(pid: u32) -> Vec<ProcId> {
    let t = Table::scan();
    t.descendants([pid])
        .into_iter()
        .filter_map(|p| {
            t.get(p).map(|s| ProcId {
                pid: p,
                start_time: s.start_time,
            })
        })
        .collect()
}

/// The identities in `ids` that are still alive (zombies count as dead).
pub fn alive(ids: &[ProcId]) -> Vec<ProcId> {
    ids.iter()
        .copied()
        .filter(|id| {
            rollpoint_proctree::scan::read_stat(id.pid)
                .is_some_and(|s| s.start_time == id.start_time && !matches!(s.state, 'Z' | 'X'))
        })
        .collect()
}

/// Number of lines in a file (0 when missing).
pub fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

/// Defines one test per freeze strategy calling `$body(strategy)`. The
/// cgroup variants are named `root_*` so they run in the serial root group.
#[macro_export]
macro_rules! per_strategy {
    ($name:ident, $body:ident) => {
        mod $name {
            #[test]
            fn root_cgroup_v2() {
                $crate::require_root();
                super::$body("cgroup-v2");
            }
            #[test]
            fn root_cgroup_v1() {
                $crate::require_root();
                super::$body("cgroup-v1");
            }
            #[test]
            fn sigstop() {
                super::$body("sigstop");
            }
        }
    };
}

/// A launch id unique to this test process.
pub fn launch_id(name: &str) -> String {
    format!("{name}-{}", std::process::id())
}

/// The receipt of a reply, or a panic naming the verb.
pub fn receipt(verb: &str, reply: &Reply) -> rollpoint_proto::receipt::Receipt {
    reply
        .receipt
        .clone()
        .unwrap_or_else(|| panic!("{verb}: reply has no receipt: {reply:?}"))
}

/// State letter of a process, if it is alive with that identity.
pub fn state(id: ProcId) -> Option<char> {
    rollpoint_proctree::scan::read_stat(id.pid)
        .filter(|s| s.start_time == id.start_time)
        .map(|s| s.state)
}

/// Processes anywhere on the machine whose environment carries the tag.
pub fn tagged(launch_id: &str) -> Vec<u32> {
    let needle = format!("{}={launch_id}", rollpoint_proto::launch::LAUNCH_TAG_VAR).into_bytes();
    Table::scan()
        .iter()
        .filter(|s| {
            !matches!(s.state, 'Z' | 'X')
                && std::fs::read(format!("/proc/{}/environ", s.pid))
                    .is_ok_and(|e| e.split(|&b| b == 0).any(|v| v == needle))
        })
        .map(|s| s.pid)
        .collect()
}

/// Live processes with an environment variable `name` whose value starts
/// with `prefix` (a rollout tag, say).
pub fn processes_with_env(name: &str, prefix: &str) -> Vec<u32> {
    let needle = format!("{name}={prefix}").into_bytes();
    Table::scan()
        .iter()
        .filter(|s| {
            !matches!(s.state, 'Z' | 'X')
                && std::fs::read(format!("/proc/{}/environ", s.pid))
                    .is_ok_and(|e| e.split(|&b| b == 0).any(|v| v.starts_with(&needle)))
        })
        .map(|s| s.pid)
        .collect()
}

/// Live processes whose command line holds `needle` (a run directory's
/// ledger path names the run's gateway, say).
pub fn processes_naming(needle: &str) -> Vec<u32> {
    let needle = needle.as_bytes();
    Table::scan()
        .iter()
        .filter(|s| {
            !matches!(s.state, 'Z' | 'X')
                && std::fs::read(format!("/proc/{}/cmdline", s.pid))
                    .is_ok_and(|c| c.windows(needle.len()).any(|w| w == needle))
        })
        .map(|s| s.pid)
        .collect()
}

/// Fails naming the log when a request reached the scripted model twice
/// (the same `request_sha256` in its `--log`); returns how many requests
/// it saw.
pub fn assert_no_repeated_model_call(log: &Path) -> usize {
    let text =
        std::fs::read_to_string(log).unwrap_or_else(|e| panic!("model log {}: {e}", log.display()));
    let mut digests: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("model log {}: {e}: {l}", log.display()));
            v["request_sha256"]
                .as_str()
                .unwrap_or_else(|| panic!("model log {}: no request_sha256: {l}", log.display()))
                .to_owned()
        })
        .collect();
    let n = digests.len();
    digests.sort();
    digests.dedup();
    assert_eq!(
        digests.len(),
        n,
        "a model call went upstream twice:\n{text}"
    );
    n
}

/// The root of the live sandbox whose directory is `sandbox_dir`
/// (`<owner>/sandboxes/<id>`) as the host reaches it: through its anchor
/// (`/proc/<anchor>/root`, read from `sandbox.json`), since the overlay is
/// attached in the sandbox's mount namespace alone. `None` before its anchor
/// is recorded or after it is gone.
pub fn sandbox_root(sandbox_dir: &Path) -> Option<PathBuf> {
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sandbox_dir.join("sandbox.json")).ok()?).ok()?;
    let pid = record.get("anchor_pid")?.as_u64().filter(|p| *p > 0)?;
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    root.exists().then_some(root)
}

/// Mount points at or under `dir` (resolved first, as /proc lists them).
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    std::fs::read_to_string("/proc/self/mounts")
        .expect("read /proc/self/mounts")
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| Path::new(m).starts_with(&dir))
        .map(str::to_owned)
        .collect()
}

/// Sandbox cgroups (`rollpoint/sandbox-*` in the v2 hierarchy and the v1
/// freezer, memory, pids, cpu and blkio ones, wherever this host mounts them)
/// whose directory name `pick` accepts.
pub fn sandbox_cgroups(pick: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let h = rollpoint_proctree::cgroup::Hierarchies::read();
    let mut out = Vec::new();
    for root in [h.v2, h.freezer, h.memory, h.pids, h.cpu, h.blkio]
        .into_iter()
        .flatten()
    {
        let Ok(entries) = std::fs::read_dir(root.join("rollpoint")) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("sandbox-") && pick(&name) {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// The sum of the samples of `metric` in the OpenMetrics `text` whose labels hold `label`
/// (every sample of it without one), 0 when there is none; a histogram counts its
/// observations. Fails naming the text when it does not parse.
pub fn metric(text: &str, metric: &str, label: Option<(&str, &str)>) -> f64 {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .unwrap_or_else(|e| panic!("metrics do not parse ({e}):\n{text}"));
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric)
        .filter(|s| label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
            prometheus_parse::Value::Summary(_) => 0.0,
        })
        .sum()
}

/// Median, min and max of `samples`, for benchmark tables.
pub fn stats(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    if samples.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
}

/// A rollout task (`RolloutTask` v1) running the native worker (`$ROLLPOINT_BIN worker`)
/// against the gateway the harness is given: its prompt names `id`, so no two rollouts send
/// the same conversation; it passes when `work.txt` holds `steps` distinct lines (what the
/// tests' scripted models have it write).
pub fn native_task(id: &str, steps: u32) -> serde_json::Value {
    let wrapper = "#!/bin/sh\nin=\"$1\"; shift\nsed \"s|@MODEL@|$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY/v1|\" \"$in\" > \"$in.live\"\nexec \"$ROLLPOINT_BIN\" worker \"$in.live\" \"$@\"\n";
    let input = serde_json::json!({
        "v": 1,
        "rollout_id": id,
        "task": {"prompt": format!("Append the steps to work.txt ({id}).")},
        "model": {"base_url": "@MODEL@", "api": "chat_completions", "name": "scripted"},
        "workdir": "/workspace"
    });
    let check = format!(
        "test \"$(wc -l < work.txt)\" -eq {steps} && test \"$(sort -u work.txt | wc -l)\" -eq {steps}"
    );
    serde_json::json!({
        "v": 1,
        "task": {
            "id": id,
            "files": {"input.json": input.to_string(), "run-worker": wrapper},
            "setup": [["chmod", "0755", "run-worker"]],
            "verify": {"command": ["/bin/sh", "-c", check]}
        },
        "adapter": {"kind": "native", "input": "input.json", "worker": "./run-worker"}
    })
}

/// A port of 127.0.0.1 free a moment ago, for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The scripted model [`native_task`] runs against: `steps` shell steps, each appending
/// `step N` to `work.txt` unless it is there and sleeping `tool_ms`, then `done`. It goes on
/// only with a finished result of each step: a step the worker reports `interrupted` (a
/// checkpoint or crash landed while it ran, so its effect may or may not be in the restored
/// sandbox) is asked for again, as a real model would check and retry, and the step's own
/// check keeps its line single.
pub fn native_model_script(steps: u32, tool_ms: u32) -> serde_json::Value {
    let sleep = format!("{}.{:03}", tool_ms / 1000, tool_ms % 1000);
    let steps: Vec<serde_json::Value> = (1..=steps)
        .map(|n| {
            serde_json::json!({"shell": [format!(
                "grep -qx 'step {n}' work.txt 2>/dev/null || echo step {n} >> work.txt; sleep {sleep}"
            )]})
        })
        .collect();
    serde_json::json!({"version": 1, "key": "finished_tool_results", "steps": steps,
        "after_last": {"text": "done"}})
}
