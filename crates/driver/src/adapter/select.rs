//! The adapter a task names, built from its settings.

use std::sync::Arc;

use super::contract::Adapter;
use super::spec::AdapterSpec;
use super::{claude_code, codex, command, fake, harness, native, opencode, pi};

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
