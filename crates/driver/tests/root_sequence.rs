//! Random sequences of start, checkpoint, crash or stop followed by a
//! resume from the latest checkpoint, and retire, over real sandboxes
//! (root), for several fixed seeds of 30 operations, with the drivers
//! (agent) and the owner (resources) under the coordinator in one process.
//! After every step: every published checkpoint verifies (digests, counts,
//! versions), no participant is left with a checkpoint open, and no live
//! sandbox lacks a run that is still going. At the end: every rollout that
//! finished did each of its steps exactly once, and after the sweep no
//! sandbox, mount, cgroup or snapshot is left.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rollpoint_checkpoint::{
    Coordinator, CoordinatorConfig, HostConfig, Participant, ParticipantApi, ParticipantHost,
    Phase, Plan, store,
};
use rollpoint_driver::{AgentParticipant, DriverConfig, RolloutTask, RunHandle, Runs, Status};
use rollpoint_owner::{LocalOwner, Owner, ResourcesParticipant};
use rollpoint_sandbox::Backend;
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_testkit::{mounts_under, require_root, sandbox_cgroups, supervisor_bin};

const STEPS: u32 = 8;
const OPS: usize = 30;

fn task(id: &str) -> RolloutTask {
    let check = format!("test \"$(wc -l < .fake-harness/progress)\" -eq {STEPS}");
    serde_json::from_value(serde_json::json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["/bin/sh", "-c", check]}},
        "adapter": {"kind": "fake", "steps": STEPS, "tick_ms": 60, "pauses": true}
    }))
    .unwrap()
}

/// xorshift64: a fixed sequence per seed, no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % u64::try_from(n).unwrap()).unwrap()
    }
}

/// One incarnation of the process: owner, drivers and their controls.
struct Side {
    runs: Runs,
    agent: Arc<AgentParticipant>,
    controls: Vec<Arc<dyn ParticipantApi>>,
    coordinator: Coordinator,
}

async fn side(backend: &Arc<LocalBackend>, run_dir: &Path) -> Side {
    let owner = Arc::new(LocalOwner::new(Arc::clone(backend) as Arc<dyn Backend>));
    let runs = Runs::new(
        Arc::clone(&owner) as Arc<dyn Owner>,
        DriverConfig {
            slots: 16,
            ..DriverConfig::default()
        },
    )
    .unwrap();
    let agent = Arc::new(AgentParticipant::new(runs.clone(), "agent0"));
    let parts: [Arc<dyn Participant>; 2] = [
        Arc::clone(&agent) as Arc<dyn Participant>,
        Arc::new(ResourcesParticipant::new(owner, "owner0")),
    ];
    let controls: Vec<Arc<dyn ParticipantApi>> = parts
        .into_iter()
        .map(|p| {
            Arc::new(ParticipantHost::new(p, HostConfig::new(run_dir)).unwrap())
                as Arc<dyn ParticipantApi>
        })
        .collect();
    let coordinator = Coordinator::new(controls.clone(), CoordinatorConfig::new(run_dir))
        .await
        .unwrap();
    Side {
        runs,
        agent,
        controls,
        coordinator,
    }
}

type Results = Arc<Mutex<BTreeMap<String, Vec<(u32, Status, Option<f64>)>>>>;

fn collect(results: &Results, handle: RunHandle) {
    let results = Arc::clone(results);
    tokio::spawn(async move {
        if let Ok(r) = handle.result().await {
            results
                .lock()
                .unwrap()
                .entry(r.rollout.clone())
                .or_default()
                .push((r.attempt, r.status, r.reward));
        }
    });
}

/// Attempt keys of the runs still going.
fn in_flight(runs: &Runs) -> Vec<rollpoint_checkpoint::AttemptKey> {
    runs.export_runs()
        .into_iter()
        .filter(|(_, mark)| mark.next() != rollpoint_driver::Next::Return)
        .filter(|(task, _)| {
            !matches!(
                runs.status(task.rollout()),
                Some(rollpoint_driver::RunStatus::Done) | None
            )
        })
        .map(|(task, mark)| {
            rollpoint_driver::runner::capture_key(task.rollout(), mark.attempt).unwrap()
        })
        .collect()
}

async fn check_invariants(side: &Side, backend: &LocalBackend, run_dir: &Path, step: &str) {
    if let Ok(entries) = std::fs::read_dir(store::checkpoints_dir(run_dir)) {
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            if entry.path().join("checkpoint.json").exists() {
                store::verify(run_dir, &id)
                    .unwrap_or_else(|e| panic!("{step}: checkpoint {id} does not verify: {e}"));
            }
        }
    }
    for control in &side.controls {
        let status = control.status().await.unwrap();
        assert_eq!(status.phase, Phase::Idle, "{step}: {status:?}");
    }
    let going: BTreeSet<_> = in_flight(&side.runs).into_iter().collect();
    let live = backend.list().unwrap().sandboxes;
    assert!(
        live.len() <= going.len(),
        "{step}: sandboxes {live:?} outnumber the runs going {going:?}"
    );
}

/// What one sequence did: crashes, restored runs, retires, checkpoints.
#[derive(Debug, Default, Clone, Copy)]
struct Done {
    crashes: usize,
    restored: usize,
    retires: usize,
    checkpoints: usize,
}

async fn sequence(seed: u64) -> Done {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_owned();
    let backend = Arc::new(
        LocalBackend::open(&run_dir.join("owner"), LocalOptions::new(supervisor_bin())).unwrap(),
    );
    let results: Results = Arc::default();
    let mut rng = Rng(seed);
    let mut current = side(&backend, &run_dir).await;
    let mut started = 0usize;
    let mut checkpoints = 0usize;
    let mut done = Done::default();
    for op in 0..OPS {
        let step = format!("seed {seed} op {op}");
        let choice = rng.below(10);
        match choice {
            0..=2 => {
                let id = format!("s{seed}x{started}");
                started += 1;
                collect(&results, current.runs.register(task(&id)).unwrap());
            }
            3..=5 => {
                let scope = in_flight(&current.runs);
                let id = format!("ck{checkpoints}");
                checkpoints += 1;
                current
                    .coordinator
                    .checkpoint(&Plan {
                        id,
                        scope,
                        continues: None,
                        stop: false,
                    })
                    .await
                    .unwrap_or_else(|e| panic!("{step}: checkpoint: {e}"));
                done.checkpoints += 1;
            }
            6..=8 => {
                if choice == 6 {
                    // Crash: every run is killed with its sandbox, as a
                    // sweep after a dead process would; nothing is saved
                    // beyond the published checkpoints.
                    for (task, _) in current.runs.export_runs() {
                        let _ = current.runs.cancel(task.rollout()).await;
                    }
                    assert!(
                        backend.list().unwrap().sandboxes.is_empty(),
                        "{step}: sandboxes outlived the crash"
                    );
                    done.crashes += 1;
                } else {
                    // A stop: checkpoint with `stop` (sandboxes freed), and
                    // the process ends.
                    let scope = in_flight(&current.runs);
                    let id = format!("ck{checkpoints}");
                    checkpoints += 1;
                    current
                        .coordinator
                        .checkpoint(&Plan {
                            id,
                            scope,
                            continues: None,
                            stop: true,
                        })
                        .await
                        .unwrap_or_else(|e| panic!("{step}: stop: {e}"));
                    done.checkpoints += 1;
                }
                // The next process resumes from the latest checkpoint.
                current = side(&backend, &run_dir).await;
                if let Some(latest) = store::latest(&run_dir).unwrap() {
                    let doc = store::read_checkpoint(&run_dir, &latest).unwrap();
                    // Finished: ended by itself (a crash's cancel does not count).
                    let finished: BTreeSet<String> = results
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|(_, ends)| ends.iter().any(|e| e.1 != Status::Cancelled))
                        .map(|(r, _)| r.clone())
                        .collect();
                    let scope: Vec<_> = doc
                        .scope
                        .iter()
                        .filter(|k| !finished.contains(k.rollout().as_str()))
                        .cloned()
                        .collect();
                    let id = format!("rs{op}");
                    current
                        .coordinator
                        .restore(&id, &latest, &scope)
                        .await
                        .unwrap_or_else(|e| panic!("{step}: restore: {e}"));
                    for handle in current.agent.take_installed() {
                        collect(&results, handle);
                        done.restored += 1;
                    }
                    current.coordinator.resume(&id).await.unwrap();
                }
            }
            _ => {
                let going = in_flight(&current.runs);
                if !going.is_empty() {
                    let key = going[rng.below(going.len())].clone();
                    current
                        .coordinator
                        .retire(std::slice::from_ref(&key))
                        .await
                        .unwrap_or_else(|e| panic!("{step}: retire {key}: {e}"));
                    done.retires += 1;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(rng.below(250)).unwrap(),
        ))
        .await;
        check_invariants(&current, &backend, &run_dir, &step).await;
    }
    // Let what is still going finish, then check every finished rollout.
    for _ in 0..600 {
        if in_flight(&current.runs).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (rollout, ends) in results.lock().unwrap().iter() {
        for (attempt, status, reward) in ends {
            if *status == Status::Verified {
                assert_eq!(
                    *reward,
                    Some(1.0),
                    "seed {seed}: {rollout} attempt {attempt} did a step twice or skipped one"
                );
            }
        }
    }
    for (task, _) in current.runs.export_runs() {
        let _ = current.runs.cancel(task.rollout()).await;
    }
    backend.destroy_all().unwrap();
    backend.sweep_orphans().unwrap();
    backend.sweep_snapshots(&[]).unwrap();
    let listing = backend.list().unwrap();
    assert!(
        listing.sandboxes.is_empty() && listing.snapshots.is_empty(),
        "{listing:?}"
    );
    let mounts = mounts_under(&run_dir.join("owner/sandboxes"));
    assert!(mounts.is_empty(), "seed {seed}: mounts left: {mounts:?}");
    let tag = format!("-s{seed}x");
    let left = sandbox_cgroups(|name| name.contains(&tag));
    assert!(left.is_empty(), "seed {seed}: cgroups left: {left:?}");
    done
}

#[tokio::test(flavor = "multi_thread")]
async fn root_random_sequences_keep_every_invariant() {
    require_root();
    let mut total = Done::default();
    for seed in [
        0x9e37_79b9_7f4a_7c15,
        0x2545_f491_4f6c_dd1d,
        0x1234_5678_9abc_def1,
        0x0bad_cafe_f00d_d00d,
    ] {
        let d = tokio::time::timeout(Duration::from_secs(600), sequence(seed))
            .await
            .unwrap_or_else(|_| panic!("seed {seed:#x} hung"));
        total.crashes += d.crashes;
        total.restored += d.restored;
        total.retires += d.retires;
        total.checkpoints += d.checkpoints;
    }
    // The seeds are fixed: they must keep exercising every kind of step.
    assert!(
        total.crashes > 0 && total.restored > 0 && total.retires > 0 && total.checkpoints > 0,
        "{total:?}"
    );
}
