//! The agent's control plane as served: the participant's own
//! `LocalControl`, plus two steps: a retire first marks the attempts so
//! their cancelled runs are not taken for results, and a restore then
//! takes over the runs it installed so their results reach the rollout
//! routes.

use std::sync::Arc;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_checkpoint::wire::{
    CommitReply, CommitRequest, KeysReply, KeysRequest, PrepareReply, PrepareRequest, RestoreReply,
    RestoreRequest, ResumeReply, ResumeRequest, Status,
};
use rollpoint_checkpoint::{Control, ControlResult, LocalControl};

use super::Shared;

#[derive(Debug)]
pub struct AgentControl {
    local: LocalControl,
    shared: Arc<Shared>,
}

impl AgentControl {
    pub(super) fn new(local: LocalControl, shared: Arc<Shared>) -> Self {
        Self { local, shared }
    }
}

impl Control for AgentControl {
    fn status(&self) -> BoxFuture<'_, ControlResult<Status>> {
        self.local.status()
    }

    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, ControlResult<PrepareReply>> {
        self.local.prepare(req)
    }

    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, ControlResult<CommitReply>> {
        self.local.commit(req)
    }

    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, ControlResult<RestoreReply>> {
        async move {
            let reply = self.local.restore(req).await?;
            self.shared.adopt_installed(&reply.restored);
            Ok(reply)
        }
        .boxed()
    }

    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, ControlResult<ResumeReply>> {
        self.local.resume(req)
    }

    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, ControlResult<KeysReply>> {
        self.shared.retiring(&req.keys);
        self.local.retire(req)
    }

    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, ControlResult<KeysReply>> {
        self.local.forget(req)
    }
}
