//! Stopping a launch (for a park, a cancel, a time limit or a failed
//! pause), and whether it ended on its own first.

use rollpoint_proto::receipt::Outcome;
use rollpoint_proto::supervisor::Verb;

use crate::machine::event::{Event, StopWhy};

use super::context::Runner;

impl Runner {
    pub(super) async fn stop(&self, launch_id: &str, why: StopWhy) -> Event {
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
