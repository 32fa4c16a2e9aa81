//! Token capture's cost, side by side in one run: 64 concurrent streaming clients call the
//! scripted model in token mode straight and through two gateways (ledger on disk), one with
//! capture off and one with `model_tokens = "vllm"`, in alternating rounds. Prints p50
//! latency, throughput and the gateway's CPU per call for each, as median, min and max over
//! the rounds, and the ratios capture on / capture off.
//!
//! Everything runs in this one process, so a gateway's CPU per call is the process's CPU in
//! its rounds less the CPU of direct rounds asking the model the same thing (with the token
//! fields for the capturing gateway, whose model answers with ids and logprobs).
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

use common::{Setup, stats};

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

fn body(client: usize, call: usize, asked: bool) -> Vec<u8> {
    let messages = json!([
        {"role": "system", "content": "You are a coding agent. ".repeat(20)},
        {"role": "user", "content": format!("client {client} call {call}: fix the failing test")},
    ]);
    let mut b = json!({"model": "bench", "stream": true, "messages": messages,
        "stream_options": {"include_usage": true},
        "tools": [{"type": "function", "function": {"name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]});
    if asked {
        b["return_token_ids"] = json!(true);
        b["logprobs"] = json!(true);
        b["return_tokens_as_token_ids"] = json!(true);
    }
    serde_json::to_vec(&b).unwrap()
}

async fn round(urls: Vec<String>, setup: Setup, asked: bool) -> Round {
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
    capture: bool,
) -> (String, Gateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::new(upstream, UpstreamApi::OpenAi, dir.path().join("l.db"));
    config.tokens = capture.then_some(TokenSource::Vllm);
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
    let (off_base, _off, _d1) = gateway(&model.base_url(), setup.clients, false).await;
    let (on_base, on, _d2) = gateway(&model.base_url(), setup.clients, true).await;
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
    let via_off = urls(&off_base, true);
    let via_on = urls(&on_base, true);
    let warm = Setup { calls: 2, ..setup };
    round(direct.clone(), warm, false).await;
    round(via_off.clone(), warm, false).await;
    round(via_on.clone(), warm, false).await;
    let mut rows: [Vec<Round>; 4] = Default::default();
    for _ in 0..setup.rounds {
        rows[0].push(round(direct.clone(), setup, false).await);
        rows[1].push(round(direct.clone(), setup, true).await);
        rows[2].push(round(via_off.clone(), setup, false).await);
        rows[3].push(round(via_on.clone(), setup, false).await);
    }
    let calls = (setup.clients * setup.calls) as f64;
    let [plain, asked, off, on_rounds] = &rows;
    let per_call_ms = |via: &[Round], direct: &[Round]| -> Vec<f64> {
        via.iter()
            .zip(direct)
            .map(|(v, d)| (v.cpu_s - d.cpu_s) / calls * 1e3)
            .collect()
    };
    let cpu_off = per_call_ms(off, plain);
    let cpu_on = per_call_ms(on_rounds, asked);
    let table: Vec<(&str, Vec<f64>)> = vec![
        (
            "off: p50 latency (ms)",
            off.iter().map(|r| r.p50_ms).collect(),
        ),
        (
            "on: p50 latency (ms)",
            on_rounds.iter().map(|r| r.p50_ms).collect(),
        ),
        (
            "added p50 latency on-off (ms)",
            on_rounds
                .iter()
                .zip(off)
                .map(|(a, b)| a.p50_ms - b.p50_ms)
                .collect(),
        ),
        (
            "off: throughput (calls/s)",
            off.iter().map(|r| r.calls_per_s).collect(),
        ),
        (
            "on: throughput (calls/s)",
            on_rounds.iter().map(|r| r.calls_per_s).collect(),
        ),
        (
            "throughput ratio on/off",
            on_rounds
                .iter()
                .zip(off)
                .map(|(a, b)| a.calls_per_s / b.calls_per_s)
                .collect(),
        ),
        ("off: gateway CPU per call (ms)", cpu_off.clone()),
        ("on: gateway CPU per call (ms)", cpu_on.clone()),
        (
            "gateway CPU ratio on/off",
            cpu_on.iter().zip(&cpu_off).map(|(a, b)| a / b).collect(),
        ),
    ];
    println!(
        "\n{} streaming clients x {} calls, {} deltas {} ms apart, {} rounds (captured rows: {})",
        setup.clients,
        setup.calls,
        setup.chunks,
        setup.chunk_delay_ms,
        setup.rounds,
        on.calls(None)
            .await
            .unwrap()
            .iter()
            .filter(|c| c.tokens_digest.is_some())
            .count()
    );
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "metric", "median", "min", "max"
    );
    for (name, values) in table {
        let (med, min, max) = stats(values);
        println!("{name:<34} {med:>10.3} {min:>10.3} {max:>10.3}");
    }
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
