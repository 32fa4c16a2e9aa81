//! The upstream's key stays outside the sandboxes (root): a run whose config names the key's
//! environment variable runs a native task against the gateway and a command task that dumps
//! its own environment; both verify (the dump holds no key), and no file anywhere under the
//! run directory (ledger, logs, checkpoints, snapshots, results) holds the key's bytes.

mod common;

use common::*;
use rollpoint_testkit::require_root;

#[test]
fn root_the_model_key_reaches_no_sandbox_and_no_file_of_the_run() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rk")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let marker = format!("sk-marker-{:016x}", fastrand::u64(..));
    let tag = format!("k{:04x}", fastrand::u16(..));
    let dump = serde_json::json!({
        "v": 1,
        "task": {"id": format!("{tag}env"), "verify": {"command": ["/bin/sh", "-c",
            "test -s env.txt && ! grep -q sk-marker- env.txt"]}},
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", "env > env.txt; cat /proc/1/environ >> env.txt"]}
    });
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &[native_task(&format!("{tag}n")), dump]);
    std::fs::write(dir.path().join("model.json"), model_script(0).to_string()).expect("script");
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "v = 1\ncheckpoint_every_s = 1\nmodel_script = \"model.json\"\nmodel_credential_env = \"ROLLPOINT_TEST_MODEL_KEY\"\n",
    )
    .expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let text = run_verified_with_env(
        &tasks,
        &config,
        &run_dir,
        ("ROLLPOINT_TEST_MODEL_KEY", &marker),
        &log,
    );
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        !text.contains(&marker),
        "the key is in the runner's output:\n{text}"
    );
    let holding = files_holding(&run_dir, marker.as_bytes());
    assert!(holding.is_empty(), "files holding the key: {holding:?}");
    let config_text = std::fs::read_to_string(run_dir.join("run.json")).expect("run.json");
    assert!(
        config_text.contains("ROLLPOINT_TEST_MODEL_KEY"),
        "run.json names the variable, not the key: {config_text}"
    );
}
