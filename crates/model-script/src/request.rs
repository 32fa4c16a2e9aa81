//! What the scripted model reads from a request: the API, the stream flag, the model, the
//! conversation position and the tools on offer. Pure functions over parsed JSON.

pub use rollpoint_proto::responses::is_model_item;
use serde_json::Value;

/// The three generation APIs the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI chat completions (`/v1/chat/completions`).
    Chat,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// Anthropic Messages (`/v1/messages`).
    Messages,
}

impl Api {
    /// The name used in logs.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Responses => "responses",
            Self::Messages => "messages",
        }
    }
}

/// A tool the request offers.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    pub name: String,
    pub schema: Value,
}

/// The parts of a request the script needs.
#[derive(Debug, Clone)]
pub struct Request {
    pub api: Api,
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    /// Number of model-authored turns already in the conversation.
    pub position: usize,
    /// Number of tool results in the conversation.
    pub results: usize,
    /// Number of those whose text does not say the call was interrupted.
    pub finished: usize,
    pub tools: Vec<OfferedTool>,
}

impl Request {
    /// Reads a parsed request body of `api`.
    #[must_use]
    pub fn read(api: Api, body: &Value) -> Self {
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("scripted-model")
            .to_owned();
        let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let include_usage = body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let position = match api {
            Api::Chat | Api::Messages => body
                .get("messages")
                .and_then(Value::as_array)
                .map_or(0, |m| m.iter().filter(|m| is_assistant(m)).count()),
            Api::Responses => body
                .get("input")
                .and_then(Value::as_array)
                .map_or(0, |items| responses_turns(items)),
        };
        let outputs: Vec<&Value> = match api {
            Api::Chat => body
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
                .map(|m| m.get("content").unwrap_or(&Value::Null))
                .collect(),
            Api::Messages => body
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|m| m.get("content").and_then(Value::as_array))
                .flatten()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("tool_result"))
                .map(|p| p.get("content").unwrap_or(&Value::Null))
                .collect(),
            Api::Responses => body
                .get("input")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|i| {
                    i.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| t.ends_with("_call_output"))
                })
                .map(|i| i.get("output").unwrap_or(&Value::Null))
                .collect(),
        };
        let results = outputs.len();
        let finished = outputs.iter().filter(|o| !says_interrupted(o)).count();
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| tools.iter().filter_map(|t| offered(api, t)).collect())
            .unwrap_or_default();
        Self {
            api,
            model,
            stream,
            include_usage,
            position,
            results,
            finished,
            tools,
        }
    }
}

impl Request {
    /// Reads a chat prompt rendered by a Hermes-style template (Qwen2.5, Qwen3, Hermes), as a
    /// completion endpoint gets it: the tools from between `<tools>` and `</tools>` (one JSON
    /// tool a line), a model-authored turn per `<|im_start|>assistant` before the generation
    /// prompt, and a tool result per `<tool_response>`.
    #[must_use]
    pub fn from_rendered(model: &str, prompt: &str) -> Self {
        let assistant = "<|im_start|>assistant";
        let opened = prompt.matches(assistant).count();
        let position = opened.saturating_sub(usize::from(prompt.trim_end().ends_with(assistant)));
        let outputs: Vec<Value> = prompt
            .split("<tool_response>")
            .skip(1)
            .map(|r| {
                Value::String(
                    r.split("</tool_response>")
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_owned(),
                )
            })
            .collect();
        let tools = prompt
            .split_once("<tools>")
            .and_then(|(_, rest)| rest.split_once("</tools>"))
            .map(|(list, _)| {
                list.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
                    .filter_map(|t| offered(Api::Chat, &t))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            api: Api::Chat,
            model: model.to_owned(),
            stream: false,
            include_usage: false,
            position,
            results: outputs.len(),
            finished: outputs.iter().filter(|o| !says_interrupted(o)).count(),
            tools,
        }
    }
}

/// A tool output whose text begins with `interrupted`: a harness saying the call was cut off
/// and its effects are unknown (the native worker's words), not a result.
fn says_interrupted(output: &Value) -> bool {
    let text = match output {
        Value::String(s) => s.as_str(),
        // A list of content parts: the first one's text.
        Value::Array(parts) => parts
            .first()
            .and_then(|p| p.get("text"))
            .and_then(Value::as_str)
            .unwrap_or(""),
        _ => "",
    };
    text.trim_start()
        .get(..11)
        .is_some_and(|head| head.eq_ignore_ascii_case("interrupted"))
}

fn is_assistant(message: &Value) -> bool {
    message.get("role").and_then(Value::as_str) == Some("assistant")
}

/// Counts runs of consecutive model-authored items: one run is one model turn.
fn responses_turns(items: &[Value]) -> usize {
    let mut turns = 0;
    let mut in_turn = false;
    for item in items {
        let model = is_model_item(item);
        if model && !in_turn {
            turns += 1;
        }
        in_turn = model;
    }
    turns
}

fn offered(api: Api, tool: &Value) -> Option<OfferedTool> {
    let (name, schema) = match api {
        Api::Chat => {
            let f = tool.get("function")?;
            (f.get("name")?, f.get("parameters"))
        }
        Api::Responses => {
            if tool.get("type").and_then(Value::as_str) != Some("function") {
                return None;
            }
            (tool.get("name")?, tool.get("parameters"))
        }
        Api::Messages => (tool.get("name")?, tool.get("input_schema")),
    };
    Some(OfferedTool {
        name: name.as_str()?.to_owned(),
        schema: schema.cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn responses_position_counts_runs_of_model_items() {
        let body = json!({"input": [
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "reasoning", "summary": []},
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "a"},
            {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "b"},
            {"type": "function_call_output", "call_id": "a", "output": "x"},
            {"type": "function_call_output", "call_id": "b", "output": "y"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        ]});
        assert_eq!(Request::read(Api::Responses, &body).position, 2);
    }

    #[test]
    fn chat_tools_are_read_with_their_schema() {
        let body = json!({"messages": [{"role": "assistant", "content": "x"}], "stream": true,
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]});
        let req = Request::read(Api::Chat, &body);
        assert_eq!(req.position, 1);
        assert!(req.stream);
        assert_eq!(req.tools[0].name, "bash");
    }

    #[test]
    fn results_count_the_tool_results_of_every_api() {
        let chat = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{"id": "a"}]},
            {"role": "tool", "tool_call_id": "a", "content": "ok"},
            {"role": "assistant", "tool_calls": [{"id": "b"}]}
        ]});
        assert_eq!(Request::read(Api::Chat, &chat).results, 1);
        assert_eq!(Request::read(Api::Chat, &chat).position, 2);
        let messages = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"},
                                          {"type": "text", "text": "more"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "made up"}]}
        ]});
        let m = Request::read(Api::Messages, &messages);
        assert_eq!(
            (m.results, m.position),
            (1, 2),
            "a made-up turn moves position only"
        );
        let responses = json!({"input": [
            {"type": "message", "role": "user", "content": "go"},
            {"type": "function_call", "call_id": "a"},
            {"type": "function_call_output", "call_id": "a"},
            {"type": "custom_tool_call", "call_id": "b"},
            {"type": "custom_tool_call_output", "call_id": "b"}
        ]});
        assert_eq!(Request::read(Api::Responses, &responses).results, 2);
    }

    #[test]
    fn an_interrupted_output_is_a_result_but_not_a_finished_one() {
        let chat = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "tool_calls": [{"id": "a"}]},
            {"role": "tool", "tool_call_id": "a", "content": "ok"},
            {"role": "assistant", "tool_calls": [{"id": "b"}]},
            {"role": "tool", "tool_call_id": "b",
             "content": "interrupted: the worker stopped while this tool call ran"}
        ]});
        let r = Request::read(Api::Chat, &chat);
        assert_eq!((r.results, r.finished), (2, 1));
        let messages = json!({"messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                "content": [{"type": "text", "text": "Interrupted by the user"}]}]}
        ]});
        let r = Request::read(Api::Messages, &messages);
        assert_eq!((r.results, r.finished), (1, 0));
        let responses = json!({"input": [
            {"type": "function_call_output", "call_id": "a", "output": "interrupted"},
            {"type": "function_call_output", "call_id": "b", "output": "exit 0"}
        ]});
        let r = Request::read(Api::Responses, &responses);
        assert_eq!((r.results, r.finished), (2, 1));
    }
}
