//! Restore order inside one process: the coordinator sends restore to every
//! participant at once, but a run the agent installs looks up its session
//! in the owner at once, before it parks. So the agent's restore waits here
//! until the resources' restore of the same id has returned (its forks
//! exist, or it failed and the coordinator retires everything).

use std::sync::Arc;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_checkpoint::wire::{
    CommitReply, CommitRequest, KeysReply, KeysRequest, PrepareReply, PrepareRequest, RestoreReply,
    RestoreRequest, ResumeReply, ResumeRequest, Status,
};
use rollpoint_checkpoint::{Control, ControlResult};
use tokio::sync::watch;

/// A control that either announces its restores (`done`) or waits for
/// the announcement of the same restore id before its own (`after`).
#[derive(Debug)]
pub struct Ordered {
    inner: Arc<dyn Control>,
    done: Option<watch::Sender<Option<String>>>,
    after: Option<watch::Receiver<Option<String>>>,
}

/// Wraps `first` and `then` so `then`'s restore starts once `first`'s has
/// returned.
pub fn ordered(first: Arc<dyn Control>, then: Arc<dyn Control>) -> (Ordered, Ordered) {
    let (tx, rx) = watch::channel(None);
    (
        Ordered {
            inner: first,
            done: Some(tx),
            after: None,
        },
        Ordered {
            inner: then,
            done: None,
            after: Some(rx),
        },
    )
}

impl Control for Ordered {
    fn status(&self) -> BoxFuture<'_, ControlResult<Status>> {
        self.inner.status()
    }
    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, ControlResult<PrepareReply>> {
        self.inner.prepare(req)
    }
    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, ControlResult<CommitReply>> {
        self.inner.commit(req)
    }
    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, ControlResult<RestoreReply>> {
        async move {
            let id = req.checkpoint.clone();
            if let Some(rx) = &self.after {
                let mut rx = rx.clone();
                // The sender lives as long as this pair; a closed channel
                // only means the process is ending.
                let _done_or_closed = rx.wait_for(|d| d.as_deref() == Some(id.as_str())).await;
            }
            let reply = self.inner.restore(req).await;
            if let Some(tx) = &self.done {
                tx.send_replace(Some(id));
            }
            reply
        }
        .boxed()
    }
    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, ControlResult<ResumeReply>> {
        self.inner.resume(req)
    }
    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, ControlResult<KeysReply>> {
        self.inner.retire(req)
    }
    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, ControlResult<KeysReply>> {
        self.inner.forget(req)
    }
}
