//! The loop itself: one task selects over finished rollouts, the checkpoint timer, the
//! signals and control requests, and the progress display, until every rollout in flight is
//! done or the run is stopped.

use std::time::{Duration, Instant};

use rollpoint_driver::RunStatus;
use rollpoint_owner::Owner as _;
use tokio::sync::{mpsc, watch};

use super::new::Loop;
use super::signal::{EndpointRequest, Signal};
use crate::errors::RunError;
use crate::files::events::Event;

/// How the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every task has a result row.
    Finished { rows: usize },
    /// Stopped by a signal after publishing `checkpoint`.
    Stopped { checkpoint: String },
    /// Stopped by a signal without a stop checkpoint, which did not fit the grace period;
    /// a resume continues from `latest`, the newest checkpoint published before.
    StoppedWithout { latest: Option<String>, why: String },
}

impl Loop {
    pub(crate) fn show(&mut self) {
        self.count();
        self.reporter.tick(&self.progress);
    }

    pub(crate) fn count(&mut self) {
        let mut queued = 0;
        let mut parked = 0;
        for r in self.in_flight.keys() {
            match self.stack.runs.status(r) {
                Some(RunStatus::Queued) => queued += 1,
                Some(RunStatus::Parked(_)) => parked += 1,
                _ => {}
            }
        }
        self.progress.in_flight = self.in_flight.len();
        self.progress.queued = queued;
        self.progress.parked = parked;
    }

    pub(crate) async fn drive(
        mut self,
        mut signals: mpsc::UnboundedReceiver<Signal>,
        grace: Option<Duration>,
        stop_requested: watch::Receiver<Option<Instant>>,
    ) -> Result<Ending, RunError> {
        self.grace = grace.map(|g| (stop_requested, g));
        let every = self.state.config.checkpoint_every_s;
        let period = Duration::from_secs(every.max(1));
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shown = tokio::time::interval(self.reporter.period());
        let mut signals_open = true;
        while !self.in_flight.is_empty() {
            tokio::select! {
                Some((rollout, attempt, result)) = self.rx.recv() => {
                    self.finished(rollout, attempt, result).await?;
                }
                _ = ticker.tick(), if every > 0 => {
                    match self.checkpoint(None, false, Duration::ZERO).await {
                        Ok(done) => self.branch_by_rule(&done.id, &done.scope, &done.restarts).await,
                        Err(e) => tracing::warn!(error = %RunError::from(e), "checkpoint failed; the run goes on"),
                    }
                }
                signal = signals.recv(), if signals_open => match signal {
                    Some(Signal::Checkpoint) => {
                        match self.checkpoint(None, false, Duration::ZERO).await {
                            Ok(done) => self.branch_by_rule(&done.id, &done.scope, &done.restarts).await,
                            Err(e) => tracing::warn!(error = %RunError::from(e), "checkpoint failed; the run goes on"),
                        }
                    }
                    Some(Signal::Endpoint(EndpointRequest::Checkpoint { request, reply })) => {
                        if request.stop {
                            match self.stop(request.id).await {
                                Ok(done) => {
                                    let id = done.id.clone();
                                    let _asker_gone: Result<(), _> = reply.send(Ok(done));
                                    self.stack.shutdown().await;
                                    return Ok(Ending::Stopped { checkpoint: id });
                                }
                                // Nothing was published and everyone was
                                // resumed: the run goes on.
                                Err(e) => {
                                    tracing::warn!(error = %e.as_run_error(), "stop checkpoint failed; the run goes on");
                                    let _asker_gone: Result<(), _> = reply.send(Err(e.api()));
                                    continue;
                                }
                            }
                        }
                        let answer = self.checkpoint(request.id.clone(), false, request.hold()).await;
                        if let Err(e) = &answer {
                            tracing::warn!(error = %e.as_run_error(), "checkpoint failed; the run goes on");
                        }
                        let done = answer.as_ref().ok().cloned();
                        let _asker_gone: Result<(), _> = reply.send(answer.map_err(|e| e.api()));
                        if let Some(done) = done {
                            self.branch_by_rule(&done.id, &done.scope, &done.restarts).await;
                        }
                    }
                    Some(Signal::Endpoint(EndpointRequest::Record(event))) => {
                        self.events.record(event);
                    }
                    Some(Signal::Endpoint(EndpointRequest::Status { reply })) => {
                        self.count();
                        let _asker_gone: Result<(), _> = reply.send(self.progress.clone());
                    }
                    Some(Signal::Endpoint(EndpointRequest::Fork { request, reply })) => {
                        let answer = self.fork(&request).await.map_err(|e| {
                            tracing::warn!(error = %e, "fork refused");
                            rollpoint_api::ApiError::new(e.fork_refusal_code(), e.to_string())
                        });
                        let _asker_gone: Result<(), _> = reply.send(answer);
                    }
                    Some(Signal::Endpoint(EndpointRequest::FleetPause { request, reply })) => {
                        let answer = self.fleet_pause(request.calls).await;
                        let _asker_gone: Result<(), _> = reply.send(answer);
                    }
                    Some(Signal::Endpoint(EndpointRequest::FleetContinue { request, reply })) => {
                        let answer = self.fleet_continue(request.version).await;
                        let _asker_gone: Result<(), _> = reply.send(answer);
                    }
                    Some(Signal::Endpoint(EndpointRequest::Metrics { reply })) => {
                        self.count();
                        let _asker_gone: Result<(), _> = reply.send(self.metrics.render(&self.progress, &self.stack.owner.counts()));
                    }
                    Some(Signal::Stop(received)) => return self.stop_within(received, grace).await,
                    Some(Signal::Fenced(why)) => {
                        tracing::error!(why = %why, "fenced: another process drives this run now; stopping without a checkpoint");
                        if let Err(e) = self.stack.backend.destroy_all() {
                            tracing::warn!(error = %e, "tearing down sandboxes failed");
                        }
                        self.stack.shutdown().await;
                        return Err(RunError::setup("checkpoint store claim", format!("fenced: {why}")));
                    }
                    None => signals_open = false,
                },
                _ = shown.tick() => self.show(),
            }
        }
        self.show();
        self.reporter.finish(&self.progress);
        let rows = self.progress.done;
        let lost = std::mem::take(&mut self.lost);
        self.stack.shutdown().await;
        if lost.is_empty() {
            self.events.record(Event::Finished { rows });
            Ok(Ending::Finished { rows })
        } else {
            Err(RunError::rollout(
                lost.join(", "),
                "ended without a result; `rollpoint resume` runs them again",
            ))
        }
    }
}
