//! A task whose launch cannot start (the command's binary is missing, the
//! native worker's input file is missing) gets a result row that says so,
//! through the real `rollpoint run` (root): status `failed`, an error naming
//! the file, its launch logged as `failed` with why, and nothing graded or
//! left behind. Before, such a row read `verified`, reward 0, `error: null`.

mod common;

use common::{native_task, processes_of, run_rows_to_end};
use rollpoint_driver::{LaunchEnd, Status};
use rollpoint_testkit::{mounts_under, require_root};

#[test]
fn root_a_launch_with_a_missing_binary_or_input_fails_naming_it() {
    require_root();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let missing_bin = "/nonexistent/lm-harness";
    let mut no_input = native_task("lm-native");
    no_input["adapter"]["input"] = serde_json::json!("no-such-input.json");
    let rows = vec![
        serde_json::json!({
            "v": 1,
            "task": {"id": "lm-command", "verify": {"command": ["true"]}},
            "adapter": {"kind": "command", "argv": [missing_bin]}
        }),
        no_input,
    ];
    let (rows, run_dir) = run_rows_to_end(dir, &rows);
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for (rollout, name) in [
        ("lm-command", missing_bin),
        ("lm-native", "/workspace/no-such-input.json"),
    ] {
        let r = rows
            .iter()
            .find(|r| r.rollout == rollout)
            .unwrap_or_else(|| panic!("{rollout}: {rows:#?}"));
        assert_eq!(r.status, Status::InfraError, "{r:#?}");
        assert_eq!(r.reward, None, "nothing was graded: {r:#?}");
        let error = r.error.as_deref().unwrap_or_default();
        assert!(
            error.contains(name),
            "{rollout}: the error names {name}: {error}"
        );
        assert_eq!(r.launches.len(), 1, "{r:#?}");
        let launch = &r.launches[0];
        assert_eq!(launch.end, Some(LaunchEnd::Failed), "{launch:?}");
        let note = launch.note.as_deref().unwrap_or_default();
        assert!(
            note.contains(name),
            "{rollout}: the launch says why: {note}"
        );
    }
    assert!(mounts_under(&run_dir).is_empty());
    assert!(processes_of("lm-").is_empty());
}
