//! The coordinator's results and errors in the HTTP contract's terms
//! ([`rollpoint_api`]), for every surface that drives a coordinator: the
//! `serve coordinator` routes and a run's control endpoint.

use std::time::Duration;

use rollpoint_api::wire::{CheckpointReply, MemberRecords, PhaseTimings, WIRE_VERSION};
use rollpoint_api::{ApiError, ErrorCode};

use crate::coordinator::Checkpointed;
use crate::errors::{CallError, Code, CoordinatorError};

impl Checkpointed {
    /// The reply for this checkpoint, which took `total` in all.
    pub fn reply(&self, total: Duration) -> CheckpointReply {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let t = self.timings;
        CheckpointReply {
            v: WIRE_VERSION,
            id: self.doc.id.clone(),
            scope: self.doc.scope.clone(),
            restarts: self.doc.restarts.clone(),
            timings: PhaseTimings {
                prepare_ms: ms(t.prepare),
                commit_ms: ms(t.commit),
                publish_ms: ms(t.publish),
                held_ms: ms(t.held),
                resume_ms: ms(t.resume),
                total_ms: ms(total),
            },
            participants: self
                .doc
                .participants
                .iter()
                .map(|m| MemberRecords {
                    kind: m.kind,
                    instance: m.instance.clone(),
                    record_count: m.manifest.record_count,
                })
                .collect(),
            pruned: self.pruned.clone(),
        }
    }
}

/// A coordinator failure as a reply: a restore's move naming a participant
/// it cannot move is unprocessable, naming `moves[i].from` or `.to`; a stage
/// not ready or a published checkpoint of other participants is a conflict; a participant's refusal
/// keeps its own kind (a stale or conflicting checkpoint id is a conflict, a
/// share that is not there is not found); the rest a failure.
impl From<&CoordinatorError> for ApiError {
    fn from(e: &CoordinatorError) -> Self {
        let mut reply = Self::new(error_code(e), e.to_string());
        if let CoordinatorError::BadMove { index, field, .. } = e {
            reply.field = Some(format!("moves[{index}].{field}"));
        }
        reply
    }
}

impl From<CoordinatorError> for ApiError {
    fn from(e: CoordinatorError) -> Self {
        Self::from(&e)
    }
}

fn error_code(e: &CoordinatorError) -> ErrorCode {
    match e {
        CoordinatorError::NotPrepared { .. } => ErrorCode::NotPrepared,
        CoordinatorError::BadMove { .. } => ErrorCode::Unprocessable,
        CoordinatorError::Members { .. } => ErrorCode::Conflict,
        CoordinatorError::Call { source, .. } | CoordinatorError::Fork { source, .. } => {
            call_code(source.code)
        }
        CoordinatorError::Store { source, .. } => call_code(CallError::store_code(source)),
        // One kind when every participant refused alike.
        CoordinatorError::Several { failures, .. } => {
            let mut codes = failures.iter().map(error_code);
            match codes.next() {
                Some(first) if codes.all(|c| c == first) => first,
                _ => ErrorCode::Failed,
            }
        }
        CoordinatorError::Discover { .. }
        | CoordinatorError::Duplicate { .. }
        | CoordinatorError::PublishedNotResumed { .. } => ErrorCode::Failed,
    }
}

/// The reply kind of a participant's error code.
fn call_code(code: Code) -> ErrorCode {
    match code {
        Code::BadRequest => ErrorCode::BadRequest,
        Code::Unauthorized => ErrorCode::Unauthorized,
        Code::TooLarge => ErrorCode::TooLarge,
        Code::NotFound => ErrorCode::NotFound,
        Code::StaleCheckpoint
        | Code::CheckpointConflict
        | Code::InvalidPhase
        | Code::RestartInScope => ErrorCode::Conflict,
        Code::DeadlineExceeded
        | Code::HookFailed
        | Code::Storage
        | Code::Transport
        | Code::Remote => ErrorCode::Failed,
    }
}

impl From<CallError> for ApiError {
    fn from(e: CallError) -> Self {
        Self {
            code: call_code(e.code),
            message: e.message,
            field: e.field,
        }
    }
}
