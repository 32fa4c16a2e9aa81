//! The agent's control plane as served: the participant's own
//! `ParticipantHost`, plus a few steps of its own: a retire first marks the
//! attempts so their cancelled runs are not taken for results; a restore
//! then takes over the runs it installed so their results reach the
//! rollout routes; prepare and restore hold back forgetting finished
//! rollouts, and resume lets it go on.

use std::sync::Arc;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_checkpoint::wire::{
    CommitReply, CommitRequest, KeysReply, KeysRequest, PrepareReply, PrepareRequest, RestoreReply,
    RestoreRequest, ResumeReply, ResumeRequest, Status,
};
use rollpoint_checkpoint::{Control, ControlResult, ParticipantHost};

use super::Shared;

#[derive(Debug)]
pub struct AgentControl {
    shared: Arc<Shared>,
}

impl AgentControl {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn local(&self) -> &ParticipantHost {
        &self.shared.local
    }
}

impl Control for AgentControl {
    fn status(&self) -> BoxFuture<'_, ControlResult<Status>> {
        self.local().status()
    }

    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, ControlResult<PrepareReply>> {
        self.shared.forgetting.opened();
        self.local().prepare(req)
    }

    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, ControlResult<CommitReply>> {
        self.local().commit(req)
    }

    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, ControlResult<RestoreReply>> {
        async move {
            self.shared.forgetting.opened();
            let reply = self.local().restore(req).await?;
            self.shared.adopt_installed(&reply.restored);
            Ok(reply)
        }
        .boxed()
    }

    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, ControlResult<ResumeReply>> {
        async move {
            let reply = self.local().resume(req).await?;
            let keys = self.shared.forgetting.closed();
            self.shared.forgetting.flush(self.local(), keys).await;
            Ok(reply)
        }
        .boxed()
    }

    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, ControlResult<KeysReply>> {
        self.shared.retiring(&req.keys);
        self.local().retire(req)
    }

    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, ControlResult<KeysReply>> {
        self.local().forget(req)
    }
}
