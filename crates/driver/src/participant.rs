//! The drivers as the checkpoint's `agent` participant.
//!
//! Prepare asks every run to park ([`Runs::request_park`]): launches pause
//! in place (or stop, the fallback), queued runs stay at their seed, and
//! restarts are reported as such. The cut is ready once every run has
//! answered and none is blocked. Commit exports, per attempt in scope, the
//! run's task and its last bookmark. Resume lets the runs go on: paused
//! launches continue, stopped ones relaunch. Restore continues each
//! exported run as its next attempt; the handles of those runs are kept
//! for the controller to collect results from ([`AgentParticipant::take_installed`]).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_checkpoint::HookError;
use rollpoint_checkpoint::participant::{
    HookResult, Kind, Participant, Readiness, tag_record, untag_record,
};
use rollpoint_proto::key::AttemptKey;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::bookmark::Stage;
use crate::runner::env::capture_key;
use crate::runs::{ParkReport, ParkState, RunHandle, Runs};
use crate::{bookmark::Bookmark, errors::DriverError, task::RolloutTask};

/// A [`Runs`] registry seen by the checkpoint control plane.
#[derive(Debug)]
pub struct AgentParticipant {
    runs: Runs,
    instance: String,
    parking: Mutex<Option<JoinHandle<()>>>,
    report: Arc<Mutex<Option<ParkReport>>>,
    parked: Arc<Notify>,
    installed: Mutex<Vec<RunHandle>>,
}

impl AgentParticipant {
    /// Installs `runs` and keeps their handles for [`AgentParticipant::take_installed`].
    fn install_runs(&self, runs: Vec<(RolloutTask, Bookmark)>) -> HookResult<()> {
        let handles = self.runs.install(runs).map_err(HookError::new)?;
        self.installed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(handles);
        Ok(())
    }

    pub fn new(runs: Runs, instance: &str) -> Self {
        Self {
            runs,
            instance: instance.to_owned(),
            parking: Mutex::new(None),
            report: Arc::new(Mutex::new(None)),
            parked: Arc::new(Notify::new()),
            installed: Mutex::new(Vec::new()),
        }
    }

    /// The runs a restore started, for the controller to await.
    pub fn take_installed(&self) -> Vec<RunHandle> {
        std::mem::take(
            &mut *self
                .installed
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// The attempt key of each registered run, by rollout id.
    fn keys(&self) -> Vec<(String, AttemptKey)> {
        self.runs
            .export()
            .into_iter()
            .filter_map(|(rollout, mark)| {
                let key = capture_key(&rollout, mark.attempt).ok()?;
                Some((rollout, key))
            })
            .collect()
    }
}

fn readiness_of(report: &ParkReport, keys: &[(String, AttemptKey)]) -> Readiness {
    let key_of = |rollout: &str| {
        keys.iter()
            .find(|(r, _)| r == rollout)
            .map(|(_, k)| k.clone())
    };
    let name_of =
        |rollout: &str| key_of(rollout).map_or_else(|| rollout.to_owned(), |k| k.to_string());
    let blockers = report
        .runs
        .iter()
        .filter_map(|(rollout, state)| match state {
            ParkState::Blocked { reason } => Some(format!("{}: {reason}", name_of(rollout))),
            _ => None,
        });
    let restarts = report
        .with(|s| matches!(s, ParkState::Restart))
        .into_iter()
        .filter_map(key_of)
        .collect();
    let count = |pick: fn(&ParkState) -> bool| report.with(pick).len() as u64;
    Readiness::from_blockers(blockers)
        .with_count("paused", count(|s| matches!(s, ParkState::Paused)))
        .with_count("held", count(|s| matches!(s, ParkState::Held)))
        .with_count("stopped", count(|s| matches!(s, ParkState::Stopped)))
        .with_count(
            "at_bookmark",
            count(|s| matches!(s, ParkState::AtBookmark(_))),
        )
        .with_count("queued", count(|s| matches!(s, ParkState::Queued)))
        .with_count("finished", count(|s| matches!(s, ParkState::Finished)))
        .with_restarts(restarts)
}

/// What the agent participant saves of one attempt: its task and its
/// bookmark, each in its own versioned format.
#[derive(Debug, Clone)]
pub struct AgentRecord {
    pub task: RolloutTask,
    pub bookmark: Bookmark,
}

impl AgentRecord {
    /// This record as branch `branch` (`<rollout>~<n>` at the attempt it continues after):
    /// the task and bookmark renamed, the bookmark's session the branch's session
    /// ([`rollpoint_owner::record::branch_session`]), the launch log kept as history.
    pub fn for_branch(&self, branch: &AttemptKey) -> Result<Self, DriverError> {
        let mut out = self.clone();
        out.task.id = Some(branch.rollout().as_str().to_owned());
        out.bookmark.rollout = branch.rollout().as_str().to_owned();
        out.bookmark.attempt = branch.attempt();
        if let Stage::Harness(p) | Stage::Verify(p) = &mut out.bookmark.stage {
            p.session.session =
                rollpoint_owner::record::branch_session(&p.session.session, branch.rollout())
                    .map_err(|e| DriverError::Task {
                        field: "bookmark.session".to_owned(),
                        message: e.to_string(),
                    })?;
        }
        out.task.validate()?;
        Ok(out)
    }

    /// Reads an exported agent record: its attempt key, then its task and
    /// bookmark, each checked by its own reader; errors name the key and
    /// the field.
    pub fn untag(record: Value) -> HookResult<(AttemptKey, Self)> {
        let (key, own) = untag_record(record, Kind::Agent)?;
        let field = |name: &str| {
            own.get(name)
                .ok_or_else(|| HookError::new(format!("{key}: agent record without `{name}`")))
                .and_then(|v| serde_json::to_vec(v).map_err(HookError::new))
        };
        let task = RolloutTask::decode(&field("task")?)
            .map_err(|e| HookError::new(format!("{key}: {e}")))?;
        let bookmark = Bookmark::decode(&field("bookmark")?)
            .map_err(|e| HookError::new(format!("{key}: {e}")))?;
        Ok((key, Self { task, bookmark }))
    }
}

impl Participant for AgentParticipant {
    fn kind(&self) -> Kind {
        Kind::Agent
    }

    fn instance(&self) -> String {
        self.instance.clone()
    }

    fn close_admission<'a>(&'a self, _checkpoint: &'a str) -> BoxFuture<'a, HookResult<()>> {
        async move {
            *self.report.lock().unwrap_or_else(PoisonError::into_inner) = None;
            // The running launches first, as one batch; then the park.
            // Before returning: a restore installs right after this, and an
            // installed run must stay at its bookmark until the checkpoint
            // opens (its forked sandbox may not be registered yet).
            self.runs.pause_batch().await;
            self.runs.begin_park();
            let (runs, report, parked) = (
                self.runs.clone(),
                Arc::clone(&self.report),
                Arc::clone(&self.parked),
            );
            let task = tokio::spawn(async move {
                let answer = runs.request_park().await;
                *report.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
                parked.notify_waiters();
            });
            if let Some(old) = self
                .parking
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .replace(task)
            {
                old.abort();
            }
            Ok(())
        }
        .boxed()
    }

    fn open_admission(&self) -> BoxFuture<'_, HookResult<()>> {
        async move {
            if let Some(task) = self
                .parking
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                task.abort();
            }
            *self.report.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.runs.open().await;
            Ok(())
        }
        .boxed()
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        async move {
            let report = self
                .report
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            match report {
                Some(report) => readiness_of(&report, &self.keys()),
                None if self
                    .parking
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_none() =>
                {
                    Readiness::from_blockers(["admission is open".to_owned()])
                }
                None => Readiness::from_blockers(["runs are parking".to_owned()]),
            }
        }
        .boxed()
    }

    fn changed(&self) -> BoxFuture<'_, ()> {
        async move {
            let _elapsed = tokio::time::timeout(
                rollpoint_checkpoint::participant::DEFAULT_POLL,
                self.parked.notified(),
            )
            .await;
        }
        .boxed()
    }

    fn export<'a>(
        &'a self,
        _checkpoint: &'a str,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<Value>>> {
        async move {
            let scope: BTreeSet<&AttemptKey> = scope.iter().collect();
            let mut out = Vec::new();
            for (task, mark) in self.runs.export_runs() {
                let key = capture_key(task.rollout(), mark.attempt).map_err(HookError::new)?;
                if !scope.contains(&key) {
                    continue;
                }
                let bookmark: Value =
                    serde_json::from_slice(&mark.encode()).map_err(HookError::new)?;
                let task = serde_json::to_value(&task).map_err(HookError::new)?;
                out.push(tag_record(
                    json!({"task": task, "bookmark": bookmark}),
                    &key,
                )?);
            }
            Ok(out)
        }
        .boxed()
    }

    fn install<'a>(
        &'a self,
        _checkpoint: &'a str,
        records: Vec<Value>,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            let mut runs = Vec::with_capacity(records.len());
            for record in records {
                let (key, record) = AgentRecord::untag(record)?;
                if !scope.contains(&key) {
                    continue;
                }
                runs.push((record.task, record.bookmark));
            }
            let next: Vec<AttemptKey> = runs
                .iter()
                .map(|(task, mark)| {
                    capture_key(task.rollout(), mark.attempt.saturating_add(1))
                        .map_err(HookError::new)
                })
                .collect::<HookResult<_>>()?;
            self.install_runs(runs)?;
            Ok(next)
        }
        .boxed()
    }

    fn fork<'a>(
        &'a self,
        _checkpoint: &'a str,
        records: Vec<Value>,
        from: &'a AttemptKey,
        to: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            let mut source = None;
            for record in records {
                let (key, record) = AgentRecord::untag(record)?;
                if &key == from {
                    source = Some(record);
                }
            }
            let source = source
                .ok_or_else(|| HookError::not_found(format!("{from}: no agent record to fork")))?;
            let mut runs = Vec::with_capacity(to.len());
            for branch in to {
                let record = source.for_branch(branch).map_err(HookError::new)?;
                runs.push((record.task, record.bookmark));
            }
            self.install_runs(runs)?;
            Ok(to.iter().map(AttemptKey::next).collect())
        }
        .boxed()
    }

    fn retire<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            let mut failures = Vec::new();
            for key in keys {
                let rollout = key.rollout().as_str();
                if self.runs.status(rollout).is_some()
                    && let Err(e) = self.runs.cancel(rollout).await
                {
                    failures.push(format!("{key}: {e}"));
                }
            }
            if failures.is_empty() {
                Ok(keys.to_vec())
            } else {
                Err(HookError::new(failures.join("; ")))
            }
        }
        .boxed()
    }

    fn forget<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            for key in keys {
                self.runs.forget(key.rollout().as_str());
            }
            Ok(keys.to_vec())
        }
        .boxed()
    }

    fn fleet(
        &self,
        order: rollpoint_checkpoint::participant::FleetOrder,
    ) -> BoxFuture<'_, HookResult<rollpoint_checkpoint::participant::FleetReply>> {
        async move {
            self.runs.set_fleet(order.paused);
            if !order.paused {
                return Ok(rollpoint_checkpoint::participant::FleetReply::default());
            }
            let in_flight = self.runs.in_flight();
            let going_on = self.runs.fleet_parked().await;
            Ok(rollpoint_checkpoint::participant::FleetReply {
                parked: in_flight.saturating_sub(going_on.len()),
                going_on,
                version: None,
            })
        }
        .boxed()
    }
}
