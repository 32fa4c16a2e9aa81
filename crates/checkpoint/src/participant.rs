//! The participant contract: the few kind-specific hooks a process provides
//! so the generic control plane (phase machine, lease, routes, storage) can
//! checkpoint it. The gateway, the drivers and the owner each implement it;
//! the control plane only ever sees `Arc<dyn Participant>`.
//!
//! Records are opaque JSON objects to the control plane. The one thing it
//! reads in them is the attempt key they belong to ([`RECORD_KEY_FIELD`]),
//! so a restore can keep only the records its scope names.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
pub use rollpoint_proto::key::AttemptKey;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::errors::HookError;

/// The most blockers a readiness report lists; `blocker_count` stays exact.
pub const BLOCKER_CAP: usize = 100;

/// The field of every record naming the attempt key it belongs to
/// (`<rollout>` or `<rollout>-a<N>`, as the gateway's capture keys).
pub const RECORD_KEY_FIELD: &str = "key";

/// How often the default [`Participant::changed`] wakes a readiness wait.
pub const DEFAULT_POLL: Duration = Duration::from_millis(100);

pub use rollpoint_api::Kind;

/// Whether a participant has reached a consistent cut, and if not, why not.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Readiness {
    pub ready: bool,
    /// What still blocks the cut (at most [`BLOCKER_CAP`] entries).
    #[serde(default)]
    pub blockers: Vec<String>,
    /// How many blockers there are in all.
    #[serde(default)]
    pub blocker_count: u64,
    /// Free-form exact counters (`parked`, `held_replies`, ...).
    #[serde(default)]
    pub counts: BTreeMap<String, u64>,
    /// Attempt keys this participant cannot continue from a checkpoint: the
    /// controller restarts them instead. Never capped.
    #[serde(default)]
    pub restarts: Vec<AttemptKey>,
}

impl Readiness {
    /// A report from every blocker: ready when there is none, the list capped
    /// at [`BLOCKER_CAP`] and the count exact.
    pub fn from_blockers(blockers: impl IntoIterator<Item = String>) -> Self {
        let mut listed = Vec::new();
        let mut count: u64 = 0;
        for blocker in blockers {
            if listed.len() < BLOCKER_CAP {
                listed.push(blocker);
            }
            count += 1;
        }
        Self {
            ready: count == 0,
            blockers: listed,
            blocker_count: count,
            counts: BTreeMap::new(),
            restarts: Vec::new(),
        }
    }

    /// The report as sent: the list cut to [`BLOCKER_CAP`], the count at
    /// least the number listed, ready only with no blocker.
    #[must_use]
    pub fn capped(mut self) -> Self {
        self.blocker_count = self.blocker_count.max(self.blockers.len() as u64);
        self.blockers.truncate(BLOCKER_CAP);
        self.ready &= self.blocker_count == 0;
        self
    }

    /// Adds an exact counter.
    #[must_use]
    pub fn with_count(mut self, name: &str, value: u64) -> Self {
        self.counts.insert(name.to_owned(), value);
        self
    }

    /// Names attempts this participant cannot continue.
    #[must_use]
    pub fn with_restarts(mut self, restarts: Vec<AttemptKey>) -> Self {
        self.restarts = restarts;
        self
    }
}

/// The attempt key a record names: it must be an object whose
/// [`RECORD_KEY_FIELD`] is a valid attempt key; the error says what is wrong.
pub fn record_key(record: &Value) -> Result<AttemptKey, String> {
    let key = record
        .get(RECORD_KEY_FIELD)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("not an object with a string `{RECORD_KEY_FIELD}`"))?;
    AttemptKey::parse(key).map_err(|e| format!("field `{RECORD_KEY_FIELD}`: {e}"))
}

/// Tags `record`, a participant's own JSON object, with the attempt key it
/// belongs to, as every exported record must be.
pub fn tag_record(mut record: Value, key: &AttemptKey) -> HookResult<Value> {
    let Value::Object(map) = &mut record else {
        return Err(HookError::new(format!(
            "{key}: a record must be a JSON object"
        )));
    };
    map.insert(RECORD_KEY_FIELD.to_owned(), Value::String(key.to_string()));
    Ok(record)
}

/// Splits a record of `kind` into its attempt key and the participant's own
/// object, the tag removed: the inverse of [`tag_record`].
pub fn untag_record(mut record: Value, kind: Kind) -> HookResult<(AttemptKey, Value)> {
    let key = record_key(&record).map_err(|e| HookError::new(format!("{kind} record: {e}")))?;
    if let Value::Object(map) = &mut record {
        map.remove(RECORD_KEY_FIELD);
    }
    Ok((key, record))
}

/// [`untag_record`], then the participant's own object read by `decode`
/// (its format's reader, from the object's JSON bytes); an error names the
/// attempt key.
pub fn untag_decode<T, E: std::fmt::Display>(
    record: Value,
    kind: Kind,
    decode: impl FnOnce(&[u8]) -> Result<T, E>,
) -> HookResult<(AttemptKey, T)> {
    let (key, own) = untag_record(record, kind)?;
    let bytes = serde_json::to_vec(&own).map_err(HookError::new)?;
    let decoded =
        decode(&bytes).map_err(|e| HookError::new(format!("{kind} record {key}: {e}")))?;
    Ok((key, decoded))
}

/// Result of a participant hook.
pub type HookResult<T> = Result<T, HookError>;

/// The kind-specific side of a checkpoint participant. The control plane
/// calls these hooks under its own lock, in phase order, at most once per
/// transition; implementations need not be idempotent except where noted.
///
/// `scope` is always the list of attempt keys the checkpoint covers.
pub trait Participant: Send + Sync + std::fmt::Debug {
    fn kind(&self) -> Kind;

    /// This participant's name among those of its kind (a path component:
    /// `^[A-Za-z0-9][A-Za-z0-9._-]*$`).
    fn instance(&self) -> String;

    /// Starts the cut for `checkpoint`: admit no new work and drive running
    /// work to a boundary (the model holds finished replies, an agent parks
    /// its runs). Also called before [`Participant::install`] on restore.
    fn close_admission<'a>(&'a self, checkpoint: &'a str) -> BoxFuture<'a, HookResult<()>>;

    /// Ends the cut: admit work again and let parked work continue (held
    /// replies delivered). Called on resume, abort and lease expiry, and
    /// after a failed close or install; must be safe to call when open.
    fn open_admission(&self) -> BoxFuture<'_, HookResult<()>>;

    /// The current readiness; cheap, called repeatedly while preparing and
    /// once more at commit (readiness may regress).
    fn readiness(&self) -> BoxFuture<'_, Readiness>;

    /// Resolves when readiness may have changed. The default polls every
    /// [`DEFAULT_POLL`]; a participant with a change signal (a
    /// `tokio::sync::Notify`) should wait on it instead.
    fn changed(&self) -> BoxFuture<'_, ()> {
        tokio::time::sleep(DEFAULT_POLL).boxed()
    }

    /// The records of the attempts in `scope`, one JSON object each, each
    /// naming its attempt in [`RECORD_KEY_FIELD`]. Called once per
    /// checkpoint while admission is closed (a resources participant
    /// snapshots its sandboxes here).
    fn export<'a>(
        &'a self,
        checkpoint: &'a str,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<Value>>>;

    /// Frees the compute of what was exported, once the records are durable
    /// (a commit with `stop`): the run is about to end. Failures are reported
    /// but do not undo the commit. Nothing to do by default: the agent's runs
    /// stay parked at their bookmarks until the process ends, and the model's
    /// ledger is durable from export; only resources (sandboxes) free
    /// anything.
    fn park_exported(&self) -> BoxFuture<'_, HookResult<()>> {
        async { Ok(()) }.boxed()
    }

    /// Restores `records` (already verified, only those in `scope`) as each
    /// attempt's next attempt; returns the next attempts' keys. Admission is
    /// closed around the call and opens on resume.
    fn install<'a>(
        &'a self,
        checkpoint: &'a str,
        records: Vec<Value>,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>>;

    /// Installs `records` (already verified, those of `from`) once per key of `to`: each a
    /// new rollout starting from `from`'s saved state, named `<rollout>~<n>` (checked by
    /// [`crate::wire::ForkSpec::check`]). Returns each branch's next key (`to[i].next()`).
    /// `from` itself is not disturbed. Admission is closed around the call, as for install.
    fn fork<'a>(
        &'a self,
        checkpoint: &'a str,
        records: Vec<Value>,
        from: &'a AttemptKey,
        to: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>>;

    /// Stops and frees the attempts `keys` and every earlier attempt of their
    /// rollouts, and refuses them from now on (until forgotten). Returns the
    /// keys it retired. Idempotent.
    fn retire<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>>;

    /// Drops what is remembered about the rollouts of `keys` (their refusal
    /// included): nothing of them can run any more. Idempotent.
    fn forget<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>>;

    /// Pauses (or continues) this participant's share of the fleet for a weight update,
    /// independent of any checkpoint: the model holds every call (`req.calls` says what
    /// the calls generating now do) and, on continue, tags later calls with `req.version`;
    /// an agent parks its runs in place until the continue. Nothing to do by default
    /// (resources). Idempotent.
    fn fleet(&self, order: FleetOrder) -> BoxFuture<'_, HookResult<FleetReply>> {
        let _ = order;
        async { Ok(FleetReply::default()) }.boxed()
    }
}

/// What a fleet verb asks of a participant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetOrder {
    /// `true` pauses, `false` continues.
    pub paused: bool,
    /// With `paused`: what model calls generating now do.
    pub calls: rollpoint_api::wire::InFlightCalls,
    /// With a continue: the policy version from now on (absent keeps the last one).
    pub version: Option<String>,
}

/// A participant's share of a fleet pause or continue (`POST /v1/checkpoint/fleet`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ParticipantFleetReply)]
#[serde(deny_unknown_fields)]
pub struct FleetReply {
    /// Rollouts it parked in place (agents).
    pub parked: usize,
    /// Rollouts it could not park and that go on (agents).
    pub going_on: Vec<String>,
    /// The policy version its model calls are tagged with (the model participant).
    pub version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_caps_the_list_and_keeps_the_count() {
        let r = Readiness::from_blockers((0..250).map(|i| format!("run {i}")));
        assert!(!r.ready);
        assert_eq!(r.blockers.len(), BLOCKER_CAP);
        assert_eq!(r.blocker_count, 250);
        assert_eq!(r.blockers[0], "run 0");
        let ready = Readiness::from_blockers(Vec::new());
        assert!(ready.ready);
        assert_eq!(ready.blocker_count, 0);
    }

    #[test]
    fn a_hand_made_report_is_capped_on_the_way_out() {
        let r = Readiness {
            ready: true,
            blockers: (0..150).map(|i| i.to_string()).collect(),
            ..Readiness::default()
        }
        .capped();
        assert!(!r.ready, "blockers listed: not ready");
        assert_eq!(r.blockers.len(), BLOCKER_CAP);
        assert_eq!(r.blocker_count, 150);
    }

    #[test]
    fn kinds_sort_in_prepare_order() {
        let mut kinds = vec![Kind::Resources, Kind::Model, Kind::Agent];
        kinds.sort();
        assert_eq!(kinds, Kind::ALL.to_vec());
        assert_eq!(
            serde_json::to_string(&Kind::Resources).expect("encode"),
            "\"resources\""
        );
    }

    #[test]
    fn tag_and_untag_are_inverse_and_name_what_is_wrong() {
        let own = serde_json::json!({"x": 1});
        let r1a1 = AttemptKey::parse("r1-a1").expect("key");
        let tagged = tag_record(own.clone(), &r1a1).expect("tag");
        assert_eq!(record_key(&tagged), Ok(r1a1.clone()));
        let (key, back) = untag_record(tagged, Kind::Agent).expect("untag");
        assert_eq!((key, back), (r1a1, own));
        let err = untag_record(serde_json::json!({"x": 1}), Kind::Model).expect_err("untagged");
        assert_eq!(
            err.to_string(),
            "model record: not an object with a string `key`"
        );
        let r1 = AttemptKey::parse("r1").expect("key");
        let err = tag_record(serde_json::json!([1]), &r1).expect_err("not an object");
        assert!(err.to_string().contains("r1"), "{err}");
        let err = untag_record(serde_json::json!({"key": "r-a0"}), Kind::Agent).expect_err("bad");
        assert!(err.to_string().contains("r-a0"), "{err}");
    }

    #[test]
    fn record_key_reads_the_key_field() {
        assert_eq!(
            record_key(&serde_json::json!({"key": "r1-a2", "x": 1})),
            Ok(AttemptKey::parse("r1-a2").expect("key"))
        );
        assert!(record_key(&serde_json::json!({"key": 3})).is_err());
        assert!(record_key(&serde_json::json!([1])).is_err());
    }
}
