//! What the driver asks of every adapter: the [`Adapter`] trait, the
//! session it works in, and what it answers (a resume decision, a launch
//! command).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_owner::Owner;

use crate::errors::AdapterError;
use crate::launchlog::RecoveryTier;
use crate::result::Collected;

/// The session an adapter works in.
#[derive(Debug, Clone)]
pub struct Cx {
    pub owner: Arc<dyn Owner>,
    pub session: String,
    pub workdir: String,
    pub rollout: String,
    pub attempt: u32,
}

/// Resume or start over, and why (for the launch log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub resume: bool,
    pub reason: String,
}

/// The harness command of one launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchCommand {
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// One harness, as the driver sees it.
pub trait Adapter: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;

    /// Where the harness keeps its session in this sandbox: a JSON object
    /// stored in the bookmark, so a continuation finds it again.
    fn new_state(&self, workdir: &str, rollout: &str) -> serde_json::Value;

    /// Readies the sandbox before a launch (idempotent); by default there
    /// is nothing to ready.
    fn prepare<'a>(
        &'a self,
        _cx: &'a Cx,
        _state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), AdapterError>> {
        futures_util::future::ready(Ok(())).boxed()
    }

    /// What the launch needs in the sandbox that is not there (an input
    /// file, the binary), checked after `prepare`: `Some` names it, and the
    /// launch fails without being started. Only reads. A binary the
    /// supervisor cannot start is reported by the supervisor itself, so
    /// most adapters check nothing here.
    fn missing<'a>(
        &'a self,
        _cx: &'a Cx,
        _state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Option<String>, AdapterError>> {
        futures_util::future::ready(Ok(None)).boxed()
    }

    /// Whether the saved session can be continued, and why.
    fn resume_decision<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Decision, AdapterError>>;

    /// The command of a fresh or a resumed launch.
    fn command(
        &self,
        state: &serde_json::Value,
        resume: bool,
    ) -> Result<LaunchCommand, AdapterError>;

    /// Reads what the harness left (usage, transcript) before grading; by
    /// default nothing.
    fn collect<'a>(
        &'a self,
        _cx: &'a Cx,
        _state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Collected, AdapterError>> {
        futures_util::future::ready(Ok(Collected::default())).boxed()
    }

    /// Paused in place at checkpoints (else stopped and relaunched).
    fn pauses_at_checkpoints(&self) -> bool {
        true
    }

    /// How faithfully a relaunch continues the saved session; recorded in
    /// every launch record. `None` for adapters that are not a real harness.
    fn recovery_tier(&self) -> Option<RecoveryTier> {
        None
    }
}
