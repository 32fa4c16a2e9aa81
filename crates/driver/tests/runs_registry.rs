//! The registry's own rules, against an owner whose seed never answers: a
//! queued run is exported at its seed and cancelled without touching the
//! owner; a run that cannot park in time is reported blocked, naming where
//! it is; a second registration of a live rollout is refused.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_driver::{DriverConfig, DriverError, ParkState, RolloutTask, Runs, Stage, Status};
use rollpoint_owner::record::SessionRecord;
use rollpoint_owner::{Access, Launched, Owner, OwnerResult, OwnerTask, SessionInfo, Verdict};
use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};

/// Seeding never finishes; nothing else is ever reached.
#[derive(Debug, Default)]
struct StuckOwner {
    seeds: std::sync::atomic::AtomicUsize,
}

fn never<'a, T: Send + 'a>() -> BoxFuture<'a, OwnerResult<T>> {
    futures_util::future::pending().boxed()
}

impl Owner for StuckOwner {
    fn create_session(&self, _task: OwnerTask) -> BoxFuture<'_, OwnerResult<SessionInfo>> {
        self.seeds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        never()
    }
    fn access<'a>(&'a self, _: &'a str) -> BoxFuture<'a, OwnerResult<Access>> {
        never()
    }
    fn exec<'a>(&'a self, _: &'a str, _: ExecRequest) -> BoxFuture<'a, OwnerResult<ExecOutput>> {
        never()
    }
    fn upload<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: Vec<u8>,
        _: u32,
    ) -> BoxFuture<'a, OwnerResult<()>> {
        never()
    }
    fn download<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: u64,
    ) -> BoxFuture<'a, OwnerResult<Vec<u8>>> {
        never()
    }
    fn launch<'a>(&'a self, _: &'a str, _: LaunchRequest) -> BoxFuture<'a, OwnerResult<Launched>> {
        never()
    }
    fn verify<'a>(&'a self, _: &'a str) -> BoxFuture<'a, OwnerResult<Verdict>> {
        never()
    }
    fn usage<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, OwnerResult<rollpoint_owner::ResourceUsage>> {
        never()
    }
    fn close<'a>(&'a self, _: &'a str) -> BoxFuture<'a, OwnerResult<()>> {
        never()
    }
    fn snapshot<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, OwnerResult<SessionRecord>> {
        never()
    }
    fn restore(&self, _: SessionRecord) -> BoxFuture<'_, OwnerResult<Access>> {
        never()
    }
    fn delete_snapshot<'a>(&'a self, _: &'a str) -> BoxFuture<'a, OwnerResult<()>> {
        never()
    }
}

fn task(id: &str) -> RolloutTask {
    serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["true"]}},
        "adapter": {"kind": "command", "argv": ["true"]}
    }))
    .expect("task")
}

#[tokio::test]
async fn queued_runs_export_their_seed_and_cancel_without_the_owner() {
    let owner = Arc::new(StuckOwner::default());
    let config = DriverConfig {
        slots: 1,
        park_timeout: Duration::from_millis(300),
        ..DriverConfig::default()
    };
    let runs = Runs::new(Arc::clone(&owner) as Arc<dyn Owner>, config).expect("runs");
    let _seeding = runs.register(task("seeding")).expect("register");
    let queued = runs.register(task("queued")).expect("register");
    assert!(matches!(
        runs.register(task("queued")),
        Err(DriverError::Duplicate { .. })
    ));
    // Let the first run take the slot and start seeding.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(owner.seeds.load(std::sync::atomic::Ordering::SeqCst), 1);

    let report = runs.request_park().await;
    assert_eq!(report.runs["queued"], ParkState::Queued, "{report:?}");
    let ParkState::Blocked { reason } = &report.runs["seeding"] else {
        panic!("{report:?}")
    };
    assert!(
        reason.contains("300ms") && reason.contains("`seed`"),
        "names where it is: {reason}"
    );
    assert!(!report.ready());
    let exported = runs.export();
    assert_eq!(exported.len(), 2);
    assert!(exported.iter().all(|(_, b)| b.stage == Stage::Seed));

    runs.cancel("queued").await.expect("cancel");
    let result = queued.result().await.expect("result");
    assert_eq!(result.status, Status::Cancelled);
    assert!(result.launches.is_empty());
    assert_eq!(
        owner.seeds.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "a cancelled queued run never seeds"
    );
    assert!(runs.forget("queued"));
    assert!(matches!(
        runs.cancel("nobody").await,
        Err(DriverError::Unknown { .. })
    ));
}

#[tokio::test]
async fn install_refuses_a_bookmark_of_another_rollout_before_starting_any() {
    let owner: Arc<dyn Owner> = Arc::new(StuckOwner::default());
    let runs = Runs::new(owner, DriverConfig::default()).expect("runs");
    let good = rollpoint_driver::Bookmark::seed("a", 0, 1);
    let wrong = rollpoint_driver::Bookmark::seed("other", 0, 1);
    let err = runs
        .install(vec![(task("a"), good), (task("b"), wrong)])
        .expect_err("mismatch");
    assert!(err.to_string().contains("bookmark.rollout"), "{err}");
    assert!(runs.export().is_empty(), "nothing started");
}
