//! The rollout's state as a pure value: the conversation, usage and tool observations, and how
//! each journal record moves it forward. Replaying a checkpoint and running live both go through
//! [`State::apply`], so a resumed run holds exactly the state the killed run had at its last
//! durable boundary.

use serde::{Deserialize, Serialize};

use crate::errors::ApplyError;
use crate::journal::record::Record;

/// One conversation message, independent of the model API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System(TextMessage),
    User(TextMessage),
    Assistant(AssistantMessage),
    Tool(ToolMessage),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextMessage {
    pub content: String,
}

/// A model reply: text, tool calls, or both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantMessage {
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// A tool call as the model asked for it; `arguments` is the raw JSON text the model wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A tool's output as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolMessage {
    pub call_id: String,
    pub content: String,
    pub status: ToolStatus,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// Ran and succeeded (exit code 0 for bash).
    Ok,
    /// Ran and failed, or its arguments were unusable.
    Error,
    /// Killed at the tool timeout.
    TimedOut,
    /// A previous launch died while it ran: its effects are unknown and it is not run again.
    Interrupted,
    /// Final result only: the run was cancelled while this tool ran; output so far.
    Incomplete,
    /// Final result only: the run ended before this tool call started.
    NotRun,
}

/// Token counts of one model call, as the endpoint reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// Totals over the rollout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    pub model_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// What one tool execution did, for the result's observations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolObservation {
    pub call_id: String,
    pub name: String,
    pub status: ToolStatus,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// Output bytes left out of what the model saw.
    pub truncated_bytes: u64,
}

/// Everything a checkpoint holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub rollout_id: String,
    pub messages: Vec<Message>,
    pub usage: Usage,
    /// Active time of the rollout at its last boundary, across launches.
    pub elapsed_ms: u64,
    /// Launches of this rollout so far (1 for a run that never crashed).
    pub launches: u32,
    pub tools: Vec<ToolObservation>,
    /// A tool call whose start is recorded and whose end is not.
    pub in_flight: Option<String>,
    /// Tokens of the last model call (prompt plus completion).
    pub last_context_tokens: u64,
    /// Bytes of tool output added since the last model reply.
    pub bytes_since_reply: u64,
}

impl State {
    /// The state of a rollout that has not called the model yet.
    pub fn new(rollout_id: &str, system: Option<&str>, prompt: &str) -> Self {
        let mut messages = Vec::with_capacity(2);
        if let Some(system) = system {
            messages.push(Message::System(TextMessage {
                content: system.to_owned(),
            }));
        }
        messages.push(Message::User(TextMessage {
            content: prompt.to_owned(),
        }));
        Self {
            rollout_id: rollout_id.to_owned(),
            messages,
            usage: Usage::default(),
            elapsed_ms: 0,
            launches: 1,
            tools: Vec::new(),
            in_flight: None,
            last_context_tokens: 0,
            bytes_since_reply: 0,
        }
    }

    /// The messages that came from the task rather than from the run.
    pub fn initial_messages(&self) -> &[Message] {
        let end = self
            .messages
            .iter()
            .position(|m| !matches!(m, Message::System(_) | Message::User(_)))
            .unwrap_or(self.messages.len());
        &self.messages[..end]
    }

    /// Tool calls of the last model reply that have no output yet, in order.
    pub fn pending_calls(&self) -> Vec<&ToolCall> {
        let Some(at) = self
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant(_)))
        else {
            return Vec::new();
        };
        let Message::Assistant(reply) = &self.messages[at] else {
            return Vec::new();
        };
        let answered: Vec<&str> = self.messages[at + 1..]
            .iter()
            .filter_map(|m| match m {
                Message::Tool(t) => Some(t.call_id.as_str()),
                _ => None,
            })
            .collect();
        reply
            .tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .collect()
    }

    /// The last model reply, when it is the last message (the model stopped).
    pub fn final_reply(&self) -> Option<&AssistantMessage> {
        match self.messages.last() {
            Some(Message::Assistant(reply)) if reply.tool_calls.is_empty() => Some(reply),
            _ => None,
        }
    }

    /// Moves the state forward by one record. Header and snapshot records are handled by the
    /// journal replay, not here.
    pub fn apply(&mut self, record: &Record) -> Result<(), ApplyError> {
        match record {
            Record::Header(_) => return Err(ApplyError("a second header record".to_owned())),
            Record::Snapshot(snapshot) => {
                if snapshot.state.rollout_id != self.rollout_id {
                    return Err(ApplyError(format!(
                        "snapshot of rollout `{}` in the journal of `{}`",
                        snapshot.state.rollout_id, self.rollout_id
                    )));
                }
                *self = snapshot.state.clone();
            }
            Record::Launch(launch) => {
                if launch.launch <= self.launches {
                    return Err(ApplyError(format!(
                        "launch {} after launch {}",
                        launch.launch, self.launches
                    )));
                }
                self.launches = launch.launch;
            }
            Record::ModelResponse(reply) => {
                if reply.call != self.usage.model_calls {
                    return Err(ApplyError(format!(
                        "model call {} recorded after {} calls",
                        reply.call, self.usage.model_calls
                    )));
                }
                if let Some(pending) = self.pending_calls().first() {
                    return Err(ApplyError(format!(
                        "model reply while tool call `{}` has no output",
                        pending.id
                    )));
                }
                if self.final_reply().is_some() {
                    return Err(ApplyError("model reply after the final reply".to_owned()));
                }
                self.messages
                    .push(Message::Assistant(reply.message.clone()));
                self.usage.model_calls += 1;
                self.usage.prompt_tokens += reply.usage.prompt_tokens;
                self.usage.completion_tokens += reply.usage.completion_tokens;
                self.usage.total_tokens += reply.usage.total_tokens;
                self.last_context_tokens = reply
                    .usage
                    .total_tokens
                    .max(reply.usage.prompt_tokens + reply.usage.completion_tokens);
                self.bytes_since_reply = 0;
                self.elapsed_ms = self.elapsed_ms.max(reply.elapsed_ms);
            }
            Record::ToolStarted(started) => {
                let first = self.pending_calls().first().map(|c| c.id.clone());
                if first.as_deref() != Some(started.call_id.as_str()) {
                    return Err(ApplyError(format!(
                        "tool call `{}` started but the next pending call is {first:?}",
                        started.call_id
                    )));
                }
                self.in_flight = Some(started.call_id.clone());
                self.elapsed_ms = self.elapsed_ms.max(started.elapsed_ms);
            }
            Record::ToolFinished(done) => {
                if self.in_flight.as_deref() != Some(done.call_id.as_str()) {
                    return Err(ApplyError(format!(
                        "tool call `{}` finished but {:?} is the one in flight",
                        done.call_id, self.in_flight
                    )));
                }
                let name = self
                    .pending_calls()
                    .first()
                    .map(|c| c.name.clone())
                    .unwrap_or_default();
                self.in_flight = None;
                self.bytes_since_reply += done.content.len() as u64;
                self.messages.push(Message::Tool(ToolMessage {
                    call_id: done.call_id.clone(),
                    content: done.content.clone(),
                    status: done.status,
                }));
                self.tools.push(ToolObservation {
                    call_id: done.call_id.clone(),
                    name,
                    status: done.status,
                    exit_code: done.exit_code,
                    duration_ms: done.duration_ms,
                    truncated_bytes: done.truncated_bytes,
                });
                self.elapsed_ms = self.elapsed_ms.max(done.elapsed_ms);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::journal::record::{ModelResponse, ToolFinished, ToolStarted};

    fn reply(call: u32, calls: &[&str]) -> Record {
        Record::ModelResponse(ModelResponse {
            call,
            message: AssistantMessage {
                content: None,
                tool_calls: calls
                    .iter()
                    .map(|id| ToolCall {
                        id: (*id).to_owned(),
                        name: "bash".to_owned(),
                        arguments: "{}".to_owned(),
                    })
                    .collect(),
            },
            usage: CallUsage {
                prompt_tokens: 10,
                completion_tokens: 5,
                total_tokens: 15,
            },
            elapsed_ms: 1,
        })
    }

    fn started(id: &str) -> Record {
        Record::ToolStarted(ToolStarted {
            call_id: id.to_owned(),
            elapsed_ms: 2,
        })
    }

    fn finished(id: &str) -> Record {
        Record::ToolFinished(ToolFinished {
            call_id: id.to_owned(),
            content: "ok".to_owned(),
            status: ToolStatus::Ok,
            exit_code: Some(0),
            duration_ms: 1,
            truncated_bytes: 0,
            elapsed_ms: 3,
        })
    }

    #[test]
    fn tool_calls_run_in_order_and_are_answered_once() {
        let mut s = State::new("r", None, "p");
        s.apply(&reply(0, &["a", "b"])).unwrap();
        assert_eq!(s.pending_calls().len(), 2);
        assert!(s.apply(&started("b")).is_err(), "out of order");
        s.apply(&started("a")).unwrap();
        assert!(
            s.apply(&reply(1, &[])).is_err(),
            "reply while a call is pending"
        );
        s.apply(&finished("a")).unwrap();
        assert!(s.apply(&finished("a")).is_err(), "finished twice");
        s.apply(&started("b")).unwrap();
        s.apply(&finished("b")).unwrap();
        assert!(s.pending_calls().is_empty());
        s.apply(&reply(1, &[])).unwrap();
        assert!(s.final_reply().is_some());
        assert_eq!(s.usage.model_calls, 2);
        assert_eq!(s.usage.total_tokens, 30);
        assert_eq!(s.tools.len(), 2);
        assert!(
            s.apply(&reply(2, &[])).is_err(),
            "reply after the final reply"
        );
    }

    #[test]
    fn model_call_numbers_must_follow_on() {
        let mut s = State::new("r", Some("sys"), "p");
        assert!(s.apply(&reply(1, &[])).is_err());
        assert_eq!(s.initial_messages().len(), 2);
    }

    #[test]
    fn messages_round_trip_strictly() {
        let m = Message::Tool(ToolMessage {
            call_id: "a".to_owned(),
            content: "x".to_owned(),
            status: ToolStatus::Interrupted,
        });
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), m);
        let extra = json.replacen('{', "{\"extra\":1,", 1);
        assert!(serde_json::from_str::<Message>(&extra).is_err());
    }
}
