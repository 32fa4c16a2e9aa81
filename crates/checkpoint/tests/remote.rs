//! Checkpoints in an object store, against a real S3 server (moto's, on loopback) and a
//! `file://` directory playing the shared disk: published ones restore on a node that holds
//! nothing, of two coordinators only one publishes, a failed commit's upload is never seen and
//! is pruned, a flipped byte in the store is refused by digest while the checkpoint before it
//! still restores, and a store that stops answering fails the checkpoint and publishes
//! nothing.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{Fake, Rig, all_idle, key, keys};
use rollpoint_checkpoint::coordinator::Plan;
use rollpoint_checkpoint::{CoordinatorError, Kind, StoreError, store};
use rollpoint_remote::{Options, RemoteStore, StoreUrl};
use rollpoint_testkit::s3::{S3Server, SECRET};

const KEYS: usize = 3;

/// Where the store lives for one test.
enum Place {
    S3(S3Server),
    File(tempfile::TempDir),
}

impl Place {
    fn s3() -> Self {
        Self::S3(S3Server::start())
    }

    fn file() -> Self {
        Self::File(tempfile::tempdir().unwrap())
    }

    /// The store under `prefix`.
    fn open(&self, prefix: &str) -> RemoteStore {
        self.open_with(prefix, "")
    }

    fn open_with(&self, prefix: &str, extra: &str) -> RemoteStore {
        match self {
            Self::S3(server) => {
                let dir = tempfile::tempdir().unwrap();
                let options = Options::from_file(&server.options_file(dir.path(), extra)).unwrap();
                RemoteStore::open(&StoreUrl::parse(&server.url(prefix)).unwrap(), &options).unwrap()
            }
            Self::File(dir) => {
                let url = format!("file://{}/{prefix}", dir.path().display());
                RemoteStore::open(&StoreUrl::parse(&url).unwrap(), &Options::none()).unwrap()
            }
        }
    }
}

fn fakes(records: usize) -> Vec<Arc<Fake>> {
    let k = keys(KEYS);
    vec![
        Fake::with_records(Kind::Model, "gw", &k, records),
        Fake::with_records(Kind::Agent, "d1", &k, records),
        Fake::with_records(Kind::Resources, "owner", &k, records),
    ]
}

/// A node: its own run directory, participants and coordinator, all on `remote`.
async fn node(run: &Path, fakes: Vec<Arc<Fake>>, remote: &RemoteStore) -> Rig {
    common::rig(run, fakes, false, Duration::from_secs(60), Some(remote)).await
}

fn plan(id: &str) -> Plan {
    common::plan(id, keys(KEYS))
}

fn installed(rig: &Rig) -> Vec<Vec<serde_json::Value>> {
    rig.fakes
        .iter()
        .map(|f| f.get(|s| s.installed.clone()))
        .collect()
}

async fn restores_on_a_node_with_nothing(place: Place) {
    let remote = place.open("run");
    let a = tempfile::tempdir().unwrap();
    let first = node(a.path(), fakes(2), &remote).await;
    for id in ["c1", "c2", "c3"] {
        first.coordinator.checkpoint(&plan(id)).await.unwrap();
    }
    all_idle(&first).await;
    // Retention (2) reached the store: c1's objects and its marker are gone.
    let listed = remote.list("").await.unwrap();
    assert!(
        listed.iter().all(|k| !k.starts_with("checkpoints/c1/")),
        "{listed:?}"
    );
    assert_eq!(
        listed.iter().filter(|k| k.starts_with("publish/")).count(),
        2,
        "{listed:?}"
    );
    assert_eq!(store::remote::head(&remote).await.unwrap(), Some(3));

    // Another node, an empty directory: everything comes from the store.
    let b = tempfile::tempdir().unwrap();
    let fetched = store::remote::fetch(&remote, b.path()).await.unwrap();
    assert_eq!(fetched.latest.as_deref(), Some("c3"));
    assert_eq!(store::latest(b.path()).unwrap().as_deref(), Some("c3"));
    let doc = store::verify(b.path(), "c3").unwrap();
    assert_eq!(doc.participants.len(), 3);
    for m in &doc.participants {
        let dir = store::participant_dir(b.path(), "c3", m.kind, &m.instance);
        let local = std::fs::read(dir.join(&m.manifest.records_file)).unwrap();
        let there = std::fs::read(
            store::participant_dir(a.path(), "c3", m.kind, &m.instance)
                .join(&m.manifest.records_file),
        )
        .unwrap();
        assert_eq!(local, there, "{}/{}", m.kind, m.instance);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.join(&m.manifest.records_file))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }
    // The second node's participants restore it from their own (fetched) copy.
    let c = tempfile::tempdir().unwrap();
    let second = node(c.path(), fakes(0), &remote).await;
    let scope = vec![key("r0"), key("r2")];
    let restored = second
        .coordinator
        .restore("x1", "c3", &scope)
        .await
        .unwrap();
    for (_, _, next) in &restored.restored {
        assert_eq!(next, &vec![key("r0-a1"), key("r2-a1")]);
    }
    for (f, got) in second.fakes.iter().zip(installed(&second)) {
        assert_eq!(got.len(), 4, "{}: two records of two rollouts", f.instance);
        assert!(got.iter().all(|r| r["instance"] == f.instance.as_str()));
    }
    second.coordinator.resume("x1").await.unwrap();
    // It publishes on from the store's newest marker.
    second.coordinator.checkpoint(&plan("c4")).await.unwrap();
    assert_eq!(store::remote::head(&remote).await.unwrap(), Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_restores_on_a_node_with_nothing() {
    restores_on_a_node_with_nothing(Place::s3()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_restores_on_a_node_with_nothing() {
    restores_on_a_node_with_nothing(Place::file()).await;
}

async fn only_one_of_two_coordinators_publishes(place: Place) {
    let remote = place.open("race");
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for round in 0..3 {
        // Both start from the same newest marker, then publish at once.
        let one = node(a.path(), fakes(1), &remote).await;
        let two = node(b.path(), fakes(1), &remote).await;
        let (x, y) = (format!("a{round}"), format!("b{round}"));
        let (px, py) = (plan(&x), plan(&y));
        let (r1, r2) = tokio::join!(
            one.coordinator.checkpoint(&px),
            two.coordinator.checkpoint(&py)
        );
        let fenced = |r: &Result<_, CoordinatorError>| {
            matches!(
                r,
                Err(CoordinatorError::Store {
                    source: StoreError::Fenced { .. },
                    ..
                })
            )
        };
        assert!(
            r1.is_ok() != r2.is_ok() && (fenced(&r1) || fenced(&r2)),
            "round {round}: exactly one publishes, the other is fenced: {:?} / {:?}",
            r1.as_ref().map(|_| ()),
            r2.as_ref().map(|_| ())
        );
        let winner = if r1.is_ok() { &x } else { &y };
        let (loser, loser_dir) = if r1.is_ok() {
            (&two, b.path())
        } else {
            (&one, a.path())
        };
        all_idle(loser).await;
        let fresh = tempfile::tempdir().unwrap();
        let fetched = store::remote::fetch(&remote, fresh.path()).await.unwrap();
        assert_eq!(fetched.latest.as_ref(), Some(winner), "round {round}");
        assert_ne!(
            store::latest(loser_dir).unwrap().as_ref(),
            Some(if r1.is_ok() { &y } else { &x }),
            "the loser's LATEST never names its checkpoint"
        );
        // The loser missed the winner's publish: it stays fenced.
        let again = loser
            .coordinator
            .checkpoint(&plan(&format!("l{round}")))
            .await;
        assert!(fenced(&again), "round {round}: {:?}", again.map(|_| ()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_only_one_of_two_coordinators_publishes() {
    only_one_of_two_coordinators_publishes(Place::s3()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_only_one_of_two_coordinators_publishes() {
    only_one_of_two_coordinators_publishes(Place::file()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_a_failed_commit_is_never_seen_and_its_upload_is_pruned() {
    let place = Place::s3();
    let remote = place.open("torn");
    let a = tempfile::tempdir().unwrap();
    let rig = node(a.path(), fakes(1), &remote).await;
    rig.coordinator.checkpoint(&plan("c1")).await.unwrap();
    // The agent's export names a rollout outside the scope: its write fails while the
    // others upload their shares.
    let agent = &rig.fakes[1];
    agent.set(|s| {
        s.records
            .get_mut("r0")
            .unwrap()
            .push(serde_json::json!({"key": "zz"}))
    });
    let failed = rig.coordinator.checkpoint(&plan("c2")).await;
    assert!(failed.is_err(), "the commit fails");
    all_idle(&rig).await;
    let listed = remote.list("checkpoints/c2").await.unwrap();
    assert!(
        !listed.is_empty(),
        "the other participants uploaded their shares"
    );
    assert!(
        listed.iter().all(|k| !k.ends_with("checkpoint.json")),
        "{listed:?}"
    );
    let fresh = tempfile::tempdir().unwrap();
    let fetched = store::remote::fetch(&remote, fresh.path()).await.unwrap();
    assert_eq!(
        fetched.latest.as_deref(),
        Some("c1"),
        "c2 was never published"
    );
    assert!(!store::checkpoint_dir(fresh.path(), "c2").exists());
    // The next publish prunes what c2 left.
    agent.set(|s| {
        s.records.get_mut("r0").unwrap().pop();
    });
    rig.coordinator.checkpoint(&plan("c3")).await.unwrap();
    assert!(remote.list("checkpoints/c2").await.unwrap().is_empty());
    assert_eq!(store::remote::head(&remote).await.unwrap(), Some(2));
}

async fn flipped_byte_is_refused_and_the_previous_restores(place: Place, file: &str) {
    let remote = place.open("flip");
    let a = tempfile::tempdir().unwrap();
    let rig = node(a.path(), fakes(2), &remote).await;
    rig.coordinator.checkpoint(&plan("c1")).await.unwrap();
    rig.coordinator.checkpoint(&plan("c2")).await.unwrap();
    let doc = store::read_checkpoint(a.path(), "c2").unwrap();
    let m = doc
        .participants
        .iter()
        .find(|m| m.kind == Kind::Agent)
        .unwrap();
    let name = if file == "manifest" {
        "manifest.json".to_owned()
    } else {
        m.manifest.records_file.clone()
    };
    let k = format!("checkpoints/c2/agent/{}/{name}", m.instance);
    let mut bytes = remote.get(&k).await.unwrap().unwrap().to_vec();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    remote.put(&k, Bytes::from(bytes)).await.unwrap();

    let b = tempfile::tempdir().unwrap();
    store::remote::fetch(&remote, b.path()).await.unwrap();
    let err = store::verify(b.path(), "c2").unwrap_err();
    assert!(err.is_damage(), "{err}");
    assert!(err.to_string().contains("c2"), "{err}");
    let list = store::published(b.path()).unwrap();
    let ids: Vec<&str> = list.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["c2", "c1"]);
    store::verify(b.path(), "c1").unwrap();

    let second = node(b.path(), fakes(0), &remote).await;
    let refused = second
        .coordinator
        .restore("x1", "c2", &[key("r1")])
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("c2"), "{refused}");
    all_idle(&second).await;
    second
        .coordinator
        .restore("x2", "c1", &[key("r1")])
        .await
        .unwrap();
    second.coordinator.resume("x2").await.unwrap();
    // The refused restore was undone (retired); what c1 holds was installed after it.
    for got in installed(&second) {
        let last: Vec<&serde_json::Value> = got.iter().rev().take(2).collect();
        assert!(
            last.len() == 2 && last.iter().all(|r| r["key"] == "r1"),
            "{got:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_a_flipped_byte_in_a_manifest_is_refused_and_the_previous_restores() {
    flipped_byte_is_refused_and_the_previous_restores(Place::s3(), "manifest").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_a_flipped_byte_in_records_is_refused_and_the_previous_restores() {
    flipped_byte_is_refused_and_the_previous_restores(Place::file(), "records").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_a_store_that_stops_answering_fails_the_checkpoint_and_publishes_nothing() {
    let place = Place::s3();
    let Place::S3(server) = &place else {
        unreachable!()
    };
    let remote = place.open_with("down", "AWS_TIMEOUT=1s\nAWS_CONNECT_TIMEOUT=1s\n");
    let a = tempfile::tempdir().unwrap();
    let rig = node(a.path(), fakes(1), &remote).await;
    rig.coordinator.checkpoint(&plan("c1")).await.unwrap();
    server.freeze();
    let failed = rig.coordinator.checkpoint(&plan("c2")).await;
    server.thaw();
    let message = failed.map(|_| ()).unwrap_err().to_string();
    assert!(message.contains("checkpoint store s3://"), "{message}");
    assert!(!message.contains(SECRET), "{message}");
    all_idle(&rig).await;
    assert_eq!(store::latest(a.path()).unwrap().as_deref(), Some("c1"));
    let fresh = tempfile::tempdir().unwrap();
    let fetched = store::remote::fetch(&remote, fresh.path()).await.unwrap();
    assert_eq!(fetched.latest.as_deref(), Some("c1"));
    // Back again: the run goes on and the next checkpoint publishes.
    rig.coordinator.checkpoint(&plan("c3")).await.unwrap();
    assert_eq!(store::remote::head(&remote).await.unwrap(), Some(2));
    assert!(!format!("{remote:?}").contains(SECRET));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_a_lost_nodes_rollouts_move_to_a_live_node_from_the_store_alone() {
    let place = Place::s3();
    let remote = place.open("moved");
    let (a_keys, b_keys) = (vec![key("a0"), key("a1")], vec![key("b0")]);
    let all: Vec<_> = a_keys.iter().chain(&b_keys).cloned().collect();
    let gw = Fake::with_records(Kind::Model, "gw", &all, 1);
    let node_a = [
        Fake::with_records(Kind::Agent, "agent-a", &a_keys, 2),
        Fake::with_records(Kind::Resources, "owner-a", &a_keys, 1),
    ];
    let node_b = [
        Fake::with_records(Kind::Agent, "agent-b", &b_keys, 2),
        Fake::with_records(Kind::Resources, "owner-b", &b_keys, 1),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut fakes = vec![gw.clone()];
    fakes.extend(node_a.iter().cloned());
    fakes.extend(node_b.iter().cloned());
    let before = node(dir.path(), fakes, &remote).await;
    let plan = Plan {
        id: "c1".into(),
        scope: all.clone(),
        continues: None,
        stop: false,
    };
    before.coordinator.checkpoint(&plan).await.unwrap();
    drop(before);

    // Node A is gone with its directory; node B and the gateway go on, from another
    // directory (the coordinator's own is gone too).
    let fresh = tempfile::tempdir().unwrap();
    let mut fakes = vec![Fake::new(Kind::Model, "gw")];
    let survivors = [
        Fake::new(Kind::Agent, "agent-b"),
        Fake::new(Kind::Resources, "owner-b"),
    ];
    fakes.extend(survivors.iter().cloned());
    let after = node(fresh.path(), fakes, &remote).await;
    let moved = after
        .coordinator
        .keys_of("c1", Kind::Agent, "agent-a")
        .await
        .unwrap();
    assert_eq!(moved, a_keys);
    // Without the moves the lost node's shares are named.
    let refused = after
        .coordinator
        .restore("x0", "c1", &moved)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("agent/agent-a"), "{refused}");
    let moves = [
        rollpoint_checkpoint::Move {
            kind: Kind::Agent,
            from: "agent-a".into(),
            to: "agent-b".into(),
        },
        rollpoint_checkpoint::Move {
            kind: Kind::Resources,
            from: "owner-a".into(),
            to: "owner-b".into(),
        },
    ];
    let restored = after
        .coordinator
        .restore_moved("x1", "c1", &moved, &moves)
        .await
        .unwrap();
    for (_, _, next) in &restored.restored {
        assert_eq!(next, &vec![key("a0-a1"), key("a1-a1")]);
    }
    let got = installed(&after);
    assert_eq!(got[0].len(), 2, "the gateway's calls of a0 and a1");
    assert_eq!(
        got[1].len(),
        4,
        "agent-b holds agent-a's two records of each"
    );
    assert!(got[1].iter().all(|r| r["instance"] == "agent-a"));
    assert!(got[2].iter().all(|r| r["instance"] == "owner-a"));
    after.coordinator.resume("x1").await.unwrap();
    // A move from a participant still here is refused by name.
    let bad = [rollpoint_checkpoint::Move {
        kind: Kind::Agent,
        from: "agent-b".into(),
        to: "agent-b".into(),
    }];
    let err = after
        .coordinator
        .restore_moved("x2", "c1", &moved, &bad)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("still a participant"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_a_coordinator_killed_mid_upload_publishes_nothing_and_its_objects_are_pruned() {
    let place = Place::s3();
    let remote = place.open("killed");
    let a = tempfile::tempdir().unwrap();
    let rig = node(a.path(), fakes(1), &remote).await;
    rig.coordinator.checkpoint(&plan("c1")).await.unwrap();
    // The agent exports slowly; the coordinator dies while the others have uploaded.
    rig.fakes[1].set(|s| s.export_delay = Some(Duration::from_secs(3)));
    let coordinator = rig.coordinator.clone();
    let cut = tokio::spawn(async move { coordinator.checkpoint(&plan("c2")).await });
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while remote.list("checkpoints/c2").await.unwrap().len() < 4 {
        assert!(
            std::time::Instant::now() < end,
            "the fast participants never uploaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cut.abort();
    let _killed = cut.await;
    assert_eq!(store::remote::head(&remote).await.unwrap(), Some(1));
    let fresh = tempfile::tempdir().unwrap();
    let fetched = store::remote::fetch(&remote, fresh.path()).await.unwrap();
    assert_eq!(
        fetched.latest.as_deref(),
        Some("c1"),
        "c2 was never published"
    );

    // Another node's coordinator, with a directory of its own, goes on from the store.
    let b = tempfile::tempdir().unwrap();
    let next = node(b.path(), fakes(1), &remote).await;
    next.coordinator.checkpoint(&plan("c3")).await.unwrap();
    assert!(
        remote.list("checkpoints/c2").await.unwrap().is_empty(),
        "the killed commit's uploads are pruned"
    );
    assert!(
        !remote.list("checkpoints/c1").await.unwrap().is_empty(),
        "the newest two checkpoints stay although this node never held c1"
    );
    assert_eq!(store::remote::head(&remote).await.unwrap(), Some(2));
}
