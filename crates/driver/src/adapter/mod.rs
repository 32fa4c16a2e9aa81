//! Adapters hold everything harness-specific: where the harness keeps its
//! session, how the sandbox is prepared, whether a saved session can be
//! continued, the launch command, what is collected afterwards, and whether
//! the harness may be paused at checkpoints. The driver stays generic.

pub mod claude_code;
pub mod codex;
pub mod command;
pub mod fake;
pub mod harness;
pub mod native;
pub mod opencode;
pub mod pi;
pub mod spec;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_owner::Owner;

use crate::errors::AdapterError;
pub use crate::launchlog::RecoveryTier;
pub use crate::result::Collected;
use spec::AdapterSpec;

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

    /// Readies the sandbox before a launch (idempotent).
    fn prepare<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), AdapterError>>;

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

    /// Reads what the harness left (usage, transcript) before grading.
    fn collect<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Collected, AdapterError>>;

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

/// The adapter a task names.
pub fn from_spec(spec: &AdapterSpec) -> Arc<dyn Adapter> {
    match spec {
        AdapterSpec::Command(s) => Arc::new(command::CommandAdapter::new(s.clone())),
        AdapterSpec::Native(s) => Arc::new(native::NativeAdapter::new(s.clone())),
        AdapterSpec::Fake(s) => Arc::new(fake::FakeAdapter::new(s.clone())),
        AdapterSpec::Codex(s) => Arc::new(harness::HarnessAdapter::new(codex::Codex, s.clone())),
        AdapterSpec::ClaudeCode(s) => Arc::new(harness::HarnessAdapter::new(
            claude_code::ClaudeCode,
            s.clone(),
        )),
        AdapterSpec::Opencode(s) => {
            Arc::new(harness::HarnessAdapter::new(opencode::OpenCode, s.clone()))
        }
        AdapterSpec::Pi(s) => Arc::new(harness::HarnessAdapter::new(pi::Pi, s.clone())),
    }
}

/// A string field of the adapter state.
pub(crate) fn state_str<'a>(
    adapter: &'static str,
    state: &'a serde_json::Value,
    key: &str,
) -> Result<&'a str, AdapterError> {
    state
        .get(key)
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| {
            AdapterError::new(
                adapter,
                format!("state field `{key}` is missing or not a string"),
            )
        })
}

fn default_true() -> bool {
    true
}
