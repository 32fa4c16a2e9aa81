//! The gateway in front of 1, 2 and 8 replicas of one model, side by side in one run:
//! `--clients` concurrent streaming clients (64, then 512) call through three gateways (ledger
//! on disk, sticky per rollout) in alternating rounds, each gateway in front of its own
//! replicas of the paced scripted model. Prints p50/p99 latency and throughput for each, and
//! the ratio of each against one replica, as median, min and max over the rounds. Every
//! replica runs in this one process on the same cores, so more replicas add no capacity here:
//! the figures show what choosing a replica costs, not what replicas buy.
//!
//! `cargo bench -p rollpoint-gateway --bench replicas -- [--calls N] [--rounds N] [--chunks N]
//!  [--chunk-delay-ms N]`
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

mod common;

use rollpoint_gateway::{Gateway, GatewayConfig, UpstreamApi};
use rollpoint_model_script::{Script, ScriptServer, Step};
use rollpoint_proto::key::AttemptKey;

use common::{Round, Setup, print_table, round};

const REPLICAS: [usize; 3] = [1, 2, 8];

/// A gateway in front of `n` replicas, serving on 127.0.0.1.
async fn gateway(
    n: usize,
    setup: Setup,
) -> (Vec<ScriptServer>, Vec<String>, tokio::task::JoinHandle<()>) {
    let step = Step {
        text: Some("The test fails because the fixture path is wrong; fixing it now.".into()),
        ..Step::default()
    };
    let mut replicas = Vec::new();
    for _ in 0..n {
        let mut script = Script::new(vec![step.clone()]);
        script.stream_chunks = setup.chunks;
        script.chunk_delay_ms = setup.chunk_delay_ms;
        replicas.push(
            ScriptServer::start(script, "127.0.0.1:0".parse().unwrap(), None)
                .await
                .unwrap(),
        );
    }
    let dir = tempfile::tempdir().unwrap().keep();
    let mut config = GatewayConfig::new(
        replicas[0].base_url(),
        UpstreamApi::OpenAi,
        dir.join("l.db"),
    );
    config.replicas = replicas[1..].iter().map(ScriptServer::base_url).collect();
    let gw = Gateway::new(config).unwrap();
    for c in 0..setup.clients {
        gw.register(&AttemptKey::of(&format!("b{c}"), 0).unwrap())
            .unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = gw.serve(listener).await;
    });
    let urls = (0..setup.clients)
        .map(|c| format!("http://{addr}/r/b{c}/v1/chat/completions"))
        .collect();
    (replicas, urls, server)
}

async fn scenario(setup: Setup) {
    let mut gateways = Vec::new();
    for n in REPLICAS {
        gateways.push(gateway(n, setup).await);
    }
    let clients = common::clients(setup.clients);
    for (_, urls, _) in &gateways {
        round(&clients, urls.clone(), Setup { calls: 3, ..setup }).await;
    }
    let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); REPLICAS.len()];
    for _ in 0..setup.rounds {
        for (i, (_, urls, _)) in gateways.iter().enumerate() {
            rounds[i].push(round(&clients, urls.clone(), setup).await);
        }
    }
    let mut rows: Vec<(String, Vec<f64>)> = Vec::new();
    for (i, n) in REPLICAS.iter().enumerate() {
        rows.push((
            format!("{n} replica(s) p50 latency (ms)"),
            rounds[i].iter().map(|r| r.p50_ms).collect(),
        ));
    }
    for (i, n) in REPLICAS.iter().enumerate() {
        rows.push((
            format!("{n} replica(s) p99 latency (ms)"),
            rounds[i].iter().map(|r| r.p99_ms).collect(),
        ));
    }
    for (i, n) in REPLICAS.iter().enumerate() {
        rows.push((
            format!("{n} replica(s) throughput (calls/s)"),
            rounds[i].iter().map(|r| r.calls_per_s).collect(),
        ));
    }
    for (i, n) in REPLICAS.iter().enumerate().skip(1) {
        rows.push((
            format!("throughput ratio {n}/1 replica"),
            rounds[i]
                .iter()
                .zip(&rounds[0])
                .map(|(r, one)| r.calls_per_s / one.calls_per_s)
                .collect(),
        ));
        rows.push((
            format!("p50 latency ratio {n}/1 replica"),
            rounds[i]
                .iter()
                .zip(&rounds[0])
                .map(|(r, one)| r.p50_ms / one.p50_ms)
                .collect(),
        ));
    }
    println!(
        "\n{} streaming clients x {} calls, {} deltas {} ms apart, {} rounds",
        setup.clients, setup.calls, setup.chunks, setup.chunk_delay_ms, setup.rounds
    );
    print_table(rows);
    for (replicas, _, server) in gateways {
        server.abort();
        for r in replicas {
            r.shutdown().await;
        }
    }
}

fn main() {
    let setup = Setup::from_args(Setup {
        clients: 64,
        calls: 20,
        rounds: 5,
        chunks: 16,
        chunk_delay_ms: 10,
    });
    common::at_64_and_512(setup, scenario);
}
