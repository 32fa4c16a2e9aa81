//! Cost of a whole checkpoint (prepare, commit, publish, prune, resume)
//! over N fake participants, in process and over HTTP on 127.0.0.1,
//! against the baseline of writing the same records to one plain fsynced
//! file, measured in the same run. The participants are the test fakes, so
//! the figures are the control plane's own cost and not a sandbox's.
//!
//! `cargo bench -p rollpoint-checkpoint --bench checkpoint_cycle`
#![expect(clippy::unwrap_used, reason = "benchmark")]

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Fake, TOKEN, keys, serve};
use rollpoint_checkpoint::AttemptKey;
use rollpoint_checkpoint::coordinator::Plan;
use rollpoint_checkpoint::{
    Coordinator, CoordinatorConfig, HostConfig, HttpParticipant, Kind, ParticipantApi,
    ParticipantHost,
};

const REPS: usize = 15;
/// Records per attempt key per participant.
const PER_KEY: usize = 4;

/// Median, min and max in milliseconds.
fn stats(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
}

fn kind_of(i: usize) -> Kind {
    match i % 4 {
        0 => Kind::Model,
        3 => Kind::Resources,
        _ => Kind::Agent,
    }
}

async fn coordinator(run: &Path, n: usize, scope: &[AttemptKey], http: bool) -> Coordinator {
    let mut controls: Vec<Arc<dyn ParticipantApi>> = Vec::new();
    for i in 0..n {
        let fake = Fake::with_records(kind_of(i), &format!("p{i}"), scope, PER_KEY);
        let local = ParticipantHost::new(fake, HostConfig::new(run)).unwrap();
        if http {
            let base = serve(Arc::new(local)).await;
            controls.push(Arc::new(HttpParticipant::new(&base, TOKEN).unwrap()));
        } else {
            controls.push(Arc::new(local));
        }
    }
    let mut config = CoordinatorConfig::new(run);
    config.timeout = Duration::from_secs(60);
    Coordinator::new(controls, config).await.unwrap()
}

/// Whole-checkpoint samples, and per-step samples (prepare, commit,
/// publish with prune, resume), in milliseconds.
async fn cycles(c: &Coordinator, scope: &[AttemptKey], tag: &str) -> (Vec<f64>, [Vec<f64>; 4]) {
    let mut samples = Vec::new();
    let mut steps: [Vec<f64>; 4] = Default::default();
    for rep in 0..=REPS {
        let plan = Plan {
            id: format!("{tag}-{rep}"),
            scope: scope.to_vec(),
            continues: None,
            stop: false,
        };
        let start = Instant::now();
        let done = c.checkpoint(&plan).await.unwrap();
        // The first round warms connections and directories.
        if rep > 0 {
            samples.push(start.elapsed().as_secs_f64() * 1e3);
            let t = done.timings;
            for (i, d) in [t.prepare, t.commit, t.publish, t.resume]
                .iter()
                .enumerate()
            {
                steps[i].push(d.as_secs_f64() * 1e3);
            }
        }
    }
    (samples, steps)
}

/// The same records as one JSON-lines file, written and fsynced once.
fn baseline(dir: &Path, n: usize, scope: &[AttemptKey]) -> Vec<f64> {
    let records: Vec<serde_json::Value> = (0..n)
        .flat_map(|i| {
            scope.iter().flat_map(move |key| {
                (0..PER_KEY).map(move |seq| {
                    serde_json::json!({"key": key, "kind": kind_of(i).as_str(), "instance": format!("p{i}"), "seq": seq})
                })
            })
        })
        .collect();
    let mut samples = Vec::new();
    for rep in 0..=REPS {
        let path = dir.join(format!("plain-{rep}.jsonl"));
        let start = Instant::now();
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for r in &records {
            serde_json::to_writer(&mut out, r).unwrap();
            out.write_all(b"\n").unwrap();
        }
        out.into_inner().unwrap().sync_all().unwrap();
        if rep > 0 {
            samples.push(start.elapsed().as_secs_f64() * 1e3);
        }
    }
    samples
}

fn cell((m, lo, hi): (f64, f64, f64)) -> String {
    format!("{m:.2}/{lo:.2}/{hi:.2}")
}

#[tokio::main]
async fn main() {
    println!(
        "{:>5} {:>5} {:>8} {:>22} {:>22} {:>22} {:>8} {:>8}",
        "parts", "keys", "records", "plain fsync ms", "in-process ms", "http ms", "in-proc", "http"
    );
    let mut breakdown = Vec::new();
    for (n, k) in [(4, 8), (4, 64), (16, 64), (64, 64)] {
        let scope = keys(k);
        let dir = tempfile::tempdir().unwrap();
        let base = stats(baseline(dir.path(), n, &scope));
        let local_run = dir.path().join("local");
        let local = coordinator(&local_run, n, &scope, false).await;
        let (whole, steps) = cycles(&local, &scope, "l").await;
        let inproc = stats(whole);
        breakdown.push((n, k, steps.map(|s| stats(s).0)));
        let http_run = dir.path().join("http");
        let http = coordinator(&http_run, n, &scope, true).await;
        let over_http = stats(cycles(&http, &scope, "h").await.0);
        println!(
            "{n:>5} {k:>5} {:>8} {:>22} {:>22} {:>22} {:>7.1}x {:>7.1}x",
            n * k * PER_KEY,
            cell(base),
            cell(inproc),
            cell(over_http),
            inproc.0 / base.0,
            over_http.0 / base.0
        );
    }
    println!(
        "ms med/min/max over {REPS} checkpoints; ratio = median / plain fsync median (the baseline)"
    );
    println!();
    println!(
        "{:>5} {:>5} {:>10} {:>10} {:>10} {:>10}",
        "parts", "keys", "prepare", "commit", "publish", "resume"
    );
    for (n, k, [p, c, pb, r]) in breakdown {
        println!("{n:>5} {k:>5} {p:>10.2} {c:>10.2} {pb:>10.2} {r:>10.2}");
    }
    println!("in-process median ms per step (publish includes pruning to 2)");
}
