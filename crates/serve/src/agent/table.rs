//! The rollouts an agent service knows: each rollout id with its current
//! attempt and, once it ended, its outcome. Waiters (long polls, cancel)
//! watch an entry's outcome; a restore replaces the attempt and clears the
//! outcome, and a late outcome of an older or retired attempt is dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rollpoint_driver::RolloutResult;
use tokio::sync::watch;

/// How a rollout's run ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    Done(Arc<RolloutResult>),
    /// The run ended without a result.
    Lost(String),
}

#[derive(Debug)]
struct Entry {
    attempt: u32,
    /// The attempt was retired before it ended: how its run ends is not
    /// its result (a restore continues the rollout as the next attempt).
    retired: bool,
    outcome: watch::Sender<Option<Outcome>>,
}

impl Entry {
    fn new(attempt: u32) -> Self {
        Self {
            attempt,
            retired: false,
            outcome: watch::Sender::new(None),
        }
    }
}

/// One rollout as read from the table.
#[derive(Debug)]
pub struct Seen {
    pub attempt: u32,
    pub retired: bool,
    pub outcome: Option<Outcome>,
    pub changes: watch::Receiver<Option<Outcome>>,
}

#[derive(Debug, Default)]
pub struct Table {
    entries: Mutex<BTreeMap<String, Entry>>,
}

impl Table {
    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        // Plain data changed in single steps: a poisoned lock is still whole.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims `rollout` for a new run as attempt 0; false when the id is
    /// taken (running or finished).
    pub fn claim(&self, rollout: &str) -> bool {
        let mut entries = self.entries();
        if entries.contains_key(rollout) {
            return false;
        }
        entries.insert(rollout.to_owned(), Entry::new(0));
        true
    }

    /// Gives up a claim whose run could not start.
    pub fn release(&self, rollout: &str) {
        self.entries().remove(rollout);
    }

    /// Makes `attempt` the rollout's current one (a restore), with no
    /// outcome yet. Waiters of an older attempt keep waiting for this one.
    pub fn adopt(&self, rollout: &str, attempt: u32) {
        let mut entries = self.entries();
        match entries.get_mut(rollout) {
            Some(e) => {
                e.attempt = attempt;
                e.retired = false;
                e.outcome.send_replace(None);
            }
            None => {
                entries.insert(rollout.to_owned(), Entry::new(attempt));
            }
        }
    }

    /// Marks the rollout's current attempt retired if it is `upto` or
    /// earlier and has no outcome yet.
    pub fn retire(&self, rollout: &str, upto: u32) {
        if let Some(e) = self.entries().get_mut(rollout)
            && e.attempt <= upto
            && e.outcome.borrow().is_none()
        {
            e.retired = true;
        }
    }

    /// Records how `attempt` ended; false (and nothing recorded) when the
    /// rollout has moved on to another attempt or this one was retired.
    pub fn finish(&self, rollout: &str, attempt: u32, outcome: Outcome) -> bool {
        let entries = self.entries();
        match entries.get(rollout) {
            Some(e) if e.attempt == attempt && !e.retired => {
                e.outcome.send_replace(Some(outcome));
                true
            }
            _ => false,
        }
    }

    pub fn get(&self, rollout: &str) -> Option<Seen> {
        self.entries().get(rollout).map(|e| Seen {
            attempt: e.attempt,
            retired: e.retired,
            outcome: e.outcome.borrow().clone(),
            changes: e.outcome.subscribe(),
        })
    }

    /// Every rollout with what [`Self::get`] reads, by id.
    pub fn list(&self) -> Vec<(String, Seen)> {
        self.entries()
            .iter()
            .map(|(r, e)| {
                (
                    r.clone(),
                    Seen {
                        attempt: e.attempt,
                        retired: e.retired,
                        outcome: e.outcome.borrow().clone(),
                        changes: e.outcome.subscribe(),
                    },
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(why: &str) -> Outcome {
        Outcome::Lost(why.to_owned())
    }

    #[test]
    fn ids_are_claimed_once_and_released_on_failure() {
        let t = Table::default();
        assert!(t.claim("r"));
        assert!(!t.claim("r"));
        t.release("r");
        assert!(t.claim("r"));
    }

    #[test]
    fn outcomes_of_older_or_retired_attempts_are_dropped() {
        let t = Table::default();
        assert!(t.claim("r"));
        t.retire("r", 0);
        assert!(!t.finish("r", 0, lost("cancelled by retire")));
        let seen = t.get("r").expect("known");
        assert!(seen.retired && seen.outcome.is_none());

        t.adopt("r", 1);
        assert!(!t.finish("r", 0, lost("late")));
        assert!(t.finish("r", 1, lost("ended")));
        let seen = t.get("r").expect("known");
        assert_eq!((seen.attempt, seen.retired), (1, false));
        assert!(matches!(seen.outcome, Some(Outcome::Lost(ref m)) if m == "ended"));

        // A finished attempt is not retired after the fact.
        t.retire("r", 1);
        assert!(!t.get("r").expect("known").retired);
    }

    #[test]
    fn a_waiter_sees_the_adopted_attempt_end() {
        let t = Table::default();
        assert!(t.claim("r"));
        let mut changes = t.get("r").expect("known").changes;
        t.adopt("r", 1);
        assert!(changes.borrow_and_update().is_none());
        assert!(t.finish("r", 1, lost("ended")));
        assert!(changes.has_changed().expect("open"));
        assert!(changes.borrow().is_some());
    }
}
