//! The rollout's state as a pure value: the conversation, usage and tool observations, and how
//! each journal record moves it forward. Replaying a checkpoint and running live both go through
//! [`State::apply`], so a resumed run holds exactly the state the killed run had at its last
//! durable boundary.

use serde::{Deserialize, Serialize};

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
}
