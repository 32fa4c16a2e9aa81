//! `rollpoint run` refuses a bad tasks file or config before starting
//! anything, with an error naming the file, the line and the field.

mod common;

use std::process::Command;

use common::*;

fn run(args: &[&str], dir: &std::path::Path) -> (bool, String) {
    // Any existing file passes the supervisor check; nothing is started.
    let sup = dir.join("supervisor");
    std::fs::write(&sup, "").expect("supervisor");
    let out = Command::new(rollpoint_bin())
        .arg("run")
        .args(args)
        .arg("--supervisor")
        .arg(&sup)
        .arg("--run-dir")
        .arg(dir.join("run"))
        .output()
        .expect("run rollpoint");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_tasks_and_configs_are_refused_naming_the_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let good = command_task("a", 100);
    let mut bad = command_task("b", 100);
    bad["adapter"]["argz"] = serde_json::json!(["true"]);
    let tasks = d.join("tasks.jsonl");
    write_jsonl(&tasks, &[good.clone(), bad]);
    let (ok, err) = run(&[tasks.to_str().expect("utf-8")], d);
    assert!(!ok);
    assert!(
        err.contains("tasks.jsonl: line 2") && err.contains("argz"),
        "{err}"
    );

    write_jsonl(&tasks, &[good.clone(), good.clone()]);
    let (ok, err) = run(&[tasks.to_str().expect("utf-8")], d);
    assert!(!ok);
    assert!(err.contains("line 2") && err.contains("task.id"), "{err}");

    write_jsonl(&tasks, &[good]);
    let config = d.join("run.toml");
    std::fs::write(&config, "v = 1\ncheckpoint_every = 3\n").expect("config");
    let (ok, err) = run(
        &[
            tasks.to_str().expect("utf-8"),
            "--config",
            config.to_str().expect("utf-8"),
        ],
        d,
    );
    assert!(!ok);
    assert!(
        err.contains("run.toml") && err.contains("checkpoint_every"),
        "{err}"
    );

    let config = d.join("run.json");
    std::fs::write(&config, r#"{"v": 1, "keep": 0}"#).expect("config");
    let (ok, err) = run(
        &[
            tasks.to_str().expect("utf-8"),
            "--config",
            config.to_str().expect("utf-8"),
        ],
        d,
    );
    assert!(!ok);
    assert!(
        err.contains("run.json") && err.contains("field `keep`"),
        "{err}"
    );
    for (text, field, says) in [
        (
            "v = 1\nmodel_upstream = \"ftp://m\"\n",
            "model_upstream",
            "https://",
        ),
        (
            "v = 1\n[branch]\nat = \"sometimes\"\nn = 2\n",
            "branch.at",
            "every checkpoint",
        ),
        (
            "v = 1\n[branch]\nat = \"checkpoint 0\"\nn = 2\n",
            "branch.at",
            "1..=1000000",
        ),
        (
            "v = 1\n[branch]\nat = \"every checkpoint\"\nn = 300\n",
            "branch.n",
            "1..=256",
        ),
        (
            "v = 1\nmodel_credential_env = \"K\"\nmodel_credential_file = \"k\"\n",
            "model_credential_file",
            "not both",
        ),
        (
            "v = 1\nmodel_tokens = \"sglang\"\n",
            "model_tokens",
            "expected `vllm`",
        ),
        (
            "v = 1\ntoken_breaks = \"drop\"\n",
            "token_breaks",
            "`split` or `mask`",
        ),
        ("v = 1\nmodel_logprobs = 3\n", "model_logprobs", "a boolean"),
        (
            "v = 1\nmodel_credential_env = \"NOT A NAME\"\n",
            "model_credential_env",
            "[A-Za-z_]",
        ),
        (
            "v = 1\nmodel_max_calls = 70000\n",
            "model_max_calls",
            "0..=65536",
        ),
        (
            "v = 1\n[[models]]\nname = \"m\"\nupstream = \"http://x\"\napi = \"openai\"\n",
            "models",
            "model_upstream or model_script",
        ),
        (
            "v = 1\nmodel_upstream = \"http://d\"\n[[models]]\nname = \"m\"\nupstream = \"http://x\"\napi = \"openai\"\n[[models]]\nname = \"m\"\nupstream = \"http://y\"\napi = \"openai\"\n",
            "models[1].name",
            "named twice",
        ),
        (
            "v = 1\nmodel_upstream = \"http://d\"\n[[models]]\nname = \"m\"\nupstream = \"x\"\napi = \"openai\"\n",
            "models[0].upstream",
            "https://",
        ),
        (
            "v = 1\nmodel_upstream = \"http://d\"\n[[models]]\nname = \"m\"\nupstreams = [\"x\"]\n",
            "models[0].upstreams",
            "unknown field `upstreams`",
        ),
        (
            "v = 1\nmodel_upstream = \"http://d\"\n[[models]]\nname = \"m\"\nupstream = \"http://x\"\napi = \"gemini\"\n",
            "api",
            "gemini",
        ),
    ] {
        let config = d.join("model.toml");
        std::fs::write(&config, text).expect("config");
        let (ok, err) = run(
            &[
                tasks.to_str().expect("utf-8"),
                "--config",
                config.to_str().expect("utf-8"),
            ],
            d,
        );
        assert!(!ok, "{text}");
        assert!(
            err.contains("model.toml") && err.contains(field) && err.contains(says),
            "{text}: {err}"
        );
        assert_eq!(
            err.matches(": field `").count(),
            1,
            "the field is named once: {err}"
        );
    }
    assert!(
        !d.join("run").join("run.json").exists(),
        "nothing was started"
    );
}

#[test]
fn the_example_runs_load_and_name_every_adapter_kind() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for (tasks, config) in [
        ("tasks.jsonl", "run.toml"),
        ("harnesses/tasks.jsonl", "harnesses/run.toml"),
    ] {
        let loaded = rollpoint_run::load_tasks(&root.join(tasks)).expect(tasks);
        assert!(!loaded.tasks.is_empty(), "{tasks}");
        let config = rollpoint_run::RunConfig::load(&root.join(config)).expect(config);
        assert!(
            config.model_script.as_ref().is_some_and(|p| p.is_file()),
            "{config:?}"
        );
    }
    let harnesses = rollpoint_run::load_tasks(&root.join("harnesses/tasks.jsonl")).expect("load");
    let kinds: Vec<String> = harnesses
        .tasks
        .iter()
        .map(|t| {
            serde_json::to_value(&t.adapter).expect("adapter")["kind"]
                .as_str()
                .expect("kind")
                .to_owned()
        })
        .collect();
    assert_eq!(kinds, ["opencode", "codex", "claude-code", "pi"]);
}
