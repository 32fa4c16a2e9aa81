//! The per-sandbox network's costs, each against its baseline in the same
//! run:
//!
//! - a model call from a sandbox (`network = "gateway"`: the harness dials
//!   `127.0.0.1:<port>` in the sandbox's namespace) by its two paths: the
//!   anchor's relay, which dials the gateway on the host, and the listener
//!   handed to a gateway on the node (`--gateway-attach`: no relay), against
//!   the same call made directly on the host's loopback, as a `host` sandbox
//!   makes it: p50 per call and calls per second at 1, 64 and 512 streams
//!   (keep-alive connections, each making calls of 1 KiB against a 1 KiB
//!   reply back to back, spread over 8 sandboxes per path). From 64 streams
//!   every path keeps the machine's cores busy, so the added p50 is mostly
//!   the path's CPU per call times the calls waiting; the CPU column says
//!   that cost per call;
//! - starting a sandbox (create to a first command) on the host's network,
//!   with its own namespace and relay, and with its own namespace and its
//!   listener handed to the gateway.
//!
//! The "gateway" is the gateway's HTTP stack (`rollpoint_api::serve`, axum
//! on tokio, and the gateway's own attach socket) answering every call with
//! 1 KiB, so what is measured is the path, not the gateway's recording.
//! Needs root and the supervisor (`ROLLPOINT_SUPERVISOR` or the workspace
//! build).
//!
//! Run: `cargo bench -p rollpoint-run --bench network`

#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::AsFd;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_sandbox::{Backend, Network, SandboxSpec};
use rollpoint_testkit::stats;

const SANDBOXES: usize = 8;
const ROUNDS: usize = 3;
const BODY: usize = 1024;
const PATHS: [&str; 3] = ["direct", "relay", "attached"];

/// The stand-in gateway: every call under `/r/` answered with `BODY` bytes,
/// on the host's loopback and on every listener handed to `socket`.
fn serve(runtime: &tokio::runtime::Runtime, socket: &std::path::Path) -> u16 {
    let app = Router::new().route(
        "/r/{key}/{*rest}",
        axum::routing::post(|body: Bytes| async move {
            drop(body);
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                vec![b'x'; BODY],
            )
        }),
    );
    runtime.block_on(async {
        let attach = rollpoint_gateway::attach::AttachSocket::bind(socket).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(rollpoint_api::serve(listener, app.clone()));
        tokio::spawn(attach.serve(app));
        port
    })
}

/// One call on `conn`: a 1 KiB POST, then the whole reply.
fn call(conn: &mut TcpStream, reader: &mut BufReader<TcpStream>) -> Duration {
    let start = Instant::now();
    let request = format!(
        "POST /r/k/v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-length: {BODY}\r\n\r\n{}",
        "y".repeat(BODY)
    );
    conn.write_all(request.as_bytes()).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    start.elapsed()
}

/// `streams` connections making `calls` calls each, all at once; each
/// stream's thread first joins the network namespace of one of `anchors`'
/// sandboxes (none: the host's). Returns every call's time and calls per
/// second.
fn round(port: u16, anchors: &[u32], streams: usize, calls: usize) -> (Vec<f64>, f64) {
    let barrier = Arc::new(Barrier::new(streams + 1));
    let threads: Vec<_> = (0..streams)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            let anchor = (!anchors.is_empty()).then(|| anchors[i % anchors.len()]);
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    if let Some(anchor) = anchor {
                        let ns = std::fs::File::open(format!("/proc/{anchor}/ns/net")).unwrap();
                        nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                            .unwrap();
                    }
                    let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
                    conn.set_nodelay(true).unwrap();
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    call(&mut conn, &mut reader);
                    barrier.wait();
                    (0..calls)
                        .map(|_| call(&mut conn, &mut reader).as_secs_f64() * 1e3)
                        .collect::<Vec<f64>>()
                })
                .unwrap()
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let times: Vec<f64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let rate = times.len() as f64 / start.elapsed().as_secs_f64();
    (times, rate)
}

/// `SANDBOXES` sandboxes named `prefix<i>`, their anchors' pids.
fn sandboxes(backend: &LocalBackend, prefix: &str) -> Vec<u32> {
    (0..SANDBOXES)
        .map(|i| {
            backend
                .create(&format!("{prefix}{i}"), &SandboxSpec::default())
                .unwrap()
                .anchor_pid
        })
        .collect()
}

fn main() {
    let dir = tempfile::Builder::new()
        .prefix("rpnet")
        .tempdir_in("/var/tmp")
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let socket = dir.path().join("attach.sock");
    let port = serve(&runtime, &socket);
    let backend = LocalBackend::open(
        &dir.path().join("owner"),
        LocalOptions::new(rollpoint_testkit::supervisor_bin()),
    )
    .unwrap();
    backend.route_to_gateway(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let relayed = sandboxes(&backend, "r");
    backend.attach_to_gateway(Some(socket.clone()));
    let attached = sandboxes(&backend, "a");
    let anchors: [&[u32]; 3] = [&[], &relayed, &attached];

    println!("## A model call: relayed and attached against direct (ms per call; calls/s)\n");
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    println!(
        "| streams | path | p50 median/min/max over {ROUNDS} rounds | calls/s median | p50 added | calls/s ratio | CPU per call added ({cores} cores busy) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (streams, calls) in [(1, 2000), (64, 200), (512, 40)] {
        let (mut p50s, mut rates) = (
            [Vec::new(), Vec::new(), Vec::new()],
            [Vec::new(), Vec::new(), Vec::new()],
        );
        for _ in 0..ROUNDS {
            for (i, anchors) in anchors.iter().enumerate() {
                let (times, rate) = round(port, anchors, streams, calls);
                p50s[i].push(stats(times).0);
                rates[i].push(rate);
            }
        }
        let p50 = |i: usize| stats(p50s[i].clone());
        let rate = |i: usize| stats(rates[i].clone()).0;
        for (i, name) in PATHS.into_iter().enumerate() {
            let (med, min, max) = p50(i);
            let (added, ratio, cpu) = if i > 0 {
                #[expect(clippy::cast_precision_loss, reason = "a core count")]
                let busy = cores as f64 * (1.0 / rate(i) - 1.0 / rate(0)) * 1e6;
                (
                    format!("{:+.3} ms", med - p50(0).0),
                    format!("{:.2}", rate(i) / rate(0)),
                    if streams > 1 {
                        format!("{busy:.0} µs")
                    } else {
                        "-".into()
                    },
                )
            } else {
                (String::new(), "1.00".into(), String::new())
            };
            println!(
                "| {streams} | {name} | {med:.3}/{min:.3}/{max:.3} | {:.0} | {added} | {ratio} | {cpu} |",
                rate(i)
            );
        }
    }
    backend.destroy_all().unwrap();

    println!(
        "\n## Start-up: the host's network, a namespace with a relay, a namespace with its listener attached (ms, create to a first command)\n"
    );
    println!("| network | median/min/max | ratio |");
    println!("|---|---|---|");
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for n in 0..16 {
        for (i, (network, attach)) in [
            (Network::Host, false),
            (Network::Gateway, false),
            (Network::Gateway, true),
        ]
        .into_iter()
        .enumerate()
        {
            backend.attach_to_gateway(attach.then(|| socket.clone()));
            let id = format!("u{n}-{i}");
            let spec = SandboxSpec {
                network,
                ..SandboxSpec::default()
            };
            let start = Instant::now();
            backend.create(&id, &spec).unwrap();
            let out = backend
                .exec(&id, &rollpoint_testkit::shell("true"))
                .unwrap();
            assert_eq!(out.exit_code, Some(0));
            times[i].push(start.elapsed().as_secs_f64() * 1e3);
            backend.destroy(&id).unwrap();
        }
    }
    let host = stats(times[0].clone()).0;
    for (i, name) in ["host", "gateway, relayed", "gateway, attached"]
        .into_iter()
        .enumerate()
    {
        let (med, min, max) = stats(times[i].clone());
        println!(
            "| {name} | {med:.1}/{min:.1}/{max:.1} | {:.2} |",
            med / host
        );
    }
    drop(backend);
    drop(runtime);
    std::thread::sleep(Duration::from_millis(10));
}
