//! What the gateway's benchmarks share: the load's settings from the command line and the
//! median, min and max of a row.
#![allow(dead_code, reason = "each benchmark uses a different part")]

use std::time::{Duration, Instant};

use serde_json::json;

/// The load: clients, calls each, rounds, and how the model streams.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub clients: usize,
    pub calls: usize,
    pub rounds: usize,
    pub chunks: usize,
    pub chunk_delay_ms: u64,
}

impl Setup {
    /// `defaults` with `--clients N --calls N --rounds N --chunks N --chunk-delay-ms N` from
    /// the command line applied.
    #[must_use]
    pub fn from_args(defaults: Self) -> Self {
        let mut s = defaults;
        let args: Vec<String> = std::env::args().collect();
        let mut i = 1;
        while i < args.len() {
            let value = || args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
            let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
            let used = match args[i].as_str() {
                "--clients" => value().map(|v| s.clients = to_usize(v)),
                "--calls" => value().map(|v| s.calls = to_usize(v)),
                "--rounds" => value().map(|v| s.rounds = to_usize(v)),
                "--chunks" => value().map(|v| s.chunks = to_usize(v)),
                "--chunk-delay-ms" => value().map(|v| s.chunk_delay_ms = v),
                _ => None,
            };
            i += if used.is_some() { 2 } else { 1 };
        }
        s
    }
}

/// Prints `rows` (name, one value per round) as median, min and max.
pub fn print_table<N: std::fmt::Display>(rows: impl IntoIterator<Item = (N, Vec<f64>)>) {
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "metric", "median", "min", "max"
    );
    for (name, values) in rows {
        let (med, min, max) = stats(values);
        println!("{name:<34} {med:>10.3} {min:>10.3} {max:>10.3}");
    }
}

/// Median, min and max.
#[must_use]
pub fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// One HTTP client per simulated harness, built once for the whole run: building one loads
/// the platform's root certificates, which would otherwise dominate a round's CPU.
pub fn clients(n: usize) -> Vec<reqwest::Client> {
    (0..n)
        .map(|_| {
            reqwest::Client::builder()
                .tcp_nodelay(true)
                .build()
                .unwrap()
        })
        .collect()
}

/// One round's figures.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub calls_per_s: f64,
}

pub fn body(client: usize, call: usize) -> Vec<u8> {
    let messages = json!([
        {"role": "system", "content": "You are a coding agent. ".repeat(20)},
        {"role": "user", "content": format!("client {client} call {call}: fix the failing test")},
    ]);
    serde_json::to_vec(
        &json!({"model": "bench", "stream": true, "messages": messages,
        "stream_options": {"include_usage": true},
        "tools": [{"type": "function", "function": {"name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]}),
    )
    .unwrap()
}

pub async fn round(clients: &[reqwest::Client], urls: Vec<String>, setup: Setup) -> Round {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, url) in urls.into_iter().enumerate() {
        let client = clients[c].clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(setup.calls);
            for k in 0..setup.calls {
                let b = body(c, k);
                let t = Instant::now();
                let resp = client.post(&url).body(b).send().await.unwrap();
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
    // Nearest-rank percentile over the sorted latencies.
    let pick = |percent: usize| {
        let idx = ((all.len() - 1) * percent).div_ceil(100);
        all[idx].as_secs_f64() * 1e3
    };
    Round {
        p50_ms: pick(50),
        p99_ms: pick(99),
        calls_per_s: all.len() as f64 / wall,
    }
}

/// Runs `scenario` with 64 streaming clients, then with 512 and a quarter of the calls.
pub fn at_64_and_512<F, Fut>(setup: Setup, scenario: F)
where
    F: Fn(Setup) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        scenario(Setup {
            clients: 64,
            ..setup
        })
        .await;
        scenario(Setup {
            clients: 512,
            calls: setup.calls.div_ceil(4),
            ..setup
        })
        .await;
    });
}

/// The scripted model every call of a benchmark asks: one answer of a coding agent, streamed
/// in `chunks` deltas `chunk_delay_ms` apart, on loopback.
pub async fn scripted_model(
    chunks: usize,
    chunk_delay_ms: u64,
) -> rollpoint_model_script::ScriptServer {
    let step = rollpoint_model_script::Step {
        text: Some("The test fails because the fixture path is wrong; fixing it now.".into()),
        ..rollpoint_model_script::Step::default()
    };
    let mut script = rollpoint_model_script::Script::new(vec![step]);
    script.stream_chunks = chunks;
    script.chunk_delay_ms = chunk_delay_ms;
    rollpoint_model_script::ScriptServer::start(script, "127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap()
}

/// A gateway to `model` (OpenAI's API) with its ledger in `dir`.
pub fn gateway_to(
    model: &rollpoint_model_script::ScriptServer,
    dir: &std::path::Path,
) -> rollpoint_gateway::Gateway {
    let config = rollpoint_gateway::GatewayConfig::new(
        model.base_url(),
        rollpoint_gateway::UpstreamApi::OpenAi,
        dir.join("l.db"),
    );
    rollpoint_gateway::Gateway::new(config).unwrap()
}
