//! The control protocol's requests and replies, shared by the in-process
//! control, the HTTP routes and the HTTP client. The routes carry the
//! version (`/v1/checkpoint/...`); bodies refuse unknown fields, and every
//! request is checked by [`Request::check`] before anything acts on it.

use serde::{Deserialize, Serialize};

use crate::errors::CallError;
use crate::id::{check_keys, check_name};
use rollpoint_api::{Kind, Phase};

use crate::participant::{AttemptKey, Readiness};
use crate::store::Manifest;

/// Longest deadline a call may ask for: one hour.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// A request body that can be checked field by field.
pub trait Request {
    /// The first problem with the request, naming its field.
    fn check(&self) -> Result<(), CallError>;
}

fn check_timeout(timeout_ms: u64) -> Result<(), CallError> {
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(CallError::bad(
            "timeout_ms",
            format!("{timeout_ms} is outside 1..={MAX_TIMEOUT_MS}"),
        ));
    }
    Ok(())
}

/// Reply of `GET /v1/checkpoint/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ParticipantStatus)]
#[serde(deny_unknown_fields)]
pub struct Status {
    pub kind: Kind,
    pub instance: String,
    pub phase: Phase,
    /// The active checkpoint, if any.
    pub checkpoint: Option<String>,
    /// Time left before the participant resumes by itself, while active.
    pub lease_remaining_ms: Option<u64>,
    pub readiness: Readiness,
}

/// `POST /v1/checkpoint/prepare`: close admission and wait for a cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PrepareRequest {
    pub checkpoint: String,
    /// How long to wait for readiness.
    pub timeout_ms: u64,
}

impl Request for PrepareRequest {
    fn check(&self) -> Result<(), CallError> {
        check_name("checkpoint", &self.checkpoint)?;
        check_timeout(self.timeout_ms)
    }
}

/// Reply of prepare: `prepared`, or still `preparing` when the deadline
/// passed first (admission stays closed until resume).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PrepareReply {
    pub checkpoint: String,
    pub phase: Phase,
    pub readiness: Readiness,
}

/// `POST /v1/checkpoint/commit`: export the scope's records and write them
/// durably under `RUN_DIR/checkpoints/<checkpoint>/<kind>/<instance>/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitRequest {
    pub checkpoint: String,
    pub timeout_ms: u64,
    /// The attempt keys the checkpoint covers.
    pub scope: Vec<AttemptKey>,
    /// Free the exported work's compute once the records are durable.
    #[serde(default)]
    pub stop: bool,
}

impl Request for CommitRequest {
    fn check(&self) -> Result<(), CallError> {
        check_name("checkpoint", &self.checkpoint)?;
        check_timeout(self.timeout_ms)?;
        check_keys("scope", &self.scope, false)
    }
}

/// Reply of commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommitReply {
    pub checkpoint: String,
    pub phase: Phase,
    pub manifest: Manifest,
    /// Why parking the exported work failed, for a commit with `stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub park_error: Option<String>,
}

/// `POST /v1/checkpoint/restore`: install the records of checkpoint
/// `source` for the keys in `scope` as their next attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ParticipantRestoreRequest)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    /// The id of this restore; resume it like a checkpoint.
    pub checkpoint: String,
    /// The published checkpoint to read.
    pub source: String,
    pub timeout_ms: u64,
    pub scope: Vec<AttemptKey>,
    /// Install the records of `fork.from` as new rollouts, one per key of `fork.to`, instead
    /// of continuing `scope` (which is then exactly `[fork.from]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<ForkSpec>,
    /// Install the share another instance of this kind wrote (a node that is gone) instead of
    /// this participant's own: its rollouts move here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_instance: Option<String>,
}

/// Most branches one fork makes.
pub const MAX_BRANCHES: usize = 256;

/// A fork: the saved state of attempt `from` installed once per key of `to`. Each key of `to`
/// is `<from's rollout>~<n>` at an attempt no earlier than `from`'s; the branch continues as
/// the attempt after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkSpec {
    pub from: AttemptKey,
    pub to: Vec<AttemptKey>,
}

impl ForkSpec {
    /// The first problem with the fork, naming its field.
    pub fn check(&self) -> Result<(), CallError> {
        if self.to.is_empty() || self.to.len() > MAX_BRANCHES {
            return Err(CallError::bad(
                "fork.to",
                format!("{} branches is outside 1..={MAX_BRANCHES}", self.to.len()),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, k) in self.to.iter().enumerate() {
            let field = format!("fork.to[{i}]");
            match k.rollout().branch_of() {
                Some((base, _)) if &base == self.from.rollout() => {}
                _ => {
                    return Err(CallError::bad(
                        &field,
                        format!("{k} is not named {}~<n>", self.from.rollout()),
                    ));
                }
            }
            if k.attempt() < self.from.attempt() {
                return Err(CallError::bad(
                    &field,
                    format!("{k} is of an attempt before {}", self.from),
                ));
            }
            if !seen.insert(k.rollout().clone()) {
                return Err(CallError::bad(
                    &field,
                    format!("{} is named twice", k.rollout()),
                ));
            }
        }
        Ok(())
    }
}

impl Request for RestoreRequest {
    fn check(&self) -> Result<(), CallError> {
        check_name("checkpoint", &self.checkpoint)?;
        check_name("source", &self.source)?;
        check_timeout(self.timeout_ms)?;
        check_keys("scope", &self.scope, false)?;
        if let Some(from) = &self.from_instance {
            check_name("from_instance", from)?;
        }
        if let Some(fork) = &self.fork {
            fork.check()?;
            if self.scope != [fork.from.clone()] {
                return Err(CallError::bad(
                    "scope",
                    format!("a fork's scope is exactly [{}]", fork.from),
                ));
            }
        }
        Ok(())
    }
}

/// Reply of restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ParticipantRestoreReply)]
#[serde(deny_unknown_fields)]
pub struct RestoreReply {
    pub checkpoint: String,
    pub source: String,
    pub phase: Phase,
    /// The next attempts' keys.
    pub restored: Vec<AttemptKey>,
    /// How many records were installed.
    pub record_count: u64,
}

/// `POST /v1/checkpoint/resume`: end (or abort) a checkpoint or restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    pub checkpoint: String,
    pub timeout_ms: u64,
}

impl Request for ResumeRequest {
    fn check(&self) -> Result<(), CallError> {
        check_name("checkpoint", &self.checkpoint)?;
        check_timeout(self.timeout_ms)
    }
}

/// Reply of resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeReply {
    pub checkpoint: String,
    pub phase: Phase,
    /// The id was already resumed (or was never active here).
    pub idempotent: bool,
}

/// `POST /v1/checkpoint/retire` and `/forget`: attempt keys to act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ParticipantKeysRequest)]
#[serde(deny_unknown_fields)]
pub struct KeysRequest {
    pub keys: Vec<AttemptKey>,
    pub timeout_ms: u64,
}

impl Request for KeysRequest {
    fn check(&self) -> Result<(), CallError> {
        check_keys("keys", &self.keys, true)?;
        check_timeout(self.timeout_ms)
    }
}

/// The two verbs that act on attempt keys rather than on a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysVerb {
    /// Stop and refuse the attempts (and every earlier one of their rollouts).
    Retire,
    /// Drop what is remembered of their rollouts.
    Forget,
}

impl KeysVerb {
    /// The verb as in its route, `/v1/checkpoint/<verb>`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retire => "retire",
            Self::Forget => "forget",
        }
    }
}

/// Reply of retire and forget: the keys acted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ParticipantKeysReply)]
#[serde(deny_unknown_fields)]
pub struct KeysReply {
    pub keys: Vec<AttemptKey>,
}

/// `POST /v1/checkpoint/fleet`: pause every participant's share of the fleet for a weight
/// update, or continue it under `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ParticipantFleetRequest)]
#[serde(deny_unknown_fields)]
pub struct FleetRequest {
    /// `true` pauses, `false` continues.
    pub paused: bool,
    /// With `paused`: what model calls generating now do.
    #[serde(default)]
    pub calls: rollpoint_api::wire::InFlightCalls,
    /// With a continue: the policy version from now on (absent keeps the last one).
    #[serde(default)]
    pub version: Option<String>,
    pub timeout_ms: u64,
}

impl Request for FleetRequest {
    fn check(&self) -> Result<(), CallError> {
        if let Some(v) = &self.version {
            crate::id::check_name("version", v)?;
        }
        check_timeout(self.timeout_ms)
    }
}

pub use crate::participant::FleetReply;

/// Body of every error reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = CheckpointErrorReply)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    pub error: CallError,
}
