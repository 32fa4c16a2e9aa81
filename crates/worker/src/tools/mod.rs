//! The agent's tools (bash, read, write, edit; one file each), their specs as the model sees
//! them, and dispatch from a model's tool call to an outcome. A tool that cannot run (unknown
//! name, bad arguments) is an error output for the model, not a failure of the run.

pub mod bash;
pub mod capped;
pub mod edit;
pub mod read;
pub mod write;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::transcript::{ToolCall, ToolStatus};
use capped::Capped;

/// A tool as advertised to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
}

/// The four tools.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "bash",
            description: "Run a shell command in the working directory. Output (stdout and \
                          stderr) is capped; the command is killed at the tool timeout.",
            parameters: json!({
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
                "additionalProperties": false,
            }),
        },
        ToolSpec {
            name: "read",
            description: "Read a text file. Optional 1-based start line and line count.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 1},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["path"],
                "additionalProperties": false,
            }),
        },
        ToolSpec {
            name: "write",
            description: "Write a file whole, creating parent directories.",
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
                "additionalProperties": false,
            }),
        },
        ToolSpec {
            name: "edit",
            description: "Replace an exact string in a file. It must occur exactly once \
                          unless replace_all is true.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_string": {"type": "string"},
                    "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean"},
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false,
            }),
        },
    ]
}

/// Whether running the tool again after a crash is harmless. Reads and whole-file writes are;
/// a shell command or an edit may not be, so an interrupted one is reported, not rerun.
pub fn is_idempotent(name: &str) -> bool {
    matches!(name, "read" | "write")
}

/// What a tool run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub content: String,
    pub status: ToolStatus,
    pub exit_code: Option<i32>,
    pub truncated_bytes: u64,
}

impl Outcome {
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: format!("error: {}", message.into()),
            status: ToolStatus::Error,
            exit_code: None,
            truncated_bytes: 0,
        }
    }
}

/// Where and how tools run.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub workdir: PathBuf,
    pub timeout: Duration,
    pub output_cap: usize,
    /// Process group of the running bash tool, so a cancellation can kill it. Locked across
    /// spawn and across reaping, so the group is never signalled after its id is released.
    pub running_group: Arc<Mutex<Option<Pid>>>,
}

impl ToolContext {
    /// `path` resolved against the working directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.workdir.join(p)
        }
    }
}

fn args<T: DeserializeOwned>(call: &ToolCall) -> Result<T, Outcome> {
    serde_json::from_str(&call.arguments)
        .map_err(|e| Outcome::error(format!("bad arguments for `{}`: {e}", call.name)))
}

/// Runs one tool call; `output` receives the tool's output as it is produced, so a
/// cancellation can report what there was.
pub fn run(call: &ToolCall, ctx: &ToolContext, output: &Arc<Mutex<Capped>>) -> Outcome {
    let outcome = match call.name.as_str() {
        "bash" => args(call).map(|a| bash::run(&a, ctx, output)),
        "read" => args(call).map(|a| read::run(&a, ctx)),
        "write" => args(call).map(|a| write::run(&a, ctx)),
        "edit" => args(call).map(|a| edit::run(&a, ctx)),
        other => Err(Outcome::error(format!(
            "unknown tool `{other}` (tools: bash, read, write, edit)"
        ))),
    };
    outcome.unwrap_or_else(|e| e)
}
