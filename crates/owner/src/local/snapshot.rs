//! Snapshots of a session for a checkpoint, and deleting them.

use std::sync::Arc;

use super::LocalOwner;
use crate::errors::OwnerError;
use crate::owner::OwnerResult;
use crate::record::{RECORD_VERSION, SessionRecord, check_checkpoint, snapshot_id};
use crate::task::{OwnerTask, check_id};

impl LocalOwner {
    pub(super) async fn snapshot_impl(
        &self,
        session: &str,
        checkpoint: &str,
    ) -> OwnerResult<SessionRecord> {
        let mut records = self
            .snapshot_sessions(&[session.to_owned()], checkpoint)
            .await?;
        records.pop().ok_or_else(|| OwnerError::NotFound {
            session: session.to_owned(),
        })
    }

    /// Snapshots every session of `sessions` for `checkpoint` as one batch
    /// of the backend (each step for all sandboxes before the next), all or
    /// nothing; a session already snapshotted for it keeps its record.
    pub async fn snapshot_sessions(
        &self,
        sessions: &[String],
        checkpoint: &str,
    ) -> OwnerResult<Vec<SessionRecord>> {
        check_checkpoint(checkpoint)?;
        let mut done: Vec<Option<SessionRecord>> = Vec::with_capacity(sessions.len());
        let mut todo = Vec::new();
        {
            let table = self.sessions();
            for session in sessions {
                let s = table.get(session).ok_or_else(|| OwnerError::NotFound {
                    session: session.clone(),
                })?;
                if !s.task.capture {
                    return Err(OwnerError::NotCapturable {
                        session: session.clone(),
                    });
                }
                if let Some(record) = s.records.get(checkpoint) {
                    done.push(Some(record.clone()));
                    continue;
                }
                done.push(None);
                todo.push((session.clone(), s.sandbox.clone(), Arc::clone(&s.task)));
            }
        }
        let items: Vec<(String, String)> = todo
            .iter()
            .map(|(session, sandbox, _)| (sandbox.id.clone(), snapshot_id(checkpoint, session)))
            .collect();
        let ck = checkpoint.to_owned();
        let what = format!("{} sessions of checkpoint {checkpoint}", todo.len());
        let taken = if items.is_empty() {
            Vec::new()
        } else {
            self.on_backend(&what, "-", "snapshot", move |b| b.snapshot_all(&items, &ck))
                .await?
        };
        let mut fresh = todo
            .into_iter()
            .zip(taken)
            .map(|((session, sandbox, task), taken)| {
                self.count_snapshot(taken.bytes, taken.duration_ms);
                let record = SessionRecord {
                    v: RECORD_VERSION,
                    session: session.clone(),
                    task: OwnerTask::clone(&task),
                    snapshot: taken.id,
                    sandbox: sandbox.id.clone(),
                    spec: taken.spec,
                    workdir: sandbox.spec.workdir.clone(),
                    checkpoint: checkpoint.to_owned(),
                };
                if let Some(s) = self.sessions().get_mut(&session)
                    && s.sandbox.id == sandbox.id
                {
                    s.records.insert(checkpoint.to_owned(), record.clone());
                }
                record
            });
        Ok(done
            .into_iter()
            .filter_map(|d| d.or_else(|| fresh.next()))
            .collect())
    }

    pub(super) async fn delete_snapshot_impl(&self, snapshot: &str) -> OwnerResult<()> {
        check_id("snapshot", snapshot, rollpoint_proto::limits::MAX_STORE_ID)?;
        let name = snapshot.to_owned();
        let backend = Arc::clone(&self.backend);
        tokio::task::spawn_blocking(move || backend.delete_snapshot(&name))
            .await
            .map_err(|source| OwnerError::Join {
                session: String::new(),
                call: "delete_snapshot",
                source,
            })?
            .map_err(|source| match source.missing_snapshot() {
                Some(_) => OwnerError::NoSnapshot {
                    snapshot: snapshot.to_owned(),
                },
                None => OwnerError::SnapshotBackend {
                    snapshot: snapshot.to_owned(),
                    source: Box::new(source),
                },
            })?;
        for s in self.sessions().values_mut() {
            s.records.retain(|_, r| r.snapshot != snapshot);
        }
        Ok(())
    }
}
