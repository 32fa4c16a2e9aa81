//! Waiting on a running launch: its end (or its sandbox lost), a park or
//! cancel request, or the harness's time limit, counted in running time.

use std::time::Duration;

use crate::machine::event::Event;
use crate::machine::state::Machine;
use crate::result::InfraClass;

use super::context::Runner;

impl Runner {
    pub(super) async fn wait(&mut self, machine: &Machine, launch_id: &str) -> Event {
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
}

/// Sleeps `d`; `Duration::MAX` (no limit) never ends.
async fn sleep_for(d: Duration) {
    match tokio::time::Instant::now().checked_add(d) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
