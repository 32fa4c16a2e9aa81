//! Checkpoints end to end in one process (root): the drivers (agent) and
//! the owner (resources) under the checkpoint coordinator, over real
//! sandboxes. A checkpoint taken while harnesses run lets them continue in
//! place; a checkpoint with `stop` ends the run; a fresh owner and fresh
//! drivers restore from it, each rollout continues as its next attempt in a
//! fork of its snapshot, and every step of every harness is done exactly
//! once (the verify command counts them).
#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rollpoint_checkpoint::{
    Coordinator, CoordinatorConfig, HostConfig, Participant, ParticipantApi, ParticipantHost, Plan,
};
use rollpoint_driver::{AgentParticipant, DriverConfig, RolloutTask, Runs, Status};
use rollpoint_owner::{LocalOwner, Owner, ResourcesParticipant};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(240);
const STEPS: u32 = 24;

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

/// Steps the rollout's harness has made so far.
async fn steps(owner: &LocalOwner, rollout: &str) -> usize {
    for live in owner.live_sessions() {
        if live.attempt.rollout().as_str() == rollout
            && let Ok(bytes) = owner
                .download(&live.session, ".fake-harness/progress", 1 << 20)
                .await
        {
            return bytes.iter().filter(|b| **b == b'\n').count();
        }
    }
    0
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
            while steps(&first.owner, r).await < 3 {
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
        let before = steps(&first.owner, "alpha").await;
        while steps(&first.owner, "alpha").await <= before {
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
