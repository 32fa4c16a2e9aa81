//! Snapshots that travel (root, real btrfs and copy stores, a real S3 server): a session's
//! snapshots are uploaded at each commit, incrementally against the one before (each later
//! upload about the size of what changed, a whole one every `full_every`, so no chain is longer
//! than that), and a second node with its own store, which never held them, restores the
//! session from the store alone: the chain is fetched oldest first and the fork holds the
//! files as they were. A node that holds the snapshot downloads nothing.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use rollpoint_checkpoint::AttemptKey;
use rollpoint_checkpoint::participant::Participant;
use rollpoint_owner::travel::{SnapshotMeta, Travel};
use rollpoint_owner::{LocalOwner, Owner, OwnerTask, ResourcesParticipant, SessionRecord};
use rollpoint_proto::anchor::ExecRequest;
use rollpoint_remote::{Options, RemoteStore, StoreUrl};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_snapshot::StoreChoice;
use rollpoint_testkit::s3::S3Server;
use rollpoint_testkit::{require_root, supervisor_bin};

fn sh(script: &str) -> ExecRequest {
    ExecRequest {
        output_limit: 1 << 16,
        ..rollpoint_testkit::shell(script)
    }
}

fn key(text: &str) -> AttemptKey {
    AttemptKey::parse(text).unwrap()
}

/// A node: its own directory and snapshot store.
fn node(dir: &std::path::Path, choice: StoreChoice) -> (Arc<dyn Backend>, Arc<LocalOwner>) {
    let mut options = LocalOptions::new(supervisor_bin());
    options.store.choice = choice;
    let backend: Arc<dyn Backend> =
        Arc::new(LocalBackend::open(&dir.join("owner"), options).unwrap());
    let owner = Arc::new(LocalOwner::new(Arc::clone(&backend)));
    (backend, owner)
}

fn store(server: &S3Server, prefix: &str) -> RemoteStore {
    let options = Options::from_file(&server.options_file(server.scratch(), "")).unwrap();
    RemoteStore::open(&StoreUrl::parse(&server.url(prefix)).unwrap(), &options).unwrap()
}

async fn meta(remote: &RemoteStore, record: &SessionRecord) -> SnapshotMeta {
    let bytes = remote
        .get(&format!(
            "snapshots/{}/{}/meta.json",
            record.checkpoint, record.snapshot
        ))
        .await
        .unwrap()
        .expect("the snapshot's meta is in the store");
    serde_json::from_slice(&bytes).unwrap()
}

async fn commit(p: &ResourcesParticipant, id: &str) -> (serde_json::Value, SessionRecord) {
    p.close_admission(id).await.unwrap();
    let mut records = p.export(id, &[key("r1")]).await.unwrap();
    p.open_admission().await.unwrap();
    assert_eq!(records.len(), 1);
    let value = records.remove(0);
    let mut plain = value.clone();
    plain.as_object_mut().unwrap().remove("key");
    (value, serde_json::from_value(plain).unwrap())
}

async fn travels(choice: StoreChoice) {
    require_root();
    let server = S3Server::start();
    let remote = store(&server, "travel");
    let a = tempfile::Builder::new()
        .prefix("ta")
        .tempdir_in("/var/tmp")
        .unwrap();
    let b = tempfile::Builder::new()
        .prefix("tb")
        .tempdir_in("/var/tmp")
        .unwrap();
    let (backend_a, owner_a) = node(a.path(), choice);
    let travel_a = Arc::new(Travel::new(remote.clone(), &a.path().join("spool"), 3).unwrap());
    let p =
        ResourcesParticipant::new(Arc::clone(&owner_a), "owner").with_travel(Arc::clone(&travel_a));
    let task: OwnerTask = serde_json::from_value(serde_json::json!({
        "id": "r1",
        "sandbox": {"workdir": "/work/repo"},
        "files": {"lines.txt": "1\n"},
        "verify": {"command": ["true"]},
    }))
    .unwrap();
    let session = owner_a.create_session(task).await.unwrap();
    owner_a
        .exec(
            &session.session,
            sh("head -c 4194304 /dev/urandom > big.bin && sha256sum big.bin > big.sum"),
        )
        .await
        .unwrap();

    let mut metas = Vec::new();
    let mut records = Vec::new();
    for (i, id) in ["c1", "c2", "c3", "c4"].iter().enumerate() {
        if i > 0 {
            owner_a
                .exec(
                    &session.session,
                    sh(&format!("echo {} >> lines.txt", i + 1)),
                )
                .await
                .unwrap();
        }
        let (value, record) = commit(&p, id).await;
        metas.push(meta(&remote, &record).await);
        records.push((value, record));
    }
    let depths: Vec<u32> = metas.iter().map(|m| m.depth).collect();
    let sizes: Vec<u64> = metas.iter().map(|m| m.bytes).collect();
    eprintln!("upload bytes per checkpoint: {sizes:?}, depths {depths:?}");
    assert!(
        sizes[0] > 4 << 20,
        "the first upload holds the 4 MiB file: {sizes:?}"
    );
    if choice == StoreChoice::Btrfs {
        assert_eq!(
            depths,
            [0, 1, 2, 0],
            "whole every 3: no chain is longer than 3"
        );
        assert_eq!(
            metas[1].parent.as_deref(),
            Some(format!("c1/{}", records[0].1.snapshot).as_str())
        );
        for later in &sizes[1..3] {
            assert!(
                *later < sizes[0] / 20,
                "an incremental upload is about what changed: {sizes:?}"
            );
        }
    } else {
        assert_eq!(depths, [0, 0, 0, 0], "the copy store sends whole archives");
    }

    // Node B never held any of them: c3's chain comes from the store.
    let (backend_b, owner_b) = node(b.path(), choice);
    let travel_b = Arc::new(Travel::new(remote.clone(), &b.path().join("spool"), 3).unwrap());
    let q =
        ResourcesParticipant::new(Arc::clone(&owner_b), "owner").with_travel(Arc::clone(&travel_b));
    assert!(!backend_b.has_snapshot(&records[2].1.snapshot));
    q.close_admission("x1").await.unwrap();
    let next = q
        .install("x1", vec![records[2].0.clone()], &[key("r1")])
        .await
        .unwrap();
    assert_eq!(next, [key("r1-a1")]);
    let chain_len = if choice == StoreChoice::Btrfs { 3 } else { 1 };
    let received = backend_b.list().unwrap().snapshots;
    assert_eq!(received.len(), chain_len, "received: {received:?}");
    let session_b = &owner_b.live_sessions()[0].session;
    let lines = owner_b.download(session_b, "lines.txt", 100).await.unwrap();
    assert_eq!(lines, b"1\n2\n3\n", "the fork holds the files as of c3");
    let check = owner_b
        .exec(session_b, sh("sha256sum -c big.sum"))
        .await
        .unwrap();
    assert_eq!(check.exit_code, Some(0), "{check:?}");
    q.open_admission().await.unwrap();

    // Node B's next snapshots continue the rollout's lineage: c3 ended a chain of 3, so c5
    // goes whole; c6 goes against c5.
    let mut on_b = Vec::new();
    for id in ["c5", "c6"] {
        owner_b
            .exec(session_b, sh(&format!("echo {id} >> lines.txt")))
            .await
            .unwrap();
        q.close_admission(id).await.unwrap();
        let exported = q.export(id, &[key("r1-a1")]).await.unwrap();
        q.open_admission().await.unwrap();
        let mut plain = exported[0].clone();
        plain.as_object_mut().unwrap().remove("key");
        let record: SessionRecord = serde_json::from_value(plain).unwrap();
        on_b.push((meta(&remote, &record).await, record));
    }
    if choice == StoreChoice::Btrfs {
        assert_eq!(on_b[0].0.depth, 0, "c3's chain was full");
        assert_eq!(
            on_b[1].0.parent.as_deref(),
            Some(format!("c5/{}", on_b[0].1.snapshot).as_str())
        );
        assert!(on_b[1].0.bytes < sizes[0] / 20, "{}", on_b[1].0.bytes);
    }

    // Node A holds c4's snapshot: nothing is downloaded.
    let fetched = travel_a
        .fetch(&backend_a, &[("r1".to_owned(), records[3].1.clone())])
        .await
        .unwrap();
    assert_eq!(fetched, 0);
    for owner in [&owner_a, &owner_b] {
        for live in owner.live_sessions() {
            owner.close(&live.session).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn root_btrfs_snapshots_travel_incrementally_and_restore_on_another_node() {
    travels(StoreChoice::Btrfs).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn root_copy_store_archives_travel_and_restore_on_another_node() {
    travels(StoreChoice::Copy).await;
}

/// A flipped byte in a snapshot chunk in the store is refused by its digest, naming the
/// object, and nothing is received; the checkpoint before, whose chunks are intact, restores.
#[tokio::test(flavor = "multi_thread")]
async fn root_a_flipped_byte_in_a_snapshot_chunk_is_refused_and_the_previous_restores() {
    require_root();
    let server = S3Server::start();
    let remote = store(&server, "flip");
    let a = tempfile::Builder::new()
        .prefix("fa")
        .tempdir_in("/var/tmp")
        .unwrap();
    let b = tempfile::Builder::new()
        .prefix("fb")
        .tempdir_in("/var/tmp")
        .unwrap();
    let (_backend_a, owner_a) = node(a.path(), StoreChoice::Btrfs);
    // Every snapshot whole, so each checkpoint stands alone.
    let travel_a = Arc::new(Travel::new(remote.clone(), &a.path().join("spool"), 1).unwrap());
    let p = ResourcesParticipant::new(Arc::clone(&owner_a), "owner").with_travel(travel_a);
    let task: OwnerTask = serde_json::from_value(serde_json::json!({
        "id": "r1", "files": {"lines.txt": "1\n"}, "verify": {"command": ["true"]},
    }))
    .unwrap();
    let session = owner_a.create_session(task).await.unwrap();
    let (first, r1) = commit(&p, "c1").await;
    owner_a
        .exec(&session.session, sh("echo 2 >> lines.txt"))
        .await
        .unwrap();
    let (second, r2) = commit(&p, "c2").await;
    let m2 = meta(&remote, &r2).await;
    let chunk = format!(
        "snapshots/c2/{}/{:06}-{}",
        r2.snapshot, 0, m2.chunks[0].sha256
    );
    let mut bytes = remote.get(&chunk).await.unwrap().unwrap().to_vec();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    remote.put(&chunk, bytes.into()).await.unwrap();

    let (backend_b, owner_b) = node(b.path(), StoreChoice::Btrfs);
    let travel_b = Arc::new(Travel::new(remote.clone(), &b.path().join("spool"), 1).unwrap());
    let q = ResourcesParticipant::new(Arc::clone(&owner_b), "owner").with_travel(travel_b);
    q.close_admission("x1").await.unwrap();
    let err = q
        .install("x1", vec![second], &[key("r1")])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&chunk) && err.contains("sha256"), "{err}");
    assert!(
        backend_b.list().unwrap().snapshots.is_empty(),
        "nothing received"
    );
    assert!(owner_b.live_sessions().is_empty());
    q.open_admission().await.unwrap();
    q.close_admission("x2").await.unwrap();
    q.install("x2", vec![first], &[key("r1")]).await.unwrap();
    q.open_admission().await.unwrap();
    let restored = &owner_b.live_sessions()[0].session;
    let lines = owner_b.download(restored, "lines.txt", 100).await.unwrap();
    assert_eq!(lines, b"1\n", "c1 as it was");
    assert_eq!(r1.checkpoint, "c1");
    for owner in [&owner_a, &owner_b] {
        for live in owner.live_sessions() {
            owner.close(&live.session).await.unwrap();
        }
    }
}
