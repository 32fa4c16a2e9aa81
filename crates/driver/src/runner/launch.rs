//! A launch: the adapter prepares the sandbox and names what is missing,
//! the command gets the rollout's environment and gateway route, and the
//! owner starts it under a supervisor.

use rollpoint_proto::anchor::LaunchRequest;

use crate::machine::event::Event;
use crate::machine::state::Machine;
use crate::result::InfraClass;
use crate::supervisor::LaunchDir;

use super::context::Runner;
use super::env::{
    ATTEMPT_VAR, CAPTURE_KEY_VAR, GATEWAY_VAR, ROLLOUT_VAR, capture_key, on_loopback,
};

impl Runner {
    pub(super) async fn launch(
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
}
