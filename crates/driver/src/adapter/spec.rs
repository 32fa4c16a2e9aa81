//! Which adapter a task names, with its settings: the `adapter` field of a
//! rollout task.
//!
//! Decoding reads `kind` first, then decodes that adapter's settings with
//! the path of a bad field kept (`argv`, `env.X`): serde's internally tagged
//! enums buffer the object and lose the path inside it, so a wrong type
//! would name only `adapter`.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::command::CommandSettings;
use super::fake::FakeSettings;
use super::harness::HarnessSettings;
use super::native::NativeSettings;

/// The adapter that runs the harness, with its settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
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

/// Every `kind` an adapter object may name.
pub const KINDS: [&str; 7] = [
    "command",
    "native",
    "fake",
    "codex",
    "claude-code",
    "opencode",
    "pi",
];

/// A bad field of an adapter object: its path inside the object (`kind`,
/// `argv`, `env.X`; `.` for the object itself) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct SpecError {
    pub field: String,
    pub message: String,
}

impl SpecError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
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

    /// Decodes an adapter object: `kind` first, then that adapter's
    /// settings (unknown fields refused); the error names the bad field by
    /// its path inside the object.
    pub fn from_value(value: Value) -> Result<Self, SpecError> {
        let mut map = serde_json::from_value::<serde_json::Map<String, Value>>(value)
            .map_err(|e| SpecError::new(".", e.to_string()))?;
        let kind = match map.remove("kind") {
            None => return Err(SpecError::new("kind", "missing field `kind`")),
            Some(kind) => serde_json::from_value::<String>(kind)
                .map_err(|e| SpecError::new("kind", e.to_string()))?,
        };
        let settings = Value::Object(map);
        match kind.as_str() {
            "command" => settings_of(settings).map(Self::Command),
            "native" => settings_of(settings).map(Self::Native),
            "fake" => settings_of(settings).map(Self::Fake),
            "codex" => settings_of(settings).map(Self::Codex),
            "claude-code" => settings_of(settings).map(Self::ClaudeCode),
            "opencode" => settings_of(settings).map(Self::Opencode),
            "pi" => settings_of(settings).map(Self::Pi),
            other => {
                let expected: Vec<String> = KINDS.iter().map(|k| format!("`{k}`")).collect();
                Err(SpecError::new(
                    "kind",
                    format!(
                        "unknown variant `{other}`, expected one of {}",
                        expected.join(", ")
                    ),
                ))
            }
        }
    }
}

/// One adapter's settings, the bad field named by its path.
fn settings_of<T: DeserializeOwned>(value: Value) -> Result<T, SpecError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        SpecError::new(
            rollpoint_proto::field_path(&path, &inner),
            inner.to_string(),
        )
    })
}

impl<'de> Deserialize<'de> for AdapterSpec {
    /// Through [`AdapterSpec::from_value`]; the error's text names the
    /// field inside the object (a path tracker outside sees only `adapter`,
    /// which [`crate::RolloutTask::decode`] makes up for).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Self::from_value(value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(json: Value) -> String {
        AdapterSpec::from_value(json.clone())
            .map(|s| panic!("{json} decoded as {s:?}"))
            .unwrap_or_else(|e| e.field)
    }

    #[test]
    fn a_bad_field_is_named_inside_the_adapter() {
        use serde_json::json;
        assert_eq!(field_of(json!({"kind": "command", "argv": "true"})), "argv");
        assert_eq!(
            field_of(json!({"kind": "command", "argv": ["a"], "env": {"X": 1}})),
            "env.X"
        );
        assert_eq!(field_of(json!({"kind": "command"})), "argv");
        assert_eq!(
            field_of(json!({"kind": "command", "argv": ["a"], "colour": 1})),
            "colour"
        );
        assert_eq!(field_of(json!({"kind": "fake", "steps": "3"})), "steps");
        assert_eq!(field_of(json!({"kind": "pi", "prompt": 3})), "prompt");
        assert_eq!(field_of(json!({"kind": "warp"})), "kind");
        assert_eq!(field_of(json!({"kind": 3})), "kind");
        assert_eq!(field_of(json!({"argv": ["a"]})), "kind");
        assert_eq!(field_of(json!("command")), ".");
    }

    #[test]
    fn every_kind_round_trips() {
        use serde_json::json;
        for spec in [
            json!({"kind": "command", "argv": ["a"]}),
            json!({"kind": "native", "input": "in.json"}),
            json!({"kind": "fake", "steps": 2, "tick_ms": 5}),
            json!({"kind": "codex", "prompt": "go"}),
            json!({"kind": "claude-code", "prompt": "go"}),
            json!({"kind": "opencode", "prompt": "go"}),
            json!({"kind": "pi", "prompt": "go"}),
        ] {
            let decoded = AdapterSpec::from_value(spec.clone()).expect("decodes");
            let again: AdapterSpec =
                serde_json::from_value(serde_json::to_value(&decoded).expect("encodes"))
                    .expect("decodes again");
            assert_eq!(again, decoded, "{spec}");
            assert_eq!(
                serde_json::to_value(&decoded).expect("encodes")["kind"],
                spec["kind"]
            );
        }
    }
}
