//! The rollouts an agent service knows: each rollout id with its current
//! attempt and, once it ended, its outcome. Waiters (long polls, cancel)
//! watch an entry's outcome; a restore replaces the attempt and clears the
//! outcome, and a late outcome of an older attempt is dropped.

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
    outcome: watch::Sender<Option<Outcome>>,
}

/// One rollout as read from the table.
#[derive(Debug)]
pub struct Seen {
    pub attempt: u32,
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
        entries.insert(
            rollout.to_owned(),
            Entry {
                attempt: 0,
                outcome: watch::Sender::new(None),
            },
        );
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
                e.outcome.send_replace(None);
            }
            None => {
                entries.insert(
                    rollout.to_owned(),
                    Entry {
                        attempt,
                        outcome: watch::Sender::new(None),
                    },
                );
            }
        }
    }

    /// Records how `attempt` ended; false (and nothing recorded) when the
    /// rollout has moved on to another attempt.
    pub fn finish(&self, rollout: &str, attempt: u32, outcome: Outcome) -> bool {
        let entries = self.entries();
        match entries.get(rollout) {
            Some(e) if e.attempt == attempt => {
                e.outcome.send_replace(Some(outcome));
                true
            }
            _ => false,
        }
    }

    pub fn get(&self, rollout: &str) -> Option<Seen> {
        self.entries().get(rollout).map(|e| Seen {
            attempt: e.attempt,
            outcome: e.outcome.borrow().clone(),
            changes: e.outcome.subscribe(),
        })
    }

    /// Every rollout with its attempt and outcome, by id.
    pub fn list(&self) -> Vec<(String, u32, Option<Outcome>)> {
        self.entries()
            .iter()
            .map(|(r, e)| (r.clone(), e.attempt, e.outcome.borrow().clone()))
            .collect()
    }
}
