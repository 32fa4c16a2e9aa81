//! What strict isolation costs a sandbox's start, and how that cost grows
//! with the sandboxes already alive: with 0, 128 and 512 sandboxes running,
//! fresh sandboxes are made strict and trusted in turn (the same rounds, so
//! the machine's noise falls on both), each timed to `create` returning and
//! then to its first command (`true`) ending. The baseline is the trusted
//! sandbox measured in the same rounds.
//!
//! Needs root and the static supervisor (`ROLLPOINT_SUPERVISOR`).
//! Run: `cargo bench -p rollpoint-sandbox --bench isolation [-- --live 0,128,512 --rounds 15]`

#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_sandbox::{Backend, Isolation, SandboxSpec};

fn flag(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

fn median_min_max(samples: &[Duration]) -> (f64, f64, f64) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[0], ms[ms.len() - 1])
}

fn cell(samples: &[Duration]) -> String {
    let (median, min, max) = median_min_max(samples);
    format!("{median:.1}/{min:.1}/{max:.1}")
}

fn ratio(ours: &[Duration], base: &[Duration]) -> f64 {
    median_min_max(ours).0 / median_min_max(base).0
}

fn first_command(b: &LocalBackend, id: &str) {
    let out = b.exec(id, &rollpoint_testkit::command(&["true"])).unwrap();
    assert_eq!(out.exit_code, Some(0), "{}", out.stderr);
}

/// Create and first-command times of one fresh sandbox.
fn one(b: &LocalBackend, id: &str, isolation: Isolation) -> (Duration, Duration) {
    let spec = SandboxSpec {
        isolation,
        ..SandboxSpec::default()
    };
    let start = Instant::now();
    b.create(id, &spec).unwrap();
    let created = start.elapsed();
    let start = Instant::now();
    first_command(b, id);
    let ran = start.elapsed();
    b.destroy(id).unwrap();
    (created, ran)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let live: Vec<usize> = flag("--live", "0,128,512")
        .split(',')
        .map(|n| n.parse().unwrap())
        .collect();
    let rounds: usize = flag("--rounds", "15").parse().unwrap();
    let supervisor = PathBuf::from(
        std::env::var_os("ROLLPOINT_SUPERVISOR").expect("ROLLPOINT_SUPERVISOR: the static build"),
    );
    let scratch = tempfile::tempdir().unwrap();
    let b = LocalBackend::open(scratch.path(), LocalOptions::new(supervisor)).unwrap();
    println!(
        "fresh sandbox with N alive, ms (median/min/max over {rounds} rounds each, interleaved)"
    );
    println!(
        "{:>5} | {:>18} | {:>18} | {:>6} | {:>18} | {:>18} | {:>6} | {:>6}",
        "N",
        "create strict",
        "create trusted",
        "ratio",
        "first cmd strict",
        "first cmd trusted",
        "ratio",
        "total"
    );
    let mut alive = 0;
    for n in live {
        while alive < n {
            b.create(&format!("alive{alive}"), &SandboxSpec::default())
                .unwrap();
            alive += 1;
        }
        let (mut cs, mut ct, mut rs, mut rt, mut ts, mut tt) = Default::default();
        let push = |v: &mut Vec<Duration>, d| v.push(d);
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [Isolation::Strict, Isolation::Trusted]
            } else {
                [Isolation::Trusted, Isolation::Strict]
            };
            for iso in order {
                let (created, ran) = one(&b, &format!("fresh{round}"), iso);
                let (c, r, t): (&mut Vec<Duration>, &mut Vec<Duration>, &mut Vec<Duration>) =
                    if iso == Isolation::Strict {
                        (&mut cs, &mut rs, &mut ts)
                    } else {
                        (&mut ct, &mut rt, &mut tt)
                    };
                push(c, created);
                push(r, ran);
                push(t, created + ran);
            }
        }
        println!(
            "{:>5} | {:>18} | {:>18} | {:>5.2}x | {:>18} | {:>18} | {:>5.2}x | {:>5.2}x",
            n,
            cell(&cs),
            cell(&ct),
            ratio(&cs, &ct),
            cell(&rs),
            cell(&rt),
            ratio(&rs, &rt),
            ratio(&ts, &tt),
        );
    }
    for i in 0..alive {
        b.destroy(&format!("alive{i}")).unwrap();
    }
}
