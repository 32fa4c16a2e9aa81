//! Snapshots that travel, measured (root, real btrfs stores, a real S3 server: moto's):
//!
//! - commit: a checkpoint of N sessions with the snapshots uploaded to the store, against the
//!   same commit kept local only (the baseline), for N = 8 and 64, over several rounds (the
//!   first uploads whole, the later ones incrementally);
//! - restore to first command: a session restored on a node that never held its snapshot
//!   (the chain fetched and received), against one restored on the node that holds it;
//! - upload bytes per checkpoint against the bytes the sessions' uppers hold.
//!
//! `ROLLPOINT_SUPERVISOR=… cargo bench -p rollpoint-owner --bench travel [-- ROUNDS SIZES]`
//! (defaults: 4 rounds, sizes 8,64)
#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::sync::Arc;
use std::time::Instant;

use rollpoint_checkpoint::AttemptKey;
use rollpoint_checkpoint::participant::Participant;
use rollpoint_owner::travel::Travel;
use rollpoint_owner::{LocalOwner, Owner, OwnerTask, ResourcesParticipant};
use rollpoint_proto::anchor::ExecRequest;
use rollpoint_remote::{Options, RemoteStore, StoreUrl};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_snapshot::StoreChoice;
use rollpoint_testkit::s3::S3Server;
use rollpoint_testkit::{stats, supervisor_bin};

/// What each session writes before the first checkpoint, and per round after.
const FIRST_BYTES: usize = 1 << 20;
const ROUND_BYTES: usize = 16 << 10;

fn sh(script: &str) -> ExecRequest {
    ExecRequest {
        output_limit: 1 << 16,
        ..rollpoint_testkit::shell(script)
    }
}

fn node(dir: &std::path::Path) -> (Arc<dyn Backend>, Arc<LocalOwner>) {
    let mut options = LocalOptions::new(supervisor_bin());
    options.store.choice = StoreChoice::Btrfs;
    let backend: Arc<dyn Backend> =
        Arc::new(LocalBackend::open(&dir.join("owner"), options).unwrap());
    let owner = Arc::new(LocalOwner::new(Arc::clone(&backend)));
    (backend, owner)
}

fn key(text: &str) -> AttemptKey {
    AttemptKey::parse(text).unwrap()
}

struct Row {
    n: usize,
    local: (f64, f64, f64),
    remote: (f64, f64, f64),
    first_upload: u64,
    later_upload: (f64, f64, f64),
    upper_bytes: u64,
}

#[expect(clippy::cast_precision_loss, reason = "byte counts in a table")]
async fn commits(server: &S3Server, n: usize, rounds: usize) -> Row {
    let dir = tempfile::Builder::new()
        .prefix("bt")
        .tempdir_in("/var/tmp")
        .unwrap();
    let (backend, owner) = node(dir.path());
    let options = Options::from_file(&server.options_file(dir.path(), "")).unwrap();
    let store = RemoteStore::open(
        &StoreUrl::parse(&server.url(&format!("bench-{n}"))).unwrap(),
        &options,
    )
    .unwrap();
    let travel = Arc::new(Travel::new(store.clone(), &dir.path().join("spool"), 8).unwrap());
    let local = ResourcesParticipant::new(Arc::clone(&owner), "owner");
    let remote = ResourcesParticipant::new(Arc::clone(&owner), "owner").with_travel(travel);
    let mut sessions = Vec::new();
    for i in 0..n {
        let task: OwnerTask = serde_json::from_value(serde_json::json!({
            "id": format!("r{i}"), "verify": {"command": ["true"]},
        }))
        .unwrap();
        let s = owner.create_session(task).await.unwrap();
        owner
            .exec(
                &s.session,
                sh(&format!("head -c {FIRST_BYTES} /dev/urandom > big.bin")),
            )
            .await
            .unwrap();
        sessions.push(s.session);
    }
    let scope: Vec<AttemptKey> = (0..n).map(|i| key(&format!("r{i}"))).collect();
    let (mut local_ms, mut remote_ms, mut uploads) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        for (which, p) in [("l", &local), ("u", &remote)] {
            let id = format!("c{round}{which}");
            let before: u64 = store_bytes(&store).await;
            let start = Instant::now();
            p.close_admission(&id).await.unwrap();
            p.export(&id, &scope).await.unwrap();
            p.open_admission().await.unwrap();
            let ms = start.elapsed().as_secs_f64() * 1e3;
            if which == "l" {
                local_ms.push(ms);
            } else {
                remote_ms.push(ms);
                uploads.push(store_bytes(&store).await - before);
            }
        }
        for s in &sessions {
            owner
                .exec(
                    s,
                    sh(&format!("head -c {ROUND_BYTES} /dev/urandom >> log.bin")),
                )
                .await
                .unwrap();
        }
    }
    for s in &sessions {
        owner.close(s).await.unwrap();
    }
    drop(backend);
    let upper = (FIRST_BYTES * n) as u64;
    Row {
        n,
        local: stats(local_ms),
        remote: stats(remote_ms),
        first_upload: uploads[0],
        later_upload: stats(uploads[1..].iter().map(|b| *b as f64).collect()),
        upper_bytes: upper,
    }
}

/// Bytes of every object under `snapshots/`.
async fn store_bytes(store: &RemoteStore) -> u64 {
    let mut total = 0;
    for k in store.list("snapshots").await.unwrap() {
        if k.ends_with(".json") {
            continue;
        }
        total += store.get(&k).await.unwrap().map_or(0, |b| b.len() as u64);
    }
    total
}

/// Restore to first command: on a node without the snapshot, and on the one with it.
async fn restores(server: &S3Server, reps: usize) -> ((f64, f64, f64), (f64, f64, f64)) {
    let a = tempfile::Builder::new()
        .prefix("ba")
        .tempdir_in("/var/tmp")
        .unwrap();
    let (backend_a, owner_a) = node(a.path());
    let options = Options::from_file(&server.options_file(a.path(), "")).unwrap();
    let store =
        RemoteStore::open(&StoreUrl::parse(&server.url("restore")).unwrap(), &options).unwrap();
    let travel_a = Arc::new(Travel::new(store.clone(), &a.path().join("spool"), 8).unwrap());
    let p = ResourcesParticipant::new(Arc::clone(&owner_a), "owner").with_travel(travel_a);
    let task: OwnerTask = serde_json::from_value(serde_json::json!({
        "id": "r0", "verify": {"command": ["true"]},
    }))
    .unwrap();
    let s = owner_a.create_session(task).await.unwrap();
    owner_a
        .exec(
            &s.session,
            sh(&format!(
                "head -c {} /dev/urandom > big.bin",
                8 * FIRST_BYTES
            )),
        )
        .await
        .unwrap();
    p.close_admission("c0").await.unwrap();
    let records = p.export("c0", &[key("r0")]).await.unwrap();
    p.open_admission().await.unwrap();
    owner_a.close(&s.session).await.unwrap();
    let (mut fresh, mut held) = (Vec::new(), Vec::new());
    for i in 0..reps {
        // A node that never held it.
        let b = tempfile::Builder::new()
            .prefix("bb")
            .tempdir_in("/var/tmp")
            .unwrap();
        let (_backend_b, owner_b) = node(b.path());
        let travel_b = Arc::new(Travel::new(store.clone(), &b.path().join("spool"), 8).unwrap());
        let q = ResourcesParticipant::new(Arc::clone(&owner_b), "owner").with_travel(travel_b);
        let start = Instant::now();
        q.close_admission(&format!("x{i}")).await.unwrap();
        q.install(&format!("x{i}"), records.clone(), &[key("r0")])
            .await
            .unwrap();
        let session = owner_b.live_sessions()[0].session.clone();
        owner_b.exec(&session, sh("true")).await.unwrap();
        fresh.push(start.elapsed().as_secs_f64() * 1e3);
        q.open_admission().await.unwrap();
        owner_b.close(&session).await.unwrap();
        // The node that holds it.
        let owner_a2 = Arc::new(LocalOwner::new(Arc::clone(&backend_a)));
        let travel = Arc::new(Travel::new(store.clone(), &a.path().join("spool"), 8).unwrap());
        let r = ResourcesParticipant::new(Arc::clone(&owner_a2), "owner").with_travel(travel);
        let start = Instant::now();
        r.close_admission(&format!("y{i}")).await.unwrap();
        r.install(&format!("y{i}"), records.clone(), &[key("r0")])
            .await
            .unwrap();
        let session = owner_a2.live_sessions()[0].session.clone();
        owner_a2.exec(&session, sh("true")).await.unwrap();
        held.push(start.elapsed().as_secs_f64() * 1e3);
        r.open_admission().await.unwrap();
        owner_a2.close(&session).await.unwrap();
    }
    (stats(fresh), stats(held))
}

fn mib(b: f64) -> f64 {
    b / f64::from(1u32 << 20)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
#[expect(clippy::cast_precision_loss, reason = "byte counts in a table")]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rounds: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(4)
        .max(2);
    let sizes: Vec<usize> = args.get(1).map_or_else(
        || vec![8, 64],
        |s| s.split(',').map(|n| n.parse().unwrap()).collect(),
    );
    let server = S3Server::start();
    println!(
        "commit of N sessions, ms (median, min-max over {rounds} rounds): local only (baseline) and with uploads to S3 (moto)"
    );
    println!(
        "| N | local ms | with upload ms | ratio | first upload MiB | later uploads MiB | uppers MiB | first / upper | later / upper |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for n in sizes {
        let r = commits(&server, n, rounds).await;
        let upper = r.upper_bytes as f64;
        println!(
            "| {} | {:.0} ({:.0}-{:.0}) | {:.0} ({:.0}-{:.0}) | {:.2} | {:.2} | {:.3} ({:.3}-{:.3}) | {:.1} | {:.2} | {:.4} |",
            r.n,
            r.local.0,
            r.local.1,
            r.local.2,
            r.remote.0,
            r.remote.1,
            r.remote.2,
            r.remote.0 / r.local.0,
            mib(r.first_upload as f64),
            mib(r.later_upload.0),
            mib(r.later_upload.1),
            mib(r.later_upload.2),
            mib(upper),
            r.first_upload as f64 / upper,
            r.later_upload.0 / upper,
        );
    }
    let reps = 5;
    let (fresh, held) = restores(&server, reps).await;
    println!();
    println!("restore to first command of one 8 MiB session, ms (median, min-max over {reps})");
    println!("| node | ms | ratio |");
    println!("|---|---:|---:|");
    println!(
        "| holds the snapshot (baseline) | {:.0} ({:.0}-{:.0}) | 1.00 |",
        held.0, held.1, held.2
    );
    println!(
        "| never held it (fetch and receive) | {:.0} ({:.0}-{:.0}) | {:.2} |",
        fresh.0,
        fresh.1,
        fresh.2,
        fresh.0 / held.0
    );
}
