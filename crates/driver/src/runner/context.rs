//! The runner of one rollout: what its effects need (the owner, the
//! adapter, the task, budgets, the launches made) and the small reads and
//! records the effects share. Each kind of effect is a file beside this one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rollpoint_owner::Owner;
use rollpoint_proto::supervisor::{Reply, Verb};
use tokio::sync::watch;

use crate::adapter::{Adapter, Cx};
use crate::bookmark::Bookmark;
use crate::ctl::{Ctl, RunStatus};
use crate::machine::state::Machine;
use crate::result::RolloutResult;
use crate::store::Store;
use crate::supervisor::LaunchDir;
use crate::task::RolloutTask;

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
    pub(super) fn set_status(&self, machine: &Machine) {
        let restart = machine.restart();
        self.ctl.send_modify(|c| {
            c.restart = restart;
            if matches!(c.status, RunStatus::Queued) {
                c.status = RunStatus::Running;
            }
        });
    }

    pub(super) async fn record(&self, bookmark: Bookmark) {
        if let Some(store) = &self.store
            && let Err(e) = store.write(&bookmark).await
        {
            // The in-memory bookmark still serves export; the durable copy
            // is a convenience for tools, the checkpoint is the record.
            tracing::warn!(rollout = %bookmark.rollout, error = %e, "the bookmark's durable copy was not written");
        }
        self.ctl.send_modify(|c| c.bookmark = bookmark);
    }

    pub(super) fn cx(&self, machine: &Machine) -> Cx {
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

    pub(super) fn state(machine: &Machine) -> serde_json::Value {
        machine
            .progress()
            .map(|p| p.state.clone())
            .unwrap_or_else(|| serde_json::json!({}))
    }

    /// Reads what the session's sandbox used, once, before it is graded
    /// or closed (both end it). A failure leaves the result without it.
    pub(super) async fn read_usage(&mut self, session: &str) {
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
    pub(super) fn with_resources(&mut self, mut result: RolloutResult) -> RolloutResult {
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

    pub(super) fn dir(&self, launch_id: &str) -> Option<LaunchDir> {
        self.launches.get(launch_id).cloned()
    }

    pub(super) async fn ask(
        &self,
        dir: &LaunchDir,
        verb: Verb,
        limit: Duration,
    ) -> Result<Reply, String> {
        let reply = dir.ask(verb, limit).await.map_err(|e| e.to_string())?;
        if let Some(e) = &reply.error {
            return Err(format!("supervisor: {e}"));
        }
        Ok(reply)
    }
}
