//! The runner: carries out one rollout's effects (owner calls, the adapter,
//! the supervisor's control socket) and feeds the outcomes back to the
//! machine. Each bookmark is recorded before the effect after it runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rollpoint_proto::clock::unix_ms;

use rollpoint_owner::{Owner, OwnerTask};
use rollpoint_proto::anchor::LaunchRequest;
use rollpoint_proto::receipt::Outcome;
use rollpoint_proto::supervisor::{Reply, Verb};
use tokio::sync::watch;

use crate::adapter::{Adapter, Cx};
use crate::bookmark::{Bookmark, VerifyMode};
use crate::ctl::{Ctl, RunStatus};
use crate::machine::{Effect, Event, Machine, PauseOutcome, StopWhy};
use crate::result::{InfraClass, RolloutResult};
use crate::store::Store;
use crate::supervisor::LaunchDir;
use crate::task::RolloutTask;
use rollpoint_proto::key::{AttemptKey, KeyError};

/// Environment variables every launch gets.
pub const ROLLOUT_VAR: &str = "ROLLPOINT_ROLLOUT";
pub const ATTEMPT_VAR: &str = "ROLLPOINT_ATTEMPT";
/// How long grading waits for a launch's supervisor to have stopped what
/// the harness left behind.
const CLEANUP_WAIT: Duration = Duration::from_secs(30);
/// The gateway capture key of this attempt ([`capture_key`]).
pub const CAPTURE_KEY_VAR: &str = "ROLLPOINT_CAPTURE_KEY";
/// The gateway base harnesses call: `$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY/v1`.
pub const GATEWAY_VAR: &str = "ROLLPOINT_GATEWAY";

/// The [`GATEWAY_VAR`] value for a gateway served at `server`
/// (`http://host:port`): harnesses put a capture key and `/v1` after it.
pub fn gateway_base(server: &str) -> String {
    format!("{}/r", server.trim_end_matches('/'))
}

/// `url` with its host replaced by `127.0.0.1` (the port kept, or the
/// scheme's): where a sandbox's relay serves the gateway.
pub fn on_loopback(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let port = authority
        .rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or(if scheme == "https" { "443" } else { "80" });
    format!("{scheme}://127.0.0.1:{port}{path}")
}

/// The capture key the gateway records an attempt's model calls under.
/// Fails only for a rollout id no checked task can carry.
pub fn capture_key(rollout: &str, attempt: u32) -> Result<AttemptKey, KeyError> {
    AttemptKey::of(rollout, attempt)
}

/// Budgets of the runner.
#[derive(Debug, Clone)]
pub struct Budgets {
    /// A pause, continue or stop reply (the supervisor's own budgets are
    /// 120 s per pause and 10 s of stop grace).
    pub control: Duration,
    /// A stop on cancel.
    pub cancel: Duration,
    /// Settle time before a held launch is asked again.
    pub hold_settle: Duration,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            control: Duration::from_secs(150),
            cancel: Duration::from_secs(60),
            hold_settle: Duration::from_millis(200),
        }
    }
}

pub(crate) struct Runner {
    pub owner: Arc<dyn Owner>,
    pub adapter: Arc<dyn Adapter>,
    pub task: RolloutTask,
    pub ctl: Arc<watch::Sender<Ctl>>,
    pub budgets: Budgets,
    pub route_key: Option<rollpoint_proto::route::RouteKey>,
    pub model_health: Option<Arc<dyn crate::health::ModelHealth>>,
    pub store: Option<Arc<Store>>,
    pub launches: HashMap<String, LaunchDir>,
    /// Running (unpaused) time each launch has had, for the time limit.
    pub ran: HashMap<String, Duration>,
    /// What the sandbox used, read before it was graded or closed.
    pub resources: Option<rollpoint_owner::ResourceUsage>,
    pub pauses: crate::metrics::PauseMetrics,
    pub(crate) batch: Arc<crate::batch::Batch>,
}

impl Runner {
    /// Runs the machine to its result.
    pub async fn drive(mut self, mut machine: Machine) -> RolloutResult {
        let mut effects = Vec::new();
        let ctl = self.ctl.borrow().clone();
        let pauses = machine.pauses();
        if ctl.cancel {
            effects.extend(machine.step(unix_ms(), Event::CancelRequested));
        }
        if ctl.parks(pauses) && machine.wants_park() {
            effects.extend(machine.step(unix_ms(), Event::ParkRequested));
        }
        effects.extend(machine.step(unix_ms(), Event::Start));
        let mut told_cancel = ctl.cancel;
        loop {
            let mut action = None;
            for effect in effects.drain(..) {
                match effect {
                    Effect::RecordBookmark(b) => self.record(b).await,
                    other => action = Some(other),
                }
            }
            self.set_status(&machine);
            let Some(action) = action else {
                // Every step but a finished machine's yields an action.
                let mut result = machine_failed(&machine, &self.task);
                result.group.clone_from(&self.task.group);
                self.ctl.send_modify(|c| c.status = RunStatus::Done);
                return result;
            };
            let event = match action {
                Effect::Return(result) => {
                    self.ctl.send_modify(|c| c.status = RunStatus::Done);
                    return self.with_resources(*result);
                }
                Effect::Wait { launch_id } => self.wait(&machine, &launch_id).await,
                Effect::Park(kind) => {
                    self.ctl
                        .send_modify(|c| c.status = RunStatus::Parked(kind.clone()));
                    let mut rx = self.ctl.subscribe();
                    let woke = rx
                        .wait_for(|c| !c.parks(pauses) || c.cancel)
                        .await
                        .map(|c| c.cancel);
                    self.ctl.send_modify(|c| c.status = RunStatus::Running);
                    match woke {
                        Ok(true) => Event::CancelRequested,
                        _ => Event::Opened,
                    }
                }
                other => {
                    let event = self.perform(&machine, other).await;
                    // Requests that came meanwhile only set the machine's
                    // flags here: it acts on them at its next boundary.
                    let ctl = self.ctl.borrow().clone();
                    if ctl.cancel && !told_cancel {
                        told_cancel = true;
                        effects.extend(machine.step(unix_ms(), Event::CancelRequested));
                    }
                    if ctl.parks(pauses) && machine.wants_park() {
                        effects.extend(machine.step(unix_ms(), Event::ParkRequested));
                    }
                    event
                }
            };
            if event == Event::CancelRequested {
                told_cancel = true;
            }
            effects.extend(machine.step(unix_ms(), event));
        }
    }

    fn set_status(&self, machine: &Machine) {
        let restart = machine.restart();
        self.ctl.send_modify(|c| {
            c.restart = restart;
            if matches!(c.status, RunStatus::Queued) {
                c.status = RunStatus::Running;
            }
        });
    }

    async fn record(&self, bookmark: Bookmark) {
        if let Some(store) = &self.store
            && let Err(e) = store.write(&bookmark).await
        {
            // The in-memory bookmark still serves export; the durable copy
            // is a convenience for tools, the checkpoint is the record.
            tracing::warn!(rollout = %bookmark.rollout, error = %e, "the bookmark's durable copy was not written");
        }
        self.ctl.send_modify(|c| c.bookmark = bookmark);
    }

    fn cx(&self, machine: &Machine) -> Cx {
        let (session, workdir) = machine
            .progress()
            .map(|p| (p.session.session.clone(), p.session.workdir.clone()))
            .unwrap_or_default();
        Cx {
            owner: Arc::clone(&self.owner),
            session,
            workdir,
            rollout: self.task.rollout().to_owned(),
            attempt: machine.bookmark().attempt,
        }
    }

    fn state(machine: &Machine) -> serde_json::Value {
        machine
            .progress()
            .map(|p| p.state.clone())
            .unwrap_or_else(|| serde_json::json!({}))
    }

    async fn wait(&mut self, machine: &Machine, launch_id: &str) -> Event {
        let Some(dir) = self.launches.get(launch_id).cloned() else {
            return Event::Failed {
                class: InfraClass::Internal,
                error: format!("launch {launch_id}: no session directory known"),
            };
        };
        let mut rx = self.ctl.subscribe();
        let wants_park = machine.wants_park();
        let pauses = machine.pauses();
        let ran = self.ran.get(launch_id).copied().unwrap_or_default();
        let left = self.task.harness_timeout_s.map_or(Duration::MAX, |s| {
            Duration::from_secs(s).saturating_sub(ran)
        });
        let started = tokio::time::Instant::now();
        let waiting = machine.progress().map(|p| rollpoint_owner::SessionLaunch {
            session: p.session.session.clone(),
            launch_id: launch_id.to_owned(),
        });
        self.ctl.send_modify(|c| c.waiting = waiting);
        let event = tokio::select! {
            ended = dir.ended_or_lost() => match ended {
                Ok(code) => Event::Ended { exit_code: code },
                Err(error) => {
                    return Event::Failed {
                        class: InfraClass::SandboxLost,
                        error: format!("launch {launch_id}: {error}"),
                    };
                }
            },
            r = rx.wait_for(|c| c.cancel || (c.parks(pauses) && wants_park)) => match r {
                Ok(c) if c.cancel => Event::CancelRequested,
                _ => Event::ParkRequested,
            },
            () = sleep_for(left) => Event::TimedOut,
        };
        self.ctl.send_modify(|c| c.waiting = None);
        self.ran
            .insert(launch_id.to_owned(), ran.saturating_add(started.elapsed()));
        if let Event::Ended { exit_code } = event
            && let Some(error) = dir.start_error().await
        {
            return Event::StartFailed {
                launch_id: launch_id.to_owned(),
                exit_code,
                error,
                tier: self.adapter.recovery_tier(),
            };
        }
        event
    }

    /// Seeds this attempt's session. Its owner task id is the attempt key,
    /// so the owner's checkpoint participant finds sessions by it.
    async fn seed(&self, key: AttemptKey, rollout: &str) -> Event {
        match self
            .owner
            .create_session(OwnerTask {
                id: key.to_string(),
                ..self.task.task.clone()
            })
            .await
        {
            Ok(info) => Event::Seeded {
                state: self.adapter.new_state(&info.workdir, rollout),
                session: info.session,
                sandbox: info.sandbox,
                workdir: info.workdir,
                capturable: info.capturable,
                cookies: Default::default(),
            },
            Err(e) => Event::Failed {
                class: InfraClass::SetupFailed,
                error: format!("seed: {e}"),
            },
        }
    }

    async fn perform(&mut self, machine: &Machine, effect: Effect) -> Event {
        let rollout = self.task.rollout().to_owned();
        match effect {
            Effect::Seed => match capture_key(&rollout, machine.bookmark().attempt) {
                Err(e) => Event::Failed {
                    class: InfraClass::Internal,
                    error: format!("seed: {e}"),
                },
                Ok(key) => self.seed(key, &rollout).await,
            },
            Effect::Access { session } => match self.owner.access(&session).await {
                Ok(a) => Event::Accessed {
                    sandbox: a.sandbox,
                    workdir: a.workdir,
                },
                Err(e) => Event::Failed {
                    class: InfraClass::RestoreFailed,
                    error: format!("access: {e}"),
                },
            },
            Effect::ResumeDecision { .. } => {
                let cx = self.cx(machine);
                let state = Self::state(machine);
                match self.adapter.resume_decision(&cx, &state).await {
                    Ok(d) => Event::Decided {
                        resume: d.resume,
                        reason: d.reason,
                    },
                    Err(e) => Event::Failed {
                        class: InfraClass::RestoreFailed,
                        error: format!("resume decision: {e}"),
                    },
                }
            }
            Effect::Launch {
                session,
                launch_id,
                resume,
            } => self.launch(machine, &session, launch_id, resume).await,
            Effect::Pause { launch_id, hold } => self.pause(&launch_id, hold).await,
            Effect::Continue { launch_id, hold } => self.continue_launch(&launch_id, hold).await,
            Effect::Stop { launch_id, why } => self.stop(&launch_id, why).await,
            Effect::Verify { session, mode } => {
                // Nothing the harness left may run on into grading (a loop
                // rewriting the reward file): its supervisor exits only once
                // it has stopped all of it.
                for (launch_id, dir) in &self.launches {
                    if !dir.wait_exited(CLEANUP_WAIT).await {
                        return Event::Failed {
                            class: InfraClass::SandboxLost,
                            error: format!(
                                "launch {launch_id}: its supervisor did not exit within {} s of \
                                 the harness's end, so what the harness left is not known to be \
                                 stopped; not graded",
                                CLEANUP_WAIT.as_secs()
                            ),
                        };
                    }
                }
                self.read_usage(&session).await;
                if let Some(health) = &self.model_health
                    && let Some(why) = health
                        .last_call_unanswered(&rollout, machine.bookmark().attempt)
                        .await
                {
                    return Event::Failed {
                        class: InfraClass::ModelUnreachable,
                        error: format!("the harness ended with its model unanswered: {why}"),
                    };
                }
                let cx = self.cx(machine);
                let state = Self::state(machine);
                // Usage and the answer are evidence, not the grade: a
                // harness that left none still gets graded.
                let collected = self.adapter.collect(&cx, &state).await.unwrap_or_default();
                match mode {
                    VerifyMode::Skip => Event::Verified {
                        verdict: None,
                        collected,
                    },
                    VerifyMode::Owner => match self.owner.verify(&session).await {
                        Ok(v) => Event::Verified {
                            verdict: Some(v),
                            collected,
                        },
                        Err(e) => Event::Failed {
                            // Grading that could not be done where the task asks
                            // (no shell to empty its directories) is the setup's fault.
                            class: if e.kind() == "unprocessable" {
                                InfraClass::SetupFailed
                            } else {
                                InfraClass::SandboxLost
                            },
                            error: format!("verify: {e}"),
                        },
                    },
                }
            }
            Effect::CloseSession { session } | Effect::StopSandbox { session } => {
                self.read_usage(&session).await;
                Event::Closed {
                    error: self
                        .owner
                        .close(&session)
                        .await
                        .err()
                        .map(|e| e.to_string()),
                }
            }
            Effect::RecordBookmark(_)
            | Effect::Wait { .. }
            | Effect::Park(_)
            | Effect::Return(_) => Event::Failed {
                class: InfraClass::Internal,
                error: "internal: effect performed out of place".to_owned(),
            },
        }
    }

    async fn launch(
        &mut self,
        machine: &Machine,
        session: &str,
        launch_id: String,
        resume: bool,
    ) -> Event {
        let cx = self.cx(machine);
        let state = Self::state(machine);
        if let Err(e) = self.adapter.prepare(&cx, &state).await {
            return Event::Failed {
                class: InfraClass::LaunchFailed,
                error: format!("prepare: {e}"),
            };
        }
        match self.adapter.missing(&cx, &state).await {
            Ok(None) => {}
            Ok(Some(missing)) => {
                return Event::StartFailed {
                    launch_id,
                    exit_code: None,
                    error: missing,
                    tier: self.adapter.recovery_tier(),
                };
            }
            Err(e) => {
                return Event::Failed {
                    class: InfraClass::LaunchFailed,
                    error: format!("prepare: {e}"),
                };
            }
        }
        let cmd = match self.adapter.command(&state, resume) {
            Ok(c) => c,
            Err(e) => {
                return Event::Failed {
                    class: InfraClass::LaunchFailed,
                    error: format!("launch command: {e}"),
                };
            }
        };
        let mut env = cmd.env;
        env.insert(ROLLOUT_VAR.to_owned(), cx.rollout.clone());
        env.insert(ATTEMPT_VAR.to_owned(), cx.attempt.to_string());
        let key = match capture_key(&cx.rollout, cx.attempt) {
            Ok(key) => key,
            Err(e) => {
                return Event::Failed {
                    class: InfraClass::Internal,
                    error: format!("launch: {e}"),
                };
            }
        };
        let route = match &self.route_key {
            Some(route_key) => route_key.segment(&key.to_string()),
            None => key.to_string(),
        };
        env.insert(CAPTURE_KEY_VAR.to_owned(), route);
        // A sandbox with a network of its own reaches the gateway through
        // its relay at 127.0.0.1 and the gateway's port.
        if !self.task.task.sandbox.network.is_host()
            && let Some(url) = env.get_mut(GATEWAY_VAR)
        {
            *url = on_loopback(url);
        }
        let req = LaunchRequest {
            launch_id: launch_id.clone(),
            argv: cmd.argv,
            env,
            cwd: cx.workdir.clone(),
            freeze: None,
            options: Vec::new(),
        };
        match self.owner.launch(session, req).await {
            Ok(l) => {
                self.launches
                    .insert(l.launch_id.clone(), LaunchDir::new(l.session_dir));
                Event::Launched {
                    launch_id: l.launch_id,
                    tier: self.adapter.recovery_tier(),
                }
            }
            Err(e) => Event::Failed {
                class: InfraClass::LaunchFailed,
                error: format!("launch {launch_id}: {e}"),
            },
        }
    }

    /// Reads what the session's sandbox used, once, before it is graded
    /// or closed (both end it). A failure leaves the result without it.
    async fn read_usage(&mut self, session: &str) {
        if self.resources.is_some() {
            return;
        }
        match self.owner.usage(session).await {
            Ok(usage) => self.resources = Some(usage),
            Err(e) => tracing::warn!(session, error = %e, "cannot read the sandbox's usage"),
        }
    }

    /// The result with the sandbox's usage; its error names each limit
    /// that stopped something (a graded rollout gets one saying only that).
    fn with_resources(&mut self, mut result: RolloutResult) -> RolloutResult {
        let resources = self.resources.take();
        if let Some(r) = &resources
            && !r.limits_hit.is_empty()
        {
            let hit = format!("limits hit: {}", r.limits_hit.join("; "));
            result.error = Some(match result.error.take() {
                Some(error) => format!("{error} ({hit})"),
                None => hit,
            });
        }
        result.resources = resources;
        result.group.clone_from(&self.task.group);
        result
    }

    fn dir(&self, launch_id: &str) -> Option<LaunchDir> {
        self.launches.get(launch_id).cloned()
    }

    async fn ask(&self, dir: &LaunchDir, verb: Verb, limit: Duration) -> Result<Reply, String> {
        let reply = dir.ask(verb, limit).await.map_err(|e| e.to_string())?;
        if let Some(e) = &reply.error {
            return Err(format!("supervisor: {e}"));
        }
        Ok(reply)
    }

    async fn pause(&self, launch_id: &str, hold: bool) -> Event {
        let Some(dir) = self.dir(launch_id) else {
            return Event::Paused(PauseOutcome::Failed {
                reason: format!("launch {launch_id}: no session directory known"),
            });
        };
        if !hold && let Some(receipt) = self.batch.paused(launch_id) {
            // The checkpoint's batch took it: its receipt stands for the
            // supervisor's (an ended launch is still asked below).
            match receipt.outcome {
                Outcome::Confirmed => {
                    self.pauses.paused("confirmed", receipt.duration_us);
                    return Event::Paused(PauseOutcome::Confirmed);
                }
                Outcome::Failed => {
                    self.pauses.paused("failed", receipt.duration_us);
                    return Event::Paused(PauseOutcome::Failed {
                        reason: receipt
                            .reason
                            .unwrap_or_else(|| "the batched pause was not confirmed".to_owned()),
                    });
                }
                Outcome::AlreadyEnded | Outcome::NotRunning => {}
            }
        }
        if hold && let Err(e) = dir.hold().await {
            return Event::Paused(PauseOutcome::Failed {
                reason: e.to_string(),
            });
        }
        let mut asked_again = false;
        loop {
            let reply = match self.ask(&dir, Verb::Pause, self.budgets.control).await {
                Ok(r) => r,
                Err(reason) => return Event::Paused(PauseOutcome::Failed { reason }),
            };
            let Some(receipt) = reply.receipt else {
                return Event::Paused(PauseOutcome::Failed {
                    reason: "the supervisor sent no receipt".to_owned(),
                });
            };
            let retried = receipt.outcome == Outcome::NotRunning && hold && !asked_again;
            if !retried {
                let outcome = match receipt.outcome {
                    Outcome::Confirmed => "confirmed",
                    Outcome::AlreadyEnded => "already_ended",
                    Outcome::NotRunning => "not_running",
                    Outcome::Failed => "failed",
                };
                self.pauses.paused(outcome, receipt.duration_us);
            }
            return Event::Paused(match receipt.outcome {
                Outcome::Confirmed => {
                    if hold {
                        // It runs and is frozen: the file holds nothing now.
                        let _ = dir.release().await;
                    }
                    PauseOutcome::Confirmed
                }
                Outcome::AlreadyEnded => match dir.start_error().await {
                    // Its harness never started: nothing was paused.
                    Some(error) => {
                        return Event::StartFailed {
                            launch_id: launch_id.to_owned(),
                            exit_code: receipt.exit_code,
                            error,
                            tier: self.adapter.recovery_tier(),
                        };
                    }
                    None => PauseOutcome::AlreadyEnded {
                        exit_code: receipt.exit_code,
                    },
                },
                Outcome::Failed => PauseOutcome::Failed {
                    reason: receipt
                        .reason
                        .unwrap_or_else(|| "the pause was not confirmed".to_owned()),
                },
                Outcome::NotRunning if hold && !asked_again => {
                    // Held by the pause file, unless the supervisor was
                    // past its check already: ask once more after it had
                    // time to start the harness.
                    asked_again = true;
                    tokio::time::sleep(self.budgets.hold_settle).await;
                    continue;
                }
                Outcome::NotRunning if hold => PauseOutcome::Held,
                Outcome::NotRunning => PauseOutcome::Failed {
                    reason: "the launch is not running".to_owned(),
                },
            });
        }
    }

    async fn continue_launch(&self, launch_id: &str, hold: bool) -> Event {
        let Some(dir) = self.dir(launch_id) else {
            return Event::Continued {
                error: Some(format!("launch {launch_id}: no session directory known")),
            };
        };
        if let Some(receipt) = self.batch.take_continued(launch_id) {
            return Event::Continued {
                error: match receipt.outcome {
                    Outcome::Confirmed | Outcome::AlreadyEnded => None,
                    outcome => Some(
                        receipt
                            .reason
                            .unwrap_or_else(|| format!("continue: {outcome:?}")),
                    ),
                },
            };
        }
        if hold && let Err(e) = dir.release().await {
            return Event::Continued {
                error: Some(e.to_string()),
            };
        }
        match self.ask(&dir, Verb::Continue, self.budgets.control).await {
            Err(e) => Event::Continued { error: Some(e) },
            Ok(reply) => match reply.receipt.map(|r| (r.outcome, r.reason)) {
                Some((Outcome::Confirmed | Outcome::AlreadyEnded, _)) => {
                    Event::Continued { error: None }
                }
                Some((Outcome::NotRunning, _)) if hold => Event::Continued { error: None },
                Some((outcome, reason)) => Event::Continued {
                    error: Some(reason.unwrap_or_else(|| format!("continue: {outcome:?}"))),
                },
                None => Event::Continued {
                    error: Some("the supervisor sent no receipt".to_owned()),
                },
            },
        }
    }

    async fn stop(&self, launch_id: &str, why: StopWhy) -> Event {
        let Some(dir) = self.dir(launch_id) else {
            return Event::Stopped {
                ended_on_its_own: false,
                exit_code: None,
                confirmed: false,
                reason: Some(format!("launch {launch_id}: no session directory known")),
            };
        };
        let limit = if why == StopWhy::Cancel {
            self.budgets.cancel
        } else {
            self.budgets.control
        };
        match self.ask(&dir, Verb::Stop, limit).await {
            Ok(reply) => {
                let receipt = reply.receipt;
                let outcome = receipt.as_ref().map(|r| r.outcome);
                let exit_code = receipt.as_ref().and_then(|r| r.exit_code);
                match outcome {
                    Some(Outcome::AlreadyEnded) => Event::Stopped {
                        ended_on_its_own: true,
                        exit_code,
                        confirmed: true,
                        reason: None,
                    },
                    Some(Outcome::NotRunning) => {
                        // Not started: the stop keeps it from ever starting.
                        let _ = dir.release().await;
                        Event::Stopped {
                            ended_on_its_own: false,
                            exit_code: None,
                            confirmed: true,
                            reason: None,
                        }
                    }
                    _ => {
                        let receipt = receipt.as_ref();
                        let confirmed = receipt.is_some_and(|r| {
                            r.outcome == Outcome::Confirmed && r.cleanup_confirmed != Some(false)
                        });
                        Event::Stopped {
                            ended_on_its_own: false,
                            exit_code,
                            confirmed,
                            reason: receipt.and_then(|r| r.reason.clone()),
                        }
                    }
                }
            }
            Err(reason) => match dir.record().await.and_then(|r| r.ended) {
                Some(ended) => Event::Stopped {
                    ended_on_its_own: true,
                    exit_code: ended.exit_code,
                    confirmed: true,
                    reason: None,
                },
                None => Event::Stopped {
                    ended_on_its_own: false,
                    exit_code: None,
                    confirmed: false,
                    reason: Some(reason),
                },
            },
        }
    }
}

/// Sleeps `d`; `Duration::MAX` (no limit) never ends.
async fn sleep_for(d: Duration) {
    match tokio::time::Instant::now().checked_add(d) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The result of a machine that stopped without returning (a bug): failed,
/// naming it, rather than a hang.
fn machine_failed(machine: &Machine, task: &RolloutTask) -> RolloutResult {
    let mark = machine.bookmark();
    let mut result = RolloutResult::infra_error(
        &task.task.id,
        &mark.rollout,
        mark.attempt,
        InfraClass::Internal,
        format!(
            "internal: the stage machine stopped at `{}` without a result",
            mark.next().as_str()
        ),
        crate::result::Timings {
            started_at_ms: mark.started_at_ms,
            ended_at_ms: unix_ms(),
            ..Default::default()
        },
    );
    result.restart = machine.restart();
    result.launches = machine
        .progress()
        .map(|p| p.launches.clone())
        .unwrap_or_default();
    result
}

#[cfg(test)]
mod tests {
    use super::on_loopback;

    #[test]
    fn the_gateway_url_moves_to_loopback_keeping_its_port() {
        assert_eq!(
            on_loopback("http://10.0.0.5:4000/r"),
            "http://127.0.0.1:4000/r"
        );
        assert_eq!(on_loopback("http://gw.example/r"), "http://127.0.0.1:80/r");
        assert_eq!(on_loopback("https://[::1]/r"), "https://127.0.0.1:443/r");
        assert_eq!(on_loopback("http://127.0.0.1:9"), "http://127.0.0.1:9");
        assert_eq!(on_loopback("no-scheme"), "no-scheme");
    }
}
