//! What the loop does next, decided from the state alone (pure): call the model, run the next
//! tool call, settle a tool call a dead launch left in flight, or stop. Limits are checked here
//! and nowhere else, so a relaunch makes the same decision the killed launch would have.

use crate::input::Limits;
use crate::result::Termination;
use crate::tools;
use crate::transcript::{Message, State, ToolCall};

/// The next step of the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    CallModel,
    RunTool(ToolCall),
    /// A tool call a previous launch started and did not finish, and that is not safe to run
    /// again: it gets an `interrupted` output instead.
    Interrupted(ToolCall),
    Finish(Termination),
}

/// Rough token count of the next request: the last call's tokens plus what was added since,
/// at four bytes a token (or the whole conversation that way before the first call).
pub fn context_estimate(state: &State) -> u64 {
    if state.usage.model_calls == 0 {
        let bytes: usize = state
            .messages
            .iter()
            .map(|m| match m {
                Message::System(t) | Message::User(t) => t.content.len(),
                Message::Assistant(a) => a.content.as_ref().map_or(0, String::len),
                Message::Tool(t) => t.content.len(),
            })
            .sum();
        return bytes as u64 / 4;
    }
    state.last_context_tokens + state.bytes_since_reply / 4
}

pub fn next_step(state: &State, limits: &Limits, elapsed_ms: u64) -> Step {
    let out_of_time = elapsed_ms >= limits.wall_clock_secs.saturating_mul(1000);
    if let Some(call) = state.pending_calls().first() {
        if state.in_flight.as_deref() == Some(call.id.as_str()) && !tools::is_idempotent(&call.name)
        {
            return Step::Interrupted((*call).clone());
        }
        if out_of_time {
            return Step::Finish(Termination::Deadline);
        }
        return Step::RunTool((*call).clone());
    }
    if state.final_reply().is_some() {
        return Step::Finish(Termination::Completed);
    }
    if state.usage.model_calls >= limits.max_model_calls {
        return Step::Finish(Termination::MaxModelCalls);
    }
    if out_of_time {
        return Step::Finish(Termination::Deadline);
    }
    if context_estimate(state) >= limits.context_window {
        return Step::Finish(Termination::ContextWindow);
    }
    Step::CallModel
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::journal::record::{ModelResponse, Record, ToolStarted};
    use crate::transcript::{AssistantMessage, CallUsage};

    fn with_call(name: &str, started: bool) -> State {
        let mut s = State::new("r", None, "prompt");
        s.apply(&Record::ModelResponse(ModelResponse {
            call: 0,
            message: AssistantMessage {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "c".to_owned(),
                    name: name.to_owned(),
                    arguments: "{}".to_owned(),
                }],
            },
            usage: CallUsage {
                prompt_tokens: 90,
                completion_tokens: 10,
                total_tokens: 100,
            },
            elapsed_ms: 0,
        }))
        .unwrap();
        if started {
            s.apply(&Record::ToolStarted(ToolStarted {
                call_id: "c".to_owned(),
                elapsed_ms: 0,
            }))
            .unwrap();
        }
        s
    }

    #[test]
    fn interrupted_tools_are_settled_not_rerun_unless_idempotent() {
        let limits = Limits::default();
        assert!(matches!(
            next_step(&with_call("bash", true), &limits, 0),
            Step::Interrupted(_)
        ));
        assert!(matches!(
            next_step(&with_call("write", true), &limits, 0),
            Step::RunTool(_)
        ));
        assert!(matches!(
            next_step(&with_call("bash", false), &limits, 0),
            Step::RunTool(_)
        ));
    }

    #[test]
    fn limits_stop_the_loop() {
        let fresh = State::new("r", None, "prompt");
        let limits = Limits::default();
        assert_eq!(next_step(&fresh, &limits, 0), Step::CallModel);
        let tight = Limits {
            max_model_calls: 1,
            ..Limits::default()
        };
        let mut done = with_call("bash", false);
        done.messages.pop();
        done.messages
            .push(Message::User(crate::transcript::TextMessage {
                content: "x".to_owned(),
            }));
        assert_eq!(
            next_step(&done, &tight, 0),
            Step::Finish(Termination::MaxModelCalls)
        );
        assert_eq!(
            next_step(&fresh, &limits, 3_600_000),
            Step::Finish(Termination::Deadline)
        );
        let small = Limits {
            context_window: 1,
            ..Limits::default()
        };
        assert_eq!(
            next_step(&fresh, &small, 0),
            Step::Finish(Termination::ContextWindow)
        );
    }
}
