//! What a checkpoint and a crash cost with a real harness (root): OpenCode
//! and Pi against rollpoint's own worker (the baseline), each through
//! `rollpoint run` over btrfs sandboxes with the scripted model, measured in
//! the same run. Prints one table: median (min..max) per metric and the
//! ratio of medians against the worker.
//!
//! `cargo build --release -p rollpoint -p rollpoint-supervisor`, then
//! `cargo bench -p rollpoint-run --bench harness -- [ROUNDS]`.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/common/harness_opencode_pi.rs"]
mod harness;

use std::collections::BTreeMap;

const BASELINE: &str = "native";

fn stats(v: &mut [u64]) -> (u64, u64, u64) {
    v.sort_unstable();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let kinds = [(BASELINE, 'n'), ("pi", 'p'), ("opencode", 'o')];
    let mut all: BTreeMap<&str, BTreeMap<&str, Vec<u64>>> = BTreeMap::new();
    for round in 0..rounds {
        for (kind, letter) in kinds {
            eprintln!("round {} of {rounds}: {kind}", round + 1);
            for (name, ms) in harness::bench_round(kind, letter) {
                all.entry(name)
                    .or_default()
                    .entry(kind)
                    .or_default()
                    .push(ms);
            }
        }
    }
    println!(
        "harness checkpoint and crash costs, {rounds} rounds; ms: median (min..max), ratio of medians vs {BASELINE}"
    );
    println!(
        "{:<28} {:<9} {:>22} {:>9}",
        "metric", "harness", "median (min..max)", "ratio"
    );
    for (name, per_kind) in &mut all {
        let base = per_kind
            .get_mut(BASELINE)
            .map(|v| stats(v).0)
            .unwrap_or_default();
        for (kind, _) in kinds {
            let Some(v) = per_kind.get_mut(kind) else {
                continue;
            };
            let (med, min, max) = stats(v);
            let ratio = if base == 0 {
                "-".to_owned()
            } else {
                format!(
                    "{:.2}x",
                    f64::from(u32::try_from(med).unwrap_or(u32::MAX))
                        / f64::from(u32::try_from(base).unwrap_or(u32::MAX))
                )
            };
            println!(
                "{name:<28} {kind:<9} {:>22} {ratio:>9}",
                format!("{med} ({min}..{max})")
            );
        }
    }
}
