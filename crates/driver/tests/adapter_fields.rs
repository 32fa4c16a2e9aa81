//! A bad field inside a task's `adapter` is named by its own path
//! (`task.adapter.argv`, `task.adapter.env.X`), not by `adapter` alone:
//! serde's internally tagged enums lose the path inside the object, so the
//! adapter is decoded by its `kind` first, then its settings.

use rollpoint_driver::{DriverError, RolloutTask};
use serde_json::{Value, json};

fn task_with(adapter: Value) -> Vec<u8> {
    json!({
        "v": 1,
        "task": {"id": "t", "verify": {"command": ["true"]}},
        "adapter": adapter,
    })
    .to_string()
    .into_bytes()
}

fn refusal(adapter: Value) -> (String, String) {
    match RolloutTask::decode(&task_with(adapter.clone())) {
        Err(DriverError::Task { field, message }) => (field, message),
        other => panic!("{adapter}: {other:?}"),
    }
}

#[test]
fn a_wrong_type_inside_the_adapter_names_the_field() {
    let cases = [
        (
            json!({"kind": "command", "argv": "true"}),
            "task.adapter.argv",
        ),
        (
            json!({"kind": "command", "argv": ["true"], "env": {"X": 1}}),
            "task.adapter.env.X",
        ),
        (
            json!({"kind": "command", "argv": ["true"], "resume_argv": [1]}),
            "task.adapter.resume_argv[0]",
        ),
        (
            json!({"kind": "command", "argv": ["true"], "pauses": "yes"}),
            "task.adapter.pauses",
        ),
        (json!({"kind": "native", "input": 3}), "task.adapter.input"),
        (
            json!({"kind": "native", "input": "in.json", "env": {"PATH": ["/bin"]}}),
            "task.adapter.env.PATH",
        ),
        (
            json!({"kind": "fake", "steps": "3", "tick_ms": 5}),
            "task.adapter.steps",
        ),
        (json!({"kind": "codex", "prompt": 3}), "task.adapter.prompt"),
        (
            json!({"kind": "claude-code", "prompt": "go", "bin": 3}),
            "task.adapter.bin",
        ),
    ];
    for (adapter, field) in cases {
        let (got, message) = refusal(adapter.clone());
        assert_eq!(got, field, "{adapter}: {message}");
        let inner = field.trim_start_matches("task.");
        assert!(
            message.contains(&format!("`{inner}`")),
            "{adapter}: the message names the field: {message}"
        );
        assert!(message.contains("invalid type"), "{adapter}: {message}");
    }
}

#[test]
fn missing_unknown_and_kind_fields_inside_the_adapter_are_named() {
    let cases = [
        (
            json!({"kind": "command"}),
            "task.adapter.argv",
            "missing field",
        ),
        (
            json!({"kind": "native"}),
            "task.adapter.input",
            "missing field",
        ),
        (
            json!({"kind": "command", "argv": ["a"], "argz": ["b"]}),
            "task.adapter.argz",
            "unknown field",
        ),
        (json!({"argv": ["a"]}), "task.adapter.kind", "missing field"),
        (json!({"kind": 7}), "task.adapter.kind", "invalid type"),
        (
            json!({"kind": "warp"}),
            "task.adapter.kind",
            "unknown variant",
        ),
        (json!("command"), "task.adapter", "invalid type"),
    ];
    for (adapter, field, text) in cases {
        let (got, message) = refusal(adapter.clone());
        assert_eq!(got, field, "{adapter}: {message}");
        assert!(message.contains(text), "{adapter}: {message}");
    }
}

#[test]
fn fields_outside_the_adapter_keep_their_paths() {
    let mut no_adapter: Value = serde_json::from_slice(&task_with(json!({}))).expect("json");
    no_adapter
        .as_object_mut()
        .expect("object")
        .remove("adapter");
    match RolloutTask::decode(no_adapter.to_string().as_bytes()) {
        Err(DriverError::Task { field, .. }) => assert_eq!(field, "task.adapter"),
        other => panic!("{other:?}"),
    }
    let bad_owner_task = json!({
        "v": 1,
        "task": {"id": "t", "verify": {"command": ["true"], "timeout_s": "x"}},
        "adapter": {"kind": "command", "argv": ["true"]},
    });
    match RolloutTask::decode(bad_owner_task.to_string().as_bytes()) {
        Err(DriverError::Task { field, .. }) => {
            assert_eq!(field, "task.task.verify.timeout_s");
        }
        other => panic!("{other:?}"),
    }
    // A good task still decodes, and its adapter round-trips.
    let good = RolloutTask::decode(&task_with(
        json!({"kind": "command", "argv": ["true"], "env": {"X": "1"}}),
    ))
    .expect("decodes");
    let again: RolloutTask =
        serde_json::from_value(serde_json::to_value(&good).expect("encodes")).expect("decodes");
    assert_eq!(again, good);
}
