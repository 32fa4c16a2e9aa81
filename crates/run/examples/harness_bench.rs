//! What a real harness costs a rollout at checkpoints and after a crash
//! (root): Codex CLI and Claude Code against rollpoint's native worker (the
//! baseline), each through `rollpoint run` with the same scripted model and
//! the btrfs store, measured in the same run. Per round: launch to the first
//! model call; a checkpoint while a tool runs (pause, snapshot, continue);
//! SIGKILL of the runner, `rollpoint resume`, and resume to the first model
//! call. Prints median, min and max, and the ratio to the baseline.
//!
//! `cargo build -p rollpoint && cargo run -p rollpoint-run --example harness_bench [ROUNDS]`
//! (the pinned harnesses from `scripts/install-harnesses`; the static
//! supervisor and worker from `scripts/build-static` in ROLLPOINT_SUPERVISOR
//! and ROLLPOINT_WORKER_BIN).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TOKEN: &str = "bench-token";
const LINES: usize = 4;
const PROMPT: &str = "Append the numbered lines to the file `lines`, one shell call per line.";
const LIMIT: Duration = Duration::from_secs(300);

fn rollpoint() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    // target/<profile>/examples/harness_bench -> target/<profile>/rollpoint
    let p = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("rollpoint");
    assert!(
        p.exists(),
        "{} is missing: cargo build -p rollpoint",
        p.display()
    );
    p
}

fn script() -> serde_json::Value {
    let steps: Vec<serde_json::Value> = (1..=LINES)
        .map(|n| {
            let sleep = if n == 2 { "; sleep 4" } else { "" };
            serde_json::json!({"shell": [format!("echo {n} >> lines{sleep}")], "delay_ms": 100})
        })
        .chain([serde_json::json!({"text": "all lines written"})])
        .collect();
    serde_json::json!({"version": 1, "steps": steps, "after_last": {"text": "done"}})
}

fn task(kind: &str, id: &str) -> serde_json::Value {
    let check = format!("seq 1 {LINES} | cmp -s - lines");
    let verify = serde_json::json!({"command": ["/bin/sh", "-c", check]});
    if kind != "native" {
        return serde_json::json!({
            "v": 1,
            "task": {"id": id, "verify": verify},
            "adapter": {"kind": kind, "prompt": PROMPT},
        });
    }
    let wrapper = "#!/bin/sh\nin=\"$1\"; shift\nsed \"s|@MODEL@|$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY/v1|\" \"$in\" > \"$in.live\"\nexec \"$ROLLPOINT_BIN\" worker \"$in.live\" \"$@\"\n";
    let input = serde_json::json!({
        "v": 1,
        "rollout_id": id,
        "task": {"prompt": PROMPT},
        "model": {"base_url": "@MODEL@", "api": "chat_completions", "name": "scripted"},
        "workdir": "/workspace"
    });
    serde_json::json!({
        "v": 1,
        "task": {
            "id": id,
            "files": {"input.json": input.to_string(), "run-worker": wrapper},
            "setup": [["chmod", "0755", "run-worker"]],
            "verify": verify
        },
        "adapter": {"kind": "native", "input": "input.json", "worker": "./run-worker"}
    })
}

struct Round {
    first_call: f64,
    pause: f64,
    snapshot: f64,
    cont: f64,
    resume_first_call: f64,
}

fn spawn(args: &[&OsStr], log: &Path) -> Child {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log");
    Command::new(rollpoint())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn rollpoint")
}

fn until(what: &str, log: &Path, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + LIMIT;
    while !f() {
        assert!(
            Instant::now() < end,
            "{what}:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn model_calls(run_dir: &Path) -> usize {
    std::fs::read_to_string(run_dir.join("model-script.log"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn lines(run_dir: &Path) -> usize {
    std::fs::read_dir(run_dir.join("owner/sandboxes"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("root/workspace/lines")).ok())
                .map(|t| t.lines().count())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn checkpoint(run_dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(run_dir.join("control.json")).expect("control.json");
    let file: serde_json::Value = serde_json::from_str(&text).expect("control.json");
    let url = format!(
        "http://{}/v1/coordinator/checkpoint",
        file["addr"].as_str().expect("addr")
    );
    let mut reply = ureq::post(&url)
        .header("authorization", &format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .send(r#"{"v":1}"#)
        .expect("checkpoint");
    serde_json::from_str(&reply.body_mut().read_to_string().expect("body")).expect("report")
}

fn round(kind: &str, n: usize) -> Round {
    let tmp = tempfile::Builder::new()
        .prefix("rb")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let dir = tmp.path();
    let id = format!("{}{n}", &kind[..2]);
    std::fs::write(dir.join("tasks.jsonl"), format!("{}\n", task(kind, &id))).expect("tasks");
    std::fs::write(dir.join("model.json"), script().to_string()).expect("script");
    std::fs::write(
        dir.join("run.toml"),
        "v = 1\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\nstore = \"btrfs\"\n",
    )
    .expect("config");
    std::fs::write(dir.join("token"), TOKEN).expect("token");
    let run_dir = dir.join("r");
    let log = dir.join("log");
    let sup = rollpoint_testkit::supervisor_bin();
    let (tasks, config, token) = (
        dir.join("tasks.jsonl"),
        dir.join("run.toml"),
        dir.join("token"),
    );
    let mut child = spawn(
        &[
            OsStr::new("run"),
            tasks.as_os_str(),
            OsStr::new("--config"),
            config.as_os_str(),
            OsStr::new("--run-dir"),
            run_dir.as_os_str(),
            OsStr::new("--supervisor"),
            sup.as_os_str(),
            OsStr::new("--listen"),
            OsStr::new("127.0.0.1:0"),
            OsStr::new("--control-token-file"),
            token.as_os_str(),
        ],
        &log,
    );
    until("first model call", &log, || model_calls(&run_dir) > 0);
    let first_call_ms = now_ms();
    until("line 2", &log, || lines(&run_dir) >= 2);
    let report = checkpoint(&run_dir);
    let ms = |k: &str| report[k].as_f64().unwrap_or(0.0);
    let (pause, snapshot, cont) = (ms("prepare_ms"), ms("commit_ms"), ms("resume_ms"));
    let _ = child.kill();
    let _ = child.wait();

    let before = model_calls(&run_dir);
    let start = Instant::now();
    let mut resumed = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    until("a model call after resume", &log, || {
        model_calls(&run_dir) > before
    });
    let resume_first_call = start.elapsed().as_secs_f64() * 1000.0;
    let status = resumed.wait().expect("resume");
    let rows = rollpoint_run::read_results(&run_dir).expect("results");
    assert!(
        status.success() && rows.len() == 1 && rows[0].reward == Some(1.0),
        "{kind}: {status} {rows:?}\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let started = rows[0].launches[0].started_at_ms;
    Round {
        #[expect(clippy::cast_precision_loss, reason = "milliseconds")]
        first_call: first_call_ms.saturating_sub(started) as f64,
        pause,
        snapshot,
        cont,
        resume_first_call,
    }
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (
        v.get(v.len() / 2).copied().unwrap_or(0.0),
        v.first().copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
    )
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(3, |a| a.parse().expect("ROUNDS is a number"));
    let kinds = ["native", "codex", "claude-code"];
    let results: Vec<(&str, Vec<Round>)> = kinds
        .iter()
        .map(|k| (*k, (0..rounds).map(|n| round(k, n)).collect()))
        .collect();
    type Pick = fn(&Round) -> f64;
    let metrics: [(&str, Pick); 5] = [
        ("launch to first model call", |r| r.first_call),
        ("pause (mid-tool)", |r| r.pause),
        ("snapshot", |r| r.snapshot),
        ("continue", |r| r.cont),
        ("resume to first model call", |r| r.resume_first_call),
    ];
    println!("{rounds} rounds per harness; ms: median (min..max); ratio = median / native median");
    println!(
        "{:<28} {:<12} {:>24} {:>8}",
        "metric", "harness", "ms", "ratio"
    );
    for (name, pick) in metrics {
        let base = stats(results[0].1.iter().map(pick).collect()).0;
        for (kind, rs) in &results {
            let (med, min, max) = stats(rs.iter().map(pick).collect());
            // The control report counts whole milliseconds: a 0 ms
            // baseline has no ratio.
            let ratio = if base > 0.0 {
                format!("{:.2}x", med / base)
            } else {
                "-".to_owned()
            };
            println!(
                "{name:<28} {kind:<12} {:>24} {ratio:>8}",
                format!("{med:.1} ({min:.1}..{max:.1})")
            );
        }
    }
}
