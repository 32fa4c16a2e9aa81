//! What a model call through the gateway costs one rollout with N rollouts in flight: N
//! capture keys registered, each with calls already in the ledger (on disk), then one
//! rollout's streaming calls made one at a time, alternating between the scripted model
//! straight and the gateway, in rounds. Prints, per N, the p50 of each (median, min and max
//! over the rounds), the latency the gateway adds, and the gateway's p50 against N = 1 (the
//! idle node, measured first in the same run). Sizes grow by adding rollouts.
//!
//! `cargo bench -p rollpoint-gateway --bench in_flight -- [--sizes 1,128,1024] [--calls N]
//!  [--rounds N] [--history N]`
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

mod common;

use rollpoint_proto::key::AttemptKey;
use std::time::Instant;

use futures_util::StreamExt as _;

use common::{body, stats};

struct Args {
    sizes: Vec<usize>,
    calls: usize,
    rounds: usize,
    history: usize,
}

fn args() -> Args {
    let mut a = Args {
        sizes: vec![1, 128, 1024],
        calls: 40,
        rounds: 5,
        history: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--sizes" => {
                a.sizes = it
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|s| s.parse().unwrap())
                    .collect();
            }
            "--calls" => a.calls = it.next().unwrap().parse().unwrap(),
            "--rounds" => a.rounds = it.next().unwrap().parse().unwrap(),
            "--history" => a.history = it.next().unwrap().parse().unwrap(),
            _ => {}
        }
    }
    a
}

/// One streaming call; its latency in ms.
async fn call(client: &reqwest::Client, url: &str, n: usize) -> f64 {
    let t = Instant::now();
    let resp = client.post(url).body(body(0, n)).send().await.unwrap();
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    let bytes = resp.bytes().await.unwrap();
    assert!(bytes.ends_with(b"data: [DONE]\n\n"));
    t.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let a = args();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let model = common::scripted_model(16, 0).await;
        let dir = tempfile::tempdir().unwrap();
        let gateway = common::gateway_to(&model, dir.path());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gw = listener.local_addr().unwrap();
        let g = gateway.clone();
        let server = tokio::spawn(async move { g.serve(listener).await });
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .unwrap();
        let direct = format!("{}/v1/chat/completions", model.base_url());
        let via = format!("http://{gw}/r/b0/v1/chat/completions");

        println!(
            "{:<26} {:>6} {:>9} {:>9} {:>9} {:>7}",
            "metric (ms)", "N", "median", "min", "max", "ratio"
        );
        let mut registered = 0;
        let mut base = None;
        let mut seq = 0;
        for &n in &a.sizes {
            let t = Instant::now();
            // The new rollouts, each with its calls already in the ledger.
            futures_util::stream::iter(registered..n)
                .map(|r| {
                    let (gateway, client) = (gateway.clone(), client.clone());
                    async move {
                        gateway
                            .register(&AttemptKey::of(&format!("b{r}"), 0).unwrap())
                            .unwrap();
                        let url = format!("http://{gw}/r/b{r}/v1/chat/completions");
                        for k in 0..a.history {
                            call(&client, &url, k).await;
                        }
                    }
                })
                .buffer_unordered(64)
                .collect::<Vec<()>>()
                .await;
            registered = registered.max(n);
            eprintln!(
                "{n} in flight ({:.1} s to add them; ledger rows: {})",
                t.elapsed().as_secs_f64(),
                gateway.calls(None).await.unwrap().len()
            );
            let (mut straight, mut through, mut added) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..a.rounds {
                let (mut d, mut g) = (Vec::new(), Vec::new());
                for _ in 0..a.calls {
                    seq += 1;
                    d.push(call(&client, &direct, seq).await);
                    g.push(call(&client, &via, seq).await);
                }
                let (d, g) = (stats(d).0, stats(g).0);
                straight.push(d);
                through.push(g);
                added.push(g - d);
            }
            let through = stats(through);
            let base = *base.get_or_insert(through.0);
            for (metric, (med, min, max), ratio) in [
                ("direct p50", stats(straight), None),
                ("gateway p50", through, Some(through.0 / base)),
                ("added p50", stats(added), None),
            ] {
                let ratio = ratio.map_or_else(String::new, |r| format!("{r:.2}"));
                println!("{metric:<26} {n:>6} {med:>9.3} {min:>9.3} {max:>9.3} {ratio:>7}");
            }
        }
        println!("ratio = the gateway's p50 at N / at the first size (the idle node)");
        server.abort();
        model.shutdown().await;
    });
}
