//! The rollout task the driver takes: the owner's task, the adapter and its
//! settings, and how the rollout is graded. One JSON object per task.

use rollpoint_owner::OwnerTask;
use serde::{Deserialize, Serialize};

use crate::bookmark::{VerifyMode, check_rollout};
use crate::errors::DriverError;
use rollpoint_proto::limits::MAX_TIMEOUT_S;

/// Version of [`RolloutTask`].
pub const TASK_VERSION: u32 = 1;
/// Most `samples` of one task.
pub const MAX_SAMPLES: u32 = 1024;

pub use crate::adapter::spec::AdapterSpec;

/// One rollout to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutTask {
    pub v: u32,
    /// The rollout id; the owner task's id when absent.
    #[serde(default)]
    pub id: Option<String>,
    pub task: OwnerTask,
    /// The adapter and its settings, `{"kind": ..., ...}`: `kind` is one of
    /// `command`, `native`, `fake`, `codex`, `claude-code`, `opencode`, `pi`,
    /// and the other fields are that adapter's settings (unknown ones refused).
    // An object in the OpenAPI description: its reader is hand-written (kind
    // first, then the settings), not a serde derive.
    #[schema(value_type = Object)]
    pub adapter: AdapterSpec,
    #[serde(default)]
    pub verify_mode: VerifyMode,
    /// Running time one launch may take (paused time excluded); past it the
    /// launch is stopped as failed and the rollout is graded as it stands.
    #[serde(default)]
    pub harness_timeout_s: Option<u64>,
    /// Rollouts of this task (over the run's `samples`): K above 1 runs
    /// `<id>.s0` .. `<id>.s<K-1>` as one group (1..=[`MAX_SAMPLES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u32>,
    /// The group this rollout is a sample of; set when samples are expanded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

impl RolloutTask {
    /// Fills each sandbox limit the task names none of from `defaults`.
    #[must_use]
    pub fn with_limits(mut self, defaults: &rollpoint_owner::Limits) -> Self {
        self.task.sandbox.limits = self.task.sandbox.limits.or(defaults);
        self
    }

    /// Adds `extra` to the harness's environment; the task's own values win.
    pub fn with_env(mut self, extra: &std::collections::BTreeMap<String, String>) -> Self {
        if let Some(env) = self.adapter.env_mut() {
            for (k, v) in extra {
                env.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        self
    }

    /// Reads a task, rejecting unknown versions and fields by name. A bad
    /// field is named by its full path (`task.adapter.env.X`).
    pub fn decode(bytes: &[u8]) -> Result<Self, DriverError> {
        let task: Self = rollpoint_proto::decode("rollout task", TASK_VERSION, bytes)
            .map_err(|e| decode_error(bytes, e))?;
        task.validate()?;
        Ok(task)
    }

    /// This task as its samples: itself when `k` (its own `samples`, else
    /// `run_samples`) is 1, else `k` tasks `<id>.s<i>` in group `<id>`.
    pub fn samples(self, run_samples: u32) -> Result<Vec<Self>, DriverError> {
        let k = self.samples.unwrap_or(run_samples);
        if k <= 1 {
            return Ok(vec![self]);
        }
        let group = self.rollout().to_owned();
        (0..k)
            .map(|i| {
                let sample = Self {
                    id: Some(format!("{group}.s{i}")),
                    samples: None,
                    group: Some(group.clone()),
                    ..self.clone()
                };
                sample.validate()?;
                Ok(sample)
            })
            .collect()
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
        if let Some(k) = self.samples
            && !(1..=MAX_SAMPLES).contains(&k)
        {
            return Err(bad(
                "task.samples".to_owned(),
                format!("{k} is outside 1..={MAX_SAMPLES}"),
            ));
        }
        if let Some(group) = &self.group {
            check_rollout("task.group", group).map_err(|e| bad(e.field, e.message))?;
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

/// A task that did not decode, as the error naming its field. A path
/// tracker sees a bad field inside `adapter` only as `adapter` (the adapter
/// object is decoded by [`AdapterSpec::from_value`]), so that one is decoded
/// again on its own for the path inside it.
fn decode_error(bytes: &[u8], e: rollpoint_proto::FormatError) -> DriverError {
    use rollpoint_proto::FormatError;
    let field = match &e {
        FormatError::Field { path, .. } if path == "adapter" => {
            let adapter = serde_json::from_slice::<serde_json::Value>(bytes)
                .ok()
                .and_then(|mut v| v.get_mut("adapter").map(serde_json::Value::take));
            if let Some(Err(inner)) = adapter.map(AdapterSpec::from_value) {
                let field = match inner.field.as_str() {
                    "." => "adapter".to_owned(),
                    f => format!("adapter.{f}"),
                };
                return DriverError::Task {
                    message: format!("rollout task: field `{field}`: {}", inner.message),
                    field: format!("task.{field}"),
                };
            }
            "task.adapter".to_owned()
        }
        FormatError::Field { path, source, .. } => {
            match rollpoint_proto::field_path(path, source).as_str() {
                "." => "task".to_owned(),
                f => format!("task.{f}"),
            }
        }
        FormatError::MissingVersion { .. } | FormatError::UnknownVersion { .. } => {
            "task.v".to_owned()
        }
        FormatError::Json { .. } => "task".to_owned(),
    };
    DriverError::Task {
        field,
        message: e.to_string(),
    }
}
