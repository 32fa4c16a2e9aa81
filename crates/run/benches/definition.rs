//! What carrying the run's definition in the checkpoint store costs as a run grows: with N
//! finished rollouts, `publish` is what every checkpoint uploads before it is prepared (the
//! tasks file, put once; `results.jsonl` whole; the document) to a `file://` store, and
//! `install` is what `rollpoint resume --from` does with it on a new machine (the newest
//! definition found through the publish markers, fetched, digests checked, the run directory
//! written). Baseline in the same run: copying `results.jsonl` to a new file and fsyncing it.
//! Prints median, min and max over the rounds per size, the ratio to the baseline and the cost
//! per rollout.
//!
//! `cargo bench -p rollpoint-run --bench definition -- [--sizes 1000,4000,16000] [--rounds 5]`
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

mod fixture;

use std::io::Write as _;
use std::time::Instant;

use bytes::Bytes;
use fixture::{run_dir, stats};
use rollpoint_checkpoint::store::remote::Marker;
use rollpoint_remote::{Options, RemoteStore, StoreUrl};
use rollpoint_run::RunState;
use rollpoint_run::files::definition;

fn parse_args() -> (Vec<usize>, usize) {
    let mut sizes = vec![1000, 4000, 16_000];
    let mut rounds = 5;
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        match pair[0].as_str() {
            "--sizes" => sizes = pair[1].split(',').map(|n| n.parse().unwrap()).collect(),
            "--rounds" => rounds = pair[1].parse().unwrap(),
            _ => {}
        }
    }
    (sizes, rounds)
}

fn row(n: usize, metric: &str, v: Vec<f64>) {
    let (med, min, max) = stats(v);
    println!("{n:>6} {metric:<30} {med:>10.3} {min:>10.3} {max:>10.3}");
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (sizes, rounds) = parse_args();
    let tmp = tempfile::tempdir().unwrap();
    println!("{rounds} rounds");
    println!(
        "{:>6} {:<30} {:>10} {:>10} {:>10}",
        "N", "metric (ms)", "median", "min", "max"
    );
    for &n in &sizes {
        let dir = tmp.path().join(format!("run-{n}"));
        run_dir(&dir, n);
        let state = RunState::load(&dir).unwrap();
        let url = format!("file://{}/store-{n}", tmp.path().display());
        let store = RemoteStore::open(&StoreUrl::parse(&url).unwrap(), &Options::none()).unwrap();
        let (mut publish, mut install, mut copy) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            let t = Instant::now();
            let to = tmp.path().join(format!("copy-{n}-{r}"));
            let bytes = std::fs::read(dir.join("results.jsonl")).unwrap();
            let mut f = std::fs::File::create(&to).unwrap();
            f.write_all(&bytes).unwrap();
            f.sync_all().unwrap();
            copy.push(ms(t));

            let id = format!("ck-{n}-{r}");
            let t = Instant::now();
            definition::publish(&store, &dir, &state, &id)
                .await
                .unwrap();
            publish.push(ms(t));
            let seq = u64::try_from(r).unwrap() + 1;
            let marker = Marker {
                version: 1,
                seq,
                checkpoint: id.clone(),
                created_unix_ms: seq,
            };
            store
                .put_new(
                    &format!("publish/{seq:020}.json"),
                    Bytes::from(serde_json::to_vec(&marker).unwrap()),
                )
                .await
                .unwrap();

            let fresh = tmp.path().join(format!("new-{n}-{r}"));
            std::fs::create_dir(&fresh).unwrap();
            let t = Instant::now();
            let def = definition::newest(&store).await.unwrap();
            definition::install(&store, &def, &fresh, None)
                .await
                .unwrap();
            install.push(ms(t));
            assert_eq!(def.checkpoint, id);
            assert_eq!(
                std::fs::read(fresh.join("results.jsonl")).unwrap().len(),
                bytes.len()
            );
        }
        let ratio: Vec<f64> = publish.iter().zip(&copy).map(|(p, c)| p / c).collect();
        #[expect(clippy::cast_precision_loss, reason = "a rollout count")]
        let per: Vec<f64> = publish.iter().map(|p| p * 1e3 / n as f64).collect();
        row(n, "publish (each checkpoint)", publish);
        row(n, "install (resume --from)", install);
        row(n, "copy results (baseline)", copy);
        row(n, "ratio publish/copy", ratio);
        row(n, "publish per rollout (us)", per);
    }
}
