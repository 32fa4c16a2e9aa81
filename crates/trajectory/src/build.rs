//! Building a trajectory from a rollout's ledger records (the same records a checkpoint
//! exports) and its outcome. Pure.
//!
//! The chain is found backwards from the last answered generation call of the final
//! attempt, parent by parent, so abandoned retries, side calls (titles, summaries) and
//! calls of dead attempts are left out. A replayed call takes the tokens of the call it was
//! answered from. Anything that does not resolve makes the rollout not trainable, with the
//! reason and the call: fail closed, never a guess.

use std::collections::HashMap;

use rollpoint_gateway::tokens::{CallTokens, FaultKind};
use rollpoint_gateway::{CallRecord, CallStatus, LedgerRecord};

use crate::format::{
    BreakPolicy, Breaks, Metrics, NotTrainable, Reason, Segment, TRAJECTORY_VERSION, TokenBreak,
    Trajectory, TrajectoryCall, VersionPolicy,
};

/// What is known of the rollout besides its calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// It has its result.
    pub finished: bool,
    /// The attempt the result came from.
    pub attempt: u32,
    pub reward: Option<f64>,
    pub passed: Option<bool>,
    pub paused_ms: u64,
    pub launches: u64,
    pub checkpoints: u64,
    pub group: Option<String>,
    /// How the infrastructure ended it (status `infra_error`).
    pub infra_class: Option<String>,
}

impl Outcome {
    /// What a rollout's result says besides its calls.
    #[must_use]
    pub fn of(r: &rollpoint_driver::RolloutResult) -> Self {
        Self {
            finished: true,
            attempt: r.attempt,
            reward: r.reward,
            passed: r.verdict.as_ref().map(|v| v.passed),
            paused_ms: r.timings.paused_ms,
            launches: r.launches.len() as u64,
            checkpoints: r.launches.iter().map(|l| u64::from(l.pauses)).sum(),
            group: r.group.clone(),
            infra_class: (r.status == rollpoint_driver::Status::InfraError).then(|| {
                r.infra_class
                    .unwrap_or(rollpoint_driver::InfraClass::Unclassified)
                    .as_str()
                    .to_owned()
            }),
        }
    }
}

fn is_generation(c: &CallRecord) -> bool {
    matches!(c.route.as_str(), "chat" | "responses" | "messages")
}

fn answered(c: &CallRecord) -> bool {
    matches!(c.status, CallStatus::Ok | CallStatus::Replayed)
}

struct Records<'a, 'b> {
    calls: HashMap<&'a str, &'a CallRecord>,
    bodies: &'b HashMap<&'a str, &'a [u8]>,
}

impl<'a> Records<'a, '_> {
    /// The call whose answer `c` carries: itself, or the one it was replayed from.
    fn source(&self, c: &'a CallRecord) -> &'a CallRecord {
        let mut c = c;
        // Replays of replays end at a recorded answer; the bound stops a malformed loop.
        for _ in 0..64 {
            match (
                c.status,
                c.tokens_digest.as_deref(),
                c.replayed_from.as_deref(),
            ) {
                (_, Some(_), _) | (_, None, None) => return c,
                (_, None, Some(from)) => match self.calls.get(from) {
                    Some(next) => c = next,
                    None => return c,
                },
            }
        }
        c
    }

    fn tokens(&self, c: &CallRecord) -> Result<CallTokens, NotTrainable> {
        let source = self.source(c);
        let not = |reason, message: String| NotTrainable {
            reason,
            call_id: Some(c.call_id.clone()),
            message,
        };
        if let Some(fault) = &source.tokens_fault {
            let reason = match fault.kind {
                FaultKind::Malformed => Reason::CaptureError,
                _ => Reason::MissingTokens,
            };
            return Err(not(reason, fault.message.clone()));
        }
        let Some(digest) = source.tokens_digest.as_deref() else {
            return Err(not(
                Reason::MissingTokens,
                format!(
                    "call {} has no captured tokens (is model_tokens set?)",
                    source.call_id
                ),
            ));
        };
        let Some(bytes) = self.bodies.get(digest) else {
            return Err(not(
                Reason::MissingTokens,
                format!(
                    "the tokens {digest} of call {} are not in the records",
                    source.call_id
                ),
            ));
        };
        CallTokens::decode(bytes).map_err(|e| {
            not(
                Reason::CaptureError,
                format!("the tokens of call {} do not read: {e}", source.call_id),
            )
        })
    }
}

/// The chain of `rollout`'s final answer, first call first.
fn chain<'a>(
    records: &Records<'a, '_>,
    ordered: &[&'a CallRecord],
    attempt: u32,
) -> Result<Vec<&'a CallRecord>, NotTrainable> {
    let last = ordered
        .iter()
        .copied()
        .filter(|c| c.attempt == attempt && is_generation(c))
        .max_by_key(|c| c.seq)
        .or_else(|| ordered.iter().copied().rfind(|c| is_generation(c)));
    let Some(last) = last else {
        return Err(NotTrainable {
            reason: Reason::NoCalls,
            call_id: None,
            message: "the rollout made no model call".into(),
        });
    };
    // The final answer is the last answered call of that attempt.
    let end = ordered
        .iter()
        .copied()
        .filter(|c| c.attempt == last.attempt && is_generation(c) && answered(c))
        .max_by_key(|c| c.seq);
    let Some(end) = end else {
        return Err(NotTrainable {
            reason: Reason::UnansweredCall,
            call_id: Some(last.call_id.clone()),
            message: format!(
                "call {} ended {} and no call of attempt {} was answered",
                last.call_id,
                last.status.as_str(),
                last.attempt
            ),
        });
    };
    let mut out = vec![end];
    let mut c = end;
    while out.len() <= records.calls.len() {
        match (c.lineage.as_str(), c.parent_call_id.as_deref()) {
            (_, Some(parent)) => {
                let Some(p) = records.calls.get(parent) else {
                    return Err(NotTrainable {
                        reason: Reason::UnresolvedLineage,
                        call_id: Some(c.call_id.clone()),
                        message: format!(
                            "the parent {parent} of call {} is not in the records",
                            c.call_id
                        ),
                    });
                };
                if !answered(p) {
                    return Err(NotTrainable {
                        reason: Reason::UnansweredCall,
                        call_id: Some(p.call_id.clone()),
                        message: format!("call {} ended {}", p.call_id, p.status.as_str()),
                    });
                }
                out.push(p);
                c = p;
            }
            ("root", None) if c.lineage_reason.as_deref() == Some("first_turn") => {
                out.reverse();
                return Ok(out);
            }
            (lineage, None) => {
                let why = c.lineage_reason.as_deref().unwrap_or(lineage);
                return Err(NotTrainable {
                    reason: Reason::UnresolvedLineage,
                    call_id: Some(c.call_id.clone()),
                    message: format!(
                        "call {} continues a conversation whose earlier calls do not resolve ({why})",
                        c.call_id
                    ),
                });
            }
        }
    }
    Err(NotTrainable {
        reason: Reason::UnresolvedLineage,
        call_id: Some(end.call_id.clone()),
        message: format!("the parents of call {} form a loop", end.call_id),
    })
}

/// Where `prompt` stops extending `expected` (`None`: it extends it).
fn break_at(prompt: &[u32], expected: &[u32]) -> Option<usize> {
    if prompt.starts_with(expected) {
        return None;
    }
    Some(
        prompt
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(prompt.len().min(expected.len())),
    )
}

/// Records grouped for building many trajectories: calls by rollout, bodies by digest.
#[derive(Debug, Default)]
pub struct Grouped<'a> {
    pub calls: HashMap<&'a str, Vec<&'a CallRecord>>,
    pub bodies: HashMap<&'a str, &'a [u8]>,
}

impl<'a> Grouped<'a> {
    /// Groups `records` in one pass.
    #[must_use]
    pub fn new(records: &'a [LedgerRecord]) -> Self {
        let mut g = Self::default();
        for r in records {
            match r {
                LedgerRecord::Call(c) => g.calls.entry(c.rollout.as_str()).or_default().push(c),
                LedgerRecord::Body(b) => {
                    g.bodies.insert(b.digest.as_str(), b.bytes.as_slice());
                }
            }
        }
        g
    }

    /// The trajectory of `rollout`.
    #[must_use]
    pub fn build(
        &self,
        rollout: &str,
        outcome: Option<&Outcome>,
        policy: impl Into<Breaks>,
    ) -> Trajectory {
        let mut ordered = self.calls.get(rollout).cloned().unwrap_or_default();
        ordered.sort_by_key(|c| (c.attempt, c.seq));
        let records = Records {
            calls: ordered.iter().map(|c| (c.call_id.as_str(), *c)).collect(),
            bodies: &self.bodies,
        };
        build_one(rollout, &records, &ordered, outcome, policy.into())
    }
}

/// Builds the trajectory of `rollout` from ledger records (of it, or of many rollouts).
#[must_use]
pub fn build(
    rollout: &str,
    records: &[LedgerRecord],
    outcome: Option<&Outcome>,
    policy: impl Into<Breaks>,
) -> Trajectory {
    Grouped::new(records).build(rollout, outcome, policy)
}

fn build_one(
    rollout: &str,
    records: &Records<'_, '_>,
    ordered: &[&CallRecord],
    outcome: Option<&Outcome>,
    policy: Breaks,
) -> Trajectory {
    let attempt = outcome.map_or_else(
        || ordered.iter().map(|c| c.attempt).max().unwrap_or(0),
        |o| o.attempt,
    );
    let mut t = Trajectory {
        v: TRAJECTORY_VERSION,
        rollout: rollout.to_owned(),
        attempt,
        trainable: false,
        not_trainable: None,
        reward: outcome.and_then(|o| o.reward),
        passed: outcome.and_then(|o| o.passed),
        group: outcome.and_then(|o| o.group.clone()),
        infra_class: outcome.and_then(|o| o.infra_class.clone()),
        calls: Vec::new(),
        token_breaks: Vec::new(),
        segments: Vec::new(),
        metrics: Metrics {
            paused_ms: outcome.map_or(0, |o| o.paused_ms),
            launches: outcome.map_or(0, |o| o.launches),
            checkpoints: outcome.map_or(0, |o| o.checkpoints),
            ..Metrics::default()
        },
    };
    let fail = |t: &mut Trajectory, n: NotTrainable| {
        if t.not_trainable.is_none() {
            t.not_trainable = Some(n);
        }
    };
    if let Some(class) = &t.infra_class {
        let n = NotTrainable {
            reason: Reason::InfraError,
            call_id: None,
            message: format!("the infrastructure ended rollout {rollout}: {class}"),
        };
        fail(&mut t, n);
    }
    let chain = match chain(records, ordered, attempt) {
        Ok(chain) => chain,
        Err(n) => {
            fail(&mut t, n);
            return t;
        }
    };
    for c in &chain {
        let source = records.source(c);
        t.metrics.turns += 1;
        t.metrics.tool_calls += tool_calls(records, source);
        let latency_ms = source
            .upstream_ms
            .zip(source.finished_ms)
            .map(|(a, b)| u64::try_from(b - a).unwrap_or(0));
        t.metrics.model_latency_ms += latency_ms.unwrap_or(0);
        match records.tokens(c) {
            Ok(tokens) => {
                t.metrics.prompt_tokens += tokens.prompt_ids.len() as u64;
                t.metrics.completion_tokens += tokens.completion_ids.len() as u64;
                t.calls.push(TrajectoryCall {
                    call_id: c.call_id.clone(),
                    route: c.route.clone(),
                    model: tokens.model.or_else(|| c.model.clone()),
                    prompt_ids: tokens.prompt_ids,
                    completion_ids: tokens.completion_ids,
                    logprobs: tokens.logprobs,
                    finish_reason: tokens.finish_reason,
                    replayed_from: c.replayed_from.clone(),
                    latency_ms,
                    policy_version: source.policy_version.clone(),
                });
            }
            Err(n) => {
                fail(&mut t, n);
                return t;
            }
        }
    }
    merge(&mut t, policy);
    if policy.versions == VersionPolicy::Refuse
        && let Some(c) = first_version_change(&t.calls)
    {
        let n = NotTrainable {
            reason: Reason::PolicyVersions,
            call_id: Some(c.call_id.clone()),
            message: format!(
                "call {} was answered by policy version {}, an earlier call by another",
                c.call_id,
                c.policy_version.as_deref().unwrap_or("(unknown)")
            ),
        };
        fail(&mut t, n);
    }
    if let Some(b) = t
        .token_breaks
        .first()
        .filter(|_| policy.tokens == BreakPolicy::Mask)
    {
        let n = NotTrainable {
            reason: Reason::TokenBreak,
            call_id: Some(b.call_id.clone()),
            message: format!(
                "the prompt of call {} departs from the previous call's tokens at {}",
                b.call_id, b.position
            ),
        };
        fail(&mut t, n);
    }
    if outcome.is_none_or(|o| !o.finished) {
        fail(
            &mut t,
            NotTrainable {
                reason: Reason::NotFinished,
                call_id: None,
                message: format!("rollout {rollout} has no result"),
            },
        );
    }
    t.trainable = t.not_trainable.is_none();
    t
}

/// Tool calls in the answer of `c`.
fn tool_calls(records: &Records<'_, '_>, c: &CallRecord) -> u64 {
    let Some(body) = c
        .response_digest
        .as_deref()
        .and_then(|d| records.bodies.get(d))
    else {
        return 0;
    };
    let route = match c.route.as_str() {
        "chat" => rollpoint_gateway::conversation::Route::Chat,
        "responses" => rollpoint_gateway::conversation::Route::Responses,
        "messages" => rollpoint_gateway::conversation::Route::Messages,
        _ => return 0,
    };
    let view = rollpoint_gateway::response::read_response(route, c.stream, body);
    view.turn.map_or(0, |turn| {
        turn.iter()
            .filter(|a| matches!(a, rollpoint_gateway::conversation::Atom::Call { .. }))
            .count() as u64
    })
}

/// Joins the calls into segments, finding token breaks.
/// The first call answered by another policy version than the call before it.
fn first_version_change(calls: &[TrajectoryCall]) -> Option<&TrajectoryCall> {
    calls
        .windows(2)
        .find(|w| w[0].policy_version != w[1].policy_version)
        .map(|w| &w[1])
}

fn merge(t: &mut Trajectory, policy: Breaks) {
    let mut segments: Vec<Segment> = Vec::new();
    let mut previous: Option<Vec<u32>> = None;
    let mut last_version: Option<&Option<String>> = None;
    for (i, call) in t.calls.iter().enumerate() {
        let new_version = policy.versions == VersionPolicy::Split
            && last_version.is_some_and(|v| *v != call.policy_version);
        last_version = Some(&call.policy_version);
        let broke = previous
            .as_ref()
            .and_then(|p| break_at(&call.prompt_ids, p));
        if let Some(position) = broke {
            t.token_breaks.push(TokenBreak {
                call_index: i,
                call_id: call.call_id.clone(),
                position,
            });
        }
        if broke.is_some() || new_version || segments.is_empty() {
            segments.push(Segment {
                first_call: i,
                tokens: Vec::new(),
                loss_mask: Vec::new(),
                logprobs: Some(Vec::new()),
                policy_versions: Vec::new(),
            });
        }
        let Some(seg) = segments.last_mut() else {
            continue;
        };
        if let Some(v) = &call.policy_version
            && !seg.policy_versions.contains(v)
        {
            seg.policy_versions.push(v.clone());
        }
        let added = &call.prompt_ids[seg.tokens.len().min(call.prompt_ids.len())..];
        seg.tokens.extend_from_slice(added);
        seg.loss_mask.extend(std::iter::repeat_n(0, added.len()));
        seg.tokens.extend_from_slice(&call.completion_ids);
        seg.loss_mask
            .extend(std::iter::repeat_n(1, call.completion_ids.len()));
        match (&mut seg.logprobs, &call.logprobs) {
            (Some(lp), Some(own)) => {
                lp.extend(std::iter::repeat_n(0.0, added.len()));
                lp.extend_from_slice(own);
            }
            (slot, _) => *slot = None,
        }
        let mut next = call.prompt_ids.clone();
        next.extend_from_slice(&call.completion_ids);
        previous = Some(next);
    }
    // Masking a broken rollout: nothing of it is trained on.
    if policy.tokens == BreakPolicy::Mask && !t.token_breaks.is_empty() {
        for seg in &mut segments {
            seg.loss_mask.fill(0);
        }
    }
    t.segments = segments;
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use rollpoint_gateway::ledger::record::BodyRecord;
    use rollpoint_gateway::tokens::TokenFault;

    use super::*;

    fn tokens(prompt: &[u32], completion: &[u32]) -> (LedgerRecord, String) {
        let doc = CallTokens {
            prompt_ids: prompt.to_vec(),
            completion_ids: completion.to_vec(),
            logprobs: Some(completion.iter().map(|&x| -f64::from(x) / 100.0).collect()),
            finish_reason: Some("stop".into()),
            model: Some("m".into()),
            weights_version: None,
        };
        let bytes = doc.encode();
        let digest = rollpoint_gateway::digest::sha256_hex(&bytes);
        (
            LedgerRecord::Body(BodyRecord {
                digest: digest.clone(),
                bytes,
            }),
            digest,
        )
    }

    fn call(
        id: &str,
        attempt: u32,
        seq: i64,
        parent: Option<&str>,
        digest: Option<&str>,
    ) -> CallRecord {
        let line = serde_json::json!({
            "call_id": id, "capture_key": "r", "rollout": "r", "attempt": attempt, "seq": seq,
            "route": "chat", "stream": false, "model": "m", "request_digest": null,
            "conversation_digest": null, "items": [], "model_fp": null, "output_fp": null,
            "parent_call_id": parent, "lineage": if parent.is_some() { "resolved" } else { "root" },
            "lineage_reason": if parent.is_some() { None } else { Some("first_turn") },
            "status": "ok", "http_status": 200, "content_type": null, "error": null,
            "replayed_from": null, "response_digest": null, "usage": null, "admitted_ms": 0,
            "upstream_ms": 10, "first_byte_ms": null, "finished_ms": 25, "delivered_ms": null,
            "tokens_digest": digest, "tokens_fault": null});
        serde_json::from_value(line).unwrap()
    }

    fn done() -> Outcome {
        Outcome {
            finished: true,
            attempt: 1,
            reward: Some(1.0),
            passed: Some(true),
            ..Outcome::default()
        }
    }

    /// Two calls before a restore, a replay of the second and a third after it, and an
    /// abandoned retry: the chain is the three answers, joined into one segment.
    fn records(third_prompt: &[u32]) -> Vec<LedgerRecord> {
        let (b0, d0) = tokens(&[1, 2], &[3]);
        let (b1, d1) = tokens(&[1, 2, 3, 4], &[5, 6]);
        let (b2, d2) = tokens(third_prompt, &[9]);
        let mut replay = call("r-a1#0", 1, 0, Some("r#0"), None);
        replay.status = CallStatus::Replayed;
        replay.replayed_from = Some("r#1".into());
        let mut retry = call("r-a1#1", 1, 1, Some("r-a1#0"), None);
        retry.status = CallStatus::UpstreamStatus;
        vec![
            b0,
            b1,
            b2,
            LedgerRecord::Call(Box::new(call("r#0", 0, 0, None, Some(&d0)))),
            LedgerRecord::Call(Box::new(call("r#1", 0, 1, Some("r#0"), Some(&d1)))),
            LedgerRecord::Call(Box::new(replay)),
            LedgerRecord::Call(Box::new(retry)),
            LedgerRecord::Call(Box::new(call("r-a1#2", 1, 2, Some("r-a1#0"), Some(&d2)))),
        ]
    }

    /// `records` with the calls before the restore answered by policy version 1 and the
    /// call after it by version 2 (the replay carries its source's).
    fn versioned() -> Vec<LedgerRecord> {
        let mut all = records(&[1, 2, 3, 4, 5, 6, 7]);
        for r in &mut all {
            if let LedgerRecord::Call(c) = r {
                c.policy_version = match c.call_id.as_str() {
                    "r#0" | "r#1" => Some("1".into()),
                    "r-a1#2" => Some("2".into()),
                    _ => None,
                };
            }
        }
        all
    }

    #[test]
    fn calls_carry_their_policy_version_and_segments_keep_split_or_refuse_a_change() {
        let breaks = |versions| Breaks {
            tokens: BreakPolicy::Split,
            versions,
        };
        let kept = build(
            "r",
            &versioned(),
            Some(&done()),
            breaks(VersionPolicy::Keep),
        );
        let per_call: Vec<Option<&str>> = kept
            .calls
            .iter()
            .map(|c| c.policy_version.as_deref())
            .collect();
        assert_eq!(per_call, [Some("1"), Some("1"), Some("2")]);
        assert!(kept.trainable, "{:?}", kept.not_trainable);
        assert_eq!(kept.segments.len(), 1);
        assert_eq!(kept.segments[0].policy_versions, ["1", "2"]);

        let split = build(
            "r",
            &versioned(),
            Some(&done()),
            breaks(VersionPolicy::Split),
        );
        assert!(split.trainable);
        let firsts: Vec<usize> = split.segments.iter().map(|s| s.first_call).collect();
        assert_eq!(firsts, [0, 2]);
        assert_eq!(split.segments[0].policy_versions, ["1"]);
        assert_eq!(split.segments[1].policy_versions, ["2"]);
        assert!(
            split.token_breaks.is_empty(),
            "a version change is no token break"
        );
        let joined: usize = split.segments.iter().map(|s| s.tokens.len()).sum();
        assert_eq!(
            joined,
            kept.segments[0].tokens.len() + 6,
            "the second segment holds its whole prompt"
        );

        let refused = build(
            "r",
            &versioned(),
            Some(&done()),
            breaks(VersionPolicy::Refuse),
        );
        assert!(!refused.trainable);
        let why = refused.not_trainable.unwrap();
        assert_eq!(why.reason, Reason::PolicyVersions);
        assert_eq!(why.call_id.as_deref(), Some("r-a1#2"));
    }

    #[test]
    fn the_chain_of_the_final_answer_is_merged_with_the_harness_tokens_masked() {
        let t = build(
            "r",
            &records(&[1, 2, 3, 4, 5, 6, 7]),
            Some(&done()),
            BreakPolicy::Split,
        );
        assert!(t.trainable, "{:?}", t.not_trainable);
        let ids: Vec<&str> = t.calls.iter().map(|c| c.call_id.as_str()).collect();
        assert_eq!(ids, ["r#0", "r-a1#0", "r-a1#2"]);
        assert_eq!(
            t.calls[1].completion_ids,
            [5, 6],
            "a replay takes its source's tokens"
        );
        assert!(t.token_breaks.is_empty());
        assert_eq!(t.segments.len(), 1);
        let s = &t.segments[0];
        assert_eq!(s.tokens, [1, 2, 3, 4, 5, 6, 7, 9]);
        assert_eq!(s.loss_mask, [0, 0, 1, 0, 1, 1, 0, 1]);
        assert_eq!(s.logprobs.as_ref().unwrap()[4], -0.05);
        assert_eq!((t.metrics.turns, t.metrics.model_latency_ms), (3, 45));
    }

    #[test]
    fn a_token_break_is_reported_and_splits_or_masks() {
        let broken = records(&[1, 2, 3, 4, 5, 8, 7]);
        let t = build("r", &broken, Some(&done()), BreakPolicy::Split);
        assert!(t.trainable);
        assert_eq!(
            t.token_breaks,
            [TokenBreak {
                call_index: 2,
                call_id: "r-a1#2".into(),
                position: 5
            }]
        );
        assert_eq!(t.segments.len(), 2);
        assert_eq!(t.segments[1].first_call, 2);
        assert_eq!(t.segments[1].tokens, [1, 2, 3, 4, 5, 8, 7, 9]);
        let t = build("r", &broken, Some(&done()), BreakPolicy::Mask);
        assert!(!t.trainable);
        assert_eq!(t.not_trainable.unwrap().reason, Reason::TokenBreak);
        assert!(
            t.segments
                .iter()
                .all(|s| s.loss_mask.iter().all(|&m| m == 0))
        );
    }

    #[test]
    fn an_unresolved_parent_or_missing_tokens_fail_closed_with_the_call() {
        let mut recs = records(&[1, 2, 3, 4, 5, 6, 7]);
        if let LedgerRecord::Call(c) = &mut recs[7] {
            c.parent_call_id = Some("r-a1#9".into());
        }
        let t = build("r", &recs, Some(&done()), BreakPolicy::Split);
        let n = t.not_trainable.unwrap();
        assert_eq!(
            (n.reason, n.call_id.as_deref()),
            (Reason::UnresolvedLineage, Some("r-a1#2"))
        );
        let mut recs = records(&[1, 2, 3, 4, 5, 6, 7]);
        if let LedgerRecord::Call(c) = &mut recs[3] {
            c.tokens_digest = None;
            c.tokens_fault = Some(TokenFault::new(FaultKind::Missing, "call r#0: none"));
        }
        let t = build("r", &recs, Some(&done()), BreakPolicy::Split);
        let n = t.not_trainable.unwrap();
        assert_eq!(
            (n.reason, n.call_id.as_deref()),
            (Reason::MissingTokens, Some("r#0"))
        );
        let t = build(
            "r",
            &records(&[1, 2, 3, 4, 5, 6, 7]),
            None,
            BreakPolicy::Split,
        );
        assert_eq!(t.not_trainable.unwrap().reason, Reason::NotFinished);
        let t = build("none", &[], Some(&done()), BreakPolicy::Split);
        assert_eq!(t.not_trainable.unwrap().reason, Reason::NoCalls);
    }
}
