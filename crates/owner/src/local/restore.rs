//! Restoring a session from a checkpoint's record: a fork of its snapshot.

use std::collections::HashMap;
use std::sync::Arc;

use super::{LocalOwner, Session};
use crate::errors::OwnerError;
use crate::owner::{Access, OwnerResult};
use crate::record::SessionRecord;
use crate::record::check_checkpoint;
use crate::task::check_id;

impl LocalOwner {
    pub(super) async fn restore_impl(&self, record: SessionRecord) -> OwnerResult<Access> {
        check_restorable(&record)?;
        let attempt = record.task.attempt()?;
        let session = record.session.clone();
        let new_id = format!("{session}.{}", self.nonce());
        let (snap, id) = (record.snapshot.clone(), new_id.clone());
        let turn = self.start_turn().await;
        let info = self
            .on_backend(&session, &new_id, "fork", move |b| b.fork(&snap, &id))
            .await?;
        drop(turn);
        let access = Access {
            session: session.clone(),
            sandbox: info.id.clone(),
            workdir: record.workdir.clone(),
            root: info.root.clone(),
            control: info.control.clone(),
        };
        let replaced = self.sessions().insert(
            session.clone(),
            Session {
                attempt,
                task: Arc::new(record.task),
                sandbox: info,
                records: HashMap::new(),
            },
        );
        if let Some(old) = replaced
            && old.sandbox.id != access.sandbox
        {
            self.destroy(&session, &old.sandbox.id).await?;
        }
        Ok(access)
    }
}

/// What a record must hold before a fork is made from it.
pub(super) fn check_restorable(record: &SessionRecord) -> OwnerResult<()> {
    check_id(
        "session",
        &record.session,
        rollpoint_proto::limits::MAX_SESSION_ID,
    )?;
    check_id(
        "snapshot",
        &record.snapshot,
        rollpoint_proto::limits::MAX_STORE_ID,
    )?;
    check_checkpoint(&record.checkpoint)?;
    record.task.validate()?;
    if !record.workdir.starts_with('/') {
        return Err(OwnerError::bad("workdir", "is not an absolute path"));
    }
    Ok(())
}
