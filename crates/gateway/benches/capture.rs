//! Token capture's cost, side by side in one run: three gateways (ledger on disk) in front of
//! the scripted model in token mode, capture off, capture of the ids only
//! (`model_logprobs = false`), and capture of ids and logprobs (`model_tokens = "vllm"`),
//! each with its own streaming clients. In each round the three run at once, so whatever else
//! the shared machine does in that round falls on all three alike. Prints p50 latency,
//! throughput and the gateway's CPU per call for each, as median, min and max over the
//! rounds, and the ratios against capture off within each round.
//!
//! Each gateway runs on a runtime of its own, whose threads (and its ledger's writer thread)
//! are its alone, so its CPU per call is those threads' CPU time in the round, read from
//! the kernel's per-thread clocks: exact, with nothing of the clients or the model in it.
//!
//! `cargo bench -p rollpoint-gateway --bench capture -- [--clients N] [--calls N]
//!  [--rounds N] [--chunks N] [--chunk-delay-ms N] [--apart]`; `--clients` is per gateway,
//! `--apart` has the gateways take turns within a round instead.
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

mod common;

use rollpoint_proto::key::AttemptKey;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rollpoint_gateway::{Gateway, GatewayConfig, TokenSource, UpstreamApi};
use rollpoint_model_script::tokens::TokenMode;
use rollpoint_model_script::{Script, ScriptServer, Step};
use serde_json::json;

use common::{Setup, print_table};

fn parse_args() -> Setup {
    Setup::from_args(Setup {
        clients: 32,
        calls: 20,
        rounds: 9,
        chunks: 16,
        chunk_delay_ms: 10,
    })
}

/// The ids of this process's threads.
fn tids() -> BTreeSet<i32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// CPU time of thread `tid` of this process in ns (0 once it has exited): the kernel's
/// per-thread CPU clock, `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`, exact where
/// /proc's counts are in 10 ms ticks.
fn thread_cpu_ns(tid: i32) -> u64 {
    let clock = ((!tid) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes `ts`; an unknown clock is an error return.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec).unwrap() * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap()
}

#[derive(Debug, Clone, Copy)]
struct Round {
    p50_ms: f64,
    calls_per_s: f64,
    cpu_ms_per_call: f64,
    /// The part of it on the ledger's writer thread.
    ledger_ms_per_call: f64,
}

fn body(client: usize, call: usize) -> Vec<u8> {
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

async fn round(clients: &[reqwest::Client], gw: &Gw, setup: Setup) -> Round {
    let cpu = gw.cpu_ns();
    let ledger = gw.ledger_ns();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, url) in gw.urls(setup.clients).into_iter().enumerate() {
        let client = clients[c].clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(setup.calls);
            for k in 0..setup.calls {
                let t = Instant::now();
                let resp = client.post(&url).body(body(c, k)).send().await.unwrap();
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
    let cpu_ns = gw.cpu_ns() - cpu;
    let ledger_ns = gw.ledger_ns() - ledger;
    all.sort();
    Round {
        p50_ms: all[all.len() / 2].as_secs_f64() * 1e3,
        calls_per_s: all.len() as f64 / wall,
        cpu_ms_per_call: cpu_ns as f64 / 1e6 / all.len() as f64,
        ledger_ms_per_call: ledger_ns as f64 / 1e6 / all.len() as f64,
    }
}

/// A gateway on a runtime of its own.
struct Gw {
    base: String,
    gateway: Gateway,
    /// Its runtime's thread name.
    name: String,
    /// Threads it started besides its runtime's (the ledger's writer).
    own: BTreeSet<i32>,
    runtime: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

impl Gw {
    fn start(i: usize, upstream: &str, clients: usize, tokens: Option<bool>) -> Self {
        let name = format!("gw-{i}");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(name.clone())
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut config = GatewayConfig::new(upstream, UpstreamApi::OpenAi, dir.path().join("l.db"));
        config.tokens = tokens.map(|_| TokenSource::Vllm);
        config.token_logprobs = tokens == Some(true);
        let before = tids();
        let gateway = {
            let _in = runtime.enter();
            Gateway::new(config).unwrap()
        };
        let own = tids().difference(&before).copied().collect();
        for c in 0..clients {
            gateway
                .register(&AttemptKey::of(&format!("b{c}"), 0).unwrap())
                .unwrap();
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let g = gateway.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            g.serve(listener).await
        });
        Self {
            base,
            gateway,
            name,
            own,
            runtime: Some(runtime),
            _dir: dir,
        }
    }

    fn urls(&self, clients: usize) -> Vec<String> {
        (0..clients)
            .map(|c| format!("{}/r/b{c}/v1/chat/completions", self.base))
            .collect()
    }

    /// CPU time of the threads it started besides its runtime's, ns.
    fn ledger_ns(&self) -> u64 {
        self.own.iter().copied().map(thread_cpu_ns).sum()
    }

    /// CPU time of its threads, ns.
    fn cpu_ns(&self) -> u64 {
        tids()
            .into_iter()
            .filter(|tid| {
                self.own.contains(tid)
                    || std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                        .is_ok_and(|c| c.trim_end() == self.name)
            })
            .map(thread_cpu_ns)
            .sum()
    }

    fn stop(mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
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
    // Capture off, ids only, ids and logprobs.
    let gateways: Vec<Gw> = [None, Some(false), Some(true)]
        .into_iter()
        .enumerate()
        .map(|(i, tokens)| Gw::start(i, &model.base_url(), setup.clients, tokens))
        .collect();
    let clients: Vec<Vec<reqwest::Client>> =
        (0..3).map(|_| common::clients(setup.clients)).collect();
    let warm = Setup { calls: 2, ..setup };
    for (gw, clients) in gateways.iter().zip(&clients) {
        round(clients, gw, warm).await;
    }
    let mut via_rounds: [Vec<Round>; 3] = Default::default();
    for r in 0..setup.rounds {
        if apart() {
            // Each round starts with the next gateway, so none always follows the same one.
            for i in (0..3).map(|k| (r + k) % 3) {
                via_rounds[i].push(round(&clients[i], &gateways[i], setup).await);
            }
        } else {
            let (a, b, c) = tokio::join!(
                round(&clients[0], &gateways[0], setup),
                round(&clients[1], &gateways[1], setup),
                round(&clients[2], &gateways[2], setup),
            );
            for (i, r) in [a, b, c].into_iter().enumerate() {
                via_rounds[i].push(r);
            }
        }
    }
    let cpu: Vec<Vec<f64>> = via_rounds
        .iter()
        .map(|rounds| rounds.iter().map(|r| r.cpu_ms_per_call).collect())
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
    for i in 0..3 {
        table.push((
            format!("{}: of which ledger (ms)", names[i]),
            via_rounds[i].iter().map(|r| r.ledger_ms_per_call).collect(),
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
    for gw in &gateways {
        captured += gw
            .gateway
            .calls(None)
            .await
            .unwrap()
            .iter()
            .filter(|c| c.tokens_digest.is_some())
            .count();
    }
    println!(
        "\n{} streaming clients per gateway x {} calls, {} deltas {} ms apart, {} rounds, gateways {} (captured rows: {captured})",
        setup.clients,
        setup.calls,
        setup.chunks,
        setup.chunk_delay_ms,
        setup.rounds,
        if apart() { "in turns" } else { "at once" },
    );
    print_table(table);
    for gw in gateways {
        gw.stop();
    }
    model.shutdown().await;
}

/// `--apart`: the gateways take turns in each round instead of running at once.
fn apart() -> bool {
    std::env::args().any(|a| a == "--apart")
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
