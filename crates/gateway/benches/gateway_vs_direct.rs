//! Gateway overhead, side by side in one run: 64 concurrent streaming clients call the
//! scripted model straight and through the gateway (ledger on disk, gate open), in
//! alternating rounds. Prints p50/p99 latency, the latency the gateway adds, throughput and
//! the throughput ratio, each as median, min and max over the rounds.
//!
//! The first scenario paces the model like a served one (a delta every 10 ms); the second
//! streams with no pacing, so clients, model and gateway compete for the CPU and the gateway's
//! own CPU cost shows in full. All three run in this one process.
//!
//! `cargo bench -p rollpoint-gateway --bench gateway_vs_direct -- [--clients N] [--calls N]
//!  [--rounds N] [--chunks N] [--chunk-delay-ms N]`
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

mod common;

use common::{Setup, print_table, round};
use rollpoint_proto::key::AttemptKey;

fn parse_args() -> Setup {
    Setup::from_args(Setup {
        clients: 64,
        calls: 40,
        rounds: 5,
        chunks: 16,
        chunk_delay_ms: 10,
    })
}

async fn scenario(setup: Setup) {
    let model = common::scripted_model(setup.chunks, setup.chunk_delay_ms).await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = common::gateway_to(&model, dir.path());
    for c in 0..setup.clients {
        gateway
            .register(&AttemptKey::of(&format!("b{c}"), 0).unwrap())
            .unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gw_addr = listener.local_addr().unwrap();
    let g = gateway.clone();
    let server = tokio::spawn(async move { g.serve(listener).await });
    let direct_urls: Vec<String> = (0..setup.clients)
        .map(|_| format!("{}/v1/chat/completions", model.base_url()))
        .collect();
    let gw_urls: Vec<String> = (0..setup.clients)
        .map(|c| format!("http://{gw_addr}/r/b{c}/v1/chat/completions"))
        .collect();
    // Warm-up: connections, page cache, ledger file.
    let clients = common::clients(setup.clients);
    round(&clients, direct_urls.clone(), Setup { calls: 3, ..setup }).await;
    round(&clients, gw_urls.clone(), Setup { calls: 3, ..setup }).await;
    let (mut direct, mut via) = (Vec::new(), Vec::new());
    for _ in 0..setup.rounds {
        direct.push(round(&clients, direct_urls.clone(), setup).await);
        via.push(round(&clients, gw_urls.clone(), setup).await);
    }
    server.abort();
    let pairs = direct.iter().zip(&via);
    let rows: Vec<(&str, Vec<f64>)> = vec![
        (
            "direct p50 latency (ms)",
            direct.iter().map(|r| r.p50_ms).collect(),
        ),
        (
            "gateway p50 latency (ms)",
            via.iter().map(|r| r.p50_ms).collect(),
        ),
        (
            "added p50 latency (ms)",
            pairs.clone().map(|(d, g)| g.p50_ms - d.p50_ms).collect(),
        ),
        (
            "direct p99 latency (ms)",
            direct.iter().map(|r| r.p99_ms).collect(),
        ),
        (
            "gateway p99 latency (ms)",
            via.iter().map(|r| r.p99_ms).collect(),
        ),
        (
            "added p99 latency (ms)",
            pairs.clone().map(|(d, g)| g.p99_ms - d.p99_ms).collect(),
        ),
        (
            "direct throughput (calls/s)",
            direct.iter().map(|r| r.calls_per_s).collect(),
        ),
        (
            "gateway throughput (calls/s)",
            via.iter().map(|r| r.calls_per_s).collect(),
        ),
        (
            "throughput ratio gateway/direct",
            pairs.map(|(d, g)| g.calls_per_s / d.calls_per_s).collect(),
        ),
    ];
    println!(
        "\n{} streaming clients x {} calls, {} deltas {} ms apart, {} rounds (ledger rows: {})",
        setup.clients,
        setup.calls,
        setup.chunks,
        setup.chunk_delay_ms,
        setup.rounds,
        gateway.calls(None).await.unwrap().len()
    );
    print_table(rows);
    model.shutdown().await;
}

fn main() {
    let setup = parse_args();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        scenario(setup).await;
        // The same with no pacing: CPU-bound, the gateway's cost in CPU shows fully.
        scenario(Setup {
            chunk_delay_ms: 0,
            ..setup
        })
        .await;
    });
}
