//! The owner as the checkpoint's `resources` participant.
//!
//! A session serves one attempt, named by its task id (`<rollout>` or
//! `<rollout>-a<N>`, the same key the gateway captures under). Prepare holds
//! new seeds back and waits for seeds already running. Commit snapshots the
//! sandbox of every capturable session in scope (its launches are already
//! parked; the backend freezes the whole sandbox around the snapshot) and
//! exports one session record each. A commit with `stop` then destroys
//! those sandboxes; their snapshots stay for the checkpoint. Restore forks
//! each record's snapshot into a new sandbox serving the next attempt.
//! Sessions whose task asked not to be captured are reported as restarts.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::FutureExt as _;
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use rollpoint_checkpoint::HookError;
use rollpoint_checkpoint::participant::{
    HookResult, Kind, Participant, Readiness, tag_record, untag_decode,
};
use rollpoint_proto::key::AttemptKey;
use serde_json::Value;

use crate::owner::Owner;
use crate::record::branch_session;
use crate::travel::Travel;
use crate::{local::LocalOwner, record::SessionRecord};

/// Forks a restore makes at once.
const RESTORE_PARALLELISM: usize = 16;

/// A [`LocalOwner`] seen by the checkpoint control plane.
#[derive(Debug)]
pub struct ResourcesParticipant {
    owner: Arc<LocalOwner>,
    instance: String,
    /// Sessions exported by the last commit, for a commit with `stop`.
    exported: Mutex<Vec<String>>,
    /// The checkpoint store snapshots also go to, when there is one.
    travel: Option<Arc<Travel>>,
}

impl ResourcesParticipant {
    pub fn new(owner: Arc<LocalOwner>, instance: &str) -> Self {
        Self {
            owner,
            instance: instance.to_owned(),
            exported: Mutex::new(Vec::new()),
            travel: None,
        }
    }

    /// Every snapshot a commit takes is also uploaded through `travel` before the commit's
    /// records are written, and a restore fetches the snapshots this node lacks.
    #[must_use]
    pub fn with_travel(mut self, travel: Arc<Travel>) -> Self {
        self.travel = Some(travel);
        self
    }

    /// Fetches the snapshots of `pending` this node lacks from the checkpoint store.
    async fn fetch(&self, pending: &[(AttemptKey, SessionRecord)]) -> HookResult<()> {
        let Some(travel) = &self.travel else {
            return Ok(());
        };
        let records: Vec<(String, SessionRecord)> = pending
            .iter()
            .map(|(key, record)| (key.rollout().to_string(), record.clone()))
            .collect();
        let fetched = travel
            .fetch(self.owner.backend(), &records)
            .await
            .map_err(|e| HookError::new(format!("fetching snapshots: {e}")))?;
        if fetched > 0 {
            tracing::info!(snapshots = fetched, store = %travel.store().url(), "snapshots fetched from the checkpoint store");
        }
        Ok(())
    }
}

/// The record as JSON, tagged with the attempt it serves.
fn tagged(record: &SessionRecord, key: &AttemptKey) -> HookResult<Value> {
    tag_record(serde_json::to_value(record).map_err(HookError::new)?, key)
}

fn untagged(value: Value) -> HookResult<(AttemptKey, SessionRecord)> {
    untag_decode(value, Kind::Resources, SessionRecord::decode)
}

impl ResourcesParticipant {
    /// Restores every record as its key's sandbox; all or nothing: on any failure the forks
    /// made are destroyed.
    async fn restore_all(
        &self,
        pending: Vec<(AttemptKey, SessionRecord)>,
    ) -> HookResult<Vec<AttemptKey>> {
        // A bounded number at once: a thousand forks started together
        // contend for the same locks and cores and all finish late.
        let forks: Vec<_> =
            futures_util::stream::iter(pending.into_iter().map(|(next, record)| async move {
                let session = record.session.clone();
                (next, session, self.owner.restore(record).await)
            }))
            .buffered(RESTORE_PARALLELISM)
            .collect()
            .await;
        let failed: Vec<String> = forks
            .iter()
            .filter_map(|(next, _, r)| r.as_ref().err().map(|e| format!("{next}: {e}")))
            .collect();
        if !failed.is_empty() {
            for (_, session, r) in &forks {
                if r.is_ok() {
                    let _cleanup = self.owner.close(session).await;
                }
            }
            return Err(HookError::new(failed.join("; ")));
        }
        Ok(forks.into_iter().map(|(next, _, _)| next).collect())
    }
}

impl Participant for ResourcesParticipant {
    fn kind(&self) -> Kind {
        Kind::Resources
    }

    fn instance(&self) -> String {
        self.instance.clone()
    }

    fn close_admission<'a>(&'a self, _checkpoint: &'a str) -> BoxFuture<'a, HookResult<()>> {
        async move {
            self.owner.close_admission();
            Ok(())
        }
        .boxed()
    }

    fn open_admission(&self) -> BoxFuture<'_, HookResult<()>> {
        async move {
            self.owner.open_admission();
            Ok(())
        }
        .boxed()
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        async move {
            let seeds = self.owner.seeds_in_flight();
            let live = self.owner.live_sessions();
            let blockers = (0..seeds).map(|i| format!("seed {} of {seeds} still running", i + 1));
            let restarts = live
                .iter()
                .filter(|s| !s.capturable)
                .map(|s| s.attempt.clone())
                .collect();
            Readiness::from_blockers(blockers)
                .with_count("sessions", live.len() as u64)
                .with_count("seeding", seeds)
                .with_restarts(restarts)
        }
        .boxed()
    }

    fn export<'a>(
        &'a self,
        checkpoint: &'a str,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<Value>>> {
        async move {
            let scope: BTreeSet<&AttemptKey> = scope.iter().collect();
            let chosen: Vec<_> = self
                .owner
                .live_sessions()
                .into_iter()
                .filter(|s| s.capturable)
                .filter(|s| scope.contains(&s.attempt))
                .map(|s| {
                    let key = s.attempt.clone();
                    (s, key)
                })
                .collect();
            // One batch: the backend freezes, syncs and snapshots them all
            // together, so a checkpoint's cost per sandbox stays flat.
            let sessions: Vec<String> = chosen.iter().map(|(s, _)| s.session.clone()).collect();
            let records = self
                .owner
                .snapshot_sessions(&sessions, checkpoint)
                .await
                .map_err(|e| HookError::new(e.to_string()))?;
            if let Some(travel) = &self.travel {
                let pairs: Vec<(String, SessionRecord)> = chosen
                    .iter()
                    .zip(&records)
                    .map(|((_, key), record)| (key.rollout().to_string(), record.clone()))
                    .collect();
                let sent = travel
                    .upload(self.owner.backend(), checkpoint, &self.instance, &pairs)
                    .await
                    .map_err(|e| HookError::new(format!("uploading snapshots: {e}")))?;
                tracing::debug!(
                    checkpoint,
                    snapshots = sent.len(),
                    bytes = sent.iter().map(|s| s.bytes).sum::<u64>(),
                    "snapshots uploaded"
                );
            }
            let mut out = Vec::with_capacity(records.len());
            for ((_, key), record) in chosen.iter().zip(&records) {
                out.push(tagged(record, key)?);
            }
            *self.exported.lock().unwrap_or_else(PoisonError::into_inner) = sessions;
            Ok(out)
        }
        .boxed()
    }

    fn park_exported(&self) -> BoxFuture<'_, HookResult<()>> {
        async move {
            let sessions =
                std::mem::take(&mut *self.exported.lock().unwrap_or_else(PoisonError::into_inner));
            let mut failures = Vec::new();
            for session in sessions {
                if let Err(e) = self.owner.close(&session).await {
                    failures.push(e.to_string());
                }
            }
            if failures.is_empty() {
                Ok(())
            } else {
                Err(HookError::new(failures.join("; ")))
            }
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
            let mut pending = Vec::with_capacity(records.len());
            for value in records {
                let (key, mut record) = untagged(value)?;
                if !scope.contains(&key) {
                    continue;
                }
                let next = key.next();
                record.task.id = next.to_string();
                pending.push((next, record));
            }
            self.fetch(&pending).await?;
            self.restore_all(pending).await
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
            let mut source = Vec::new();
            for value in records {
                let (key, record) = untagged(value)?;
                if &key == from {
                    source.push(record);
                }
            }
            let mut pending = Vec::with_capacity(source.len() * to.len());
            for branch in to {
                let next = branch.next();
                for record in &source {
                    let mut record = record.clone();
                    record.session = branch_session(&record.session, branch.rollout())
                        .map_err(HookError::new)?;
                    record.task.id = next.to_string();
                    pending.push((next.clone(), record));
                }
            }
            self.fetch(&pending).await?;
            self.restore_all(pending).await?;
            // A branch with no sandbox saved (a seed) still continues as its next attempt.
            Ok(to.iter().map(AttemptKey::next).collect())
        }
        .boxed()
    }

    fn retire<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            let retired = keys;
            let mut failures = Vec::new();
            for live in self.owner.live_sessions() {
                let key = &live.attempt;
                let doomed = retired
                    .iter()
                    .any(|r| r.rollout() == key.rollout() && key.attempt() <= r.attempt());
                if doomed && let Err(e) = self.owner.close(&live.session).await {
                    failures.push(format!("{}: {e}", live.attempt));
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
        // Retired sessions are gone already; the owner keeps no refusal list.
        async move { Ok(keys.to_vec()) }.boxed()
    }
}
