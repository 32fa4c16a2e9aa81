//! The launches a checkpoint's prepare paused as one batch through the
//! owner: each run takes its receipt instead of asking its supervisor, and
//! opening the checkpoint continues them all as one batch again.
//!
//! A launch the batch did not take (its owner does not batch, its cgroup
//! was gone, the call failed) is paused by its supervisor as before; one
//! the batch could not freeze within the budgets has a failed receipt, and
//! its run falls back to stopping it, as after any failed pause.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rollpoint_owner::{Owner, SessionLaunch};
use rollpoint_proto::receipt::{Method, Op, Outcome, RECEIPT_VERSION, Receipt};

#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// This checkpoint's pause receipts, by launch id.
    paused: Mutex<HashMap<String, (SessionLaunch, Receipt)>>,
    /// The continue receipts of the last open, by launch id.
    continued: Mutex<HashMap<String, Receipt>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Batch {
    /// Pauses `launches` as one batch and keeps their receipts.
    pub(crate) async fn pause(&self, owner: &dyn Owner, launches: Vec<SessionLaunch>) {
        lock(&self.continued).clear();
        if launches.is_empty() {
            return;
        }
        match owner.pause_launches(&launches).await {
            Ok(receipts) => {
                let mut paused = lock(&self.paused);
                for (launch, receipt) in launches.into_iter().zip(receipts) {
                    if let Some(receipt) = receipt {
                        paused.insert(launch.launch_id.clone(), (launch, receipt));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, launches = launches.len(), "the batched pause failed: each launch is paused by its supervisor");
            }
        }
    }

    /// The batch's pause receipt for `launch_id`, if it took the launch.
    pub(crate) fn paused(&self, launch_id: &str) -> Option<Receipt> {
        lock(&self.paused).get(launch_id).map(|(_, r)| r.clone())
    }

    /// Continues every launch the batch froze, as one batch, and keeps the
    /// receipts for the runs to take.
    pub(crate) async fn continue_all(&self, owner: &dyn Owner) {
        let (frozen, methods): (Vec<SessionLaunch>, Vec<Method>) = lock(&self.paused)
            .drain()
            .filter(|(_, (_, r))| r.confirmed())
            .map(|(_, (l, r))| (l, r.method))
            .unzip();
        if frozen.is_empty() {
            return;
        }
        let receipts = match owner.continue_launches(&frozen).await {
            Ok(receipts) => receipts,
            Err(e) => frozen
                .iter()
                .zip(methods)
                .map(|(l, method)| Receipt {
                    v: RECEIPT_VERSION,
                    op: Op::Continue,
                    launch_id: l.launch_id.clone(),
                    method,
                    outcome: Outcome::Failed,
                    members: Vec::new(),
                    rounds: 0,
                    duration_us: 0,
                    reason: Some(format!("the batched continue failed: {e}")),
                    cleanup_confirmed: None,
                    exit_code: None,
                })
                .collect(),
        };
        let mut continued = lock(&self.continued);
        for receipt in receipts {
            continued.insert(receipt.launch_id.clone(), receipt);
        }
    }

    /// The continue receipt of a launch the batch paused, once.
    pub(crate) fn take_continued(&self, launch_id: &str) -> Option<Receipt> {
        lock(&self.continued).remove(launch_id)
    }
}
