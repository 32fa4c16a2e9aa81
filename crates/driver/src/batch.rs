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
    /// The continue receipts of the last opens not yet taken, by launch id.
    continued: Mutex<HashMap<String, (SessionLaunch, Receipt)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Batch {
    /// Pauses `launches` as one batch and keeps their receipts.
    ///
    /// The last open's continue receipts stay until their runs take them. A
    /// run that has not yet woken from that open is still parked, so it is
    /// not waiting on its launch and will not pause it again, yet the last
    /// batch already continued it: its launch is taken into this batch too,
    /// and the continue receipt it then takes is the next open's. (Without
    /// its receipt such a run would ask a supervisor that never paused the
    /// launch, and be stopped and relaunched.)
    pub(crate) async fn pause(&self, owner: &dyn Owner, mut launches: Vec<SessionLaunch>) {
        let untaken: Vec<SessionLaunch> = lock(&self.continued)
            .values()
            .map(|(l, _)| l.clone())
            .filter(|l| !launches.iter().any(|w| w.launch_id == l.launch_id))
            .collect();
        launches.extend(untaken);
        if launches.is_empty() {
            return;
        }
        match owner.pause_launches(&launches).await {
            Ok(receipts) => {
                let mut paused = lock(&self.paused);
                let mut continued = lock(&self.continued);
                for (launch, receipt) in launches.into_iter().zip(receipts) {
                    // Paused again, or ended (its supervisor answers for an
                    // ended launch): an earlier continue no longer counts.
                    continued.remove(&launch.launch_id);
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
        for (launch, receipt) in frozen.into_iter().zip(receipts) {
            continued.insert(launch.launch_id.clone(), (launch, receipt));
        }
    }

    /// The continue receipt of a launch the batch paused, once.
    pub(crate) fn take_continued(&self, launch_id: &str) -> Option<Receipt> {
        lock(&self.continued).remove(launch_id).map(|(_, r)| r)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;
    use futures_util::future::BoxFuture;
    use rollpoint_owner::{Access, Launched, OwnerError, OwnerResult, SessionInfo, SessionRecord};
    use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};
    use rollpoint_proto::receipt::Member;

    /// Pauses and continues whatever it is asked, recording each batch;
    /// every other call is an error.
    #[derive(Debug, Default)]
    struct BatchOwner {
        asked: Mutex<Vec<(Op, Vec<String>)>>,
    }

    fn receipt(op: Op, launch: &SessionLaunch) -> Receipt {
        Receipt {
            v: RECEIPT_VERSION,
            op,
            launch_id: launch.launch_id.clone(),
            method: Method::CgroupV2,
            outcome: Outcome::Confirmed,
            members: vec![Member {
                pid: 7,
                start_time: None,
                state: 'F',
            }],
            rounds: 1,
            duration_us: 1,
            reason: None,
            cleanup_confirmed: None,
            exit_code: None,
        }
    }

    fn refused<'a, T: Send + 'a>() -> BoxFuture<'a, OwnerResult<T>> {
        futures_util::future::ready(Err(OwnerError::Internal {
            message: "not used by a batch".into(),
        }))
        .boxed()
    }

    impl Owner for BatchOwner {
        fn create_session(
            &self,
            _: rollpoint_owner::OwnerTask,
        ) -> BoxFuture<'_, OwnerResult<SessionInfo>> {
            refused()
        }
        fn access<'a>(&'a self, _: &'a str) -> BoxFuture<'a, OwnerResult<Access>> {
            refused()
        }
        fn exec<'a>(
            &'a self,
            _: &'a str,
            _: ExecRequest,
        ) -> BoxFuture<'a, OwnerResult<ExecOutput>> {
            refused()
        }
        fn upload<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: Vec<u8>,
            _: u32,
        ) -> BoxFuture<'a, OwnerResult<()>> {
            refused()
        }
        fn download<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: u64,
        ) -> BoxFuture<'a, OwnerResult<Vec<u8>>> {
            refused()
        }
        fn launch<'a>(
            &'a self,
            _: &'a str,
            _: LaunchRequest,
        ) -> BoxFuture<'a, OwnerResult<Launched>> {
            refused()
        }
        fn usage<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, OwnerResult<rollpoint_owner::ResourceUsage>> {
            refused()
        }
        fn verify<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, OwnerResult<rollpoint_owner::Verdict>> {
            refused()
        }
        fn close<'a>(&'a self, _: &'a str) -> BoxFuture<'a, OwnerResult<()>> {
            refused()
        }
        fn snapshot<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, OwnerResult<SessionRecord>> {
            refused()
        }
        fn restore(&self, _: SessionRecord) -> BoxFuture<'_, OwnerResult<Access>> {
            refused()
        }
        fn delete_snapshot<'a>(&'a self, _: &'a str) -> BoxFuture<'a, OwnerResult<()>> {
            refused()
        }
        fn pause_launches<'a>(
            &'a self,
            launches: &'a [SessionLaunch],
        ) -> BoxFuture<'a, OwnerResult<Vec<Option<Receipt>>>> {
            let mut ids: Vec<String> = launches.iter().map(|l| l.launch_id.clone()).collect();
            ids.sort();
            lock(&self.asked).push((Op::Pause, ids));
            let out = launches
                .iter()
                .map(|l| Some(receipt(Op::Pause, l)))
                .collect();
            futures_util::future::ready(Ok(out)).boxed()
        }
        fn continue_launches<'a>(
            &'a self,
            launches: &'a [SessionLaunch],
        ) -> BoxFuture<'a, OwnerResult<Vec<Receipt>>> {
            let mut ids: Vec<String> = launches.iter().map(|l| l.launch_id.clone()).collect();
            ids.sort();
            lock(&self.asked).push((Op::Continue, ids));
            let out = launches.iter().map(|l| receipt(Op::Continue, l)).collect();
            futures_util::future::ready(Ok(out)).boxed()
        }
    }

    fn launch(id: &str) -> SessionLaunch {
        SessionLaunch {
            session: format!("s-{id}"),
            launch_id: id.to_owned(),
        }
    }

    /// A run still parked from the last open (its launch continued by the
    /// batch, its receipt not yet taken) is not waiting when the next
    /// checkpoint comes: its launch is paused again in that batch, and the
    /// continue it takes when it wakes is the next open's.
    #[tokio::test]
    async fn a_run_not_yet_woken_from_an_open_is_paused_again_by_the_next_batch() {
        let owner = BatchOwner::default();
        let batch = Batch::default();
        batch.pause(&owner, vec![launch("a"), launch("b")]).await;
        assert!(batch.paused("a").unwrap().confirmed());
        batch.continue_all(&owner).await;
        // `a` woke and took its continue; `b` has not woken yet.
        assert_eq!(batch.take_continued("a").unwrap().op, Op::Continue);

        // The next checkpoint: `a` waits on its launch again, `b` does not.
        batch.pause(&owner, vec![launch("a")]).await;
        assert!(
            batch.paused("b").unwrap().confirmed(),
            "b's launch frozen again"
        );
        assert!(
            batch.take_continued("b").is_none(),
            "the earlier continue no longer counts"
        );
        batch.continue_all(&owner).await;
        assert_eq!(batch.take_continued("b").unwrap().op, Op::Continue);
        assert_eq!(batch.take_continued("b"), None, "taken once");
        assert_eq!(
            *lock(&owner.asked),
            vec![
                (Op::Pause, vec!["a".to_owned(), "b".to_owned()]),
                (Op::Continue, vec!["a".to_owned(), "b".to_owned()]),
                (Op::Pause, vec!["a".to_owned(), "b".to_owned()]),
                (Op::Continue, vec!["a".to_owned(), "b".to_owned()]),
            ]
        );
    }
}
