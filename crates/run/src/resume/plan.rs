//! What a resume does with each task, decided from what is on disk: the
//! tasks, the finished rows of `results.jsonl`, the attempts in `run.json`
//! and the scope of the latest published checkpoint. Pure, so every case is
//! tested without sandboxes.

use std::collections::{BTreeMap, BTreeSet};

use rollpoint_proto::key::{AttemptKey, RolloutId};

/// A resume's decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumePlan {
    /// Attempt keys to restore from the checkpoint (they continue as their
    /// next attempt).
    pub restore: Vec<AttemptKey>,
    /// Attempt keys to retire: their rollouts start over as the next attempt.
    pub retire: Vec<AttemptKey>,
    /// Rollouts never dispatched: they start at attempt 0.
    pub fresh: Vec<RolloutId>,
    /// Rollouts with a result row: never run again.
    pub finished: BTreeSet<String>,
}

/// Decides a resume. `tasks` are rollout ids in file order; `attempts` the
/// last dispatched attempt per rollout; `checkpoint` the latest checkpoint's
/// scope, if there is one.
pub fn plan_resume(
    tasks: &[RolloutId],
    finished: &BTreeSet<String>,
    attempts: &BTreeMap<String, u32>,
    checkpoint: Option<&[AttemptKey]>,
) -> ResumePlan {
    let saved: BTreeMap<&RolloutId, u32> = checkpoint
        .unwrap_or_default()
        .iter()
        .map(|k| (k.rollout(), k.attempt()))
        .collect();
    let mut plan = ResumePlan {
        finished: finished.clone(),
        ..ResumePlan::default()
    };
    for rollout in tasks {
        if finished.contains(rollout.as_str()) {
            continue;
        }
        let key = |attempt| AttemptKey::new(rollout.clone(), attempt);
        match (attempts.get(rollout.as_str()), saved.get(rollout)) {
            // Saved as the attempt that last ran: it continues.
            (Some(last), Some(at)) if last == at => plan.restore.push(key(*at)),
            (Some(last), _) => plan.retire.push(key(*last)),
            (None, _) => plan.fresh.push(rollout.clone()),
        }
    }
    plan
}

/// Moves restore keys whose saved bookmark names a session the saved
/// sandboxes do not hold over to retire: restoring them would continue in a
/// session that does not exist. `sessions` maps each restore key to the
/// session its bookmark continues in (`None`: it starts from its seed), and
/// `saved` holds the (key, session) pairs the resources saved.
pub fn drop_unsaved_sessions(
    plan: &mut ResumePlan,
    sessions: &BTreeMap<AttemptKey, Option<String>>,
    saved: &BTreeSet<(AttemptKey, String)>,
) -> Vec<AttemptKey> {
    let (keep, moved): (Vec<AttemptKey>, Vec<AttemptKey>) = std::mem::take(&mut plan.restore)
        .into_iter()
        .partition(|k| match sessions.get(k) {
            Some(None) => true,
            Some(Some(session)) => saved.contains(&(k.clone(), session.clone())),
            None => false,
        });
    plan.restore = keep;
    plan.retire.extend(moved.iter().cloned());
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<AttemptKey> {
        v.iter().map(|x| k(x)).collect()
    }

    fn k(text: &str) -> AttemptKey {
        AttemptKey::parse(text).expect("key")
    }

    fn ids(v: &[&str]) -> Vec<RolloutId> {
        v.iter().map(|x| RolloutId::new(x).expect("id")).collect()
    }

    #[test]
    fn finished_never_rerun_saved_restored_the_rest_retired_or_fresh() {
        let tasks = ids(&["a", "b", "c", "d", "e"]);
        let finished = BTreeSet::from(["a".to_owned()]);
        let attempts = BTreeMap::from([
            ("a".to_owned(), 0),
            ("b".to_owned(), 0),
            ("c".to_owned(), 2),
            ("d".to_owned(), 1),
        ]);
        let scope = s(&["a", "b", "c-a1", "d-a1"]);
        let plan = plan_resume(&tasks, &finished, &attempts, Some(&scope));
        assert_eq!(plan.restore, s(&["b", "d-a1"]));
        assert_eq!(plan.retire, s(&["c-a2"]), "saved at an older attempt");
        assert_eq!(plan.fresh, ids(&["e"]));

        let mut moved = plan.clone();
        let sessions = BTreeMap::from([(k("b"), Some("s-b".to_owned())), (k("d-a1"), None)]);
        let saved = BTreeSet::new();
        let out = drop_unsaved_sessions(&mut moved, &sessions, &saved);
        assert_eq!(out, s(&["b"]), "b's session was not saved");
        assert_eq!(moved.restore, s(&["d-a1"]), "a seed needs no session");
        assert_eq!(moved.retire, s(&["c-a2", "b"]));
        let saved = BTreeSet::from([(k("b"), "s-b".to_owned())]);
        let mut kept = plan.clone();
        assert!(drop_unsaved_sessions(&mut kept, &sessions, &saved).is_empty());
        assert_eq!(kept.restore, s(&["b", "d-a1"]));

        let none = plan_resume(&tasks, &finished, &attempts, None);
        assert!(none.restore.is_empty());
        assert_eq!(none.retire, s(&["b", "c-a2", "d-a1"]));
    }

    #[test]
    fn an_id_that_ends_like_an_attempt_cannot_be_planned() {
        // Such an id never reaches a plan: the tasks file refuses it, so a
        // checkpoint's `x-a1` can only be attempt 1 of `x`.
        assert!(RolloutId::new("x-a1").is_err());
        let tasks = ids(&["x", "x-a"]);
        let attempts = BTreeMap::from([("x".to_owned(), 1), ("x-a".to_owned(), 0)]);
        let scope = s(&["x-a1", "x-a"]);
        let plan = plan_resume(&tasks, &BTreeSet::new(), &attempts, Some(&scope));
        assert_eq!(plan.restore, s(&["x-a1", "x-a"]));
        assert!(plan.retire.is_empty() && plan.fresh.is_empty());
    }
}
