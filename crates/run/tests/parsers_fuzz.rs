//! The run's parsers of untrusted input under hostile bytes: task lines, run
//! configs (JSON and TOML), `run.json` and `results.jsonl`. Random bytes and
//! random mutations of valid inputs never panic, and every error names the
//! file.

use std::path::Path;

use proptest::prelude::*;
use rollpoint_run::files::tasks::parse_tasks;
use rollpoint_run::{RunConfig, RunState};
use rollpoint_testkit::fuzz::hostile;

const TASK: &str = r#"{"v":1,"id":"r1","task":{"id":"t1","files":{"a.txt":"x"},"setup":[["true"]],"verify":{"command":["sh","-c","test -f a.txt"],"timeout_s":5}},"adapter":{"kind":"command","argv":["sh","-c","echo hi"],"env":{"A":"b"}},"harness_timeout_s":60}"#;
const CONFIG_JSON: &str =
    r#"{"v":1,"concurrency":4,"checkpoint_every_s":2,"keep":3,"store":"copy","gateway_port":0}"#;
const CONFIG_TOML: &str =
    "v = 1\nconcurrency = 4\ncheckpoint_every_s = 2\nkeep = 3\nstore = \"copy\"\n";

fn state() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = RunState {
        v: rollpoint_run::RUN_STATE_VERSION,
        tasks_path: "/t.jsonl".into(),
        tasks_sha256: "00".into(),
        config: RunConfig::default(),
        gateway_port: 4000,
        attempts: [("r1".to_owned(), 1)].into(),
        forks: Default::default(),
        saved_by: Default::default(),
        branched: Default::default(),
        trusted: std::collections::BTreeSet::new(),
        infra_retries: std::collections::BTreeMap::new(),
    };
    state.save(dir.path()).expect("save");
    std::fs::read(RunState::path(dir.path())).expect("read")
}

proptest! {
    #[test]
    fn task_lines_never_panic(bytes in hostile(format!("{TASK}\n{}\n", TASK.replace("r1", "r2")).into_bytes())) {
        if let Err(e) = parse_tasks(&bytes, Path::new("tasks.jsonl")) {
            prop_assert!(e.to_string().contains("tasks.jsonl"), "{e}");
        }
    }

    #[test]
    fn json_configs_never_panic(bytes in hostile(CONFIG_JSON.as_bytes().to_vec())) {
        if let Err(e) = RunConfig::parse(&bytes, Path::new("c.json")) {
            prop_assert!(e.to_string().contains("c.json"), "{e}");
        }
    }

    #[test]
    fn toml_configs_never_panic(bytes in hostile(CONFIG_TOML.as_bytes().to_vec())) {
        if let Err(e) = RunConfig::parse(&bytes, Path::new("c.toml")) {
            prop_assert!(e.to_string().contains("c.toml"), "{e}");
        }
    }

    #[test]
    fn run_states_never_panic(bytes in hostile(state())) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(RunState::path(dir.path()), &bytes).expect("write");
        if let Err(e) = RunState::load(dir.path()) {
            prop_assert!(e.to_string().contains("run.json"), "{e}");
        }
    }

    #[test]
    fn results_files_never_panic(bytes in hostile(Vec::new())) {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("results.jsonl"), &bytes).expect("write");
        if let Err(e) = rollpoint_run::read_results(dir.path()) {
            prop_assert!(e.to_string().contains("results.jsonl"), "{e}");
        }
    }
}
