//! The rollout task the driver takes: the owner's task, the adapter and its
//! settings, and how the rollout is graded. One JSON object per task.

use rollpoint_owner::OwnerTask;
use serde::{Deserialize, Serialize};

use crate::bookmark::{VerifyMode, check_rollout};
use crate::errors::DriverError;
use rollpoint_proto::limits::MAX_TIMEOUT_S;

/// Version of [`RolloutTask`].
pub const TASK_VERSION: u32 = 1;

pub use crate::adapter::spec::AdapterSpec;

/// One rollout to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutTask {
    pub v: u32,
    /// The rollout id; the owner task's id when absent.
    #[serde(default)]
    pub id: Option<String>,
    pub task: OwnerTask,
    pub adapter: AdapterSpec,
    #[serde(default)]
    pub verify_mode: VerifyMode,
    /// Running time one launch may take (paused time excluded); past it the
    /// launch is stopped as failed and the rollout is graded as it stands.
    #[serde(default)]
    pub harness_timeout_s: Option<u64>,
}

impl RolloutTask {
    /// Adds `extra` to the harness's environment; the task's own values win.
    pub fn with_env(mut self, extra: &std::collections::BTreeMap<String, String>) -> Self {
        if let Some(env) = self.adapter.env_mut() {
            for (k, v) in extra {
                env.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        self
    }

    /// Reads a task, rejecting unknown versions and fields by name.
    pub fn decode(bytes: &[u8]) -> Result<Self, DriverError> {
        let task: Self =
            rollpoint_proto::decode("rollout task", TASK_VERSION, bytes).map_err(|e| {
                DriverError::Task {
                    field: match &e {
                        rollpoint_proto::FormatError::Field { path, .. } => format!("task.{path}"),
                        rollpoint_proto::FormatError::MissingVersion { .. }
                        | rollpoint_proto::FormatError::UnknownVersion { .. } => {
                            "task.v".to_owned()
                        }
                        rollpoint_proto::FormatError::Json { .. } => "task".to_owned(),
                    },
                    message: e.to_string(),
                }
            })?;
        task.validate()?;
        Ok(task)
    }

    /// The rollout id.
    pub fn rollout(&self) -> &str {
        self.id.as_deref().unwrap_or(&self.task.id)
    }

    /// Checks ids, the owner task and the adapter settings, naming the field.
    pub fn validate(&self) -> Result<(), DriverError> {
        let bad = |field: String, message: String| DriverError::Task { field, message };
        check_rollout("task.id", self.rollout()).map_err(|e| bad(e.field, e.message))?;
        self.task.validate().map_err(|e| match e {
            rollpoint_owner::OwnerError::BadRequest { field, message } => {
                bad(format!("task.{field}"), message)
            }
            other => bad("task.task".to_owned(), other.to_string()),
        })?;
        if let Some(t) = self.harness_timeout_s
            && !(1..=MAX_TIMEOUT_S).contains(&t)
        {
            return Err(bad(
                "task.harness_timeout_s".to_owned(),
                format!("{t} is outside 1..={MAX_TIMEOUT_S}; must be above 0"),
            ));
        }
        match &self.adapter {
            AdapterSpec::Command(s) => s.validate(),
            AdapterSpec::Native(s) => s.validate(),
            AdapterSpec::Fake(s) => s.validate(),
            AdapterSpec::Codex(s)
            | AdapterSpec::ClaudeCode(s)
            | AdapterSpec::Opencode(s)
            | AdapterSpec::Pi(s) => s.validate(),
        }
        .map_err(|(field, message)| bad(format!("task.adapter.{field}"), message))
    }
}
