//! Two model providers in one run (root): the run's scripted model is the default upstream and
//! a second scripted model, started by the test as its own process, is `[[models]]` entry
//! `second` with its own key. The native task that asks for `second` is answered by it, the one
//! that asks for the default by the run's; both verify, each model saw only its own task's
//! calls, and the second's key is in no file of the run.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use rollpoint_testkit::require_root;

/// Kills the child when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn root_calls_naming_a_listed_model_go_to_its_upstream_the_rest_to_the_default() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rm")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("model.json"), model_script(0).to_string()).expect("script");
    let second_log = d.join("second.log");
    let port_file = d.join("second.port");
    let _second = Killed(
        Command::new(rollpoint_bin())
            .args(["model-script", "--script"])
            .arg(d.join("model.json"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&second_log)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("second model"),
    );
    let log = d.join("stderr.log");
    wait_file(&port_file, Duration::from_secs(60), &log);
    std::thread::sleep(Duration::from_millis(100));
    let port = std::fs::read_to_string(&port_file).expect("port");
    let marker = format!("sk-second-{:016x}", fastrand::u64(..));
    let tag = format!("m{:04x}", fastrand::u16(..));
    let mut second = native_task(&format!("{tag}s"));
    let input = second["task"]["files"]["input.json"]
        .as_str()
        .expect("input")
        .replace("\"name\":\"scripted\"", "\"name\":\"second\"");
    assert!(input.contains("\"second\""), "{input}");
    second["task"]["files"]["input.json"] = serde_json::json!(input);
    let tasks = d.join("tasks.jsonl");
    write_jsonl(&tasks, &[native_task(&format!("{tag}d")), second]);
    let config = d.join("run.toml");
    std::fs::write(
        &config,
        format!(
            "v = 1\ncheckpoint_every_s = 1\nmodel_script = \"model.json\"\n\n[[models]]\nname = \"second\"\nupstream = \"http://127.0.0.1:{}\"\napi = \"all\"\ncredential_env = \"ROLLPOINT_TEST_SECOND_KEY\"\n",
            port.trim()
        ),
    )
    .expect("config");
    let run_dir = d.join("r");
    let _text = run_verified_with_env(
        &tasks,
        &config,
        &run_dir,
        ("ROLLPOINT_TEST_SECOND_KEY", &marker),
        &log,
    );
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 2, "{results:?}");
    // STEPS tool calls and the last answer each.
    let per_task = usize::try_from(STEPS).expect("steps") + 1;
    assert_eq!(lines(&second_log), per_task, "the second model's calls");
    assert_eq!(
        lines(&run_dir.join("model-script.log")),
        per_task,
        "the default model's calls"
    );
    let holding = files_holding(&run_dir, marker.as_bytes());
    assert!(
        holding.is_empty(),
        "files holding the second model's key: {holding:?}"
    );
}
