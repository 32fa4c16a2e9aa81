//! What a checkpoint and a crash cost with each real harness (root):
//! OpenCode, Codex CLI, Claude Code and Pi against rollpoint's own worker
//! (the baseline), each through `rollpoint run` over btrfs sandboxes with
//! the scripted model, measured in the same run. A round is the end-to-end
//! tests' `bench_round`. Prints one table: median (min..max) per metric and
//! harness, and the ratio of medians against the worker.
//!
//! `cargo build --release -p rollpoint`, then
//! `ROLLPOINT_SUPERVISOR=<static supervisor> cargo bench -p rollpoint-run --bench harness -- [ROUNDS]`.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/common/harness.rs"]
mod harness;

use std::collections::BTreeMap;

use harness::{BENCH_METRICS, CLAUDE_CODE, CODEX, Harness, NATIVE, OPENCODE, PI};

/// Median, min and max of `v` (not empty).
fn stats(v: &mut [u64]) -> (u64, u64, u64) {
    v.sort_unstable();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn ratio(med: u64, base: u64) -> String {
    // The control report counts whole milliseconds: a 0 ms baseline has no
    // ratio.
    if base == 0 {
        return "-".to_owned();
    }
    let as_f = |v: u64| f64::from(u32::try_from(v).unwrap_or(u32::MAX));
    format!("{:.2}x", as_f(med) / as_f(base))
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let kinds: [Harness; 5] = [NATIVE, OPENCODE, CODEX, CLAUDE_CODE, PI];
    // metric -> harness -> one value per round
    let mut all: BTreeMap<&str, BTreeMap<&str, Vec<u64>>> = BTreeMap::new();
    for round in 0..rounds {
        for h in kinds {
            eprintln!("round {} of {rounds}: {}", round + 1, h.kind);
            for (name, ms) in harness::bench_round(h) {
                all.entry(name)
                    .or_default()
                    .entry(h.kind)
                    .or_default()
                    .push(ms);
            }
        }
    }
    println!(
        "harness checkpoint and crash costs, {rounds} rounds; ms: median (min..max), ratio of medians vs {}",
        NATIVE.kind
    );
    println!(
        "{:<28} {:<12} {:>22} {:>9}",
        "metric", "harness", "median (min..max)", "ratio"
    );
    for name in BENCH_METRICS {
        let Some(per_kind) = all.get_mut(name) else {
            continue;
        };
        let base = per_kind
            .get_mut(NATIVE.kind)
            .map(|v| stats(v).0)
            .unwrap_or_default();
        for h in kinds {
            let Some(v) = per_kind.get_mut(h.kind) else {
                continue;
            };
            let (med, min, max) = stats(v);
            println!(
                "{name:<28} {:<12} {:>22} {:>9}",
                h.kind,
                format!("{med} ({min}..{max})"),
                ratio(med, base)
            );
        }
    }
}
