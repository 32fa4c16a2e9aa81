//! Request and reply bodies of the rollout and coordinator routes. Every
//! body carries `v`; a reader rejects an unknown version by name before it
//! reads any other field, and unknown fields are refused. A rollout task
//! and a rollout result keep their own formats (`RolloutTask` v1 and
//! `RolloutResult` v1, crates/driver).

use std::time::Duration;

use rollpoint_proto::key::{AttemptKey, KeyError};
use serde::{Deserialize, Serialize};

use crate::error::ApiError;
use crate::extract::VersionedBody;
use crate::vocab::{Kind, Phase};

/// Version of every body defined here.
pub const WIRE_VERSION: u32 = 1;

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RolloutState {
    /// Waiting for a concurrency slot.
    Queued,
    Running,
    /// Held by a checkpoint.
    Parked,
    /// Its result is ready.
    Done,
    /// Its run ended without a result (`error` says why).
    Lost,
    /// Its attempt was retired (a restore is replacing it); a restore
    /// continues it as the next attempt.
    Retired,
}

impl RolloutState {
    /// Still on the drivers: covered by the next checkpoint.
    pub fn in_flight(self) -> bool {
        matches!(self, Self::Queued | Self::Running | Self::Parked)
    }
}

/// Reply of `POST /v1/rollouts` (202), and of `GET /v1/rollouts/{id}` and
/// `GET /v1/rollouts/{id}/result` while the rollout has no result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutStatus {
    pub v: u32,
    pub rollout: String,
    pub attempt: u32,
    pub state: RolloutState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RolloutStatus {
    /// The attempt key checkpoints know this rollout by.
    pub fn key(&self) -> Result<AttemptKey, KeyError> {
        AttemptKey::of(&self.rollout, self.attempt)
    }
}

/// Reply of `GET /v1/rollouts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutList {
    pub v: u32,
    pub rollouts: Vec<RolloutStatus>,
}

/// `POST /v1/coordinator/checkpoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRequest {
    pub v: u32,
    /// The checkpoint id (`ck-<unix ms>` when absent).
    #[serde(default)]
    pub id: Option<String>,
    /// Park what was exported and do not resume (the run ends).
    #[serde(default)]
    pub stop: bool,
    /// The attempt keys to cover; every in-flight rollout of every agent
    /// when absent.
    #[serde(default)]
    pub scope: Option<Vec<AttemptKey>>,
    /// Keep every rollout paused this long after publishing, before
    /// resuming them, so a frozen rollout can be inspected (at most
    /// [`MAX_HOLD_MS`]).
    #[serde(default)]
    pub hold_ms: u64,
}

impl VersionedBody for CheckpointRequest {
    const WHAT: &'static str = "coordinator checkpoint request";
    const VERSION: u32 = WIRE_VERSION;
}

/// Checks a caller-given checkpoint id, naming the field (each key of a
/// scope was checked when it was decoded).
pub fn check_id(id: Option<&str>) -> Result<(), ApiError> {
    match id.and_then(|id| rollpoint_proto::limits::name_problem(id).map(|p| (id, p))) {
        Some((id, problem)) => Err(ApiError::bad("id", format!("{id:?} {problem}"))),
        None => Ok(()),
    }
}

/// The longest hold a checkpoint may ask for: well under the participants'
/// lease, so none of them resumes on its own while held.
pub const MAX_HOLD_MS: u64 = 300_000;

impl CheckpointRequest {
    /// Checks the caller-given fields, naming the one at fault.
    pub fn check(&self) -> Result<(), ApiError> {
        check_id(self.id.as_deref())?;
        if self.hold_ms > MAX_HOLD_MS {
            return Err(ApiError::bad(
                "hold_ms",
                format!("{} is over the limit of {MAX_HOLD_MS}", self.hold_ms),
            ));
        }
        if self.stop && self.hold_ms > 0 {
            return Err(ApiError::bad(
                "hold_ms",
                "a checkpoint that stops holds nothing",
            ));
        }
        Ok(())
    }

    /// The hold asked for.
    pub fn hold(&self) -> Duration {
        Duration::from_millis(self.hold_ms)
    }
}

/// Most branches one fork makes.
pub const MAX_FORK_N: u32 = 256;

/// `POST /v1/coordinator/fork`: `n` new rollouts `<rollout>~<i>`, each made from checkpoint
/// `checkpoint`'s saved state of `rollout` (its sandbox, bookmark, session and ledger
/// prefix). The source is not disturbed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    pub v: u32,
    /// A published checkpoint.
    pub checkpoint: String,
    /// A rollout the checkpoint saved.
    pub rollout: String,
    /// How many branches, 1..=[`MAX_FORK_N`].
    pub n: u32,
}

impl VersionedBody for ForkRequest {
    const WHAT: &'static str = "fork request";
    const VERSION: u32 = WIRE_VERSION;
}

impl ForkRequest {
    /// Checks the fields, naming the one at fault.
    pub fn check(&self) -> Result<(), ApiError> {
        if let Some(problem) = rollpoint_proto::limits::name_problem(&self.checkpoint) {
            return Err(ApiError::bad(
                "checkpoint",
                format!("{:?} {problem}", self.checkpoint),
            ));
        }
        rollpoint_proto::key::RolloutId::new(&self.rollout)
            .map_err(|e| ApiError::bad("rollout", e.to_string()))?;
        if !(1..=MAX_FORK_N).contains(&self.n) {
            return Err(ApiError::bad(
                "n",
                format!("{} is outside 1..={MAX_FORK_N}", self.n),
            ));
        }
        Ok(())
    }
}

/// Reply of `POST /v1/coordinator/fork`: the branches, running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkReply {
    pub v: u32,
    pub checkpoint: String,
    pub rollout: String,
    /// The attempt of `rollout` the checkpoint saved, which every branch starts from.
    pub from: AttemptKey,
    /// The new rollouts, `<rollout>~<i>`.
    pub branches: Vec<String>,
}

/// How long each step of a checkpoint took, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PhaseTimings {
    pub prepare_ms: u64,
    pub commit_ms: u64,
    pub publish_ms: u64,
    /// Paused on purpose after publishing (`hold_ms`).
    #[serde(default)]
    pub held_ms: u64,
    pub resume_ms: u64,
    pub total_ms: u64,
}

/// One participant's share of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemberRecords {
    pub kind: Kind,
    pub instance: String,
    pub record_count: u64,
}

/// Reply of `POST /v1/coordinator/checkpoint`: the published checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointReply {
    pub v: u32,
    pub id: String,
    pub scope: Vec<AttemptKey>,
    /// Attempts some participant could not save: they start over.
    pub restarts: Vec<AttemptKey>,
    pub timings: PhaseTimings,
    pub participants: Vec<MemberRecords>,
    /// Older checkpoints deleted by retention.
    pub pruned: Vec<String>,
}

/// `POST /v1/coordinator/restore`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = CoordinatorRestoreRequest)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    pub v: u32,
    /// The published checkpoint to restore; the latest when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// The attempt keys to continue; the checkpoint's whole scope when
    /// absent, or with `moves`, the attempts the moved agents held.
    #[serde(default)]
    pub scope: Option<Vec<AttemptKey>>,
    /// Participants that are gone (a lost node) and the live ones of the same kind that take
    /// their rollouts over, from the checkpoint store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<MoveSpec>,
}

impl VersionedBody for RestoreRequest {
    const WHAT: &'static str = "coordinator restore request";
    const VERSION: u32 = WIRE_VERSION;
}

/// A lost participant's share installed into a live one of the same kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveSpec {
    pub kind: Kind,
    /// The instance that is gone.
    pub from: String,
    /// The live instance that takes its rollouts over.
    pub to: String,
}

/// The next attempts one participant installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoredMember {
    pub kind: Kind,
    pub instance: String,
    pub keys: Vec<AttemptKey>,
}

/// Reply of `POST /v1/coordinator/restore`: done and resumed everywhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = CoordinatorRestoreReply)]
#[serde(deny_unknown_fields)]
pub struct RestoreReply {
    pub v: u32,
    /// This restore's own id.
    pub id: String,
    /// The checkpoint restored.
    pub source: String,
    pub restored: Vec<RestoredMember>,
}

/// One participant as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerStatus {
    pub kind: Kind,
    pub instance: String,
    pub url: String,
    /// Its phase, when it answered.
    #[serde(default)]
    pub phase: Option<Phase>,
    /// The checkpoint it is in, if any.
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// Why it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Reply of `GET /v1/coordinator/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorStatus {
    pub v: u32,
    /// The latest published checkpoint.
    pub latest: Option<String>,
    /// The checkpoint the participants were last restored from.
    pub continues: Option<String>,
    /// A checkpoint or restore is in progress.
    pub busy: bool,
    pub peers: Vec<PeerStatus>,
}

/// What a fleet pause does to model calls generating when it begins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InFlightCalls {
    /// Let them finish; they are tagged with the version they were sent under.
    #[default]
    Finish,
    /// Drop those whose reply has not started and ask again after the pause, under the
    /// new version.
    Abort,
}

/// `POST /v1/fleet/pause` (and the gateway's `/v1/gateway/fleet/pause`): hold every
/// in-flight rollout in place and send no model call until the fleet continues.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetPauseRequest {
    pub v: u32,
    /// What calls generating now do (default: the run's `fleet_calls`, else `finish`).
    #[serde(default)]
    pub calls: Option<InFlightCalls>,
}

impl VersionedBody for FleetPauseRequest {
    const WHAT: &'static str = "fleet pause request";
    const VERSION: u32 = WIRE_VERSION;
}

/// `POST /v1/fleet/continue`: the replicas serve `version` now; the rollouts go on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetContinueRequest {
    pub v: u32,
    /// The version of the weights from now on (the id alphabet, at most 128 bytes);
    /// absent keeps the last one.
    #[serde(default)]
    pub version: Option<String>,
}

impl VersionedBody for FleetContinueRequest {
    const WHAT: &'static str = "fleet continue request";
    const VERSION: u32 = WIRE_VERSION;
}

impl FleetContinueRequest {
    /// Checks `version`, naming it.
    pub fn check(&self) -> Result<(), ApiError> {
        match self
            .version
            .as_deref()
            .and_then(|v| rollpoint_proto::limits::name_problem(v).map(|p| (v, p)))
        {
            Some((v, problem)) => Err(ApiError::bad("version", format!("{v:?} {problem}"))),
            None => Ok(()),
        }
    }
}

/// The reply to a fleet pause or continue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FleetReport {
    pub v: u32,
    pub paused: bool,
    /// While paused: what calls generating at the pause do.
    pub calls: Option<InFlightCalls>,
    /// The policy version model calls are tagged with.
    pub version: Option<String>,
    /// Rollouts paused in place (or held before they start).
    pub parked: usize,
    /// Rollouts that go on while paused: their adapter does not pause in place, or they did
    /// not park in time (their model calls are held all the same).
    pub going_on: Vec<String>,
}
