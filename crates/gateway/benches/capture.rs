//! Token capture's cost, side by side in one run: 64 concurrent streaming clients call the
//! scripted model in token mode straight and through three gateways (ledger on disk): capture
//! off, capture of the ids only (`model_logprobs = false`), and capture of ids and logprobs
//! (`model_tokens = "vllm"`), in alternating rounds. Prints p50 latency, throughput and the
//! gateway's CPU per call for each, as median, min and max over the rounds, and the ratios
//! against capture off.
//!
//! Everything runs in this one process, so a gateway's CPU per call is the process's CPU in
//! its rounds less the CPU of direct rounds asking the model the same thing (with the token
//! fields a capturing gateway adds, so the model's own work on them is not counted).
//!
//! `cargo bench -p rollpoint-gateway --bench capture -- [--clients N] [--calls N]
//!  [--rounds N] [--chunks N] [--chunk-delay-ms N]`
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

mod common;

use std::time::{Duration, Instant};

use rollpoint_gateway::{CaptureKey, Gateway, GatewayConfig, TokenSource, UpstreamApi};
use rollpoint_model_script::tokens::TokenMode;
use rollpoint_model_script::{Script, ScriptServer, Step};
use serde_json::json;

use common::{Setup, print_table};

fn parse_args() -> Setup {
    Setup::from_args(Setup {
        clients: 64,
        calls: 20,
        rounds: 5,
        chunks: 16,
        chunk_delay_ms: 10,
    })
}

/// CPU seconds this process has used (user and system).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // Linux reports these in USER_HZ, 100 on every architecture it runs on.
    ticks as f64 / 100.0
}

#[derive(Debug, Clone, Copy)]
struct Round {
    p50_ms: f64,
    calls_per_s: f64,
    cpu_s: f64,
}

/// What a direct request asks the model for besides the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Nothing,
    Ids,
    IdsAndLogprobs,
}

fn body(client: usize, call: usize, asked: Asked) -> Vec<u8> {
    let messages = json!([
        {"role": "system", "content": "You are a coding agent. ".repeat(20)},
        {"role": "user", "content": format!("client {client} call {call}: fix the failing test")},
    ]);
    let mut b = json!({"model": "bench", "stream": true, "messages": messages,
        "stream_options": {"include_usage": true},
        "tools": [{"type": "function", "function": {"name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]});
    if asked != Asked::Nothing {
        b["return_token_ids"] = json!(true);
    }
    if asked == Asked::IdsAndLogprobs {
        b["logprobs"] = json!(true);
        b["return_tokens_as_token_ids"] = json!(true);
    }
    serde_json::to_vec(&b).unwrap()
}

async fn round(urls: Vec<String>, setup: Setup, asked: Asked) -> Round {
    let cpu = cpu_s();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, url) in urls.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .tcp_nodelay(true)
                .build()
                .unwrap();
            let mut lat = Vec::with_capacity(setup.calls);
            for k in 0..setup.calls {
                let t = Instant::now();
                let resp = client
                    .post(&url)
                    .body(body(c, k, asked))
                    .send()
                    .await
                    .unwrap();
                assert!(resp.status().is_success());
                let bytes = resp.bytes().await.unwrap();
                assert!(bytes.ends_with(b"data: [DONE]\n\n"));
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut all: Vec<Duration> = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = started.elapsed().as_secs_f64();
    all.sort();
    Round {
        p50_ms: all[all.len() / 2].as_secs_f64() * 1e3,
        calls_per_s: all.len() as f64 / wall,
        cpu_s: cpu_s() - cpu,
    }
}

async fn gateway(
    upstream: &str,
    clients: usize,
    capture: Asked,
) -> (String, Gateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::new(upstream, UpstreamApi::OpenAi, dir.path().join("l.db"));
    config.tokens = (capture != Asked::Nothing).then_some(TokenSource::Vllm);
    config.token_logprobs = capture == Asked::IdsAndLogprobs;
    let gateway = Gateway::new(config).unwrap();
    for c in 0..clients {
        gateway
            .register(&CaptureKey::of(&format!("b{c}"), 0).unwrap())
            .unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let g = gateway.clone();
    tokio::spawn(async move { g.serve(listener).await });
    (format!("http://{addr}"), gateway, dir)
}

async fn scenario(setup: Setup) {
    let step = Step {
        text: Some("The test fails because the fixture path is wrong; fixing it now.".into()),
        ..Step::default()
    };
    let mut script = Script::new(vec![step]);
    script.stream_chunks = setup.chunks;
    script.chunk_delay_ms = setup.chunk_delay_ms;
    script.tokens = Some(TokenMode::default());
    let model = ScriptServer::start(script, "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let modes = [Asked::Nothing, Asked::Ids, Asked::IdsAndLogprobs];
    let mut gateways = Vec::new();
    for mode in modes {
        gateways.push(gateway(&model.base_url(), setup.clients, mode).await);
    }
    let urls = |base: &str, keyed: bool| -> Vec<String> {
        (0..setup.clients)
            .map(|c| {
                if keyed {
                    format!("{base}/r/b{c}/v1/chat/completions")
                } else {
                    format!("{base}/v1/chat/completions")
                }
            })
            .collect()
    };
    let direct = urls(&model.base_url(), false);
    let via: Vec<Vec<String>> = gateways
        .iter()
        .map(|(base, _, _)| urls(base, true))
        .collect();
    let warm = Setup { calls: 2, ..setup };
    for v in &via {
        round(v.clone(), warm, Asked::Nothing).await;
    }
    // Per mode: direct rounds asking what that gateway asks, and rounds through it.
    let mut direct_rounds: [Vec<Round>; 3] = Default::default();
    let mut via_rounds: [Vec<Round>; 3] = Default::default();
    for _ in 0..setup.rounds {
        for (i, mode) in modes.into_iter().enumerate() {
            direct_rounds[i].push(round(direct.clone(), setup, mode).await);
            via_rounds[i].push(round(via[i].clone(), setup, Asked::Nothing).await);
        }
    }
    let calls = (setup.clients * setup.calls) as f64;
    let cpu: Vec<Vec<f64>> = (0..3)
        .map(|i| {
            via_rounds[i]
                .iter()
                .zip(&direct_rounds[i])
                .map(|(v, d)| (v.cpu_s - d.cpu_s) / calls * 1e3)
                .collect()
        })
        .collect();
    let names = ["off", "ids", "ids+logprobs"];
    let mut table: Vec<(String, Vec<f64>)> = Vec::new();
    for i in 0..3 {
        table.push((
            format!("{}: p50 latency (ms)", names[i]),
            via_rounds[i].iter().map(|r| r.p50_ms).collect(),
        ));
    }
    for i in 0..3 {
        table.push((
            format!("{}: throughput (calls/s)", names[i]),
            via_rounds[i].iter().map(|r| r.calls_per_s).collect(),
        ));
    }
    for i in 0..3 {
        table.push((
            format!("{}: gateway CPU per call (ms)", names[i]),
            cpu[i].clone(),
        ));
    }
    for i in 1..3 {
        table.push((
            format!("{}: added p50 vs off (ms)", names[i]),
            via_rounds[i]
                .iter()
                .zip(&via_rounds[0])
                .map(|(a, b)| a.p50_ms - b.p50_ms)
                .collect(),
        ));
        table.push((
            format!("{}: throughput ratio vs off", names[i]),
            via_rounds[i]
                .iter()
                .zip(&via_rounds[0])
                .map(|(a, b)| a.calls_per_s / b.calls_per_s)
                .collect(),
        ));
        table.push((
            format!("{}: CPU ratio vs off", names[i]),
            cpu[i].iter().zip(&cpu[0]).map(|(a, b)| a / b).collect(),
        ));
    }
    let mut captured = 0;
    for (_, g, _) in &gateways {
        captured += g
            .calls(None)
            .await
            .unwrap()
            .iter()
            .filter(|c| c.tokens_digest.is_some())
            .count();
    }
    println!(
        "\n{} streaming clients x {} calls, {} deltas {} ms apart, {} rounds (captured rows: {captured})",
        setup.clients, setup.calls, setup.chunks, setup.chunk_delay_ms, setup.rounds,
    );
    print_table(table);
    model.shutdown().await;
}

fn main() {
    let setup = parse_args();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        scenario(setup).await;
        scenario(Setup {
            chunk_delay_ms: 0,
            ..setup
        })
        .await;
    });
}
