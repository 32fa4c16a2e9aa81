//! Export throughput: N rollouts of C calls each are recorded through a real gateway with
//! capture on (the scripted model in token mode, every call a tool call whose result the next
//! call carries, so each rollout is one chain), then their trajectories are built from the
//! ledger file as `rollpoint export` does: read the ledger read-only, group, build, write
//! JSONL. Baseline in the same run: reading the same rows and bodies without building.
//! Prints median, min and max over the rounds per N, and the ratio export / read.
//!
//! `cargo bench -p rollpoint-trajectory --bench export -- [--sizes 100,300,1000] [--calls 20]
//!  [--rounds 5]`
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

use rollpoint_proto::key::AttemptKey;
use std::time::Instant;

use rollpoint_gateway::{Gateway, GatewayConfig, TokenSource, UpstreamApi};
use rollpoint_model_script::tokens::TokenMode;
use rollpoint_model_script::{Script, ScriptServer, Step};
use rollpoint_trajectory::{BreakPolicy, Grouped, Outcome};
use serde_json::{Value, json};

struct Setup {
    sizes: Vec<usize>,
    calls: usize,
    rounds: usize,
}

fn parse_args() -> Setup {
    let mut s = Setup {
        sizes: vec![100, 300, 1000],
        calls: 20,
        rounds: 5,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let next = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--sizes" => s.sizes = next.split(',').map(|n| n.parse().unwrap()).collect(),
            "--calls" => s.calls = next.parse().unwrap(),
            "--rounds" => s.rounds = next.parse().unwrap(),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    s
}

/// One rollout's conversation: each answer and its tool's result go into the next call.
async fn rollout(client: reqwest::Client, url: String, calls: usize) {
    let tools = json!([{"type": "function", "function": {"name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]);
    let mut messages = vec![json!({"role": "user", "content": "fix the failing test"})];
    for _ in 0..calls {
        let body = json!({"model": "m", "messages": messages, "tools": tools});
        let bytes = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let reply: Value = serde_json::from_slice(&bytes).unwrap();
        let message = reply["choices"][0]["message"].clone();
        let id = message["tool_calls"][0]["id"].as_str().unwrap().to_owned();
        messages.push(message);
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "ok"}));
    }
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let setup = parse_args();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    println!(
        "{:<8} {:<26} {:>10} {:>10} {:>10}",
        "N", "metric", "median", "min", "max"
    );
    for &n in &setup.sizes {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.sqlite");
        runtime.block_on(async {
            let mut script = Script::new(Vec::new());
            script.after_last = Some(Step {
                shell: vec!["make test".into()],
                ..Step::default()
            });
            script.tokens = Some(TokenMode::default());
            let model = ScriptServer::start(script, "127.0.0.1:0".parse().unwrap(), None)
                .await
                .unwrap();
            let mut config =
                GatewayConfig::new(model.base_url(), UpstreamApi::OpenAi, ledger.clone());
            config.tokens = Some(TokenSource::Vllm);
            let gateway = Gateway::new(config).unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let g = gateway.clone();
            let server = tokio::spawn(async move { g.serve(listener).await });
            let client = reqwest::Client::new();
            let mut tasks = Vec::new();
            for r in 0..n {
                gateway
                    .register(&AttemptKey::of(&format!("r{r}"), 0).unwrap())
                    .unwrap();
                let url = format!("http://{addr}/r/r{r}/v1/chat/completions");
                tasks.push(tokio::spawn(rollout(client.clone(), url, setup.calls)));
                // At most 64 conversations at once.
                if tasks.len() >= 64 {
                    for t in tasks.drain(..) {
                        t.await.unwrap();
                    }
                }
            }
            for t in tasks {
                t.await.unwrap();
            }
            gateway.flush().await.unwrap();
            server.abort();
            model.shutdown().await;
        });
        let outcome = Outcome {
            finished: true,
            reward: Some(1.0),
            ..Outcome::default()
        };
        let (mut read, mut export) = (Vec::new(), Vec::new());
        let mut trainable = 0;
        for _ in 0..setup.rounds {
            let t = Instant::now();
            let records = rollpoint_gateway::ledger::read_for_trajectories(&ledger, None).unwrap();
            read.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let records2 = rollpoint_gateway::ledger::read_for_trajectories(&ledger, None).unwrap();
            let grouped = Grouped::new(&records2);
            let mut out = Vec::new();
            trainable = 0;
            for r in 0..n {
                let traj = grouped.build(&format!("r{r}"), Some(&outcome), BreakPolicy::Split);
                trainable += usize::from(traj.trainable);
                rollpoint_trajectory::jsonl::write_line(&mut out, &traj);
            }
            export.push(t.elapsed().as_secs_f64() * 1e3);
            drop(records);
        }
        assert_eq!(trainable, n, "every rollout is one trainable chain");
        let per_rollout: Vec<f64> = export.iter().map(|ms| ms / n as f64).collect();
        let ratio: Vec<f64> = export.iter().zip(&read).map(|(e, r)| e / r).collect();
        let rollouts_per_s: Vec<f64> = export.iter().map(|ms| n as f64 / ms * 1e3).collect();
        for (name, v) in [
            ("read rows (ms)", read),
            ("export (ms)", export),
            ("export per rollout (ms)", per_rollout),
            ("export rollouts/s", rollouts_per_s),
            ("ratio export/read", ratio),
        ] {
            let (med, min, max) = stats(v);
            println!("{n:<8} {name:<26} {med:>10.3} {min:>10.3} {max:>10.3}");
        }
    }
}
