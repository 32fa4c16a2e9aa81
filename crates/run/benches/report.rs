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

mod fixture;

use std::time::Instant;

use fixture::{run_dir, stats};
use rollpoint_run::read_results;

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
