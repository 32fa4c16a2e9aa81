//! What reading a Harbor dataset costs as it grows: `prepare` (read every task directory,
//! check it, map it to a rollout task with its tests base64-encoded) of N image tasks whose
//! `tests/` hold S bytes, and the build key of a Dockerfile context of S bytes (what a run pays
//! to find an environment already built). Baseline in the same run: reading the same files
//! with `std::fs::read` and nothing else. Prints median, min and max over the rounds per size,
//! and the ratio to the baseline.
//!
//! `cargo bench -p rollpoint-harbor --bench prepare -- [--sizes 16,128,1024] [--test-kib 64]
//!  [--rounds 5]`
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

use std::path::Path;
use std::time::Instant;

use rollpoint_harbor::{Agent, Builder, Settings, context_key, prepare};

struct Setup {
    sizes: Vec<usize>,
    test_kib: usize,
    rounds: usize,
}

fn parse_args() -> Setup {
    let mut s = Setup {
        sizes: vec![16, 128, 1024],
        test_kib: 64,
        rounds: 5,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let next = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--sizes" => s.sizes = next.split(',').map(|n| n.parse().unwrap()).collect(),
            "--test-kib" => s.test_kib = next.parse().unwrap(),
            "--rounds" => s.rounds = next.parse().unwrap(),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    s
}

/// A dataset of `n` image tasks, each with `tests/` of `kib` KiB in 4 files.
fn dataset(dir: &Path, n: usize, kib: usize) {
    for t in 0..n {
        let task = dir.join(format!("task-{t:05}"));
        std::fs::create_dir_all(task.join("tests")).unwrap();
        std::fs::create_dir_all(task.join("solution")).unwrap();
        std::fs::write(
            task.join("task.toml"),
            "version = \"1.0\"\n[environment]\ndocker_image = \"127.0.0.1:5000/tb/base:1\"\n\
             cpus = 2\nmemory_mb = 4096\n[agent]\ntimeout_sec = 900\n[verifier]\ntimeout_sec = 300\n",
        )
        .unwrap();
        std::fs::write(
            task.join("instruction.md"),
            "Make the failing test pass.\n".repeat(20),
        )
        .unwrap();
        let chunk: Vec<u8> = b"abcdefghijklmnopqrstuvwxyz"
            .iter()
            .copied()
            .cycle()
            .take(kib * 256)
            .collect();
        std::fs::write(task.join("tests/test.sh"), "#!/bin/bash\npytest /tests\n").unwrap();
        for f in 0..4 {
            std::fs::write(task.join(format!("tests/test_{f}.py")), &chunk).unwrap();
        }
        std::fs::write(task.join("solution/solve.sh"), "#!/bin/bash\ntrue\n").unwrap();
    }
}

/// Every file under `dir`, read and dropped: the baseline.
fn read_all(dir: &Path) -> usize {
    let mut bytes = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                bytes += std::fs::read(&p).unwrap().len();
            }
        }
    }
    bytes
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn row(n: usize, metric: &str, v: Vec<f64>) {
    let (med, min, max) = stats(v);
    println!("{n:>6} {metric:<28} {med:>10.3} {min:>10.3} {max:>10.3}");
}

fn main() {
    let setup = parse_args();
    let tmp = tempfile::tempdir().unwrap();
    let settings = Settings {
        agent: Agent::parse("opencode"),
        model: "policy".to_owned(),
        disk_limit: true,
    };
    let builder = Builder {
        cache: tmp.path().join("cache"),
        insecure: Vec::new(),
        auth_file: None,
    };
    println!(
        "tests/ of {} KiB a task (4 files); {} rounds",
        setup.test_kib, setup.rounds
    );
    println!(
        "{:>6} {:<28} {:>10} {:>10} {:>10}",
        "N", "metric (ms)", "median", "min", "max"
    );
    for &n in &setup.sizes {
        let ds = tmp.path().join(format!("ds-{n}"));
        dataset(&ds, n, setup.test_kib);
        let (mut prep, mut read, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..setup.rounds {
            let t = Instant::now();
            let bytes = read_all(&ds);
            let r = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let out = prepare(&ds, &settings, &builder, false).unwrap();
            let p = t.elapsed().as_secs_f64() * 1e3;
            assert_eq!(out.tasks.len(), n);
            assert!(bytes > 0);
            prep.push(p);
            read.push(r);
            ratio.push(p / r);
        }
        row(n, "prepare", prep.clone());
        row(n, "read the files (baseline)", read);
        row(n, "ratio prepare/read", ratio);
        #[expect(clippy::cast_precision_loss, reason = "a task count")]
        let per_task: Vec<f64> = prep.iter().map(|p| p / n as f64).collect();
        row(n, "prepare per task", per_task);
    }
    // The build key of a context of S MiB: what finding an environment built costs.
    for mib in [1usize, 16, 64] {
        let ctx = tmp.path().join(format!("ctx-{mib}"));
        std::fs::create_dir_all(&ctx).unwrap();
        std::fs::write(ctx.join("Dockerfile"), "FROM scratch\nCOPY data /data\n").unwrap();
        std::fs::write(ctx.join("data"), vec![7u8; mib << 20]).unwrap();
        let (mut key, mut read, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..setup.rounds {
            let t = Instant::now();
            read_all(&ctx);
            let r = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            context_key(&ctx).unwrap();
            let k = t.elapsed().as_secs_f64() * 1e3;
            key.push(k);
            read.push(r);
            ratio.push(k / r);
        }
        row(mib, "build key, MiB of context", key);
        row(mib, "read the context (baseline)", read);
        row(mib, "ratio key/read", ratio);
    }
}
