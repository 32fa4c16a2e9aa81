//! Cost of the owner's HTTP side: each call through `HttpOwner` over
//! 127.0.0.1 against the same call on the in-process `LocalOwner` (the
//! baseline), both over the in-memory fake backend, so the figures are the
//! owner's own overhead and not a sandbox's.
//!
//! `cargo bench -p rollpoint-owner --bench owner_calls`
#![expect(clippy::unwrap_used, reason = "benchmark")]

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use rollpoint_owner::Owner;
use rollpoint_proto::anchor::ExecRequest;
use support::{Served, simple_task};

/// Median, min and max of `samples` in microseconds.
fn stats(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    let mid = samples.len() / 2;
    (samples[mid], samples[0], samples[samples.len() - 1])
}

async fn time<F, Fut>(reps: usize, mut f: F) -> (f64, f64, f64)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    // Warm up connections and allocations.
    for _ in 0..reps / 10 + 1 {
        f().await;
    }
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f().await;
        samples.push(start.elapsed().as_secs_f64() * 1e6);
    }
    stats(samples)
}

/// One call of kind `name`.
async fn call(owner: &dyn Owner, name: &str, session: &str, echo: &ExecRequest, blob: &[u8]) {
    match name {
        "access" => {
            owner.access(session).await.unwrap();
        }
        "exec echo" => {
            owner.exec(session, echo.clone()).await.unwrap();
        }
        "upload 1 MiB" => owner
            .upload(session, "blob", blob.to_vec(), 0o644)
            .await
            .unwrap(),
        "download 1 MiB" => {
            owner.download(session, "blob", 2 << 20).await.unwrap();
        }
        other => panic!("unknown call {other}"),
    }
}

async fn bench_call(name: &str, reps: usize, local: &dyn Owner, http: &dyn Owner, session: &str) {
    let echo = ExecRequest {
        argv: vec!["echo".into(), "hello".into()],
        env: BTreeMap::new(),
        cwd: "/".into(),
        timeout_ms: 10_000,
        output_limit: 4096,
        stdin: None,
    };
    let blob = vec![7u8; 1 << 20];
    let (lm, ll, lh) = time(reps, || call(local, name, session, &echo, &blob)).await;
    let (hm, hl, hh) = time(reps, || call(http, name, session, &echo, &blob)).await;
    println!(
        "{name:<15} {reps:>5} {:>24} {:>24} {:>8.1}x",
        format!("{lm:.1}/{ll:.1}/{lh:.1}"),
        format!("{hm:.1}/{hl:.1}/{hh:.1}"),
        hm / lm
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = Served::start().await;
        let info = s
            .client
            .create_session(simple_task("bench", &["true"]))
            .await
            .unwrap();
        s.client
            .upload(&info.session, "blob", vec![7u8; 1 << 20], 0o644)
            .await
            .unwrap();
        println!(
            "{:<15} {:>5} {:>24} {:>24} {:>9}",
            "call", "reps", "in-process us med/min/max", "http us med/min/max", "ratio"
        );
        for (name, reps) in [
            ("access", 2000),
            ("exec echo", 2000),
            ("upload 1 MiB", 200),
            ("download 1 MiB", 200),
        ] {
            bench_call(name, reps, s.local.as_ref(), &s.client, &info.session).await;
        }
        println!("ratio = http median / in-process median (the baseline)");
    });
}
