//! The script format: what the scripted model answers at each conversation position.
//!
//! A script is versioned JSON. Steps are picked by the conversation's position (the number of
//! model-authored turns already in the request) by default, so a harness that is relaunched and
//! repeats a request gets the same answer; a global counter is the alternative.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::errors::ScriptError;

/// The script format version this build reads and writes.
pub const SCRIPT_VERSION: u32 = 1;

/// How a request is mapped to a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKey {
    /// Step = number of model-authored turns in the request (deterministic on repeats).
    #[default]
    Position,
    /// Step = number of generation requests this server answered before.
    Counter,
    /// Step = number of tool results in the request: a model that goes on
    /// only once it has a call's result, and asks for the call again when
    /// the conversation lacks it (as a real model does when a harness drops
    /// an interrupted call). Made-up assistant turns do not move it.
    ToolResults,
    /// [`StepKey::ToolResults`], and an output saying the call was interrupted (its text
    /// begins with `interrupted`) does not count either: the model asks for the call again,
    /// as a real model told a call's effects are unknown checks and retries.
    FinishedToolResults,
}

/// One scripted answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Answer with this text (`{step}`, `{position}` and `{sample}` are substituted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Call the harness's shell tool once per command (several = parallel tool calls).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shell: Vec<String>,
    /// Name of the tool to call instead of guessing the shell tool from the offered tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Answer with this HTTP status and body instead of a completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail: Option<Fail>,
    /// Wait this long before the first byte.
    #[serde(default)]
    pub delay_ms: u64,
    /// Streaming: split text into this many deltas (default: the script's `stream_chunks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<usize>,
    /// Streaming: wait this long between events (default: the script's `chunk_delay_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_delay_ms: Option<u64>,
    /// Streaming: cut the connection after this many events (a broken upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub break_after_events: Option<usize>,
}

/// A scripted HTTP failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fail {
    pub status: u16,
    #[serde(default)]
    pub body: String,
}

/// A whole script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub version: u32,
    #[serde(default)]
    pub key: StepKey,
    pub steps: Vec<Step>,
    /// Answer past the last step (default: the text "done").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_last: Option<Step>,
    /// Text answered to requests that offer no tools (e.g. title requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_tools_text: Option<String>,
    /// Default number of text deltas when streaming.
    #[serde(default = "default_chunks")]
    pub stream_chunks: usize,
    /// Default delay between streamed events.
    #[serde(default)]
    pub chunk_delay_ms: u64,
    /// Answer in vLLM's token shapes (token ids and logprobs on request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<crate::tokens::TokenMode>,
}

fn default_chunks() -> usize {
    4
}

impl Script {
    /// A script of the given steps with every default.
    #[must_use]
    pub fn new(steps: Vec<Step>) -> Self {
        Self {
            version: SCRIPT_VERSION,
            key: StepKey::Position,
            steps,
            after_last: None,
            no_tools_text: None,
            stream_chunks: default_chunks(),
            chunk_delay_ms: 0,
            tokens: None,
        }
    }

    /// Reads and validates a script file.
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read(path).map_err(|source| ScriptError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates script bytes; `path` names the source in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, ScriptError> {
        let invalid = |message: String| ScriptError::Invalid {
            path: path.to_owned(),
            message,
        };
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
        match rollpoint_proto::check_version(&value, "model script", "version", SCRIPT_VERSION) {
            Ok(()) => {}
            Err(rollpoint_proto::FormatError::UnknownVersion { found, .. }) => {
                return Err(ScriptError::UnknownVersion {
                    path: path.to_owned(),
                    found: found.to_string(),
                    supported: SCRIPT_VERSION,
                });
            }
            Err(e) => return Err(invalid(e.to_string())),
        }
        let script: Self = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        script.validate().map_err(invalid)?;
        Ok(script)
    }

    fn validate(&self) -> Result<(), String> {
        if self.stream_chunks == 0 {
            return Err("`stream_chunks` must be at least 1".into());
        }
        let steps = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("steps[{i}]"), s));
        let last = self.after_last.iter().map(|s| ("after_last".to_owned(), s));
        for (name, step) in steps.chain(last) {
            let kinds = usize::from(step.text.is_some())
                + usize::from(!step.shell.is_empty())
                + usize::from(step.fail.is_some());
            if kinds != 1 {
                return Err(format!(
                    "{name}: give exactly one of `text`, `shell`, `fail`"
                ));
            }
            if step.chunks == Some(0) {
                return Err(format!("{name}.chunks must be at least 1"));
            }
            if let Some(fail) = &step.fail
                && !(100..=599).contains(&fail.status)
            {
                return Err(format!(
                    "{name}.fail.status {} is not an HTTP status",
                    fail.status
                ));
            }
        }
        Ok(())
    }

    /// The step answering position (or counter value) `index`.
    #[must_use]
    pub fn step(&self, index: usize) -> Step {
        self.steps.get(index).cloned().unwrap_or_else(|| {
            self.after_last.clone().unwrap_or_else(|| Step {
                text: Some("done".into()),
                ..Step::default()
            })
        })
    }
}
