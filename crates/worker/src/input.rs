//! The worker's input file: what the controller hands over for one rollout. Versioned, strict
//! (an unknown field is an error naming it) and limited to what the worker needs: state that
//! belongs to the controller (rewards, verifier data, credentials of other services) is refused
//! by name, so it can never leak into a sandbox by way of the input.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::errors::InputError;

/// The input format this worker reads.
pub const INPUT_VERSION: u32 = 1;

/// Field names that belong to the controller and are refused wherever they appear.
const CONTROLLER_FIELDS: &[&str] = &[
    "reward",
    "rewards",
    "score",
    "verify",
    "verifier",
    "verifier_metadata",
    "credentials",
    "provider_credentials",
    "control_token",
    "owner_token",
    "gateway_token",
    "global_config",
    "api_key",
];

/// One rollout's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerInput {
    /// Format version, [`INPUT_VERSION`].
    pub v: u32,
    /// The rollout this run belongs to; a checkpoint of another rollout is refused.
    pub rollout_id: String,
    pub task: Task,
    pub model: ModelSpec,
    /// Directory the tools run in and resolve relative paths against (default: the worker's
    /// current directory).
    #[serde(default)]
    pub workdir: Option<PathBuf>,
    #[serde(default)]
    pub limits: Limits,
}

/// What the agent is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub prompt: String,
    #[serde(default)]
    pub system: Option<String>,
}

/// Which model to call, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Base URL ending before `/chat/completions` or `/responses`, e.g.
    /// `http://127.0.0.1:8080/r/<capture key>/v1`. Plain http: the worker carries no TLS.
    pub base_url: String,
    pub api: Api,
    pub name: String,
    /// Name of an environment variable holding a bearer token for the model endpoint. The
    /// token itself never appears in the input file.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

/// The wire protocol of the model endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    ChatCompletions,
    Responses,
}

/// Budgets of one rollout. Every one has a default and must be greater than zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Model calls across all launches of the rollout.
    pub max_model_calls: u32,
    /// Tokens; the run stops before a request that would not fit.
    pub context_window: u64,
    /// Active wall-clock time across launches (time between a crash and the relaunch does
    /// not count).
    pub wall_clock_secs: u64,
    pub tool_timeout_secs: u64,
    /// Bytes of one tool's output that go back to the model (head and tail are kept).
    pub tool_output_cap_bytes: u64,
    /// Deadline of one model call, retries included.
    pub model_call_timeout_secs: u64,
    /// Retries of one model call after a transient failure.
    pub model_retries: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_model_calls: 100,
            context_window: 128_000,
            wall_clock_secs: 3_600,
            tool_timeout_secs: 300,
            tool_output_cap_bytes: 32 * 1024,
            model_call_timeout_secs: 600,
            model_retries: 4,
        }
    }
}

/// Reads and checks the input file at `path`.
pub fn load(path: &Path) -> Result<WorkerInput, InputError> {
    let bytes = std::fs::read(path).map_err(|source| InputError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &bytes)
}

/// Parses and checks input bytes; `path` only names the file in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<WorkerInput, InputError> {
    let field = |field: &str, message: String| InputError::Field {
        path: path.to_owned(),
        field: field.to_owned(),
        message,
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|source| InputError::Json {
        path: path.to_owned(),
        source,
    })?;
    let Value::Object(_) = &value else {
        return Err(field(".", "expected a json object".to_owned()));
    };
    match rollpoint_proto::check_version(&value, "worker input", "v", INPUT_VERSION) {
        Ok(()) => {}
        Err(rollpoint_proto::FormatError::UnknownVersion { found, .. }) => {
            return Err(field(
                "v",
                format!("unknown input version {found} (this worker reads {INPUT_VERSION})"),
            ));
        }
        Err(_) => return Err(field("v", "missing (the input format version)".to_owned())),
    }
    if let Some(found) = find_controller_field(&value, "") {
        return Err(field(
            &found,
            "belongs to the controller and is refused: the worker never receives rewards, \
             verifier data or credentials"
                .to_owned(),
        ));
    }
    let input: WorkerInput = serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        let message = e.inner().to_string();
        field(&field_path(&at, &message), message)
    })?;
    check(&input).map_err(|(f, m)| field(f, m))?;
    Ok(input)
}

/// The dotted path of a serde error (for an unknown field, the path already ends with it).
fn field_path(at: &str, message: &str) -> String {
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split('`').next());
    match (at, unknown) {
        (".", Some(name)) => name.to_owned(),
        (".", None) => "(top level)".to_owned(),
        _ => at.to_owned(),
    }
}

/// Depth-first search for a controller-owned field name; returns its dotted path.
fn find_controller_field(value: &Value, prefix: &str) -> Option<String> {
    let Value::Object(map) = value else {
        return None;
    };
    for (key, child) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        if CONTROLLER_FIELDS.contains(&key.as_str()) {
            return Some(path);
        }
        if let Some(found) = find_controller_field(child, &path) {
            return Some(found);
        }
    }
    None
}

/// Checks what the types cannot: returns the offending field and why.
fn check(input: &WorkerInput) -> Result<(), (&'static str, String)> {
    let id = &input.rollout_id;
    if id.is_empty()
        || id.len() > 200
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-~".contains(&b))
    {
        return Err((
            "rollout_id",
            "must be 1 to 200 characters of [A-Za-z0-9._:~-]".to_owned(),
        ));
    }
    if input.task.prompt.is_empty() {
        return Err(("task.prompt", "must not be empty".to_owned()));
    }
    if !input.model.base_url.starts_with("http://") {
        return Err((
            "model.base_url",
            "must start with http:// (the worker has no TLS; point it at the gateway)".to_owned(),
        ));
    }
    if input.model.name.is_empty() {
        return Err(("model.name", "must not be empty".to_owned()));
    }
    let l = &input.limits;
    // Every limit is at least 1 and at most a bound that no clock or buffer
    // arithmetic can overflow (durations up to 30 days, output up to 1 GiB).
    const DAYS_30: u64 = 30 * 24 * 3600;
    let ranged: [(&'static str, u64, u64); 6] = [
        (
            "limits.max_model_calls",
            u64::from(l.max_model_calls),
            1_000_000,
        ),
        ("limits.context_window", l.context_window, 100_000_000),
        ("limits.wall_clock_secs", l.wall_clock_secs, DAYS_30),
        ("limits.tool_timeout_secs", l.tool_timeout_secs, DAYS_30),
        (
            "limits.tool_output_cap_bytes",
            l.tool_output_cap_bytes,
            1 << 30,
        ),
        (
            "limits.model_call_timeout_secs",
            l.model_call_timeout_secs,
            DAYS_30,
        ),
    ];
    for (name, value, max) in ranged {
        if value == 0 {
            return Err((name, format!("must be greater than 0 (1..={max})")));
        }
        if value > max {
            return Err((name, format!("{value} is outside 1..={max}")));
        }
    }
    if l.model_retries > 20 {
        return Err(("limits.model_retries", "must be at most 20".to_owned()));
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<WorkerInput, InputError> {
        parse(Path::new("input.json"), s.as_bytes())
    }

    const GOOD: &str = r#"{"v":1,"rollout_id":"r-1","task":{"prompt":"fix it"},
        "model":{"base_url":"http://127.0.0.1:1/v1","api":"chat_completions","name":"m"}}"#;

    #[test]
    fn good_input_gets_default_limits() {
        let input = parse_str(GOOD).unwrap();
        assert_eq!(input.limits, Limits::default());
        assert_eq!(input.model.api, Api::ChatCompletions);
    }

    #[test]
    fn unknown_fields_are_named_with_their_path() {
        let top = GOOD.replacen("{\"v\":1", "{\"v\":1,\"extra\":true", 1);
        assert_eq!(parse_str(&top).unwrap_err().field(), Some("extra"));
        let nested = GOOD.replacen("\"name\":\"m\"", "\"name\":\"m\",\"temp\":1", 1);
        assert_eq!(parse_str(&nested).unwrap_err().field(), Some("model.temp"));
    }

    #[test]
    fn wrong_types_and_missing_fields_are_named() {
        let wrong = GOOD.replacen("\"fix it\"", "7", 1);
        assert_eq!(parse_str(&wrong).unwrap_err().field(), Some("task.prompt"));
        let missing = GOOD.replacen("\"rollout_id\":\"r-1\",", "", 1);
        let err = parse_str(&missing).unwrap_err();
        assert!(err.to_string().contains("rollout_id"), "{err}");
    }

    #[test]
    fn controller_state_is_refused_by_name() {
        let reward = GOOD.replacen("{\"v\":1", "{\"v\":1,\"reward\":1.0", 1);
        let err = parse_str(&reward).unwrap_err();
        assert_eq!(err.field(), Some("reward"));
        assert!(err.to_string().contains("belongs to the controller"));
        let key = GOOD.replacen("\"name\":\"m\"", "\"name\":\"m\",\"api_key\":\"s\"", 1);
        assert_eq!(parse_str(&key).unwrap_err().field(), Some("model.api_key"));
    }

    #[test]
    fn unknown_version_and_bad_limits_are_refused() {
        let v2 = GOOD.replacen("\"v\":1", "\"v\":2", 1);
        let err = parse_str(&v2).unwrap_err();
        assert_eq!(err.field(), Some("v"));
        assert!(err.to_string().contains("unknown input version 2"), "{err}");
        let zero = GOOD.replacen("{\"v\":1", "{\"v\":1,\"limits\":{\"max_model_calls\":0}", 1);
        assert_eq!(
            parse_str(&zero).unwrap_err().field(),
            Some("limits.max_model_calls")
        );
        let tls = GOOD.replacen("http://", "https://", 1);
        assert_eq!(parse_str(&tls).unwrap_err().field(), Some("model.base_url"));
    }

    #[test]
    fn huge_limits_are_refused_by_name_with_the_range() {
        for field in [
            "wall_clock_secs",
            "tool_timeout_secs",
            "model_call_timeout_secs",
            "tool_output_cap_bytes",
            "context_window",
        ] {
            let huge = GOOD.replacen(
                "{\"v\":1",
                &format!("{{\"v\":1,\"limits\":{{\"{field}\":18446744073709551615}}"),
                1,
            );
            let err = parse_str(&huge).unwrap_err();
            assert_eq!(err.field(), Some(format!("limits.{field}").as_str()));
            assert!(err.to_string().contains("outside 1..="), "{err}");
        }
    }
}
