//! The driver over real local sandboxes (root): the fake adapter's harness
//! runs under the real supervisor in a real sandbox, checkpoints pause it
//! with the supervisor, snapshots and forks come from the real owner.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rollpoint_driver::{
    Bookmark, DriverConfig, LaunchEnd, Next, ParkState, RolloutTask, Runs, Stage, Status,
};
use rollpoint_owner::{LocalOwner, Owner};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_testkit::{require_root, supervisor_bin};

/// Generous bound on any one scenario.
const LIMIT: Duration = Duration::from_secs(180);

struct World {
    _dir: tempfile::TempDir,
    backend: Arc<LocalBackend>,
    owner: Arc<dyn Owner>,
}

impl Drop for World {
    /// A failed test still leaves no sandbox (mounts, cgroups, anchors).
    fn drop(&mut self) {
        if let Ok(listing) = self.backend.list() {
            for id in listing.sandboxes {
                let _ = self.backend.destroy(&id);
            }
        }
    }
}

fn world() -> World {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(
        LocalBackend::open(
            &dir.path().join("owner"),
            LocalOptions::new(supervisor_bin()),
        )
        .unwrap(),
    );
    let owner: Arc<dyn Owner> = Arc::new(LocalOwner::new(Arc::clone(&backend) as Arc<dyn Backend>));
    World {
        _dir: dir,
        backend,
        owner,
    }
}

fn task(id: &str, steps: u32, pauses: bool) -> RolloutTask {
    let check = format!("test \"$(wc -l < .fake-harness/progress)\" -eq {steps}");
    serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {
            "id": id,
            "verify": {"command": ["/bin/sh", "-c", check]}
        },
        "adapter": {"kind": "fake", "steps": steps, "tick_ms": 100, "pauses": pauses}
    }))
    .unwrap()
}

fn runs(owner: &Arc<dyn Owner>, slots: usize) -> Runs {
    let config = DriverConfig {
        slots,
        ..DriverConfig::default()
    };
    Runs::new(Arc::clone(owner), config).unwrap()
}

fn bookmark_of(runs: &Runs, rollout: &str) -> Bookmark {
    runs.export()
        .into_iter()
        .find(|(r, _)| r == rollout)
        .map(|(_, b)| b)
        .unwrap()
}

/// Lines in the harness's progress file, read through the owner.
async fn progress(owner: &Arc<dyn Owner>, session: &str) -> usize {
    match owner
        .download(session, ".fake-harness/progress", 1 << 20)
        .await
    {
        Ok(bytes) => bytes.iter().filter(|b| **b == b'\n').count(),
        Err(_) => 0,
    }
}

/// Waits until the rollout's harness has made `steps` steps; returns its
/// session.
async fn running(owner: &Arc<dyn Owner>, runs: &Runs, rollout: &str, steps: usize) -> String {
    let end = Instant::now() + LIMIT;
    loop {
        let mark = bookmark_of(runs, rollout);
        if let Some(p) = mark.progress()
            && !p.launches.is_empty()
            && progress(owner, &p.session.session).await >= steps
        {
            return p.session.session.clone();
        }
        assert!(Instant::now() < end, "{rollout}: harness did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The harness makes no progress while paused.
async fn assert_frozen(owner: &Arc<dyn Owner>, session: &str) {
    let before = progress(owner, session).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        progress(owner, session).await,
        before,
        "the paused harness went on"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn root_paused_launch_is_exported_and_continues_in_place_after_two_checkpoints() {
    let w = world();
    let runs = runs(&w.owner, 4);
    let handle = runs.register(task("two-ck", 25, true)).unwrap();
    tokio::time::timeout(LIMIT, async {
        let session = running(&w.owner, &runs, "two-ck", 2).await;
        for round in 1..=2u32 {
            let report = runs.request_park().await;
            assert_eq!(report.runs["two-ck"], ParkState::Paused, "{report:?}");
            let mark = bookmark_of(&runs, "two-ck");
            assert_eq!(mark.next(), Next::Harness);
            let p = mark.progress().unwrap();
            assert!(p.resume, "a parked launch's bookmark resumes");
            assert_eq!(p.launches.len(), 1);
            assert_eq!(p.launches[0].pauses, round);
            assert_eq!(p.launches[0].end, None);
            Bookmark::decode(&mark.encode()).unwrap();
            assert_frozen(&w.owner, &session).await;
            runs.open().await;
            // Let it run a little between the checkpoints.
            let now = progress(&w.owner, &session).await;
            let end = Instant::now() + LIMIT;
            while progress(&w.owner, &session).await < now + 2 {
                assert!(Instant::now() < end, "the harness did not go on");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let result = handle.result().await.unwrap();
        assert_eq!(result.status, Status::Verified, "{result:?}");
        assert_eq!(result.reward, Some(1.0));
        assert_eq!(result.launches.len(), 1, "launched once: {result:?}");
        let l = &result.launches[0];
        assert_eq!(l.pauses, 2);
        assert!(l.paused_ms >= 1000, "{l:?}");
        assert_eq!(l.end, Some(LaunchEnd::Finished));
        assert!(!l.resumed);
        assert!(result.timings.paused_ms >= 1000);
        assert!(
            w.backend.list().unwrap().sandboxes.is_empty(),
            "the verified session's sandbox is gone"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn root_checkpoint_that_opens_before_the_run_wakes_finds_it_still_paused() {
    let w = world();
    let runs = runs(&w.owner, 4);
    let handle = runs.register(task("early-open", 15, true)).unwrap();
    tokio::time::timeout(LIMIT, async {
        let session = running(&w.owner, &runs, "early-open", 1).await;
        let report = runs.request_park().await;
        assert_eq!(report.runs["early-open"], ParkState::Paused);
        // Open and park again before the run has woken from the first park.
        runs.open().await;
        let report = runs.request_park().await;
        assert_eq!(report.runs["early-open"], ParkState::Paused, "{report:?}");
        assert_frozen(&w.owner, &session).await;
        runs.open().await;
        let result = handle.result().await.unwrap();
        assert_eq!(result.status, Status::Verified, "{result:?}");
        assert_eq!(result.launches.len(), 1, "{result:?}");
        let l = &result.launches[0];
        assert_eq!(l.end, Some(LaunchEnd::Finished));
        assert!(l.note.is_none(), "continued without a fallback: {l:?}");
        assert!(l.pauses >= 1, "{l:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn root_exported_bookmark_of_a_paused_launch_relaunches_on_the_saved_session_after_a_crash() {
    let w = world();
    let first = runs(&w.owner, 4);
    let t = task("crash", 20, true);
    let _abandoned = first.register(t.clone()).unwrap();
    tokio::time::timeout(LIMIT, async {
        let session = running(&w.owner, &first, "crash", 3).await;
        let report = first.request_park().await;
        assert_eq!(report.runs["crash"], ParkState::Paused);
        let mark = bookmark_of(&first, "crash");
        let saved = progress(&w.owner, &session).await;
        let record = w.owner.snapshot(&session, "ck1").await.unwrap();
        // The crash: the first registry is never opened again. The owner
        // restores the session into a fork of the snapshot (and destroys the
        // sandbox it replaces, paused harness and all).
        let bytes = mark.encode();
        let restored = w.owner.restore(record).await.unwrap();
        let old_sandbox = mark.progress().unwrap().session.sandbox.clone();
        assert_ne!(restored.sandbox, old_sandbox);

        let second = runs(&w.owner, 4);
        let mark = Bookmark::decode(&bytes).unwrap();
        let handle = second.install(vec![(t, mark)]).unwrap().pop().unwrap();
        let result = handle.result().await.unwrap();
        assert_eq!(result.status, Status::Verified, "{result:?}");
        assert_eq!(result.reward, Some(1.0));
        assert_eq!(result.attempt, 1);
        assert_eq!(result.launches.len(), 2, "{result:?}");
        let (a, b) = (&result.launches[0], &result.launches[1]);
        assert_eq!(a.end, Some(LaunchEnd::Interrupted));
        assert_eq!(a.sandbox, old_sandbox);
        assert!(b.resumed, "{b:?}");
        assert!(
            b.reason.contains(&format!("holds {saved} of 20")),
            "resumed on the snapshot's session: {b:?}"
        );
        assert_eq!(b.sandbox, restored.sandbox);
        assert_eq!(b.attempt, 1);
        assert_eq!(b.end, Some(LaunchEnd::Finished));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn root_adapter_that_does_not_pause_is_stopped_and_relaunched() {
    let w = world();
    let runs = runs(&w.owner, 4);
    let handle = runs.register(task("no-pause", 20, false)).unwrap();
    tokio::time::timeout(LIMIT, async {
        let session = running(&w.owner, &runs, "no-pause", 2).await;
        let report = runs.request_park().await;
        assert_eq!(report.runs["no-pause"], ParkState::Stopped, "{report:?}");
        let mark = bookmark_of(&runs, "no-pause");
        let p = mark.progress().unwrap();
        assert!(p.resume);
        assert_eq!(p.launches[0].end, Some(LaunchEnd::Interrupted));
        assert_frozen(&w.owner, &session).await;
        runs.open().await;
        let result = handle.result().await.unwrap();
        assert_eq!(result.status, Status::Verified, "{result:?}");
        assert_eq!(result.launches.len(), 2, "{result:?}");
        assert!(result.launches[1].resumed);
        assert_eq!(result.launches[0].pauses, 0);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn root_run_queued_for_a_slot_is_exported_at_its_seed() {
    let w = world();
    let runs = runs(&w.owner, 1);
    let first = runs.register(task("holder", 15, true)).unwrap();
    tokio::time::timeout(LIMIT, async {
        // The holder has the only slot before the other run is registered
        // (two runs queued together take the slot in either order).
        running(&w.owner, &runs, "holder", 1).await;
        let queued = runs.register(task("queued", 3, true)).unwrap();
        let report = runs.request_park().await;
        assert_eq!(report.runs["holder"], ParkState::Paused, "{report:?}");
        assert_eq!(report.runs["queued"], ParkState::Queued, "{report:?}");
        let mark = bookmark_of(&runs, "queued");
        assert_eq!(mark.stage, Stage::Seed);
        assert_eq!(mark.attempt, 0);
        runs.open().await;
        assert_eq!(first.result().await.unwrap().status, Status::Verified);
        let r = queued.result().await.unwrap();
        assert_eq!(r.status, Status::Verified, "{r:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn root_cancel_kills_a_paused_launch_and_closes_its_session() {
    let w = world();
    let runs = runs(&w.owner, 4);
    let handle = runs.register(task("cancel", 50, true)).unwrap();
    tokio::time::timeout(LIMIT, async {
        running(&w.owner, &runs, "cancel", 1).await;
        assert_eq!(runs.request_park().await.runs["cancel"], ParkState::Paused);
        runs.cancel("cancel").await.unwrap();
        let result = handle.result().await.unwrap();
        assert_eq!(result.status, Status::Cancelled, "{result:?}");
        assert_eq!(result.launches[0].end, Some(LaunchEnd::Interrupted));
        assert!(
            w.backend.list().unwrap().sandboxes.is_empty(),
            "the cancelled session's sandbox is gone"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn root_command_adapter_pauses_in_place_and_an_ungraded_run_closes_its_session() {
    let w = world();
    let runs = runs(&w.owner, 4);
    let script = "echo \"$ROLLPOINT_CAPTURE_KEY $ROLLPOINT_ATTEMPT\" > key; \
                  i=0; while [ $i -lt 15 ]; do i=$((i+1)); echo $i >> .fake-harness/progress; sleep 0.1; done";
    let t: RolloutTask = serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {
            "id": "cmd",
            "setup": [["mkdir", "-p", ".fake-harness"]],
            "verify": {"command": ["false"]}
        },
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", script]},
        "verify_mode": "skip"
    }))
    .unwrap();
    let handle = runs.register(t).unwrap();
    tokio::time::timeout(LIMIT, async {
        let session = running(&w.owner, &runs, "cmd", 2).await;
        let key = w.owner.download(&session, "key", 100).await.unwrap();
        assert_eq!(key, b"cmd 0\n", "the launch's capture key and attempt");
        assert_eq!(runs.request_park().await.runs["cmd"], ParkState::Paused);
        assert_frozen(&w.owner, &session).await;
        runs.open().await;
        let result = handle.result().await.unwrap();
        assert_eq!(result.status, Status::Unverified, "{result:?}");
        assert_eq!(result.verdict, None);
        assert_eq!(result.launches.len(), 1, "{result:?}");
        assert_eq!(result.launches[0].pauses, 1);
        assert_eq!(result.launches[0].end, Some(LaunchEnd::Finished));
        assert!(
            w.backend.list().unwrap().sandboxes.is_empty(),
            "a run that ends without a verdict closes its session"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn root_restart_is_never_parked_and_stops_its_sandbox() {
    let w = world();
    let runs = runs(&w.owner, 4);
    let mut t = task("restart", 10, true);
    t.task.capture = false;
    t.task.verify.command = vec!["false".into()];
    t.verify_mode = rollpoint_driver::VerifyMode::Skip;
    let handle = runs.register(t).unwrap();
    // A restart exports only its seed, so its sandbox is found through the
    // backend.
    let lines = |backend: &LocalBackend| -> usize {
        tokio::task::block_in_place(|| {
            let Some(id) = backend
                .list()
                .ok()
                .and_then(|l| l.sandboxes.first().cloned())
            else {
                return 0;
            };
            backend
                .download(
                    &id,
                    std::path::Path::new("/workspace/.fake-harness/progress"),
                    1 << 20,
                )
                .map_or(0, |b| b.iter().filter(|c| **c == b'\n').count())
        })
    };
    tokio::time::timeout(LIMIT, async {
        while lines(&w.backend) < 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let report = runs.request_park().await;
        assert_eq!(report.runs["restart"], ParkState::Restart, "{report:?}");
        assert_eq!(bookmark_of(&runs, "restart").stage, Stage::Seed);
        // Not paused: it keeps going during the checkpoint.
        let before = lines(&w.backend);
        while lines(&w.backend) <= before {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let result = handle.result().await.unwrap();
        runs.open().await;
        assert!(result.restart, "{result:?}");
        assert_eq!(result.status, Status::Unverified, "{result:?}");
        assert_eq!(result.launches[0].pauses, 0);
        assert!(
            w.backend.list().unwrap().sandboxes.is_empty(),
            "a restart stops its sandbox"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn root_launch_past_its_time_limit_is_stopped_and_graded_as_it_stands() {
    let w = world();
    let runs = runs(&w.owner, 4);
    let mut t = task("slow", 10_000, true);
    t.harness_timeout_s = Some(2);
    let handle = runs.register(t).unwrap();
    tokio::time::timeout(LIMIT, async {
        running(&w.owner, &runs, "slow", 1).await;
        // A pause does not count against the limit.
        assert_eq!(runs.request_park().await.runs["slow"], ParkState::Paused);
        tokio::time::sleep(Duration::from_secs(3)).await;
        runs.open().await;
        let result = handle.result().await.unwrap();
        assert_eq!(result.status, Status::Verified, "{result:?}");
        assert_eq!(result.reward, Some(0.0), "graded as it stands");
        let l = &result.launches[0];
        assert_eq!(l.end, Some(LaunchEnd::Failed), "{l:?}");
        assert!(l.paused_ms >= 3000, "{l:?}");
        assert!(l.duration_ms(0) >= l.paused_ms + 2000, "{l:?}");
    })
    .await
    .unwrap();
}
