//! Pausing a launch in place (or holding one not yet started with its pause
//! file), and continuing it; a checkpoint's batched pause or continue
//! stands for the supervisor's reply.

use rollpoint_proto::receipt::Outcome;
use rollpoint_proto::supervisor::Verb;

use crate::machine::event::{Event, PauseOutcome};

use super::context::Runner;

impl Runner {
    pub(super) async fn pause(&self, launch_id: &str, hold: bool) -> Event {
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

    pub(super) async fn continue_launch(&self, launch_id: &str, hold: bool) -> Event {
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
}
