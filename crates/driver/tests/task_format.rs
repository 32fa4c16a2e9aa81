//! The rollout task format: the shipped example decodes, and bad tasks are
//! refused naming the field.

use rollpoint_driver::{AdapterSpec, DriverError, RolloutTask};

#[test]
fn the_example_task_decodes() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/rollout-task.json"
    ))
    .expect("example present");
    let task = RolloutTask::decode(&bytes).expect("example is valid");
    assert_eq!(task.rollout(), "fix-parser-0");
    assert_eq!(task.task.id, "fix-parser");
    let AdapterSpec::Command(cmd) = &task.adapter else {
        panic!("{:?}", task.adapter)
    };
    assert_eq!(cmd.resume_argv.as_deref().map(<[String]>::len), Some(2));
}

fn field_of(json: &str) -> String {
    match RolloutTask::decode(json.as_bytes()) {
        Err(DriverError::Task { field, .. }) => field,
        other => panic!("{json}: {other:?}"),
    }
}

#[test]
fn bad_tasks_name_the_field() {
    let verify = r#""verify":{"command":["true"]}"#;
    let cases = [
        (
            format!(
                r#"{{"v":2,"task":{{"id":"t",{verify}}},"adapter":{{"kind":"command","argv":["a"]}}}}"#
            ),
            "task.v",
        ),
        (
            format!(
                r#"{{"v":1,"task":{{"id":"t",{verify}}},"adapter":{{"kind":"command","argv":[]}}}}"#
            ),
            "task.adapter.argv",
        ),
        (
            format!(
                r#"{{"v":1,"task":{{"id":"t",{verify}}},"adapter":{{"kind":"fake","steps":0,"tick_ms":5}}}}"#
            ),
            "task.adapter.steps",
        ),
        (
            format!(r#"{{"v":1,"task":{{"id":"t",{verify}}},"adapter":{{"kind":"warp"}}}}"#),
            "task.adapter.kind",
        ),
        (
            format!(
                r#"{{"v":1,"id":"a b","task":{{"id":"t",{verify}}},"adapter":{{"kind":"command","argv":["a"]}}}}"#
            ),
            "task.id",
        ),
        (
            r#"{"v":1,"task":{"id":"t","verify":{"command":[]}},"adapter":{"kind":"command","argv":["a"]}}"#
                .to_owned(),
            "task.task.verify.command",
        ),
        (
            format!(
                r#"{{"v":1,"task":{{"id":"t",{verify}}},"adapter":{{"kind":"command","argv":["a"]}},"extra":1}}"#
            ),
            "task.extra",
        ),
    ];
    for (json, field) in cases {
        assert_eq!(field_of(&json), field, "{json}");
    }
}
