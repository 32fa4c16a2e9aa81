//! The worker's result file: what the run produced, how it ended, and why. It is agent-reported
//! evidence for the caller's grader, never a grade: the type has no reward field. Built by a pure
//! function from the state, so the normal end, a limit, an error and a cancellation all produce
//! the same well-formed shape (every tool call has exactly one output).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::errors::ResultError;
use crate::transcript::{Message, State, ToolMessage, ToolObservation, ToolStatus, Usage};

/// The result format this worker writes.
pub const RESULT_VERSION: u32 = 1;
/// Longest error message, in characters.
pub const MAX_ERROR_CHARS: usize = 2000;

/// One rollout's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerResult {
    pub v: u32,
    /// `None` only when the input could not be read.
    pub rollout_id: Option<String>,
    /// The model's final answer, when it stopped on its own (`termination: completed`).
    pub response: Option<String>,
    pub trajectory: Vec<Message>,
    pub observations: Observations,
    pub usage: Usage,
    pub termination: Termination,
    pub error: Option<RunError>,
}

/// How the run went, beyond the conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observations {
    pub tools: Vec<ToolObservation>,
    /// Launches of the rollout, this one included.
    pub launches: u32,
    /// Active time across launches.
    pub elapsed_ms: u64,
    /// Checkpoint writes that failed in this launch (the run went on).
    pub checkpoint_failures: u32,
    /// Model-call retries in this launch.
    pub model_retries: u32,
}

/// Why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    /// The model answered without asking for a tool.
    Completed,
    MaxModelCalls,
    ContextWindow,
    Deadline,
    Cancelled,
    Error,
}

/// What went wrong, when something did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunError {
    pub kind: ErrorKind,
    /// At most [`MAX_ERROR_CHARS`] characters.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The infrastructure failed (model endpoint unreachable or overloaded): worth retrying.
    Transient,
    /// Retrying will not help (bad input, unusable checkpoint, refused request).
    Fatal,
    /// Stopped by SIGTERM.
    Cancelled,
}

impl RunError {
    /// An error whose message is cut to [`MAX_ERROR_CHARS`] characters.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let message: String = message.into();
        let message = match message.char_indices().nth(MAX_ERROR_CHARS) {
            Some((cut, _)) => message[..cut].to_owned(),
            None => message,
        };
        Self { kind, message }
    }
}

/// A tool call still running when the run was cancelled, with its output so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Unfinished {
    pub call_id: String,
    pub output: String,
}

/// Per-launch counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchStats {
    pub checkpoint_failures: u32,
    pub model_retries: u32,
}

/// The result of a run that failed before it had any state (bad input, unusable checkpoint).
pub fn early_failure(rollout_id: Option<String>, message: impl Into<String>) -> WorkerResult {
    WorkerResult {
        v: RESULT_VERSION,
        rollout_id,
        response: None,
        trajectory: Vec::new(),
        observations: Observations::default(),
        usage: Usage::default(),
        termination: Termination::Error,
        error: Some(RunError::new(ErrorKind::Fatal, message)),
    }
}

/// The result of a run that ended with `state`. Tool calls without output get one: the
/// unfinished call is marked incomplete with its output so far, the rest not run.
pub fn build(
    state: &State,
    termination: Termination,
    error: Option<RunError>,
    unfinished: Option<&Unfinished>,
    stats: LaunchStats,
) -> WorkerResult {
    let mut trajectory = state.messages.clone();
    for call in state.pending_calls() {
        let (content, status) = match unfinished {
            Some(u) if u.call_id == call.id => (u.output.clone(), ToolStatus::Incomplete),
            _ => (
                "not run: the rollout ended before this tool call started".to_owned(),
                ToolStatus::NotRun,
            ),
        };
        trajectory.push(Message::Tool(ToolMessage {
            call_id: call.id.clone(),
            content,
            status,
        }));
    }
    let response = match termination {
        Termination::Completed => state.final_reply().and_then(|r| r.content.clone()),
        _ => None,
    };
    WorkerResult {
        v: RESULT_VERSION,
        rollout_id: Some(state.rollout_id.clone()),
        response,
        trajectory,
        observations: Observations {
            tools: state.tools.clone(),
            launches: state.launches,
            elapsed_ms: state.elapsed_ms,
            checkpoint_failures: stats.checkpoint_failures,
            model_retries: stats.model_retries,
        },
        usage: state.usage,
        termination,
        error,
    }
}

impl WorkerResult {
    /// Parses a result strictly (unknown fields and versions refused) and checks its invariants.
    pub fn parse(bytes: &[u8]) -> Result<Self, ResultError> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| ResultError::Schema(e.to_string()))?;
        if let Err(e) = rollpoint_proto::check_version(&value, "worker result", "v", RESULT_VERSION)
        {
            let found = match e {
                rollpoint_proto::FormatError::UnknownVersion { found, .. } => {
                    u32::try_from(found).unwrap_or(u32::MAX)
                }
                _ => 0,
            };
            return Err(ResultError::UnknownVersion {
                found,
                known: RESULT_VERSION,
            });
        }
        let result: Self = serde_path_to_error::deserialize(value)
            .map_err(|e| ResultError::Schema(format!("at `{}`: {}", e.path(), e.inner())))?;
        result.validate()?;
        Ok(result)
    }

    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), ResultError> {
        let bad = |m: String| Err(ResultError::Invariant(m));
        let kind = self.error.as_ref().map(|e| e.kind);
        match (self.termination, kind) {
            (Termination::Cancelled, Some(ErrorKind::Cancelled))
            | (Termination::Error, Some(ErrorKind::Transient | ErrorKind::Fatal))
            | (
                Termination::Completed
                | Termination::MaxModelCalls
                | Termination::ContextWindow
                | Termination::Deadline,
                None,
            ) => {}
            (t, k) => return bad(format!("termination {t:?} with error kind {k:?}")),
        }
        if let Some(e) = &self.error
            && e.message.chars().count() > MAX_ERROR_CHARS
        {
            return bad(format!(
                "error message longer than {MAX_ERROR_CHARS} characters"
            ));
        }
        if self.response.is_some() && self.termination != Termination::Completed {
            return bad("a response without termination `completed`".to_owned());
        }
        let mut open: Vec<&str> = Vec::new();
        let mut seen = HashSet::new();
        let mut replies = 0u32;
        for message in &self.trajectory {
            match message {
                Message::Assistant(a) => {
                    if let Some(id) = open.first() {
                        return bad(format!("tool call `{id}` has no output"));
                    }
                    replies += 1;
                    open = a.tool_calls.iter().map(|c| c.id.as_str()).collect();
                    seen.clear();
                }
                Message::Tool(t) => {
                    if !open.contains(&t.call_id.as_str()) || !seen.insert(t.call_id.clone()) {
                        return bad(format!("tool output `{}` answers no open call", t.call_id));
                    }
                }
                Message::System(_) | Message::User(_) => {}
            }
            open.retain(|id| !seen.contains(*id));
        }
        if let Some(id) = open.first() {
            return bad(format!("tool call `{id}` has no output"));
        }
        if replies != self.usage.model_calls {
            return bad(format!(
                "{replies} model replies but usage counts {} calls",
                self.usage.model_calls
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::journal::record::{ModelResponse, Record, ToolStarted};
    use crate::transcript::{AssistantMessage, CallUsage, ToolCall};

    fn two_calls() -> State {
        let mut s = State::new("r", None, "p");
        let calls = ["a", "b"]
            .iter()
            .map(|id| ToolCall {
                id: (*id).to_owned(),
                name: "bash".to_owned(),
                arguments: "{}".to_owned(),
            })
            .collect();
        s.apply(&Record::ModelResponse(ModelResponse {
            call: 0,
            message: AssistantMessage {
                content: None,
                tool_calls: calls,
            },
            usage: CallUsage::default(),
            elapsed_ms: 0,
        }))
        .unwrap();
        s.apply(&Record::ToolStarted(ToolStarted {
            call_id: "a".to_owned(),
            elapsed_ms: 0,
        }))
        .unwrap();
        s
    }

    #[test]
    fn cancelled_result_answers_every_tool_call() {
        let unfinished = Unfinished {
            call_id: "a".to_owned(),
            output: "half".to_owned(),
        };
        let result = build(
            &two_calls(),
            Termination::Cancelled,
            Some(RunError::new(ErrorKind::Cancelled, "sigterm")),
            Some(&unfinished),
            LaunchStats::default(),
        );
        result.validate().unwrap();
        let statuses: Vec<_> = result
            .trajectory
            .iter()
            .filter_map(|m| match m {
                Message::Tool(t) => Some(t.status),
                _ => None,
            })
            .collect();
        assert_eq!(statuses, [ToolStatus::Incomplete, ToolStatus::NotRun]);
        let json = serde_json::to_vec(&result).unwrap();
        assert_eq!(WorkerResult::parse(&json).unwrap(), result);
    }

    #[test]
    fn error_messages_are_bounded_and_invariants_checked() {
        let long = "é".repeat(5000);
        assert_eq!(
            RunError::new(ErrorKind::Fatal, long)
                .message
                .chars()
                .count(),
            MAX_ERROR_CHARS
        );
        let mut result = early_failure(None, "bad input");
        result.validate().unwrap();
        result.termination = Termination::Completed;
        assert!(result.validate().is_err());
        let json = serde_json::to_string(&early_failure(None, "x")).unwrap();
        let extra = json.replacen('{', "{\"reward\":1,", 1);
        assert!(WorkerResult::parse(extra.as_bytes()).is_err());
    }
}
