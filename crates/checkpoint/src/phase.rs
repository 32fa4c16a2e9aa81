//! The phase machine, pure: it decides what a control call may do and
//! records results, and performs nothing. The effectful side
//! ([`crate::ParticipantHost`]) asks it before each hook and tells it after.
//!
//! `idle -> preparing -> prepared -> committed`, `idle -> restored`, and any
//! phase back to `idle` on resume (which also aborts). Calls are idempotent
//! per checkpoint id: a repeated call replays the recorded result, the same
//! id with other arguments and a second id while one is active are refused
//! as conflicts, and an id resumed recently (the last [`RESUMED_KEPT`]) is
//! refused as stale, so a late prepare cannot reopen a finished checkpoint.

use std::collections::VecDeque;

use crate::errors::{CallError, Code};
use crate::participant::AttemptKey;
use crate::wire::{CommitReply, PrepareReply, RestoreReply};

/// How many resumed ids are remembered and refused.
pub const RESUMED_KEPT: usize = 64;

pub use rollpoint_api::Phase;

/// What a prepare call must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareStep {
    /// A new checkpoint: close admission, then wait for readiness.
    Close,
    /// Already preparing this id: wait for readiness again.
    Wait,
    /// Already prepared this id: the recorded reply.
    Replay(PrepareReply),
}

/// What a commit call must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitStep {
    Export,
    Replay(CommitReply),
}

/// What a restore call must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreStep {
    Install,
    Replay(RestoreReply),
}

/// What a resume call must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeStep {
    /// Resumed already: nothing to do.
    AlreadyResumed,
    /// Nothing was active here (prepare never reached this participant):
    /// the id is now remembered, so a late prepare for it is refused.
    Remembered,
    /// Open admission, then call [`Machine::resumed`].
    Open,
}

/// The identity of a commit's arguments, to tell a retry from a conflict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitArgs {
    pub scope: Vec<AttemptKey>,
    pub stop: bool,
}

/// The identity of a restore's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreArgs {
    pub source: String,
    pub scope: Vec<AttemptKey>,
    /// Set for a fork (see [`crate::wire::ForkSpec`]).
    pub fork: Option<crate::wire::ForkSpec>,
    /// The instance whose share is installed, when not this participant's own.
    pub from_instance: Option<String>,
}

/// The phase, the active checkpoint and the results recorded for it.
#[derive(Debug, Clone)]
pub struct Machine {
    phase: Phase,
    active: Option<String>,
    resumed: VecDeque<String>,
    prepared: Option<PrepareReply>,
    committed: Option<(CommitArgs, CommitReply)>,
    restored: Option<(RestoreArgs, RestoreReply)>,
    /// Bumped whenever a checkpoint starts or ends, so a lease watcher or a
    /// readiness wait can tell whether the checkpoint it serves is over.
    epoch: u64,
}

impl Default for Machine {
    fn default() -> Self {
        Self::new()
    }
}

impl Machine {
    pub fn new() -> Self {
        Self {
            phase: Phase::Idle,
            active: None,
            resumed: VecDeque::with_capacity(RESUMED_KEPT),
            prepared: None,
            committed: None,
            restored: None,
            epoch: 0,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn active(&self) -> Option<&str> {
        self.active.as_deref()
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether `id` is among the recently resumed ids.
    pub fn was_resumed(&self, id: &str) -> bool {
        self.resumed.iter().any(|r| r == id)
    }

    fn invalid(&self, action: &str, id: &str) -> CallError {
        CallError::new(
            Code::InvalidPhase,
            format!(
                "{action} of checkpoint {id} is not allowed in phase {}{}",
                self.phase,
                self.active
                    .as_deref()
                    .map(|a| format!(" (checkpoint {a})"))
                    .unwrap_or_default()
            ),
        )
    }

    /// Refuses a stale id or one that is not the active one.
    fn admit(&self, id: &str) -> Result<(), CallError> {
        if self.was_resumed(id) {
            return Err(CallError::stale(id));
        }
        match self.active.as_deref() {
            Some(active) if active != id => Err(CallError::new(
                Code::CheckpointConflict,
                format!(
                    "checkpoint {id} refused: checkpoint {active} is active ({})",
                    self.phase
                ),
            )),
            _ => Ok(()),
        }
    }

    fn start(&mut self, id: &str, phase: Phase) {
        self.active = Some(id.to_owned());
        self.phase = phase;
        self.epoch += 1;
    }

    pub fn prepare(&mut self, id: &str) -> Result<PrepareStep, CallError> {
        self.admit(id)?;
        match (self.phase, self.active.is_some()) {
            (Phase::Idle, false) => {
                self.start(id, Phase::Preparing);
                Ok(PrepareStep::Close)
            }
            (Phase::Preparing, true) => Ok(PrepareStep::Wait),
            (Phase::Prepared | Phase::Committed, true) => match &self.prepared {
                Some(reply) => Ok(PrepareStep::Replay(reply.clone())),
                None => Err(self.invalid("prepare", id)),
            },
            _ => Err(self.invalid("prepare", id)),
        }
    }

    /// Closing admission failed: the checkpoint never started here.
    pub fn prepare_failed(&mut self, id: &str) {
        if self.active.as_deref() == Some(id) && self.phase == Phase::Preparing {
            self.active = None;
            self.phase = Phase::Idle;
            self.epoch += 1;
        }
    }

    /// Readiness reached for `id`; false when the checkpoint ended meanwhile
    /// (resumed during the wait), and nothing changes.
    pub fn prepared(&mut self, reply: PrepareReply) -> bool {
        if self.active.as_deref() != Some(&reply.checkpoint) || self.phase != Phase::Preparing {
            return false;
        }
        self.phase = Phase::Prepared;
        self.prepared = Some(reply);
        true
    }

    pub fn commit(&self, id: &str, args: &CommitArgs) -> Result<CommitStep, CallError> {
        self.admit(id)?;
        match (self.phase, &self.committed) {
            (Phase::Prepared, _) if self.active.is_some() => Ok(CommitStep::Export),
            (Phase::Committed, Some((recorded, reply))) => {
                if recorded == args {
                    Ok(CommitStep::Replay(reply.clone()))
                } else {
                    Err(CallError::new(
                        Code::CheckpointConflict,
                        format!("checkpoint {id} was committed with another scope or stop"),
                    ))
                }
            }
            _ => Err(self.invalid("commit", id)),
        }
    }

    /// The commit of the active checkpoint is durable.
    pub fn committed(&mut self, args: CommitArgs, reply: CommitReply) {
        if self.active.as_deref() == Some(&reply.checkpoint) && self.phase == Phase::Prepared {
            self.phase = Phase::Committed;
            self.committed = Some((args, reply));
        }
    }

    pub fn restore(&self, id: &str, args: &RestoreArgs) -> Result<RestoreStep, CallError> {
        self.admit(id)?;
        match (self.phase, self.active.is_some(), &self.restored) {
            (Phase::Idle, false, _) => Ok(RestoreStep::Install),
            (Phase::Restored, true, Some((recorded, reply))) => {
                if recorded == args {
                    Ok(RestoreStep::Replay(reply.clone()))
                } else {
                    Err(CallError::new(
                        Code::CheckpointConflict,
                        format!("restore {id} was done from another source or scope"),
                    ))
                }
            }
            _ => Err(self.invalid("restore", id)),
        }
    }

    /// The restore `reply.checkpoint` is installed. False when the id was
    /// resumed meanwhile or another checkpoint opened: the caller undoes
    /// the install.
    pub fn restored(&mut self, args: RestoreArgs, reply: RestoreReply) -> bool {
        if self.phase != Phase::Idle || self.active.is_some() || self.was_resumed(&reply.checkpoint)
        {
            return false;
        }
        self.start(&reply.checkpoint, Phase::Restored);
        self.restored = Some((args, reply));
        true
    }

    pub fn resume(&mut self, id: &str) -> Result<ResumeStep, CallError> {
        if self.was_resumed(id) {
            return Ok(ResumeStep::AlreadyResumed);
        }
        self.admit(id)?;
        if self.active.is_none() {
            self.remember(id);
            return Ok(ResumeStep::Remembered);
        }
        Ok(ResumeStep::Open)
    }

    /// Admission is open again: the checkpoint `id` is over.
    pub fn resumed(&mut self, id: &str) {
        if self.active.as_deref() == Some(id) {
            self.active = None;
            self.phase = Phase::Idle;
            self.prepared = None;
            self.committed = None;
            self.restored = None;
            self.epoch += 1;
        }
        self.remember(id);
    }

    fn remember(&mut self, id: &str) {
        if self.was_resumed(id) {
            return;
        }
        if self.resumed.len() == RESUMED_KEPT {
            self.resumed.pop_front();
        }
        self.resumed.push_back(id.to_owned());
    }

    /// Retire and forget run only while no checkpoint is open (idle) or
    /// after a restore; the controller resumes an open checkpoint first.
    pub fn check_retire(&self, action: &str) -> Result<(), CallError> {
        match self.phase {
            Phase::Idle | Phase::Restored => Ok(()),
            _ => Err(CallError::new(
                Code::InvalidPhase,
                format!(
                    "{action} is not allowed in phase {} (checkpoint {}): resume it first",
                    self.phase,
                    self.active.as_deref().unwrap_or("-")
                ),
            )),
        }
    }

    /// The id to abort when the lease of checkpoint epoch `epoch` runs out,
    /// if that checkpoint is still the active one.
    pub fn expired(&self, epoch: u64) -> Option<&str> {
        if self.epoch == epoch {
            self.active.as_deref()
        } else {
            None
        }
    }
}

#[cfg(test)]
#[path = "phase_tests.rs"]
mod tests;
