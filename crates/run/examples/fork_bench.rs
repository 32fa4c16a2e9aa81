//! Forking a rollout N ways (root, btrfs store, through `rollpoint run` and its control
//! endpoint) against N fresh rollouts replaying the prefix from the start (the baseline),
//! measured in the same run, for N = 1, 8, 64. The rollout's setup writes 10,000 files; its
//! command then appends a line every 0.1 s. Fork: a checkpoint once it has 3 lines, then
//! `POST /v1/coordinator/fork`; timed from the request to every branch running its first
//! step (its launch marker written). Fresh: N rollouts of the same task in a run of their own,
//! timed from the run's endpoint being up to every one past the same 3 lines. Disk: the
//! store's used bytes before and after. Prints median, min and max per size.
//!
//! `cargo run --release -p rollpoint-run --example fork_bench [ROUNDS] [SIZES]`

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const FILES: usize = 10_000;
const PREFIX_LINES: usize = 3;
const TOKEN: &str = "bench-token";
const LIMIT: Duration = Duration::from_secs(300);

fn task(id: &str) -> serde_json::Value {
    let setup = format!(
        "mkdir many && cd many && i=0; while [ $i -lt {FILES} ]; do i=$((i+1)); echo $i > f$i; done"
    );
    let argv = "echo launch >> launches; n=$(wc -l < lines 2>/dev/null || echo 0); while :; do n=$((n+1)); echo $n >> lines; sleep 0.1; done";
    serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["true"]}, "setup": [["/bin/sh", "-c", setup]]},
        "adapter": {"kind": "command", "pauses": true, "argv": ["/bin/sh", "-c", argv]}
    })
}

struct Run {
    _dir: tempfile::TempDir,
    run_dir: PathBuf,
    child: Child,
}

impl Run {
    fn start(ids: &[String]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("rf")
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        let tasks = dir.path().join("tasks.jsonl");
        let text: String = ids.iter().map(|id| format!("{}\n", task(id))).collect();
        std::fs::write(&tasks, text).expect("tasks");
        let config = dir.path().join("run.toml");
        std::fs::write(
            &config,
            "v = 1\nconcurrency = 200\ncheckpoint_every_s = 0\nstore = \"btrfs\"\n",
        )
        .expect("config");
        let token = dir.path().join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
        let run_dir = dir.path().join("r");
        let log = std::fs::File::create(dir.path().join("stderr.log")).expect("log");
        let sup = rollpoint_testkit::supervisor_bin();
        let child = Command::new(rollpoint_testkit::rollpoint_bin())
            .arg("run")
            .arg(&tasks)
            .arg("--config")
            .arg(&config)
            .arg("--run-dir")
            .arg(&run_dir)
            .arg("--supervisor")
            .arg(&sup)
            .args([OsStr::new("--listen"), OsStr::new("127.0.0.1:0")])
            .arg("--control-token-file")
            .arg(&token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn rollpoint run");
        let run = Self {
            _dir: dir,
            run_dir,
            child,
        };
        run.wait_for(|| run.run_dir.join("control.json").exists());
        run
    }

    fn wait_for(&self, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + LIMIT;
        while !f() {
            assert!(
                Instant::now() < end,
                "timed out in {}",
                self.run_dir.display()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn post(&self, path: &str, body: &serde_json::Value) -> serde_json::Value {
        let file = rollpoint_run::EndpointFile::load(&self.run_dir).expect("control.json");
        let mut reply = ureq::post(&format!("http://{}{path}", file.addr))
            .header("authorization", &format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .send(body.to_string())
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let text = reply.body_mut().read_to_string().expect("reply");
        serde_json::from_str(&text).expect("json reply")
    }

    /// Workspaces of the sandboxes whose directory name holds `part`.
    fn workspaces(&self, part: &str) -> Vec<PathBuf> {
        std::fs::read_dir(self.run_dir.join("owner/sandboxes"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().contains(part))
                    .map(|e| e.path().join("root/workspace"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Used bytes of the store's filesystem, once what is written to it is on disk (btrfs
    /// allocates late).
    fn used_bytes(&self) -> u64 {
        let store = self.run_dir.join("owner/store/btrfs");
        let dir = std::fs::File::open(&store).expect("store");
        nix::unistd::syncfs(&dir).expect("syncfs");
        let s = nix::sys::statvfs::statvfs(&store).expect("statvfs");
        (s.blocks() - s.blocks_free()) * s.fragment_size()
    }

    fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn lines(ws: &Path, file: &str) -> usize {
    std::fs::read_to_string(ws.join(file)).map_or(0, |t| t.lines().count())
}

/// (time to every branch's first step, store bytes the N forks took).
fn fork_round(n: usize, round: usize) -> (Duration, u64) {
    let source = format!("fb{round}x{n}");
    let run = Run::start(std::slice::from_ref(&source));
    run.wait_for(|| {
        run.workspaces(&format!("{source}-"))
            .iter()
            .any(|ws| lines(ws, "lines") >= PREFIX_LINES)
    });
    let ck = run.post(
        "/v1/coordinator/checkpoint",
        &serde_json::json!({"v": 1, "hold_ms": 0}),
    );
    let id = ck["id"].as_str().expect("checkpoint id").to_owned();
    let before = run.used_bytes();
    let t0 = Instant::now();
    let reply = run.post(
        "/v1/coordinator/fork",
        &serde_json::json!({"v": 1, "checkpoint": id, "rollout": source, "n": n}),
    );
    assert_eq!(
        reply["branches"].as_array().map(Vec::len),
        Some(n),
        "{reply}"
    );
    run.wait_for(|| {
        (1..=n).all(|i| {
            run.workspaces(&format!(".b{i}."))
                .iter()
                .any(|ws| lines(ws, "launches") >= 2)
        })
    });
    let took = t0.elapsed();
    let used = run.used_bytes().saturating_sub(before);
    run.stop();
    (took, used)
}

/// (time to every fresh rollout past the prefix, store bytes they took).
fn fresh_round(n: usize, round: usize) -> (Duration, u64) {
    let ids: Vec<String> = (0..n).map(|i| format!("ff{round}x{n}y{i}")).collect();
    let t0 = Instant::now();
    let run = Run::start(&ids);
    let before = run.used_bytes();
    run.wait_for(|| {
        ids.iter().all(|id| {
            run.workspaces(&format!("{id}-"))
                .iter()
                .any(|ws| lines(ws, "lines") > PREFIX_LINES)
        })
    });
    let took = t0.elapsed();
    let used = run.used_bytes().saturating_sub(before);
    run.stop();
    (took, used)
}

fn stats(v: &[Duration]) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = v.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    (
        ms.get(ms.len() / 2).copied().unwrap_or(0.0),
        ms.first().copied().unwrap_or(0.0),
        ms.last().copied().unwrap_or(0.0),
    )
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let sizes: Vec<usize> = args
        .next()
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8, 64]);
    println!(
        "fork of a rollout with {FILES} files written by its setup, {rounds} rounds (btrfs store)"
    );
    println!(
        "| N | fork: every branch running, ms (median, min, max) | fresh: every rollout past the prefix, ms (median, min, max) | fresh / fork | fork disk MiB | fresh disk MiB |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for &n in &sizes {
        let (mut fork_t, mut fresh_t) = (Vec::new(), Vec::new());
        let (mut fork_d, mut fresh_d) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (t, d) = fork_round(n, round);
            fork_t.push(t);
            fork_d.push(d);
            let (t, d) = fresh_round(n, round);
            fresh_t.push(t);
            fresh_d.push(d);
        }
        let (fm, fmin, fmax) = stats(&fork_t);
        let (bm, bmin, bmax) = stats(&fresh_t);
        #[expect(clippy::cast_precision_loss, reason = "MiB of a benchmark")]
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        println!(
            "| {n} | {fm:.0} ({fmin:.0}, {fmax:.0}) | {bm:.0} ({bmin:.0}, {bmax:.0}) | {:.2} | {:.1} | {:.1} |",
            bm / fm.max(1e-9),
            mib(median(&mut fork_d)),
            mib(median(&mut fresh_d)),
        );
    }
}
