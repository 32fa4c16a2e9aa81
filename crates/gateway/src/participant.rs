//! The gateway as the checkpoint's `model` participant.
//!
//! At prepare it closes the admission gate: new calls wait, admitted calls
//! keep generating upstream and are recorded, and their replies are held
//! before the first byte, so a harness waiting on the model is at a
//! boundary. Streams already delivering are let finish; the cut is ready
//! when none is. At commit it exports, per attempt in scope, the ledger
//! rows and bodies of that rollout (held replies included, flushed first),
//! so a restore can replay them instead of paying for them again. Resume
//! opens the gate (held replies are delivered). Restore installs the
//! records and registers each rollout's next attempt.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_checkpoint::HookError;
use rollpoint_checkpoint::participant::{
    DEFAULT_POLL, FleetOrder, FleetReply, HookResult, Kind, Participant, Readiness, tag_record,
    untag_decode,
};
use serde_json::Value;

use crate::errors::GatewayError;
use crate::gate::{Phase, TailPolicy};
use crate::gateway::Gateway;
use crate::ledger::record::{LedgerRecord, decode_jsonl};
use rollpoint_proto::key::AttemptKey;

/// A [`Gateway`] seen by the checkpoint control plane.
#[derive(Debug, Clone)]
pub struct ModelParticipant {
    gateway: Arc<Gateway>,
    instance: String,
}

impl ModelParticipant {
    pub fn new(gateway: Arc<Gateway>, instance: &str) -> Self {
        Self {
            gateway,
            instance: instance.to_owned(),
        }
    }

    fn readiness_now(&self) -> Readiness {
        let in_flight = self.gateway.in_flight();
        let mut counts = BTreeMap::new();
        for e in &in_flight {
            let name = match e.phase {
                Phase::Waiting => "waiting",
                Phase::Upstream => "held",
                Phase::Delivering => "delivering",
            };
            *counts.entry(name).or_insert(0u64) += 1;
        }
        let mut blockers: Vec<String> = in_flight
            .iter()
            .filter(|e| e.phase == Phase::Delivering)
            .map(|e| {
                format!(
                    "{}: reply of {} still delivering",
                    e.capture_key,
                    e.call_id
                        .as_ref()
                        .map_or_else(|| "a call".to_owned(), ToString::to_string)
                )
            })
            .collect();
        if self.gateway.is_open() {
            blockers.insert(0, "admission is open".to_owned());
        }
        let mut readiness = Readiness::from_blockers(blockers);
        for (name, n) in counts {
            readiness = readiness.with_count(name, n);
        }
        readiness
    }
}

/// A ledger record as JSON, tagged with the attempt key it was exported for.
fn tagged(record: &LedgerRecord, key: &AttemptKey) -> HookResult<Value> {
    let value: Value = serde_json::from_str(&record.to_json()).map_err(HookError::new)?;
    tag_record(value, key)
}

/// Strips the attempt tag and decodes the ledger record (version and body
/// digest checked).
fn untagged(value: Value) -> HookResult<(AttemptKey, LedgerRecord)> {
    let (key, mut records) = untag_decode(value, Kind::Model, decode_jsonl)?;
    let record = records
        .pop()
        .ok_or_else(|| HookError::new(format!("{key}: empty model record")))?;
    Ok((key, record))
}

impl Participant for ModelParticipant {
    fn kind(&self) -> Kind {
        Kind::Model
    }

    fn instance(&self) -> String {
        self.instance.clone()
    }

    fn close_admission<'a>(&'a self, _checkpoint: &'a str) -> BoxFuture<'a, HookResult<()>> {
        async move {
            let _report = self.gateway.close(TailPolicy::Finish);
            Ok(())
        }
        .boxed()
    }

    fn open_admission(&self) -> BoxFuture<'_, HookResult<()>> {
        async move {
            self.gateway.open();
            Ok(())
        }
        .boxed()
    }

    fn readiness(&self) -> BoxFuture<'_, Readiness> {
        async move { self.readiness_now() }.boxed()
    }

    fn changed(&self) -> BoxFuture<'_, ()> {
        async move {
            // Bounded: a change between the last check and the subscription
            // is caught at the next poll.
            let _elapsed = tokio::time::timeout(DEFAULT_POLL, self.gateway.gate_changed()).await;
        }
        .boxed()
    }

    fn export<'a>(
        &'a self,
        _checkpoint: &'a str,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<Value>>> {
        async move {
            self.gateway.flush().await.map_err(HookError::new)?;
            let mut out = Vec::new();
            for key in scope {
                for record in self
                    .gateway
                    .export(key.rollout().as_str())
                    .await
                    .map_err(HookError::new)?
                {
                    out.push(tagged(&record, key)?);
                }
            }
            Ok(out)
        }
        .boxed()
    }

    fn install<'a>(
        &'a self,
        _checkpoint: &'a str,
        records: Vec<Value>,
        scope: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            // Records go in per next attempt: each rollout continues as the
            // attempt after the one the checkpoint exported.
            let mut by_next: BTreeMap<u32, Vec<LedgerRecord>> = BTreeMap::new();
            let mut next_keys = Vec::new();
            for key in scope {
                let next = key.next();
                by_next.entry(next.attempt()).or_default();
                next_keys.push(next);
            }
            for value in records {
                let (key, record) = untagged(value)?;
                by_next
                    .entry(key.next().attempt())
                    .or_default()
                    .push(record);
            }
            for (attempt, records) in by_next {
                if records.is_empty() {
                    continue;
                }
                self.gateway
                    .install(records, attempt)
                    .await
                    .map_err(|e| match e {
                        GatewayError::StaleAttempt { .. } => HookError::conflict(e),
                        e => HookError::new(e),
                    })?;
            }
            // Rollouts with no recorded call yet still continue as their
            // next attempt.
            for key in &next_keys {
                self.gateway.register(key).map_err(|e| match e {
                    GatewayError::StaleAttempt { .. } => HookError::conflict(e),
                    e => HookError::new(e),
                })?;
            }
            Ok(next_keys)
        }
        .boxed()
    }

    fn fork<'a>(
        &'a self,
        _checkpoint: &'a str,
        records: Vec<Value>,
        from: &'a AttemptKey,
        to: &'a [AttemptKey],
    ) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            let mut source = Vec::with_capacity(records.len());
            for value in records {
                let (key, record) = untagged(value)?;
                if key.rollout() == from.rollout() {
                    source.push(record);
                }
            }
            let rollout = from.rollout().as_str();
            let mut next_keys = Vec::with_capacity(to.len());
            for branch in to {
                let next = branch.next();
                let renamed: Vec<LedgerRecord> = source
                    .iter()
                    .map(|r| match r {
                        LedgerRecord::Call(c) => LedgerRecord::Call(Box::new(
                            c.for_branch(rollout, branch.rollout().as_str()),
                        )),
                        LedgerRecord::Body(b) => LedgerRecord::Body(b.clone()),
                    })
                    .collect();
                if renamed.iter().any(|r| matches!(r, LedgerRecord::Call(_))) {
                    self.gateway
                        .install(renamed, next.attempt())
                        .await
                        .map_err(HookError::new)?;
                }
                self.gateway.register(&next).map_err(HookError::new)?;
                next_keys.push(next);
            }
            Ok(next_keys)
        }
        .boxed()
    }

    fn retire<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        async move {
            // Registering the next attempt fences this one and every earlier
            // attempt of the rollout: their calls are refused from now on.
            for key in keys {
                match self.gateway.register(&key.next()) {
                    // A later attempt is registered already: this one is
                    // fenced, which is what retiring it asks.
                    Ok(()) | Err(GatewayError::StaleAttempt { .. }) => {}
                    Err(e) => return Err(HookError::new(e)),
                }
            }
            Ok(keys.to_vec())
        }
        .boxed()
    }

    fn forget<'a>(&'a self, keys: &'a [AttemptKey]) -> BoxFuture<'a, HookResult<Vec<AttemptKey>>> {
        // The fence is the registration of a later attempt, which stays
        // valid; nothing else is remembered per rollout outside the ledger.
        async move { Ok(keys.to_vec()) }.boxed()
    }

    fn fleet(&self, order: FleetOrder) -> BoxFuture<'_, HookResult<FleetReply>> {
        async move {
            let state = if order.paused {
                self.gateway.fleet_pause(order.calls)
            } else {
                self.gateway.fleet_continue(order.version)
            };
            Ok(FleetReply {
                version: state.version,
                ..Default::default()
            })
        }
        .boxed()
    }
}
