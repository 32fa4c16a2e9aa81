//! Snapshots of a session for a checkpoint, and deleting them.

use std::sync::Arc;

use super::{LocalOwner, MAX_ID};
use crate::errors::OwnerError;
use crate::owner::OwnerResult;
use crate::record::{RECORD_VERSION, SNAPSHOT_SEPARATOR, SessionRecord, snapshot_id};
use crate::task::{OwnerTask, check_id};

impl LocalOwner {
    pub(super) async fn snapshot_impl(
        &self,
        session: &str,
        checkpoint: &str,
    ) -> OwnerResult<SessionRecord> {
        check_id("checkpoint", checkpoint, MAX_ID)?;
        if checkpoint.contains(SNAPSHOT_SEPARATOR) {
            return Err(OwnerError::bad(
                "checkpoint",
                format!("{checkpoint:?} contains {SNAPSHOT_SEPARATOR:?}"),
            ));
        }
        let (sandbox, task) = {
            let sessions = self.sessions();
            let s = sessions.get(session).ok_or_else(|| OwnerError::NotFound {
                session: session.to_owned(),
            })?;
            if !s.task.capture {
                return Err(OwnerError::NotCapturable {
                    session: session.to_owned(),
                });
            }
            if let Some(record) = s.records.get(checkpoint) {
                return Ok(record.clone());
            }
            (s.sandbox.clone(), Arc::clone(&s.task))
        };
        let snap = snapshot_id(checkpoint, session);
        let (id, name, ck) = (sandbox.id.clone(), snap.clone(), checkpoint.to_owned());
        let taken = self
            .on_backend(session, &sandbox.id, "snapshot", move |b| {
                b.snapshot(&id, &name, &ck)
            })
            .await?;
        self.count_snapshot(taken.bytes, taken.duration_ms);
        let record = SessionRecord {
            v: RECORD_VERSION,
            session: session.to_owned(),
            task: OwnerTask::clone(&task),
            snapshot: taken.id,
            sandbox: sandbox.id.clone(),
            spec: taken.spec,
            workdir: sandbox.spec.workdir.clone(),
            checkpoint: checkpoint.to_owned(),
        };
        if let Some(s) = self.sessions().get_mut(session)
            && s.sandbox.id == sandbox.id
        {
            s.records.insert(checkpoint.to_owned(), record.clone());
        }
        Ok(record)
    }

    pub(super) async fn delete_snapshot_impl(&self, snapshot: &str) -> OwnerResult<()> {
        check_id("snapshot", snapshot, 2 * MAX_ID)?;
        let name = snapshot.to_owned();
        let backend = Arc::clone(&self.backend);
        tokio::task::spawn_blocking(move || backend.delete_snapshot(&name))
            .await
            .map_err(|e| OwnerError::Join {
                session: String::new(),
                call: "delete_snapshot",
                message: e.to_string(),
            })?
            .map_err(|source| OwnerError::SnapshotBackend {
                snapshot: snapshot.to_owned(),
                source: Box::new(source),
            })?;
        for s in self.sessions().values_mut() {
            s.records.retain(|_, r| r.snapshot != snapshot);
        }
        Ok(())
    }
}
