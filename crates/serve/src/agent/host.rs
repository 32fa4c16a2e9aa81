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
    CommitReply, CommitRequest, FleetReply, FleetRequest, KeysReply, KeysRequest, PrepareReply,
    PrepareRequest, RestoreReply, RestoreRequest, ResumeReply, ResumeRequest, Status,
};
use rollpoint_checkpoint::{CallResult, ParticipantApi, ParticipantHost};

use super::Shared;

#[derive(Debug)]
pub struct AgentHost {
    shared: Arc<Shared>,
}

impl AgentHost {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn local(&self) -> &ParticipantHost {
        &self.shared.local
    }
}

impl ParticipantApi for AgentHost {
    fn status(&self) -> BoxFuture<'_, CallResult<Status>> {
        self.local().status()
    }

    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, CallResult<PrepareReply>> {
        self.shared.forgetting.opened();
        self.local().prepare(req)
    }

    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, CallResult<CommitReply>> {
        self.local().commit(req)
    }

    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, CallResult<RestoreReply>> {
        async move {
            self.shared.forgetting.opened();
            let reply = self.local().restore(req).await?;
            self.shared.adopt_installed(&reply.restored);
            Ok(reply)
        }
        .boxed()
    }

    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, CallResult<ResumeReply>> {
        async move {
            let reply = self.local().resume(req).await?;
            let keys = self.shared.forgetting.closed();
            self.shared.forgetting.flush(self.local(), keys).await;
            Ok(reply)
        }
        .boxed()
    }

    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>> {
        self.shared.retiring(&req.keys);
        self.local().retire(req)
    }

    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>> {
        self.local().forget(req)
    }

    fn fleet(&self, req: FleetRequest) -> BoxFuture<'_, CallResult<FleetReply>> {
        self.local().fleet(req)
    }
}
