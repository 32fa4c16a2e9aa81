//! The control verbs, one trait for both sides of the wire: a participant in
//! this process ([`crate::ParticipantHost`]) and one reached over HTTP
//! ([`crate::HttpControl`]). The coordinator drives `Arc<dyn Control>`, so
//! the embedded default needs no HTTP.

use futures_util::future::BoxFuture;

use crate::errors::ControlError;
use crate::wire::{
    CommitReply, CommitRequest, KeysReply, KeysRequest, PrepareReply, PrepareRequest, RestoreReply,
    RestoreRequest, ResumeReply, ResumeRequest, Status,
};

/// Result of a control call.
pub type ControlResult<T> = Result<T, ControlError>;

/// One participant's control plane.
pub trait Control: Send + Sync + std::fmt::Debug {
    fn status(&self) -> BoxFuture<'_, ControlResult<Status>>;
    fn prepare(&self, req: PrepareRequest) -> BoxFuture<'_, ControlResult<PrepareReply>>;
    fn commit(&self, req: CommitRequest) -> BoxFuture<'_, ControlResult<CommitReply>>;
    fn restore(&self, req: RestoreRequest) -> BoxFuture<'_, ControlResult<RestoreReply>>;
    fn resume(&self, req: ResumeRequest) -> BoxFuture<'_, ControlResult<ResumeReply>>;
    fn retire(&self, req: KeysRequest) -> BoxFuture<'_, ControlResult<KeysReply>>;
    fn forget(&self, req: KeysRequest) -> BoxFuture<'_, ControlResult<KeysReply>>;
}
