//! The upstream's key stays outside the sandboxes (root): a run whose config names the key's
//! environment variable runs a native task against the gateway and a command task that dumps
//! its own environment; both verify (the dump holds no key), and no file anywhere under the
//! run directory (ledger, logs, checkpoints, snapshots, results) holds the key's bytes.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use rollpoint_driver::Status;
use rollpoint_testkit::{require_root, supervisor_bin};

/// Every regular file under `dir` that holds `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                stack.push(e.path());
            } else if kind.is_file()
                && std::fs::read(e.path())
                    .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

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
    let err = std::fs::File::create(&log).expect("log");
    let sup = supervisor_bin();
    let mut run = Command::new(rollpoint_bin())
        .args(run_args(&tasks, &config, &run_dir, &sup))
        .env("ROLLPOINT_TEST_MODEL_KEY", &marker)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn rollpoint");
    let status = wait(&mut run, Duration::from_secs(300), &log);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "the run failed ({status}):\n{text}");
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 2, "{results:?}");
    for r in &results {
        assert_eq!(r.status, Status::Verified, "{r:?}\n{text}");
    }
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
