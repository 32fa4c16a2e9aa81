//! Token-in/token-out's prompt: the first turn is the whole conversation rendered; a later
//! turn is its parent's exact ids and the added messages rendered as they follow an
//! assistant turn, even where the template renders earlier turns differently; a
//! conversation that does not continue its parent is rendered whole and says why.
#![expect(clippy::unwrap_used, reason = "tests")]

use rollpoint_gateway::tito::TitoConfig;
use rollpoint_gateway::tito::chat::ToolParser;
use rollpoint_gateway::tito::prompt::{ParentTurn, Tito};
use serde_json::json;

fn tito() -> (tempfile::TempDir, Tito) {
    let dir = tempfile::tempdir().unwrap();
    let (tokenizer, template) = rollpoint_testkit::tito::write_model(dir.path());
    let t = Tito::load(&TitoConfig {
        tokenizer,
        template,
        tool_parser: ToolParser::Hermes,
    })
    .unwrap();
    (dir, t)
}

#[test]
fn a_later_turn_extends_its_parent_s_exact_ids() {
    let (_dir, t) = tito();
    let tools = json!([{"type": "function", "function": {"name": "shell", "parameters": {}}}]);
    let first = vec![json!({"role": "user", "content": "go"})];
    let p0 = t.prompt(&first, Some(&tools), None).unwrap();
    assert!(p0.rerendered.is_none());
    let rendered = t.render(&first, Some(&tools), true).unwrap();
    assert_eq!(
        t.decode(&p0.ids).unwrap(),
        rendered,
        "decodes to the rendering"
    );

    // The model's answer as it generated it: reasoning the template will not render again.
    let completion = t
        .encode("<think>look</think>\n<tool_call>\n{\"name\": \"shell\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>")
        .unwrap();
    let mut parent_ids = p0.ids.clone();
    parent_ids.extend(&completion);
    let parent = ParentTurn {
        call_id: "r#0".into(),
        ids: parent_ids.clone(),
        messages: 1,
    };
    let mut next = first.clone();
    next.push(
        json!({"role": "assistant", "content": null, "reasoning_content": "look",
        "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "shell", "arguments": "{\"command\": \"ls\"}"}}]}),
    );
    next.push(json!({"role": "tool", "tool_call_id": "c", "content": "a.txt"}));
    let p1 = t.prompt(&next, Some(&tools), Some(&parent)).unwrap();
    assert!(p1.rerendered.is_none());
    assert!(
        p1.ids.starts_with(&parent_ids),
        "the parent's exact ids first"
    );
    let added = t.decode(&p1.ids[parent_ids.len()..]).unwrap();
    assert_eq!(
        added,
        "<|im_start|>user\n<tool_response>\na.txt\n</tool_response><|im_end|><|im_start|>assistant\n"
    );
    // A whole rendering drops the reasoning: it would not extend the parent.
    let whole = t
        .encode(&t.render(&next, Some(&tools), true).unwrap())
        .unwrap();
    assert!(!whole.starts_with(&parent_ids));

    // A conversation that does not carry the parent's answer is rendered whole.
    let stray = vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "user", "content": "again"}),
    ];
    let p2 = t.prompt(&stray, Some(&tools), Some(&parent)).unwrap();
    assert!(p2.rerendered.unwrap().contains("r#0"));
}

#[test]
fn a_missing_file_is_refused_by_path() {
    let e = Tito::load(&TitoConfig {
        tokenizer: "/nonexistent/tokenizer.json".into(),
        template: "/nonexistent/t.jinja".into(),
        tool_parser: ToolParser::Hermes,
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("/nonexistent/tokenizer.json"), "{e}");
}
