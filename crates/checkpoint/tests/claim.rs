//! Claims on a run in a store (`store::claim`): one process wins each claim, a released or
//! silent holder is taken over, a live one is not. Against a `file://` store (put-if-absent is
//! a hard link there) and a real S3-compatible server (moto), as `remote.rs` does.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::time::Duration;

use rollpoint_checkpoint::StoreError;
use rollpoint_checkpoint::store::claim::{self, Holder};
use rollpoint_remote::{Options, RemoteStore, StoreUrl};
use rollpoint_testkit::s3::S3Server;

fn file_store(dir: &tempfile::TempDir) -> RemoteStore {
    let url = format!("file://{}/store", dir.path().display());
    RemoteStore::open(&StoreUrl::parse(&url).unwrap(), &Options::none()).unwrap()
}

const LEASE: Duration = Duration::from_millis(600);
const POLL: Duration = Duration::from_millis(50);

async fn claims_fence_and_hand_over(store: &RemoteStore) {
    assert_eq!(claim::newest(store).await.unwrap(), None);
    assert_eq!(
        claim::wait_gone(store, LEASE, POLL).await.unwrap(),
        Holder::None
    );
    let first = claim::take(store, "a", None, 1).await.unwrap();
    assert_eq!(first.seq, 1);
    // A second process that saw no claim loses the race for claim 1.
    let lost = claim::take(store, "b", None, 2).await.unwrap_err();
    assert!(
        matches!(&lost, StoreError::Claimed { holder, .. } if holder.contains("a (claim 1)")),
        "{lost}"
    );
    claim::beat(store, &first, 0, false, 3).await.unwrap();

    // A holder that beats is alive: a taker is refused within one lease.
    let beating = {
        let (store, first) = (store.clone(), first.clone());
        tokio::spawn(async move {
            for n in 1..100 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                claim::beat(&store, &first, n, false, 3 + n).await.unwrap();
            }
        })
    };
    let alive = claim::wait_gone(store, LEASE, POLL).await.unwrap_err();
    assert!(alive.to_string().contains("heartbeat moved"), "{alive}");
    beating.abort();
    let _ = beating.await;

    // Silent for a whole lease: gone.
    let started = tokio::time::Instant::now();
    assert_eq!(
        claim::wait_gone(store, LEASE, POLL).await.unwrap(),
        Holder::Gone(first.clone())
    );
    assert!(started.elapsed() >= LEASE);
    let second = claim::take(store, "b", Some(first.seq), 10).await.unwrap();
    assert_eq!(claim::newest(store).await.unwrap(), Some(second.clone()));

    // Released: taken over at once.
    claim::beat(store, &second, 1, true, 11).await.unwrap();
    let started = tokio::time::Instant::now();
    assert_eq!(
        claim::wait_gone(store, Duration::from_secs(30), POLL)
            .await
            .unwrap(),
        Holder::Gone(second.clone())
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let heartbeat = claim::heartbeat(store, second.seq).await.unwrap().unwrap();
    assert!(heartbeat.released);
    assert_eq!(heartbeat.holder, "b");
}

#[tokio::test]
async fn claims_in_a_file_store() {
    let dir = tempfile::tempdir().unwrap();
    claims_fence_and_hand_over(&file_store(&dir)).await;
}

#[tokio::test]
async fn claims_in_an_s3_store() {
    let server = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    let options = Options::from_file(&server.options_file(dir.path(), "")).unwrap();
    let store =
        RemoteStore::open(&StoreUrl::parse(&server.url("claims")).unwrap(), &options).unwrap();
    claims_fence_and_hand_over(&store).await;
}

#[tokio::test]
async fn an_unknown_claim_version_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = file_store(&dir);
    store
        .put_new(
            "claims/00000000000000000001.json",
            bytes::Bytes::from_static(
                br#"{"version": 7, "seq": 1, "holder": "x", "created_unix_ms": 1}"#,
            ),
        )
        .await
        .unwrap();
    let e = claim::newest(&store).await.unwrap_err();
    assert!(e.to_string().contains("unknown version 7"), "{e}");
}
