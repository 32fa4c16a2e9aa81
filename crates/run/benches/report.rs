//! What the report and the dashboard's run document cost as a run grows: a run directory of N
//! finished rollouts (two launches each, one continuing a saved session) and a history of 20
//! checkpoints with a crash and its resume. `report` is `rollpoint report` whole (every file
//! read, every rollout's document, the page written); `run view` is one `GET /v1/run/view` of
//! the dashboard (the run's document, serialized). Baseline in the same run: reading and
//! parsing `results.jsonl` alone. Prints median, min and max over the rounds per size, the
//! ratio to the baseline, the cost per rollout and the page's size.
//!
//! `cargo bench -p rollpoint-run --bench report -- [--sizes 1000,4000,10000] [--rounds 5]
//!  [--keep DIR]` (`--keep`: the pages are left in DIR as `report-N.html`, for
//! `scripts/bench-report-browser`)
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use rollpoint_driver::{LaunchEnd, LaunchEntry, RolloutResult, Status, Timings, Usage};
use rollpoint_run::{RUN_STATE_VERSION, ResultsLog, RunConfig, RunState, read_results};

struct Setup {
    sizes: Vec<usize>,
    rounds: usize,
    keep: Option<std::path::PathBuf>,
}

fn parse_args() -> Setup {
    let mut s = Setup {
        sizes: vec![1000, 4000, 10_000],
        rounds: 5,
        keep: None,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let next = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--sizes" => s.sizes = next.split(',').map(|n| n.parse().unwrap()).collect(),
            "--rounds" => s.rounds = next.parse().unwrap(),
            "--keep" => s.keep = Some(next.into()),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    s
}

fn launch(id: String, attempt: u32, resumed: bool, start: u64, end: u64) -> LaunchEntry {
    let mut l = LaunchEntry::started(
        id,
        attempt,
        format!("sb-{start}"),
        resumed,
        if resumed {
            "continued its saved session"
        } else {
            "first launch"
        }
        .to_owned(),
        None,
        start,
    );
    l.ended_at_ms = Some(end);
    l.end = Some(LaunchEnd::Finished);
    l.exit_code = Some(0);
    l
}

/// A run directory of `n` finished rollouts and its events.
fn run_dir(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let t0: u64 = 1_760_000_000_000;
    let ids: Vec<String> = (0..n).map(|i| format!("task-{i:05}")).collect();
    RunState {
        v: RUN_STATE_VERSION,
        tasks_path: dir.join("tasks.jsonl"),
        tasks_sha256: "00".into(),
        config: RunConfig::default(),
        gateway_port: 0,
        attempts: ids.iter().map(|i| (i.clone(), 1)).collect(),
        forks: Default::default(),
        saved_by: Default::default(),
        branched: Default::default(),
        trusted: Default::default(),
        infra_retries: Default::default(),
    }
    .save(dir)
    .unwrap();
    let mut log = ResultsLog::open(dir).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let start = t0 + (i as u64 % 600) * 1000;
        log.append(&RolloutResult {
            v: rollpoint_driver::RESULT_VERSION,
            task_id: id.clone(),
            rollout: id.clone(),
            attempt: 1,
            status: if i % 4 == 0 {
                Status::Unverified
            } else {
                Status::Verified
            },
            verdict: None,
            reward: Some(if i % 4 == 0 { 0.0 } else { 1.0 }),
            error: None,
            infra_class: None,
            infra_retries: Vec::new(),
            group: None,
            restart: false,
            launches: vec![
                launch(format!("{id}-a0-l0"), 0, false, start, start + 40_000),
                launch(
                    format!("{id}-a1-l0"),
                    1,
                    true,
                    start + 45_000,
                    start + 90_000,
                ),
            ],
            usage: Some(Usage {
                model_calls: 12,
                prompt_tokens: 24_000,
                completion_tokens: 3_000,
                total_tokens: 27_000,
            }),
            resources: None,
            response: Some("done".into()),
            transcript: Vec::new(),
            timings: Timings {
                started_at_ms: start,
                ended_at_ms: start + 90_000,
                harness_ms: 85_000,
                paused_ms: 500,
            },
            forked_from: None,
        })
        .unwrap();
    }
    let mut events = std::fs::File::create(dir.join("events.jsonl")).unwrap();
    writeln!(
        events,
        r#"{{"v":1,"at_ms":{t0},"kind":"started","tasks":{n}}}"#
    )
    .unwrap();
    for c in 0..20u64 {
        let at = t0 + c * 30_000;
        writeln!(
            events,
            r#"{{"v":1,"at_ms":{at},"kind":"checkpoint","id":"ck-{at}","scope":{n},"restarts":0,"timings":{{"prepare_ms":80,"commit_ms":300,"publish_ms":20,"held_ms":0,"resume_ms":30,"total_ms":430}}}}"#
        )
        .unwrap();
    }
    let resumed = t0 + 42_000;
    writeln!(
        events,
        r#"{{"v":1,"at_ms":{resumed},"kind":"resumed","from":"ck-{t0}","restored":{n},"started_over":0,"finished":0}}"#
    )
    .unwrap();
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
    println!("{} rounds", setup.rounds);
    println!(
        "{:>6} {:<28} {:>10} {:>10} {:>10}",
        "N", "metric (ms)", "median", "min", "max"
    );
    for &n in &setup.sizes {
        let dir = tmp.path().join(format!("run-{n}"));
        run_dir(&dir, n);
        let out = tmp.path().join(format!("report-{n}.html"));
        let (mut report, mut view, mut read, mut ratio) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..setup.rounds {
            let t = Instant::now();
            assert_eq!(read_results(&dir).unwrap().len(), n);
            let r = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            rollpoint_run::report::write_report(&dir, Some(&out)).unwrap();
            let p = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let doc = rollpoint_run::view::run_view(&dir, None).unwrap();
            assert!(!serde_json::to_vec(&doc).unwrap().is_empty());
            view.push(t.elapsed().as_secs_f64() * 1e3);
            report.push(p);
            read.push(r);
            ratio.push(p / r);
        }
        row(n, "report", report.clone());
        row(n, "run view (dashboard)", view);
        row(n, "read results (baseline)", read);
        row(n, "ratio report/read", ratio);
        #[expect(clippy::cast_precision_loss, reason = "a rollout count")]
        let per: Vec<f64> = report.iter().map(|p| p / n as f64).collect();
        row(n, "report per rollout", per);
        let mib = std::fs::metadata(&out).unwrap().len() as f64 / f64::from(1 << 20);
        println!("{n:>6} {:<28} {mib:>10.2}", "page (MiB)");
        if let Some(keep) = &setup.keep {
            std::fs::create_dir_all(keep).unwrap();
            std::fs::copy(&out, keep.join(format!("report-{n}.html"))).unwrap();
        }
    }
}
