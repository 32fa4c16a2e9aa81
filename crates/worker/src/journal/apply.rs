//! Folding a journal record into the agent's state: the one place the
//! journal's records and the transcript's types meet, so neither module
//! imports the other back.

use crate::errors::ApplyError;
use crate::journal::record::Record;
use crate::transcript::*;

impl State {
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
