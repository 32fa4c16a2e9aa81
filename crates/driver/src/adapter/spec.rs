//! Which adapter a task names, with its settings: the `adapter` field of a
//! rollout task.

use serde::{Deserialize, Serialize};

use super::command::CommandSettings;
use super::fake::FakeSettings;
use super::harness::HarnessSettings;
use super::native::NativeSettings;

/// The adapter that runs the harness, with its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AdapterSpec {
    Command(CommandSettings),
    Native(NativeSettings),
    Fake(FakeSettings),
    /// Codex CLI (`codex exec`).
    Codex(HarnessSettings),
    /// Claude Code (`claude -p`).
    #[serde(rename = "claude-code")]
    ClaudeCode(HarnessSettings),
    /// OpenCode (`kind: opencode`).
    Opencode(HarnessSettings),
    /// Pi (`kind: pi`).
    Pi(HarnessSettings),
}

impl AdapterSpec {
    /// The harness's environment settings, for a runner adding its own
    /// variables; `None` for an adapter that takes none.
    pub fn env_mut(&mut self) -> Option<&mut std::collections::BTreeMap<String, String>> {
        match self {
            AdapterSpec::Command(s) => Some(&mut s.env),
            AdapterSpec::Native(s) => Some(&mut s.env),
            AdapterSpec::Fake(_) => None,
            AdapterSpec::Codex(s)
            | AdapterSpec::ClaudeCode(s)
            | AdapterSpec::Opencode(s)
            | AdapterSpec::Pi(s) => Some(&mut s.env),
        }
    }
}
