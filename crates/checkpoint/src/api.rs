//! The control verbs, one trait for both sides of the wire: a participant in
//! this process ([`crate::ParticipantHost`]) and one reached over HTTP
//! ([`crate::HttpParticipant`]). The coordinator drives `Arc<dyn ParticipantApi>`, so
//! the embedded default needs no HTTP.

use futures_util::future::BoxFuture;

use crate::errors::CallError;
use crate::wire::{
    CommitReply, CommitRequest, FleetReply, FleetRequest, KeysReply, KeysRequest, PrepareReply,
    PrepareRequest, RestoreReply, RestoreRequest, ResumeReply, ResumeRequest, Status,
};

/// Result of a control call.
pub type CallResult<T> = Result<T, CallError>;

/// One participant's control plane.
pub trait ParticipantApi: Send + Sync + std::fmt::Debug {
    fn status(&self) -> BoxFuture<'_, CallResult<Status>>;
    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, CallResult<PrepareReply>>;
    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, CallResult<CommitReply>>;
    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, CallResult<RestoreReply>>;
    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, CallResult<ResumeReply>>;
    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>>;
    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, CallResult<KeysReply>>;
    fn fleet(&self, req: FleetRequest) -> BoxFuture<'_, CallResult<FleetReply>>;
}
