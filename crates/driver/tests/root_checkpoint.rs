//! Checkpoints end to end in one process (root): the drivers (agent) and
//! the owner (resources) under the checkpoint coordinator, over real
//! sandboxes. A checkpoint taken while harnesses run lets them continue in
//! place; a checkpoint with `stop` ends the run; a fresh owner and fresh
//! drivers restore from it, each rollout continues as its next attempt in a
//! fork of its snapshot, and every step of every harness is done exactly
//! once (the verify command counts them). A launch the checkpoint's batched
//! pause cannot freeze (a writer in `D` on a frozen filesystem) makes only
//! its own rollout fall back to the stop and a relaunch on its saved session.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollpoint_checkpoint::{
    Coordinator, CoordinatorConfig, HostConfig, Participant, ParticipantApi, ParticipantHost, Plan,
};
use rollpoint_driver::{AgentParticipant, DriverConfig, LaunchEnd, RolloutTask, Runs, Status};
use rollpoint_owner::{LocalOwner, Owner, ResourcesParticipant};
use rollpoint_proto::receipt::{Outcome, Receipt};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_snapshot::StoreChoice;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(240);
const STEPS: u32 = 24;
/// The fake harness's steps so far, one line each.
const PROGRESS: &str = ".fake-harness/progress";

fn task(id: &str) -> RolloutTask {
    let check = format!("test \"$(wc -l < .fake-harness/progress)\" -eq {STEPS}");
    serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["/bin/sh", "-c", check]}},
        "adapter": {"kind": "fake", "steps": STEPS, "tick_ms": 100, "pauses": true}
    }))
    .unwrap()
}

struct Side {
    owner: Arc<LocalOwner>,
    runs: Runs,
    agent: Arc<AgentParticipant>,
    coordinator: Coordinator,
}

async fn side(backend: &Arc<LocalBackend>, run_dir: &std::path::Path) -> Side {
    let owner = Arc::new(LocalOwner::new(Arc::clone(backend) as Arc<dyn Backend>));
    let runs = Runs::new(
        Arc::clone(&owner) as Arc<dyn Owner>,
        DriverConfig::default(),
    )
    .unwrap();
    let agent = Arc::new(AgentParticipant::new(runs.clone(), "agent0"));
    let resources: Arc<dyn Participant> =
        Arc::new(ResourcesParticipant::new(Arc::clone(&owner), "owner0"));
    let controls: Vec<Arc<dyn ParticipantApi>> = vec![
        Arc::new(
            ParticipantHost::new(
                Arc::clone(&agent) as Arc<dyn Participant>,
                HostConfig::new(run_dir),
            )
            .unwrap(),
        ),
        Arc::new(ParticipantHost::new(resources, HostConfig::new(run_dir)).unwrap()),
    ];
    let coordinator = Coordinator::new(controls, CoordinatorConfig::new(run_dir))
        .await
        .unwrap();
    Side {
        owner,
        runs,
        agent,
        coordinator,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn root_checkpoint_continue_stop_and_restore_every_step_exactly_once() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_owned();
    let backend = Arc::new(
        LocalBackend::open(&run_dir.join("owner"), LocalOptions::new(supervisor_bin())).unwrap(),
    );
    let rollouts = ["alpha", "beta"];
    let scope: Vec<rollpoint_checkpoint::AttemptKey> =
        rollouts.iter().map(|r| r.parse().unwrap()).collect();
    tokio::time::timeout(LIMIT, async {
        let first = side(&backend, &run_dir).await;
        let _handles: Vec<_> = rollouts
            .iter()
            .map(|r| first.runs.register(task(r)).unwrap())
            .collect();
        let end = Instant::now() + LIMIT;
        for r in rollouts {
            while lines(&first.owner, r, PROGRESS).await < 3 {
                assert!(Instant::now() < end, "{r} did not start");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        // A checkpoint while they run; they continue in place.
        let ck1 = first
            .coordinator
            .checkpoint(&Plan {
                id: "ck1".into(),
                scope: scope.clone(),
                continues: None,
                stop: false,
            })
            .await
            .unwrap();
        assert_eq!(ck1.doc.id, "ck1");
        let before = lines(&first.owner, "alpha", PROGRESS).await;
        while lines(&first.owner, "alpha", PROGRESS).await <= before {
            assert!(Instant::now() < end, "alpha did not continue after ck1");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // A checkpoint that ends the run: sandboxes are freed after the write.
        first
            .coordinator
            .checkpoint(&Plan {
                id: "ck2".into(),
                scope: scope.clone(),
                continues: None,
                stop: true,
            })
            .await
            .unwrap();
        assert!(
            backend.list().unwrap().sandboxes.is_empty(),
            "stop frees every exported sandbox"
        );
        assert!(run_dir.join("checkpoints/ck2/checkpoint.json").exists());

        // A fresh owner and fresh drivers, as after the process ended.
        let second = side(&backend, &run_dir).await;
        let restored = second
            .coordinator
            .restore("r1", "ck2", &scope)
            .await
            .unwrap();
        assert!(!restored.restored.is_empty());
        let handles = second.agent.take_installed();
        assert_eq!(handles.len(), 2);
        second.coordinator.resume("r1").await.unwrap();
        for handle in handles {
            let result = handle.result().await.unwrap();
            assert_eq!(result.status, Status::Verified, "{result:?}");
            assert_eq!(
                result.reward,
                Some(1.0),
                "every step exactly once: {result:?}"
            );
            assert_eq!(result.attempt, 1, "{result:?}");
            let last = result.launches.last().unwrap();
            assert!(last.resumed, "continued its saved session: {result:?}");
        }
        assert!(backend.list().unwrap().sandboxes.is_empty());
        drop(first);
    })
    .await
    .unwrap();
    backend.sweep_snapshots(&[]).unwrap();
    backend.destroy_all().unwrap();
}

/// The btrfs filesystem of the backend's store (its loop image's mount
/// under `dir`), which holds every sandbox's upper; frozen while this lives
/// until thawed.
struct FrozenStore {
    mnt: PathBuf,
    frozen: bool,
}

impl FrozenStore {
    fn freeze(dir: &Path) -> Self {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mnt = info
            .lines()
            .filter_map(|l| {
                let fields: Vec<&str> = l.split(' ').collect();
                let dash = fields.iter().position(|f| *f == "-")?;
                (fields.get(dash + 1) == Some(&"btrfs")).then(|| PathBuf::from(fields[4]))
            })
            .find(|m| m.starts_with(dir))
            .unwrap_or_else(|| panic!("no btrfs store mounted under {}", dir.display()));
        fsfreeze("-f", &mnt);
        Self { mnt, frozen: true }
    }

    fn thaw(&mut self) {
        if self.frozen {
            fsfreeze("-u", &self.mnt);
            self.frozen = false;
        }
    }
}

impl Drop for FrozenStore {
    fn drop(&mut self) {
        if self.frozen {
            let _ = Command::new("fsfreeze").arg("-u").arg(&self.mnt).status();
        }
    }
}

fn fsfreeze(flag: &str, mnt: &Path) {
    rollpoint_testkit::images::run(Command::new("fsfreeze").arg(flag).arg(mnt));
}

/// Counts 300 steps, 50 ms apart, one line each; `$1` is `fresh` or `resume`.
const WRITER: &str = r#"echo "$1" >> /workspace/launches
n=0; [ -f /workspace/steps ] && n=$(wc -l < /workspace/steps)
while [ "$n" -lt 300 ]; do n=$((n+1)); echo "$n" >> /workspace/steps; sleep 0.05; done"#;

/// Writes once, sleeps through the checkpoint, writes once more.
const SLEEPER: &str = r#"echo "$1" >> /workspace/launches; sleep 45; echo done > /workspace/out"#;

fn command_task(id: &str, script: &str, check: &str) -> RolloutTask {
    let argv = |mode: &str| serde_json::json!(["/bin/sh", "-c", script, id, mode]);
    serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["/bin/sh", "-c", check]}},
        "adapter": {
            "kind": "command", "argv": argv("fresh"), "resume_argv": argv("resume"),
            "pauses": true
        }
    }))
    .unwrap()
}

/// Lines of `path` in the rollout's current sandbox (0 before it is written).
async fn lines(owner: &LocalOwner, rollout: &str, path: &str) -> usize {
    for live in owner.live_sessions() {
        if live.attempt.rollout().as_str() == rollout
            && let Ok(bytes) = owner.download(&live.session, path, 1 << 20).await
        {
            return bytes.iter().filter(|b| **b == b'\n').count();
        }
    }
    0
}

/// The receipts of the one batched pause written under `dir`, once there.
fn pause_batch(dir: &Path) -> Option<Vec<Receipt>> {
    let file = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("-pause.jsonl"))?;
    let text = std::fs::read_to_string(file).ok()?;
    Some(
        text.lines()
            .map(|l| Receipt::decode(l.as_bytes()).unwrap())
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn root_a_launch_the_batch_cannot_freeze_stops_and_relaunches_alone() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let mut options = LocalOptions::new(supervisor_bin());
    options.store.choice = StoreChoice::Btrfs;
    let backend = Arc::new(LocalBackend::open(&run_dir.join("owner"), options).unwrap());
    let Side {
        owner,
        runs,
        coordinator,
        ..
    } = side(&backend, &run_dir).await;
    let scope: Vec<rollpoint_checkpoint::AttemptKey> = ["writer", "sleeper"]
        .iter()
        .map(|r| r.parse().unwrap())
        .collect();

    tokio::time::timeout(LIMIT, async {
        let writer = runs
            .register(command_task(
                "writer",
                WRITER,
                "test \"$(wc -l < steps)\" -eq 300",
            ))
            .unwrap();
        let sleeper = runs
            .register(command_task(
                "sleeper",
                SLEEPER,
                "test \"$(cat launches)\" = fresh && test -f out",
            ))
            .unwrap();
        let end = Instant::now() + LIMIT;
        while lines(&owner, "writer", "/workspace/steps").await < 3
            || lines(&owner, "sleeper", "/workspace/launches").await < 1
        {
            assert!(Instant::now() < end, "the rollouts did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // The writer's next step waits on the frozen filesystem, in D.
        let mut store = FrozenStore::freeze(&run_dir);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let checkpoint = {
            let scope = scope.clone();
            let coordinator = &coordinator;
            async move {
                coordinator
                    .checkpoint(&Plan {
                        id: "ck1".into(),
                        scope,
                        continues: None,
                        stop: false,
                    })
                    .await
            }
        };
        let receipts_dir = run_dir.join("owner/receipts");
        let watch = async {
            // Once the batch has given up on the writer, its stop needs the
            // filesystem thawed to end the blocked write.
            let receipts = loop {
                if let Some(r) = pause_batch(&receipts_dir) {
                    break r;
                }
                assert!(Instant::now() < end, "no batched pause was written");
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            store.thaw();
            receipts
        };
        let (ck1, receipts) = tokio::join!(checkpoint, watch);
        let ck1 = ck1.unwrap();
        assert_eq!(ck1.doc.id, "ck1");
        assert_eq!(receipts.len(), 2, "{receipts:?}");
        let failed: Vec<&Receipt> = receipts
            .iter()
            .filter(|r| r.outcome == Outcome::Failed)
            .collect();
        let confirmed: Vec<&Receipt> = receipts.iter().filter(|r| r.confirmed()).collect();
        assert_eq!((failed.len(), confirmed.len()), (1, 1), "{receipts:?}");
        assert!(
            failed[0].reason.as_deref().unwrap_or("").contains("pid"),
            "the failure names the blocked task: {:?}",
            failed[0]
        );

        let writer = writer.result().await.unwrap();
        let sleeper = sleeper.result().await.unwrap();
        for r in [&writer, &sleeper] {
            assert_eq!(r.status, Status::Verified, "every step exactly once: {r:?}");
        }
        // The writer alone was stopped and relaunched on its saved session.
        assert_eq!(writer.launches.len(), 2, "{writer:?}");
        assert_eq!(writer.launches[0].launch_id, failed[0].launch_id);
        assert_eq!(writer.launches[0].end, Some(LaunchEnd::Interrupted));
        assert!(writer.launches[1].resumed, "{writer:?}");
        // The sleeper was paused in place by the batch and went on.
        assert_eq!(sleeper.launches.len(), 1, "{sleeper:?}");
        assert_eq!(sleeper.launches[0].launch_id, confirmed[0].launch_id);
        assert_eq!(sleeper.launches[0].pauses, 1, "{sleeper:?}");
    })
    .await
    .unwrap();
    backend.sweep_snapshots(&[]).unwrap();
    backend.destroy_all().unwrap();
}
