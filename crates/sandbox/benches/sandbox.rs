//! Sandbox-level checkpoint costs of the local backend, per snapshot store,
//! against plain `tar` of the same upper directory measured in the same run:
//!
//! - snapshot: freeze the sandbox's cgroup, syncfs, store snapshot, thaw
//!   (baseline: `tar -c` of the upper into an archive);
//! - fork to a first command: fork the snapshot into a new sandbox (upper,
//!   overlay, namespaces, anchor) and run `true` in it (baseline: `tar -x`
//!   of that archive into a fresh directory);
//!
//! for diffs of 1, 1,000 and 10,000 files of 4 KiB written inside the
//! sandbox; and create to a first command for a fresh sandbox (baseline:
//! `unshare --mount --uts --ipc --pid --fork true`). Needs root and the
//! supervisor (`ROLLPOINT_SUPERVISOR` or the workspace build).
//!
//! Run: `cargo bench -p rollpoint-sandbox --bench sandbox`

#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rollpoint_proto::anchor::ExecRequest;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_sandbox::{Backend, SandboxSpec};
use rollpoint_snapshot::{StoreChoice, StoreOptions};

const SIZES: [usize; 3] = [1, 1_000, 10_000];
const ROUNDS: usize = 5;

fn exec(b: &LocalBackend, id: &str, argv: &[&str]) {
    let out = b
        .exec(
            id,
            &ExecRequest {
                argv: argv.iter().map(|s| (*s).to_owned()).collect(),
                env: BTreeMap::new(),
                cwd: String::new(),
                timeout_ms: 600_000,
                output_limit: 4096,
                stdin: None,
            },
        )
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{argv:?}: {}", out.stderr);
}

fn stats(samples: &[Duration]) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[0], ms[ms.len() - 1])
}

fn cell(samples: &[Duration]) -> String {
    let (median, min, max) = stats(samples);
    format!("{median:.1}/{min:.1}/{max:.1}")
}

fn ratio(ours: &[Duration], base: &[Duration]) -> String {
    format!("{:.2}x", stats(ours).0 / stats(base).0)
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

fn supervisor() -> PathBuf {
    std::env::var_os("ROLLPOINT_SUPERVISOR").map_or_else(
        || {
            let exe = std::env::current_exe().unwrap();
            exe.parent()
                .and_then(Path::parent)
                .and_then(Path::parent)
                .unwrap()
                .join("debug/rollpoint-supervisor")
        },
        PathBuf::from,
    )
}

fn open(dir: &Path, choice: StoreChoice) -> LocalBackend {
    let mut options = LocalOptions::new(supervisor());
    options.store = StoreOptions {
        choice,
        ..StoreOptions::default()
    };
    LocalBackend::open(dir, options).unwrap()
}

struct Row {
    store: &'static str,
    files: usize,
    snapshot: Vec<Duration>,
    fork: Vec<Duration>,
    tar_c: Vec<Duration>,
    tar_x: Vec<Duration>,
}

fn measure(store: &'static str, choice: StoreChoice, files: usize, scratch: &Path) -> Row {
    let dir = scratch.join(format!("{store}-{files}"));
    let b = open(&dir, choice);
    let info = b.create("base", &SandboxSpec::default()).unwrap();
    let script = format!(
        "for d in $(seq 0 $(({files} / 1000))); do mkdir -p /workspace/d$d; done; \
         i=0; while [ $i -lt {files} ]; do head -c 4096 /dev/zero > /workspace/d$((i / 1000))/f$i; i=$((i + 1)); done"
    );
    exec(&b, "base", &["/bin/sh", "-c", &script]);
    let upper = {
        let rec: serde_json::Value = serde_json::from_slice(
            &std::fs::read(dir.join("sandboxes/base/sandbox.json")).unwrap(),
        )
        .unwrap();
        PathBuf::from(rec["upper"].as_str().unwrap())
    };
    rollpoint_snapshot::syncfs(&info.root).unwrap();
    let mut row = Row {
        store,
        files,
        snapshot: Vec::new(),
        fork: Vec::new(),
        tar_c: Vec::new(),
        tar_x: Vec::new(),
    };
    for round in 0..ROUNDS {
        let snap = format!("snap{round}");
        let fork = format!("fork{round}");
        row.snapshot.push(timed(|| {
            b.snapshot("base", &snap, "bench").unwrap();
        }));
        row.fork.push(timed(|| {
            b.fork(&snap, &fork).unwrap();
            exec(&b, &fork, &["true"]);
        }));
        b.destroy(&fork).unwrap();
        b.delete_snapshot(&snap).unwrap();

        let archive = scratch.join(format!("tar-{round}.tar"));
        let out = scratch.join(format!("untar-{round}"));
        row.tar_c.push(timed(|| {
            let ok = Command::new("tar")
                .args(["--xattrs", "--numeric-owner", "-cf"])
                .arg(&archive)
                .arg("-C")
                .arg(&upper)
                .arg(".")
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }));
        std::fs::create_dir_all(&out).unwrap();
        row.tar_x.push(timed(|| {
            let ok = Command::new("tar")
                .args(["--xattrs", "--numeric-owner", "-xpf"])
                .arg(&archive)
                .arg("-C")
                .arg(&out)
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }));
        std::fs::remove_file(&archive).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
    }
    b.destroy("base").unwrap();
    drop(b);
    row
}

fn create_to_first_command(scratch: &Path) -> (Vec<Duration>, Vec<Duration>) {
    let b = open(&scratch.join("create"), StoreChoice::Auto);
    let mut ours = Vec::new();
    let mut base = Vec::new();
    for round in 0..ROUNDS * 2 {
        let id = format!("fresh{round}");
        ours.push(timed(|| {
            b.create(&id, &SandboxSpec::default()).unwrap();
            exec(&b, &id, &["true"]);
        }));
        b.destroy(&id).unwrap();
        base.push(timed(|| {
            let ok = Command::new("unshare")
                .args(["--mount", "--uts", "--ipc", "--pid", "--fork", "true"])
                .status()
                .unwrap()
                .success();
            assert!(ok);
        }));
    }
    (ours, base)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    println!(
        "sandbox snapshot and fork-to-first-command, ms (median/min/max over {ROUNDS} rounds)"
    );
    println!(
        "{:>6} | {:>6} | {:>20} | {:>20} | {:>7} | {:>20} | {:>20} | {:>7}",
        "store",
        "files",
        "snapshot",
        "tar -c (baseline)",
        "ratio",
        "fork+first cmd",
        "tar -x (baseline)",
        "ratio"
    );
    for (store, choice) in [("btrfs", StoreChoice::Btrfs), ("copy", StoreChoice::Copy)] {
        for files in SIZES {
            let r = measure(store, choice, files, scratch.path());
            println!(
                "{:>6} | {:>6} | {:>20} | {:>20} | {:>7} | {:>20} | {:>20} | {:>7}",
                r.store,
                r.files,
                cell(&r.snapshot),
                cell(&r.tar_c),
                ratio(&r.snapshot, &r.tar_c),
                cell(&r.fork),
                cell(&r.tar_x),
                ratio(&r.fork, &r.tar_x),
            );
        }
    }
    let (ours, base) = create_to_first_command(scratch.path());
    println!();
    println!(
        "create to first command, ms (median/min/max over {} rounds)",
        ours.len()
    );
    println!(
        "{:>24} | {:>20} | {:>7}",
        "fresh sandbox", "unshare (baseline)", "ratio"
    );
    println!(
        "{:>24} | {:>20} | {:>7}",
        cell(&ours),
        cell(&base),
        ratio(&ours, &base)
    );
}
