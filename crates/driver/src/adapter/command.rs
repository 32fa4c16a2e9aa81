//! The command adapter: any argv. A relaunch resumes with the command the
//! task names for that (`resume_argv`), or starts over with `argv`.

use std::collections::BTreeMap;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::contract::{Adapter, Cx, Decision, LaunchCommand};
use super::fields::default_true;
use crate::errors::AdapterError;

const NAME: &str = "command";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSettings {
    pub argv: Vec<String>,
    /// Continues a saved session; without it a relaunch starts over.
    #[serde(default)]
    pub resume_argv: Option<Vec<String>>,
    /// Added to the sandbox's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_true")]
    pub pauses: bool,
}

impl CommandSettings {
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        check_argv("argv", &self.argv)?;
        if let Some(argv) = &self.resume_argv {
            check_argv("resume_argv", argv)?;
        }
        Ok(())
    }
}

pub(crate) fn check_argv(field: &str, argv: &[String]) -> Result<(), (String, String)> {
    match argv.first() {
        None => Err((field.into(), "argv is empty".into())),
        Some(a) if a.is_empty() => Err((format!("{field}[0]"), "is empty".into())),
        Some(_) => Ok(()),
    }
}

#[derive(Debug)]
pub struct CommandAdapter {
    settings: CommandSettings,
}

impl CommandAdapter {
    pub fn new(settings: CommandSettings) -> Self {
        Self { settings }
    }
}

impl Adapter for CommandAdapter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn new_state(&self, _workdir: &str, _rollout: &str) -> serde_json::Value {
        serde_json::json!({})
    }

    fn resume_decision<'a>(
        &'a self,
        _cx: &'a Cx,
        _state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Decision, AdapterError>> {
        let decision = if self.settings.resume_argv.is_some() {
            Decision {
                resume: true,
                reason: "the task names a resume command".into(),
            }
        } else {
            Decision {
                resume: false,
                reason: "the task names no resume command: start over".into(),
            }
        };
        futures_util::future::ready(Ok(decision)).boxed()
    }

    fn command(
        &self,
        _state: &serde_json::Value,
        resume: bool,
    ) -> Result<LaunchCommand, AdapterError> {
        let argv = match (&self.settings.resume_argv, resume) {
            (Some(argv), true) => argv.clone(),
            _ => self.settings.argv.clone(),
        };
        Ok(LaunchCommand {
            argv,
            env: self.settings.env.clone(),
        })
    }

    fn pauses_at_checkpoints(&self) -> bool {
        self.settings.pauses
    }
}
