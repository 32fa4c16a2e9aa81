//! Facts about the OpenAI Responses API that more than one part of rollpoint
//! must agree on: the gateway's lineage and the scripted model's position
//! both count the model's turns by the same rule.

use serde_json::Value;

/// Whether a Responses input item was authored by the model.
#[must_use]
pub fn is_model_item(item: &Value) -> bool {
    match item.get("type").and_then(Value::as_str) {
        Some(
            "function_call" | "reasoning" | "custom_tool_call" | "local_shell_call"
            | "web_search_call" | "computer_call",
        ) => true,
        Some("message") | None => item.get("role").and_then(Value::as_str) == Some("assistant"),
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn model_items_are_calls_reasoning_and_assistant_messages() {
        assert!(is_model_item(
            &json!({"type": "function_call", "name": "bash"})
        ));
        assert!(is_model_item(&json!({"type": "reasoning"})));
        assert!(is_model_item(
            &json!({"type": "message", "role": "assistant"})
        ));
        assert!(is_model_item(
            &json!({"role": "assistant", "content": "hi"})
        ));
        assert!(!is_model_item(&json!({"type": "message", "role": "user"})));
        assert!(!is_model_item(
            &json!({"type": "function_call_output", "call_id": "c"})
        ));
    }
}
