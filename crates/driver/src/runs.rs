//! The registry of runs: the in-process interface the checkpoint control
//! plane calls. A run is registered (and exportable at its seed bookmark)
//! before it waits for a concurrency slot; a park request makes every run
//! pause or stop its harness and park at a bookmark; `open` lets them go on;
//! `install` continues runs from exported bookmarks as their next attempt.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rollpoint_owner::Owner;
use tokio::sync::{Semaphore, oneshot, watch};

use crate::adapter::from_spec;
use crate::bookmark::{Bookmark, Next};
pub use crate::ctl::{Ctl, RunStatus};
use crate::errors::DriverError;
use crate::machine::event::ParkKind;
use crate::machine::state::{Machine, Setup};
use crate::result::RolloutResult;
use crate::runner::context::{Budgets, Runner};
use crate::store::Store;
use crate::task::RolloutTask;
use rollpoint_proto::clock::unix_ms;

/// Most slots a registry may have.
pub const MAX_SLOTS: usize = 65_536;

/// Settings of a registry.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Off: every run is a restart (never parked, stops its sandbox).
    pub checkpointing: bool,
    /// Runs that may hold a slot (seeding, running or parked) at once (1..=[`MAX_SLOTS`]).
    pub slots: usize,
    /// How long `request_park` waits for one run to park.
    pub park_timeout: Duration,
    pub budgets: Budgets,
    /// Where each bookmark is also written durably, if anywhere.
    pub bookmarks_dir: Option<PathBuf>,
    /// The run's route key: each launch's route carries its attempt's secret
    /// (`ROLLPOINT_CAPTURE_KEY` is `<key>@<secret>`). `None`: the bare key,
    /// for a gateway that checks none.
    pub route_key: Option<rollpoint_proto::route::RouteKey>,
    /// Asked before grading whether the model left the harness unanswered.
    pub model_health: Option<Arc<dyn crate::health::ModelHealth>>,
}

impl Default for DriverConfig {
    fn default() -> Self {
        Self {
            checkpointing: true,
            slots: 8,
            park_timeout: Duration::from_secs(300),
            budgets: Budgets::default(),
            bookmarks_dir: None,
            route_key: None,
            model_health: None,
        }
    }
}

/// How one run answered a park request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParkState {
    /// Its launch is frozen in place.
    Paused,
    /// Its launch had not started: the pause file holds it.
    Held,
    /// Its launch was stopped; it relaunches when the checkpoint opens.
    Stopped,
    /// No launch running: parked at its bookmark (`next`).
    AtBookmark(Next),
    /// Waiting for a slot: exported at its seed bookmark.
    Queued,
    /// Nothing can be saved of it: not parked, starts over after a crash.
    Restart,
    /// Finished: its bookmark holds the result.
    Finished,
    /// Could not park, and why.
    Blocked { reason: String },
}

/// The answer to [`Runs::request_park`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParkReport {
    /// Every registered run, by rollout id.
    pub runs: BTreeMap<String, ParkState>,
}

impl ParkReport {
    /// True when no run is blocked: a snapshot now is consistent.
    pub fn ready(&self) -> bool {
        !self
            .runs
            .values()
            .any(|s| matches!(s, ParkState::Blocked { .. }))
    }

    /// Runs in `state`'s kind (blocked ones match any reason).
    pub fn with(&self, pick: impl Fn(&ParkState) -> bool) -> Vec<&str> {
        self.runs
            .iter()
            .filter(|(_, s)| pick(s))
            .map(|(r, _)| r.as_str())
            .collect()
    }
}

/// A registered run; `result` waits for its end.
#[derive(Debug)]
pub struct RunHandle {
    pub rollout: String,
    done: oneshot::Receiver<RolloutResult>,
}

impl RunHandle {
    pub async fn result(self) -> Result<RolloutResult, DriverError> {
        self.done.await.map_err(|_| DriverError::Lost {
            rollout: self.rollout,
            message: "its task ended without sending a result".to_owned(),
        })
    }
}

#[derive(Debug)]
struct Entry {
    ctl: Arc<watch::Sender<Ctl>>,
    task: Arc<RolloutTask>,
}

#[derive(Debug)]
struct Inner {
    owner: Arc<dyn Owner>,
    config: DriverConfig,
    slots: Arc<Semaphore>,
    store: Option<Arc<Store>>,
    runs: Mutex<BTreeMap<String, Entry>>,
    /// A park is requested: runs registered now start parked.
    parking: Mutex<bool>,
    /// The fleet is paused: runs registered now start parked in place.
    fleet: Mutex<bool>,
    pauses: crate::metrics::PauseMetrics,
    batch: Arc<crate::batch::Batch>,
}

/// The registry of runs. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Runs {
    inner: Arc<Inner>,
}

impl Runs {
    /// The pause metrics of every run here, to register where `/metrics` is served.
    #[must_use]
    pub fn pause_metrics(&self) -> crate::metrics::PauseMetrics {
        self.inner.pauses.clone()
    }

    pub fn new(owner: Arc<dyn Owner>, config: DriverConfig) -> Result<Self, DriverError> {
        if !(1..=MAX_SLOTS).contains(&config.slots) {
            return Err(DriverError::Config {
                field: "slots",
                message: format!("{} is outside 1..={MAX_SLOTS}", config.slots),
            });
        }
        let store = match &config.bookmarks_dir {
            Some(dir) => Some(Arc::new(Store::open(dir)?)),
            None => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                owner,
                slots: Arc::new(Semaphore::new(config.slots)),
                config,
                store,
                runs: Mutex::new(BTreeMap::new()),
                parking: Mutex::new(false),
                fleet: Mutex::new(false),
                pauses: crate::metrics::PauseMetrics::default(),
                batch: Arc::default(),
            }),
        })
    }

    fn runs(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.inner
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn parking(&self) -> bool {
        *self
            .inner
            .parking
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new rollout (attempt 0) and starts it once a slot is
    /// free. It is exportable at its seed bookmark from now on.
    pub fn register(&self, task: RolloutTask) -> Result<RunHandle, DriverError> {
        task.validate()?;
        let mark = Bookmark::seed(task.rollout(), 0, unix_ms());
        self.start(task, mark, 0)
    }

    /// Continues rollouts from their bookmarks (as exported at a checkpoint)
    /// as their next attempt. Every bookmark is checked before any starts.
    pub fn install(
        &self,
        runs: Vec<(RolloutTask, Bookmark)>,
    ) -> Result<Vec<RunHandle>, DriverError> {
        for (task, mark) in &runs {
            task.validate()?;
            mark.validate().map_err(|source| DriverError::Bookmark {
                rollout: task.rollout().to_owned(),
                source,
            })?;
            if mark.rollout != task.rollout() {
                return Err(DriverError::Bookmark {
                    rollout: task.rollout().to_owned(),
                    source: crate::errors::BookmarkError::new(
                        "bookmark.rollout",
                        format!("{:?} is not the task's rollout", mark.rollout),
                    ),
                });
            }
        }
        runs.into_iter()
            .map(|(task, mark)| {
                let attempt = mark.attempt.saturating_add(1);
                self.start(task, mark, attempt)
            })
            .collect()
    }

    fn start(
        &self,
        task: RolloutTask,
        mark: Bookmark,
        attempt: u32,
    ) -> Result<RunHandle, DriverError> {
        let rollout = task.rollout().to_owned();
        let adapter = from_spec(&task.adapter);
        let setup = Setup {
            task_id: task.task.id.clone(),
            checkpointing: self.inner.config.checkpointing,
            pauses: adapter.pauses_at_checkpoints(),
            verify_mode: task.verify_mode,
        };
        let mut exported = mark.clone();
        exported.attempt = attempt;
        let ctl = Arc::new(watch::Sender::new(Ctl {
            park: self.parking(),
            stalled: false,
            fleet: *self
                .inner
                .fleet
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            pauses: setup.pauses,
            cancel: false,
            restart: !setup.checkpointing,
            waiting: None,
            status: RunStatus::Queued,
            bookmark: if setup.checkpointing {
                exported
            } else {
                Bookmark::seed(&rollout, attempt, mark.started_at_ms)
            },
        }));
        {
            let mut runs = self.runs();
            if runs
                .get(&rollout)
                .is_some_and(|e| e.ctl.borrow().status != RunStatus::Done)
            {
                return Err(DriverError::Duplicate { rollout });
            }
            runs.insert(
                rollout.clone(),
                Entry {
                    ctl: Arc::clone(&ctl),
                    task: Arc::new(task.clone()),
                },
            );
        }
        let machine = Machine::new(setup, mark, attempt);
        let runner = Runner {
            owner: Arc::clone(&self.inner.owner),
            adapter,
            task,
            ctl: Arc::clone(&ctl),
            budgets: self.inner.config.budgets.clone(),
            route_key: self.inner.config.route_key.clone(),
            model_health: self.inner.config.model_health.clone(),
            store: self.inner.store.clone(),
            launches: Default::default(),
            ran: Default::default(),
            resources: None,
            pauses: self.inner.pauses.clone(),
            batch: Arc::clone(&self.inner.batch),
        };
        let slots = Arc::clone(&self.inner.slots);
        let (tx, rx) = oneshot::channel();
        let span = tracing::info_span!("rollout", rollout = %rollout, attempt);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let mut cancelled = ctl.subscribe();
                // Queued: a cancel ends the wait; a park leaves it queued.
                let permit = tokio::select! {
                    p = slots.acquire_owned() => p.ok(),
                    _ = cancelled.wait_for(|c| c.cancel) => None,
                };
                let result = runner.drive(machine).await;
                drop(permit);
                ctl.send_modify(|c| c.status = RunStatus::Done);
                let _ = tx.send(result);
            },
            span,
        ));
        Ok(RunHandle { rollout, done: rx })
    }

    /// Pauses, as one batch through the owner, the launch of every running
    /// run whose adapter pauses in place: what a checkpoint's prepare asks
    /// of them all. Call before [`Runs::begin_park`]: each run then takes its
    /// receipt instead of asking its supervisor (a launch the batch did not
    /// take is asked as before), and [`Runs::open`] continues them as one
    /// batch.
    pub async fn pause_batch(&self) {
        let launches = self
            .runs()
            .values()
            .filter_map(|e| {
                let c = e.ctl.borrow();
                (c.pauses && !c.parks(c.pauses) && !c.cancel && c.status == RunStatus::Running)
                    .then(|| c.waiting.clone())
                    .flatten()
            })
            .collect();
        self.inner
            .batch
            .pause(self.inner.owner.as_ref(), launches)
            .await;
    }

    /// Asks every run to park and waits until each has parked (or is queued,
    /// a restart, finished), up to the park timeout per run.
    pub async fn request_park(&self) -> ParkReport {
        self.begin_park();
        let limit = self.inner.config.park_timeout;
        let runs = self
            .settle(|c| {
                matches!(
                    c.status,
                    RunStatus::Queued | RunStatus::Parked(_) | RunStatus::Done
                ) || c.restart
            })
            .await
            .into_iter()
            .map(|(rollout, settled, ctl)| {
                let state = match settled {
                    Some(Ok(c)) => park_state(&c),
                    Some(Err(())) => ParkState::Blocked {
                        reason: "its run is gone".to_owned(),
                    },
                    None => ParkState::Blocked {
                        reason: format!(
                            "did not park within {limit:?} (its last bookmark is `{}`)",
                            ctl.borrow().bookmark.next().as_str()
                        ),
                    },
                };
                (rollout, state)
            })
            .collect();
        ParkReport { runs }
    }

    /// Waits, up to the park timeout per run and for all runs at once, until each run's
    /// control state satisfies `settled`: per run, the state it settled in (`Err` when its
    /// run is gone), or `None` past the timeout, and its control.
    async fn settle(
        &self,
        settled: impl Fn(&Ctl) -> bool + Copy,
    ) -> Vec<(String, Option<Result<Ctl, ()>>, Arc<watch::Sender<Ctl>>)> {
        let entries: Vec<(String, Arc<watch::Sender<Ctl>>)> = self
            .runs()
            .iter()
            .map(|(r, e)| (r.clone(), Arc::clone(&e.ctl)))
            .collect();
        let limit = self.inner.config.park_timeout;
        let waits = entries.into_iter().map(|(rollout, ctl)| async move {
            let mut rx = ctl.subscribe();
            let state = tokio::time::timeout(limit, rx.wait_for(settled))
                .await
                .ok()
                .map(|r| r.map(|c| c.clone()).map_err(drop));
            (rollout, state, ctl)
        });
        futures_util::future::join_all(waits).await
    }

    /// Asks every run, and every run registered or installed from now on,
    /// to park, without waiting: [`Runs::request_park`] waits for them. A
    /// run installed while parking is asked for stays at its bookmark and
    /// touches nothing (not even the owner) until [`Runs::open`].
    pub fn begin_park(&self) {
        *self
            .inner
            .parking
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        for e in self.runs().values() {
            e.ctl.send_modify(|c| c.park = true);
        }
    }

    /// Every registered run's last recorded bookmark (a queued run's is its
    /// seed; a restart's is always its seed).
    pub fn export(&self) -> Vec<(String, Bookmark)> {
        self.runs()
            .iter()
            .map(|(r, e)| (r.clone(), e.ctl.borrow().bookmark.clone()))
            .collect()
    }

    /// Every registered run's task with its last recorded bookmark: what a
    /// checkpoint stores so [`Runs::install`] can continue it.
    pub fn export_runs(&self) -> Vec<(RolloutTask, Bookmark)> {
        self.runs()
            .values()
            .map(|e| (RolloutTask::clone(&e.task), e.ctl.borrow().bookmark.clone()))
            .collect()
    }

    /// The checkpoint opened: paused launches continue in place (those the
    /// batch paused, as one batch, first), stopped ones relaunch, held ones
    /// start.
    pub async fn open(&self) {
        self.inner
            .batch
            .continue_all(self.inner.owner.as_ref())
            .await;
        *self
            .inner
            .parking
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = false;
        for e in self.runs().values() {
            e.ctl.send_modify(|c| c.park = false);
        }
    }

    /// Cancels a run: its launch is killed (paused or not) and its session
    /// closed, within the cancel budget, before this returns.
    pub async fn cancel(&self, rollout: &str) -> Result<(), DriverError> {
        let ctl = self
            .runs()
            .get(rollout)
            .map(|e| Arc::clone(&e.ctl))
            .ok_or_else(|| DriverError::Unknown {
                rollout: rollout.to_owned(),
            })?;
        ctl.send_modify(|c| c.cancel = true);
        let limit = self.inner.config.budgets.cancel + Duration::from_secs(30);
        let mut rx = ctl.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|c| c.status == RunStatus::Done))
            .await
            .map_err(|_| DriverError::CancelTimeout {
                rollout: rollout.to_owned(),
                limit_s: limit.as_secs(),
            })?
            .map(drop)
            .map_err(|_| DriverError::Lost {
                rollout: rollout.to_owned(),
                message: "its run is gone".to_owned(),
            })
    }

    /// Parks a run in place while the model leaves one of its calls unanswered (`true`),
    /// or lets it go on (`false`); a checkpoint's park and open do not touch this. Whether
    /// the run was known.
    pub fn set_stalled(&self, rollout: &str, stalled: bool) -> bool {
        let runs = self.runs();
        let Some(e) = runs.get(rollout) else {
            return false;
        };
        e.ctl.send_if_modified(|c| {
            let changed = c.stalled != stalled;
            c.stalled = stalled;
            changed
        });
        true
    }

    /// Pauses every run in place for a weight update (`true`), runs registered later
    /// included, or lets them go on (`false`). A run whose adapter does not pause in place
    /// goes on (its model calls are held by the gateway); a checkpoint's open does not end
    /// the pause.
    pub fn set_fleet(&self, paused: bool) {
        *self
            .inner
            .fleet
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = paused;
        for e in self.runs().values() {
            e.ctl.send_if_modified(|c| {
                let changed = c.fleet != paused;
                c.fleet = paused;
                changed
            });
        }
    }

    /// Waits up to the park timeout per run until every run the fleet pause can hold is
    /// parked: paused in place, held before its launch, queued or finished. The rollouts
    /// that go on meanwhile (their adapter does not pause, or they did not park in time).
    pub async fn fleet_parked(&self) -> Vec<String> {
        self.settle(|c| {
            !c.pauses
                || c.restart
                || matches!(
                    c.status,
                    RunStatus::Queued | RunStatus::Parked(_) | RunStatus::Done
                )
        })
        .await
        .into_iter()
        .filter(|(_, settled, _)| !matches!(settled, Some(Ok(c)) if c.pauses && !c.restart))
        .map(|(rollout, _, _)| rollout)
        .collect()
    }

    /// Every registered run: its rollout, where it stands and its last recorded bookmark (for
    /// a live view of the run).
    pub fn states(&self) -> Vec<(String, RunStatus, Bookmark)> {
        self.runs()
            .iter()
            .map(|(r, e)| {
                let c = e.ctl.borrow();
                (r.clone(), c.status.clone(), c.bookmark.clone())
            })
            .collect()
    }

    /// Runs registered and not finished.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.runs()
            .values()
            .filter(|e| e.ctl.borrow().status != RunStatus::Done)
            .count()
    }

    /// Where one run stands.
    pub fn status(&self, rollout: &str) -> Option<RunStatus> {
        self.runs()
            .get(rollout)
            .map(|e| e.ctl.borrow().status.clone())
    }

    /// Drops a finished run from the registry (and from exports).
    pub fn forget(&self, rollout: &str) -> bool {
        let mut runs = self.runs();
        if runs
            .get(rollout)
            .is_some_and(|e| e.ctl.borrow().status == RunStatus::Done)
        {
            runs.remove(rollout);
            return true;
        }
        false
    }
}

fn park_state(c: &Ctl) -> ParkState {
    if c.restart {
        return ParkState::Restart;
    }
    match &c.status {
        RunStatus::Queued => ParkState::Queued,
        RunStatus::Done => ParkState::Finished,
        RunStatus::Running => ParkState::Blocked {
            reason: "still running".to_owned(),
        },
        RunStatus::Parked(kind) => match kind {
            ParkKind::Paused => ParkState::Paused,
            ParkKind::Held => ParkState::Held,
            ParkKind::Stopped => ParkState::Stopped,
            ParkKind::AtBookmark => ParkState::AtBookmark(c.bookmark.next()),
            ParkKind::Blocked { reason } => ParkState::Blocked {
                reason: reason.clone(),
            },
        },
    }
}
