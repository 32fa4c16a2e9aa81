//! The stage machine, as pure code: `step(now, event)` updates the state and
//! returns the effects to carry out, in order. Nothing here does I/O, waits
//! or reads a clock, so every path (crashes after any effect included) is
//! tested by feeding events.
//!
//! Contract with the runner: the effects of one step are zero or more
//! [`Effect::RecordBookmark`] followed by at most one action. The runner
//! records each bookmark durably before it performs the action, then feeds
//! back the action's event. [`Event::ParkRequested`] and
//! [`Event::CancelRequested`] may arrive between any two steps; while an
//! action is in flight they only set a flag, acted on at the next boundary.

mod event;

pub use event::{Effect, Event, ParkKind, PauseOutcome, StopWhy};

use rollpoint_owner::Verdict;

use crate::bookmark::{Bookmark, Progress, SessionHint, Stage, VerifyMode};
use crate::launchlog::{LaunchEnd, LaunchEntry, RecoveryTier, end_of};
use crate::result::{Collected, InfraClass, RESULT_VERSION, RolloutResult, Status, Timings};

/// What the machine is told about its rollout up front.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    pub task_id: String,
    /// Checkpointing is on for this run (else it is a restart).
    pub checkpointing: bool,
    /// The adapter pauses its harness at checkpoints (else stop and relaunch).
    pub pauses: bool,
    pub verify_mode: VerifyMode,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    New,
    Seeding,
    Accessing,
    Deciding,
    Launching { resume: bool, reason: String },
    Waiting,
    Pausing { hold: bool },
    Parked(ParkKind),
    Continuing { hold: bool },
    Stopping(StopWhy),
    Verifying,
    Closing,
    Done,
}

/// One rollout's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    setup: Setup,
    mark: Bookmark,
    restart: bool,
    phase: Phase,
    park: bool,
    cancel: bool,
    paused_since: Option<u64>,
    /// The result being returned, once known.
    result: Option<RolloutResult>,
}

impl Machine {
    /// A machine continuing from `mark` as attempt `attempt`.
    pub fn new(setup: Setup, mut mark: Bookmark, attempt: u32) -> Self {
        mark.attempt = attempt;
        let restart = !setup.checkpointing;
        Self {
            setup,
            mark,
            restart,
            phase: Phase::New,
            park: false,
            cancel: false,
            paused_since: None,
            result: None,
        }
    }

    /// The rollout is a restart: never parked, starts over after a crash.
    pub fn restart(&self) -> bool {
        self.restart
    }

    /// Its adapter pauses its harness in place (else a park stops it).
    pub fn pauses(&self) -> bool {
        self.setup.pauses
    }

    /// A park request would change something (not a restart, not already
    /// asked, not finished).
    pub fn wants_park(&self) -> bool {
        !self.restart && !self.park && !self.done()
    }

    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// The bookmark as it would be recorded now (a restart's is its seed).
    pub fn bookmark(&self) -> Bookmark {
        if self.restart {
            Bookmark::seed(
                &self.mark.rollout,
                self.mark.attempt,
                self.mark.started_at_ms,
            )
        } else {
            self.mark.clone()
        }
    }

    /// The harness or verify progress (a restart's too).
    pub fn progress(&self) -> Option<&Progress> {
        self.mark.progress()
    }

    fn record(&self) -> Effect {
        Effect::RecordBookmark(self.bookmark())
    }

    fn progress_mut(&mut self) -> Option<&mut Progress> {
        match &mut self.mark.stage {
            Stage::Harness(p) | Stage::Verify(p) => Some(p),
            Stage::Seed | Stage::Return(_) => None,
        }
    }

    fn session(&self) -> Option<String> {
        self.mark.progress().map(|p| p.session.session.clone())
    }

    fn current_launch(&self) -> Option<&LaunchEntry> {
        self.mark.progress().and_then(|p| p.launches.last())
    }

    fn current_launch_id(&self) -> String {
        self.current_launch()
            .map(|l| l.launch_id.clone())
            .unwrap_or_default()
    }

    fn open_launch_mut(&mut self) -> Option<&mut LaunchEntry> {
        self.progress_mut()
            .and_then(|p| p.launches.last_mut())
            .filter(|l| l.end.is_none())
    }

    fn park_effect(&mut self, kind: ParkKind) -> Vec<Effect> {
        self.phase = Phase::Parked(kind.clone());
        vec![self.record(), Effect::Park(kind)]
    }

    /// Carries out one event; returns the effects, in order.
    pub fn step(&mut self, now_ms: u64, event: Event) -> Vec<Effect> {
        if self.phase == Phase::Done {
            return Vec::new();
        }
        match event {
            Event::ParkRequested => self.on_park(),
            Event::CancelRequested => self.on_cancel(now_ms),
            Event::Start => self.on_start(now_ms),
            Event::Seeded {
                session,
                sandbox,
                workdir,
                capturable,
                cookies,
                state,
            } => {
                self.restart = self.restart || !capturable;
                self.mark.stage = Stage::Harness(Progress {
                    session: SessionHint {
                        session,
                        sandbox,
                        workdir,
                    },
                    cookies,
                    verify_mode: self.setup.verify_mode,
                    state,
                    resume: false,
                    launches: Vec::new(),
                });
                self.enter_harness(now_ms)
            }
            Event::Accessed { sandbox, workdir } => {
                if let Some(p) = self.progress_mut() {
                    p.session.sandbox = sandbox;
                    p.session.workdir = workdir;
                }
                if self.cancel {
                    return self.cancel_now(now_ms);
                }
                let resume = self.mark.progress().is_some_and(|p| p.resume);
                if resume {
                    self.phase = Phase::Deciding;
                    vec![Effect::ResumeDecision {
                        session: self.session().unwrap_or_default(),
                    }]
                } else {
                    self.decided(now_ms, false, "first launch of the rollout".to_owned())
                }
            }
            Event::Decided { resume, reason } => self.decided(now_ms, resume, reason),
            Event::Launched { launch_id, tier } => self.on_launched(now_ms, launch_id, tier),
            Event::Ended { exit_code } => {
                if let Some(l) = self.open_launch_mut() {
                    l.close(end_of(exit_code), exit_code, now_ms, None);
                }
                self.enter_verify(now_ms)
            }
            Event::StartFailed {
                launch_id,
                exit_code,
                error,
                tier,
            } => self.on_start_failed(now_ms, launch_id, exit_code, error, tier),
            Event::TimedOut => {
                if self.phase != Phase::Waiting {
                    return Vec::new();
                }
                self.phase = Phase::Stopping(StopWhy::TimedOut);
                vec![Effect::Stop {
                    launch_id: self.current_launch_id(),
                    why: StopWhy::TimedOut,
                }]
            }
            Event::Paused(outcome) => self.on_paused(now_ms, outcome),
            Event::Opened => self.on_open(now_ms),
            Event::Continued { error } => self.on_continued(now_ms, error),
            Event::Stopped {
                ended_on_its_own,
                exit_code,
                confirmed,
                reason,
            } => self.on_stopped(now_ms, ended_on_its_own, exit_code, confirmed, reason),
            Event::Verified { verdict, collected } => {
                let status = if verdict.is_some() {
                    Status::Verified
                } else {
                    Status::Unverified
                };
                self.finish(now_ms, status, verdict, collected, None)
            }
            Event::Failed { class, error } => self.fail(now_ms, class, error),
            Event::Closed { error } => {
                let Some(mut result) = self.result.take() else {
                    return Vec::new();
                };
                if let Some(e) = error {
                    result.error = Some(match result.error.take() {
                        Some(first) => format!("{first}; then closing the session: {e}"),
                        None => format!("closing the session: {e}"),
                    });
                }
                self.returned(result)
            }
        }
    }

    fn on_start(&mut self, now_ms: u64) -> Vec<Effect> {
        if self.phase != Phase::New {
            return Vec::new();
        }
        match self.mark.stage.clone() {
            Stage::Seed => {
                if self.park && !self.restart {
                    return self.park_effect(ParkKind::AtBookmark);
                }
                if self.cancel {
                    return self.cancel_now(now_ms);
                }
                self.phase = Phase::Seeding;
                vec![self.record(), Effect::Seed]
            }
            Stage::Harness(_) => {
                let attempt = self.mark.attempt;
                if let Some(l) = self.open_launch_mut() {
                    l.close(
                        LaunchEnd::Interrupted,
                        None,
                        now_ms,
                        Some(format!(
                            "its attempt ended before it did; attempt {attempt} continues"
                        )),
                    );
                }
                self.enter_harness(now_ms)
            }
            Stage::Verify(_) => self.enter_verify(now_ms),
            Stage::Return(result) => {
                self.phase = Phase::Done;
                vec![Effect::Return(result)]
            }
        }
    }

    fn on_park(&mut self) -> Vec<Effect> {
        if self.restart || self.park {
            return Vec::new();
        }
        self.park = true;
        if self.phase != Phase::Waiting {
            return Vec::new();
        }
        let launch_id = self.current_launch_id();
        if self.setup.pauses {
            self.phase = Phase::Pausing { hold: false };
            vec![Effect::Pause {
                launch_id,
                hold: false,
            }]
        } else {
            self.phase = Phase::Stopping(StopWhy::Park);
            vec![Effect::Stop {
                launch_id,
                why: StopWhy::Park,
            }]
        }
    }

    fn on_cancel(&mut self, now_ms: u64) -> Vec<Effect> {
        if self.cancel {
            return Vec::new();
        }
        self.cancel = true;
        match &self.phase {
            Phase::Waiting | Phase::Parked(ParkKind::Paused) | Phase::Parked(ParkKind::Held) => {
                self.phase = Phase::Stopping(StopWhy::Cancel);
                vec![Effect::Stop {
                    launch_id: self.current_launch_id(),
                    why: StopWhy::Cancel,
                }]
            }
            Phase::New | Phase::Parked(_) => self.cancel_now(now_ms),
            _ => Vec::new(),
        }
    }

    /// Entering the harness stage: record, then ask which sandbox is
    /// current, unless a park or cancel holds it here.
    fn enter_harness(&mut self, now_ms: u64) -> Vec<Effect> {
        if let Stage::Verify(p) = &self.mark.stage {
            self.mark.stage = Stage::Harness(p.clone());
        }
        if self.cancel {
            return self.cancel_now(now_ms);
        }
        if self.park && !self.restart {
            return self.park_effect(ParkKind::AtBookmark);
        }
        self.phase = Phase::Accessing;
        vec![
            self.record(),
            Effect::Access {
                session: self.session().unwrap_or_default(),
            },
        ]
    }

    fn decided(&mut self, now_ms: u64, resume: bool, reason: String) -> Vec<Effect> {
        if self.cancel {
            return self.cancel_now(now_ms);
        }
        if self.park && !self.restart {
            // Not launched yet: park here and ask again after the open.
            return self.park_effect(ParkKind::AtBookmark);
        }
        let n = self.mark.progress().map_or(0, |p| p.launches.len());
        let launch_id = rollpoint_proto::key::launch_id(&self.mark.rollout, self.mark.attempt, n);
        self.phase = Phase::Launching {
            resume,
            reason: reason.clone(),
        };
        vec![Effect::Launch {
            session: self.session().unwrap_or_default(),
            launch_id,
            resume,
        }]
    }

    fn on_launched(
        &mut self,
        now_ms: u64,
        launch_id: String,
        tier: Option<RecoveryTier>,
    ) -> Vec<Effect> {
        let Phase::Launching { resume, reason } = self.phase.clone() else {
            return Vec::new();
        };
        let attempt = self.mark.attempt;
        if let Some(p) = self.progress_mut() {
            p.launches.push(LaunchEntry::started(
                launch_id.clone(),
                attempt,
                p.session.sandbox.clone(),
                resume,
                reason,
                tier,
                now_ms,
            ));
            // From now on there may be a saved session to continue.
            p.resume = true;
        }
        let record = self.record();
        if self.cancel {
            self.phase = Phase::Stopping(StopWhy::Cancel);
            return vec![
                record,
                Effect::Stop {
                    launch_id,
                    why: StopWhy::Cancel,
                },
            ];
        }
        if self.park && !self.restart {
            // Parked while the launch was being started: hold it with the
            // pause file (or pause it, if it already runs).
            self.phase = Phase::Pausing { hold: true };
            return vec![
                record,
                Effect::Pause {
                    launch_id,
                    hold: true,
                },
            ];
        }
        self.phase = Phase::Waiting;
        vec![record, Effect::Wait { launch_id }]
    }

    /// The launch's harness never started: the launch is logged as failed
    /// with why (a new entry when it failed before it was logged), and the
    /// rollout fails without grading, since nothing ran.
    fn on_start_failed(
        &mut self,
        now_ms: u64,
        launch_id: String,
        exit_code: Option<i32>,
        error: String,
        tier: Option<RecoveryTier>,
    ) -> Vec<Effect> {
        let note = format!("not started: {error}");
        match self.phase.clone() {
            Phase::Launching { resume, reason } => {
                let attempt = self.mark.attempt;
                if let Some(p) = self.progress_mut() {
                    let mut entry = LaunchEntry::started(
                        launch_id.clone(),
                        attempt,
                        p.session.sandbox.clone(),
                        resume,
                        reason,
                        tier,
                        now_ms,
                    );
                    entry.close(LaunchEnd::Failed, exit_code, now_ms, Some(note));
                    p.launches.push(entry);
                }
            }
            Phase::Waiting | Phase::Pausing { .. } => {
                if self.current_launch_id() != launch_id {
                    return Vec::new();
                }
                if let Some(l) = self.open_launch_mut() {
                    l.close(LaunchEnd::Failed, exit_code, now_ms, Some(note));
                }
            }
            _ => return Vec::new(),
        }
        if self.cancel {
            return self.cancel_now(now_ms);
        }
        self.fail(
            now_ms,
            InfraClass::LaunchFailed,
            format!("launch {launch_id}: {error}"),
        )
    }

    fn on_paused(&mut self, now_ms: u64, outcome: PauseOutcome) -> Vec<Effect> {
        let Phase::Pausing { .. } = self.phase else {
            return Vec::new();
        };
        if self.cancel && !matches!(outcome, PauseOutcome::AlreadyEnded { .. }) {
            self.phase = Phase::Stopping(StopWhy::Cancel);
            return vec![Effect::Stop {
                launch_id: self.current_launch_id(),
                why: StopWhy::Cancel,
            }];
        }
        match outcome {
            PauseOutcome::Confirmed | PauseOutcome::Held => {
                if let Some(l) = self.open_launch_mut() {
                    l.pauses += 1;
                }
                self.paused_since = Some(now_ms);
                let kind = if outcome == PauseOutcome::Held {
                    ParkKind::Held
                } else {
                    ParkKind::Paused
                };
                self.park_effect(kind)
            }
            PauseOutcome::AlreadyEnded { exit_code } => {
                if let Some(l) = self.open_launch_mut() {
                    l.close(end_of(exit_code), exit_code, now_ms, None);
                }
                self.enter_verify(now_ms)
            }
            PauseOutcome::Failed { reason } => {
                self.phase = Phase::Stopping(StopWhy::PauseFailed);
                if let Some(l) = self.open_launch_mut() {
                    l.note = Some(format!("pause failed: {reason}"));
                }
                vec![Effect::Stop {
                    launch_id: self.current_launch_id(),
                    why: StopWhy::PauseFailed,
                }]
            }
        }
    }

    fn on_open(&mut self, now_ms: u64) -> Vec<Effect> {
        self.park = false;
        let Phase::Parked(kind) = self.phase.clone() else {
            return Vec::new();
        };
        match kind {
            ParkKind::Paused | ParkKind::Held => {
                let hold = kind == ParkKind::Held;
                self.phase = Phase::Continuing { hold };
                vec![Effect::Continue {
                    launch_id: self.current_launch_id(),
                    hold,
                }]
            }
            ParkKind::Stopped | ParkKind::Blocked { .. } | ParkKind::AtBookmark => {
                match &self.mark.stage {
                    Stage::Seed => {
                        self.phase = Phase::Seeding;
                        vec![Effect::Seed]
                    }
                    Stage::Harness(_) => self.enter_harness(now_ms),
                    Stage::Verify(_) => self.enter_verify(now_ms),
                    Stage::Return(r) => {
                        let r = r.clone();
                        self.phase = Phase::Done;
                        vec![Effect::Return(r)]
                    }
                }
            }
        }
    }

    fn on_continued(&mut self, now_ms: u64, error: Option<String>) -> Vec<Effect> {
        let Phase::Continuing { .. } = self.phase else {
            return Vec::new();
        };
        let since = self.paused_since.take().unwrap_or(now_ms);
        if let Some(l) = self.open_launch_mut() {
            l.paused_ms += now_ms.saturating_sub(since);
        }
        if let Some(reason) = error {
            if let Some(l) = self.open_launch_mut() {
                l.note = Some(format!("continue failed: {reason}"));
            }
            self.phase = Phase::Stopping(StopWhy::ContinueFailed);
            return vec![Effect::Stop {
                launch_id: self.current_launch_id(),
                why: StopWhy::ContinueFailed,
            }];
        }
        if self.cancel {
            self.phase = Phase::Stopping(StopWhy::Cancel);
            return vec![Effect::Stop {
                launch_id: self.current_launch_id(),
                why: StopWhy::Cancel,
            }];
        }
        self.phase = Phase::Waiting;
        let launch_id = self.current_launch_id();
        if self.park && !self.restart {
            // Another park came while it was being continued.
            self.park = false;
            let mut out = vec![self.record()];
            out.extend(self.on_park());
            return out;
        }
        vec![self.record(), Effect::Wait { launch_id }]
    }

    fn on_stopped(
        &mut self,
        now_ms: u64,
        ended_on_its_own: bool,
        exit_code: Option<i32>,
        confirmed: bool,
        reason: Option<String>,
    ) -> Vec<Effect> {
        let Phase::Stopping(why) = self.phase.clone() else {
            return Vec::new();
        };
        if let Some(since) = self.paused_since.take()
            && let Some(l) = self.open_launch_mut()
        {
            l.paused_ms += now_ms.saturating_sub(since);
        }
        if ended_on_its_own {
            // It returned before the stop: its result stands.
            if let Some(l) = self.open_launch_mut() {
                l.close(end_of(exit_code), exit_code, now_ms, None);
            }
            if why == StopWhy::Cancel {
                return self.cancel_now(now_ms);
            }
            return self.enter_verify(now_ms);
        }
        if why == StopWhy::TimedOut {
            // A failed launch: grade what it left.
            if let Some(l) = self.open_launch_mut() {
                l.close(
                    LaunchEnd::Failed,
                    exit_code,
                    now_ms,
                    Some(why.note().to_owned()),
                );
            }
            if self.cancel {
                return self.cancel_now(now_ms);
            }
            return self.enter_verify(now_ms);
        }
        if let Some(l) = self.open_launch_mut() {
            let mut note = why.note().to_owned();
            if let Some(earlier) = l.note.take() {
                note = format!("{earlier}; {note}");
            }
            if let Some(r) = &reason {
                note = format!("{note}; {r}");
            }
            l.close(LaunchEnd::Interrupted, exit_code, now_ms, Some(note));
        }
        if why == StopWhy::Cancel || self.cancel {
            return self.cancel_now(now_ms);
        }
        if let Some(p) = self.progress_mut() {
            p.resume = true;
        }
        if self.park && !self.restart {
            let kind = if confirmed {
                ParkKind::Stopped
            } else {
                ParkKind::Blocked {
                    reason: reason.unwrap_or_else(|| "the stop was not confirmed".to_owned()),
                }
            };
            return self.park_effect(kind);
        }
        self.enter_harness(now_ms)
    }

    fn enter_verify(&mut self, now_ms: u64) -> Vec<Effect> {
        if let Stage::Harness(p) = &self.mark.stage {
            self.mark.stage = Stage::Verify(p.clone());
        }
        if self.cancel {
            return self.cancel_now(now_ms);
        }
        if self.park && !self.restart {
            return self.park_effect(ParkKind::AtBookmark);
        }
        self.phase = Phase::Verifying;
        let mode = self
            .mark
            .progress()
            .map_or(self.setup.verify_mode, |p| p.verify_mode);
        vec![
            self.record(),
            Effect::Verify {
                session: self.session().unwrap_or_default(),
                mode,
            },
        ]
    }

    fn build_result(
        &self,
        now_ms: u64,
        status: Status,
        verdict: Option<Verdict>,
        collected: Collected,
        error: Option<String>,
    ) -> RolloutResult {
        let launches = self
            .mark
            .progress()
            .map(|p| p.launches.clone())
            .unwrap_or_default();
        let harness_ms = launches.iter().map(|l| l.duration_ms(now_ms)).sum();
        let paused_ms = launches.iter().map(|l| l.paused_ms).sum();
        RolloutResult {
            v: RESULT_VERSION,
            task_id: self.setup.task_id.clone(),
            rollout: self.mark.rollout.clone(),
            attempt: self.mark.attempt,
            status,
            reward: verdict.as_ref().map(|v| v.reward),
            verdict,
            error,
            infra_class: None,
            infra_retries: Vec::new(),
            group: None,
            restart: self.restart,
            launches,
            usage: collected.usage,
            resources: None,
            response: collected.response,
            transcript: collected.transcript,
            timings: Timings {
                started_at_ms: self.mark.started_at_ms,
                ended_at_ms: now_ms.max(self.mark.started_at_ms),
                harness_ms,
                paused_ms,
            },
            forked_from: None,
        }
    }

    /// The rollout ends with `status`. A verdict means the owner already
    /// ended the session; otherwise the session is closed (checkpointed) or
    /// its sandbox stopped (restart) before returning.
    fn finish(
        &mut self,
        now_ms: u64,
        status: Status,
        verdict: Option<Verdict>,
        collected: Collected,
        error: Option<String>,
    ) -> Vec<Effect> {
        let has_verdict = verdict.is_some();
        let result = self.build_result(now_ms, status, verdict, collected, error);
        self.end(result, has_verdict)
    }

    /// The infrastructure ended the rollout: status `infra_error` of `class`.
    fn fail(&mut self, now_ms: u64, class: InfraClass, error: String) -> Vec<Effect> {
        if let Some(l) = self.open_launch_mut() {
            l.close(LaunchEnd::Failed, None, now_ms, Some(error.clone()));
        }
        let mut result = self.build_result(
            now_ms,
            Status::InfraError,
            None,
            Collected::default(),
            Some(error),
        );
        result.infra_class = Some(class);
        self.end(result, false)
    }

    fn end(&mut self, result: RolloutResult, has_verdict: bool) -> Vec<Effect> {
        match self.session() {
            Some(session) if !has_verdict => {
                self.result = Some(result);
                self.phase = Phase::Closing;
                vec![if self.restart {
                    Effect::StopSandbox { session }
                } else {
                    Effect::CloseSession { session }
                }]
            }
            _ => self.returned(result),
        }
    }

    fn returned(&mut self, result: RolloutResult) -> Vec<Effect> {
        self.phase = Phase::Done;
        if result.status == Status::Cancelled {
            // A cancelled rollout keeps its last bookmark: it was not
            // finished, and may be continued.
            return vec![Effect::Return(Box::new(result))];
        }
        self.mark.stage = Stage::Return(Box::new(result.clone()));
        vec![self.record(), Effect::Return(Box::new(result))]
    }

    fn cancel_now(&mut self, now_ms: u64) -> Vec<Effect> {
        if let Some(l) = self.open_launch_mut() {
            l.close(
                LaunchEnd::Interrupted,
                None,
                now_ms,
                Some("cancelled".to_owned()),
            );
        }
        self.finish(
            now_ms,
            Status::Cancelled,
            None,
            Collected::default(),
            Some("cancelled".to_owned()),
        )
    }
}
