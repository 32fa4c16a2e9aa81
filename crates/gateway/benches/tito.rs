//! Token-in/token-out against plain token capture, side by side in one run: two gateways
//! (ledger on disk) in front of one scripted model, one capturing the ids the model returns on
//! chat completions (`model_tokens = "vllm"`), the other rendering and tokenizing each call
//! itself (a BPE tokenizer trained at start, a Qwen3-style template) and sending
//! `/v1/completions` token ids (`"tito"`). `--clients` streaming clients (64, then 512) call each
//! gateway in alternating rounds, each call a first turn (a whole rendering and tokenization:
//! a later turn adds one ledger read of its parent). Prints p50/p99 latency, throughput and the
//! ratios of token-in/token-out against capture within each round, as median, min and max.
//!
//! `cargo bench -p rollpoint-gateway --bench tito -- [--calls N] [--rounds N]`
#![expect(clippy::unwrap_used, reason = "benchmark harness")]

mod common;

use rollpoint_gateway::tito::TitoConfig;
use rollpoint_gateway::tito::chat::ToolParser;
use rollpoint_gateway::{Gateway, GatewayConfig, TokenSource, UpstreamApi};
use rollpoint_model_script::tokens::TokenMode;
use rollpoint_model_script::{Script, ScriptServer, Step};
use rollpoint_proto::key::AttemptKey;

use common::{Round, Setup, print_table, round};

async fn gateway(
    model: &ScriptServer,
    dir: &std::path::Path,
    name: &str,
    tito: Option<TitoConfig>,
    clients: usize,
) -> (Vec<String>, tokio::task::JoinHandle<()>) {
    let mut config = GatewayConfig::new(
        model.base_url(),
        UpstreamApi::All,
        dir.join(format!("{name}.db")),
    );
    if tito.is_some() {
        config.tito = tito;
    } else {
        config.tokens = Some(TokenSource::Vllm);
    }
    let gw = Gateway::new(config).unwrap();
    for c in 0..clients {
        gw.register(&AttemptKey::of(&format!("b{c}"), 0).unwrap())
            .unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = gw.serve(listener).await;
    });
    let urls = (0..clients)
        .map(|c| format!("http://{addr}/r/b{c}/v1/chat/completions"))
        .collect();
    (urls, server)
}

async fn scenario(setup: Setup) {
    let dir = tempfile::tempdir().unwrap();
    let (tokenizer, template) = rollpoint_testkit::tito::write_model(dir.path());
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
    model.serve_completions(&tokenizer).unwrap();
    let tito = TitoConfig {
        tokenizer,
        template,
        tool_parser: ToolParser::Hermes,
    };
    let (capture_urls, a) = gateway(&model, dir.path(), "capture", None, setup.clients).await;
    let (tito_urls, b) = gateway(&model, dir.path(), "tito", Some(tito), setup.clients).await;
    let clients = common::clients(setup.clients);
    round(&clients, capture_urls.clone(), Setup { calls: 3, ..setup }).await;
    round(&clients, tito_urls.clone(), Setup { calls: 3, ..setup }).await;
    let (mut capture, mut tito): (Vec<Round>, Vec<Round>) = (Vec::new(), Vec::new());
    for _ in 0..setup.rounds {
        capture.push(round(&clients, capture_urls.clone(), setup).await);
        tito.push(round(&clients, tito_urls.clone(), setup).await);
    }
    let pairs = capture.iter().zip(&tito);
    let rows: Vec<(&str, Vec<f64>)> = vec![
        (
            "capture p50 latency (ms)",
            capture.iter().map(|r| r.p50_ms).collect(),
        ),
        (
            "tito p50 latency (ms)",
            tito.iter().map(|r| r.p50_ms).collect(),
        ),
        (
            "capture p99 latency (ms)",
            capture.iter().map(|r| r.p99_ms).collect(),
        ),
        (
            "tito p99 latency (ms)",
            tito.iter().map(|r| r.p99_ms).collect(),
        ),
        (
            "capture throughput (calls/s)",
            capture.iter().map(|r| r.calls_per_s).collect(),
        ),
        (
            "tito throughput (calls/s)",
            tito.iter().map(|r| r.calls_per_s).collect(),
        ),
        (
            "throughput ratio tito/capture",
            pairs
                .clone()
                .map(|(c, t)| t.calls_per_s / c.calls_per_s)
                .collect(),
        ),
        (
            "p50 latency ratio tito/capture",
            pairs.map(|(c, t)| t.p50_ms / c.p50_ms).collect(),
        ),
    ];
    println!(
        "\n{} streaming clients x {} calls, {} rounds (capture streams {} deltas {} ms apart; \
         token-in/token-out asks the completion whole)",
        setup.clients, setup.calls, setup.rounds, setup.chunks, setup.chunk_delay_ms
    );
    print_table(rows);
    a.abort();
    b.abort();
    model.shutdown().await;
}

fn main() {
    let setup = Setup::from_args(Setup {
        clients: 64,
        calls: 20,
        rounds: 5,
        chunks: 16,
        chunk_delay_ms: 0,
    });
    common::at_64_and_512(setup, scenario);
}
