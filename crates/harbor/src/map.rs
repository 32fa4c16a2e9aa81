//! A read Harbor task and an agent, as the rollout task rollpoint runs.
//! Pure: the one place the mapping is written (docs/design/harbor.md is
//! its table).

use std::collections::BTreeMap;

use base64::Engine as _;
use rollpoint_driver::RolloutTask;
use serde_json::{Value, json};

use crate::config::NetworkPolicy;
use crate::errors::HarborError;
use crate::task_dir::{HarborTask, TaskFile};

/// Where Harbor puts the tests, the solution and the verifier's output.
pub const TESTS_DIR: &str = "/tests";
pub const SOLUTION_DIR: &str = "/solution";
/// Where the native agent's input and launcher go (outside the workdir).
pub const NATIVE_DIR: &str = "/var/lib/rollpoint/harbor";

/// Where a sandbox on an image finds the pinned harness install's binaries.
pub const LENT_HARNESSES: &str = "/.rollpoint/harnesses/node_modules/.bin";

/// A harness kind's binary name in the install.
fn harness_binary(kind: &str) -> &str {
    match kind {
        "claude-code" => "claude",
        other => other,
    }
}

/// Who does the task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agent {
    /// A real harness: `opencode`, `codex`, `claude-code` or `pi`, given the
    /// instruction as its prompt.
    Harness { kind: String },
    /// rollpoint's own agent (`rollpoint worker`).
    Native,
    /// `solution/solve.sh`, put in at `/solution` and run with bash.
    Oracle,
    /// Any shell command, run with `/bin/sh -c` in the workdir; the
    /// instruction is in `$ROLLPOINT_INSTRUCTION`.
    Command(String),
}

impl Agent {
    /// Reads `--agent`.
    #[must_use]
    pub fn parse(s: &str) -> Self {
        match s {
            "opencode" | "codex" | "claude-code" | "pi" => Self::Harness { kind: s.to_owned() },
            "native" => Self::Native,
            "oracle" => Self::Oracle,
            other => Self::Command(other.to_owned()),
        }
    }
}

/// What the run adds to every task.
#[derive(Debug, Clone)]
pub struct Settings {
    pub agent: Agent,
    /// The model name a harness or the native agent asks the gateway for.
    pub model: String,
    /// `storage_mb` becomes `limits.disk_bytes`, which only the btrfs
    /// snapshot store enforces (a copy store refuses the limit).
    pub disk_limit: bool,
}

fn files(map: &BTreeMap<String, TaskFile>) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    Value::Object(
        map.iter()
            .map(|(path, f)| {
                (
                    path.clone(),
                    json!({"base64": engine.encode(&f.bytes), "mode": f.mode}),
                )
            })
            .collect(),
    )
}

fn ceil_s(seconds: f64) -> u64 {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked (0, 30 days] when read"
    )]
    let s = seconds.ceil() as u64;
    s.max(1)
}

/// The sandbox's network for a task's policy. `public` gets the model
/// gateway only: a task file never opens a sandbox to the internet (and
/// with it to the host's loopback services).
fn network(policy: &NetworkPolicy) -> Value {
    match policy {
        NetworkPolicy::Public => json!("gateway"),
        NetworkPolicy::None => json!("none"),
        NetworkPolicy::Allow(hosts) => json!({
            "allow": hosts
                .iter()
                .flat_map(|h| [format!("{h}:443"), format!("{h}:80")])
                .collect::<Vec<_>>()
        }),
    }
}

/// `bash -c` that exports its `K=V` arguments, then runs `script`.
fn with_env(script: &str, name: &str, env: &BTreeMap<String, String>) -> Vec<String> {
    let mut argv = vec![
        "bash".to_owned(),
        "-c".to_owned(),
        format!("for kv in \"$@\"; do export \"$kv\"; done; {script}"),
        name.to_owned(),
    ];
    argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    argv
}

/// The healthcheck as a setup command, as Docker's `HEALTHCHECK` reads
/// it: after the start period, the command until it passes, at most
/// `retries` times, `interval` apart, each within `timeout`.
fn healthcheck(h: &crate::config::Healthcheck) -> Vec<String> {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked (0, 30 days] when read"
    )]
    let start = h.start_period_sec.ceil() as u64;
    vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        format!(
            "sleep {start}; i=0; while [ $i -lt {retries} ]; do \
             timeout {timeout} /bin/sh -c \"$0\" && exit 0; i=$((i+1)); sleep {interval}; done; \
             echo \"healthcheck failed {retries} times: $0\" >&2; exit 1",
            retries = h.retries.max(1),
            timeout = ceil_s(h.timeout_sec),
            interval = ceil_s(h.interval_sec),
        ),
        h.command.clone(),
    ]
}

/// The native agent's input and launcher (the launcher fills in the
/// attempt's gateway route and runs the worker lent to the sandbox).
fn native_files(task: &HarborTask, model: &str) -> Value {
    let input = json!({
        "v": 1,
        "rollout_id": task.id,
        "task": {"prompt": task.instruction},
        "model": {"base_url": "@MODEL@", "api": "chat_completions", "name": model},
    });
    let launcher = "#!/bin/sh\n\
         in=\"$1\"; shift\n\
         sed \"s|@MODEL@|$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY/v1|\" \"$in\" > \"$in.live\"\n\
         if [ -x /.rollpoint/bin/rollpoint-worker ]; then exec /.rollpoint/bin/rollpoint-worker \"$in.live\" \"$@\"; fi\n\
         exec \"${ROLLPOINT_BIN:-rollpoint}\" worker \"$in.live\" \"$@\"\n";
    json!({
        format!("{NATIVE_DIR}/input.json"): input.to_string(),
        format!("{NATIVE_DIR}/run-worker"): launcher,
    })
}

/// The rollout task of `task` with `settings`; `base` is the sandbox base
/// (`{"kind": "image", "ref": ...}` or the built archive's `{"kind": "oci-archive", ...}`).
pub fn rollout_task(
    task: &HarborTask,
    settings: &Settings,
    base: Value,
) -> Result<RolloutTask, HarborError> {
    let c = &task.config;
    let mut sandbox = json!({
        "base": base,
        "env": task.env,
        "limits": {
            "cpu_millis": c.cpus.saturating_mul(1000),
            "memory_bytes": c.memory_mb.saturating_mul(1 << 20),
        },
        "network": network(c.agent_network()),
    });
    if settings.disk_limit {
        sandbox["limits"]["disk_bytes"] = json!(c.storage_mb.saturating_mul(1 << 20));
    }
    if let Some(user) = &c.agent_user {
        sandbox["user"] = json!(user);
    }
    let verify_script = format!(
        "mkdir -p /logs/verifier; bash {TESTS_DIR}/test.sh 2>&1 | tee /logs/verifier/test-stdout.txt; \
         exit \"${{PIPESTATUS[0]}}\""
    );
    let mut owner = json!({
        "id": task.id,
        "sandbox": sandbox,
        "verify": {
            "command": with_env(&verify_script, "verify", &c.verifier_env),
            "timeout_s": ceil_s(c.verifier_timeout_s),
            "reward": "files",
            "upload": {"dir": TESTS_DIR, "files": files(&task.tests)},
        },
    });
    let mut setup: Vec<Vec<String>> = Vec::new();
    if let Some(h) = &c.healthcheck {
        setup.push(healthcheck(h));
        #[expect(clippy::cast_precision_loss, reason = "a retry count")]
        let budget =
            h.start_period_sec + (h.timeout_sec + h.interval_sec) * h.retries.max(1) as f64;
        owner["setup_timeout_s"] = json!(ceil_s(budget + 30.0));
    }
    let adapter = match &settings.agent {
        // A Harbor sandbox is on an image: the pinned harness install is
        // lent under /.rollpoint, not at its host path.
        Agent::Harness { kind } => json!({
            "kind": kind,
            "prompt": task.instruction,
            "model": settings.model,
            "bin": format!("{LENT_HARNESSES}/{}", harness_binary(kind)),
        }),
        Agent::Native => {
            owner["files"] = native_files(task, &settings.model);
            setup.push(vec![
                "chmod".to_owned(),
                "0755".to_owned(),
                format!("{NATIVE_DIR}/run-worker"),
            ]);
            json!({
                "kind": "native",
                "input": format!("{NATIVE_DIR}/input.json"),
                "worker": format!("{NATIVE_DIR}/run-worker"),
            })
        }
        Agent::Oracle => {
            if !task.solution.contains_key("solve.sh") {
                return Err(HarborError::Refused {
                    task: task.id.clone(),
                    reason: "the oracle agent needs solution/solve.sh".to_owned(),
                });
            }
            owner["upload"] = json!({"dir": SOLUTION_DIR, "files": files(&task.solution)});
            json!({
                "kind": "command",
                "argv": with_env(&format!("exec bash {SOLUTION_DIR}/solve.sh"), "oracle", &c.solution_env),
            })
        }
        Agent::Command(cmd) => json!({
            "kind": "command",
            "argv": ["/bin/sh", "-c", cmd],
            "env": {"ROLLPOINT_INSTRUCTION": task.instruction},
        }),
    };
    if !setup.is_empty() {
        owner["setup"] = json!(setup);
    }
    let mut rollout = json!({
        "v": rollpoint_driver::TASK_VERSION,
        "task": owner,
        "adapter": adapter,
    });
    if let Some(t) = c.agent_timeout_s {
        rollout["harness_timeout_s"] = json!(ceil_s(t));
    }
    RolloutTask::decode(rollout.to_string().as_bytes()).map_err(|source| HarborError::Task {
        task: task.id.clone(),
        source,
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn task_dir(toml: &str) -> (tempfile::TempDir, HarborTask) {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("fix-it");
        std::fs::create_dir_all(t.join("tests")).unwrap();
        std::fs::create_dir_all(t.join("solution")).unwrap();
        std::fs::write(t.join("task.toml"), toml).unwrap();
        std::fs::write(t.join("instruction.md"), "Fix it.\n").unwrap();
        std::fs::write(t.join("tests/test.sh"), "exit 0\n").unwrap();
        std::fs::write(t.join("solution/solve.sh"), "true\n").unwrap();
        let task = HarborTask::read(&t).unwrap();
        (d, task)
    }

    fn mapped(task: &HarborTask, agent: &str, disk_limit: bool) -> Value {
        let settings = Settings {
            agent: Agent::parse(agent),
            model: "policy".to_owned(),
            disk_limit,
        };
        let t = rollout_task(task, &settings, json!({"kind": "image", "ref": "r/i:1"})).unwrap();
        serde_json::to_value(t).unwrap()
    }

    #[test]
    fn each_field_lands_where_the_mapping_says() {
        let (_d, task) = task_dir(
            "[environment]\ndocker_image = \"r/i:1\"\ncpus = 2\nmemory_mb = 512\nstorage_mb = 100\n\
             allowed_hosts = [\"pypi.org\"]\nenv = { A = \"1\" }\n\
             [environment.healthcheck]\ncommand = \"test -f /ready\"\nretries = 2\n\
             [agent]\ntimeout_sec = 90.5\nuser = \"app\"\n[verifier]\ntimeout_sec = 30\nenv = { V = \"2\" }\n",
        );
        let t = mapped(&task, "opencode", true);
        let sb = &t["task"]["sandbox"];
        assert_eq!(sb["limits"]["cpu_millis"], 2000);
        assert_eq!(sb["limits"]["memory_bytes"], 512 << 20);
        assert_eq!(sb["limits"]["disk_bytes"], 100 << 20);
        assert_eq!(
            sb["network"],
            json!({"allow": ["pypi.org:443", "pypi.org:80"]})
        );
        assert_eq!(sb["user"], "app");
        assert_eq!(sb["env"]["A"], "1");
        assert_eq!(t["harness_timeout_s"], 91);
        let verify = &t["task"]["verify"];
        assert_eq!(verify["timeout_s"], 30);
        assert_eq!(verify["reward"], "files");
        assert_eq!(verify["upload"]["dir"], TESTS_DIR);
        assert!(verify["upload"]["files"]["test.sh"]["base64"].is_string());
        assert!(
            verify["command"]
                .as_array()
                .unwrap()
                .contains(&json!("V=2"))
        );
        assert_eq!(t["task"]["setup"][0][3], "test -f /ready");
        assert_eq!(t["adapter"]["prompt"], "Fix it.\n");
        assert_eq!(
            t["adapter"]["bin"],
            "/.rollpoint/harnesses/node_modules/.bin/opencode"
        );
        assert!(
            t["task"].get("upload").is_none(),
            "no solution but for the oracle"
        );
        // A store that cannot limit disk gets no disk limit.
        let t = mapped(&task, "opencode", false);
        assert!(t["task"]["sandbox"]["limits"].get("disk_bytes").is_none());
    }

    #[test]
    fn each_agent_gets_its_adapter() {
        let (_d, task) =
            task_dir("[environment]\ndocker_image = \"r/i:1\"\nallow_internet = false\n");
        let oracle = mapped(&task, "oracle", true);
        assert_eq!(oracle["task"]["upload"]["dir"], SOLUTION_DIR);
        assert_eq!(oracle["adapter"]["kind"], "command");
        assert_eq!(oracle["task"]["sandbox"]["network"], "none");
        let claude = mapped(&task, "claude-code", true);
        assert_eq!(
            claude["adapter"]["bin"],
            "/.rollpoint/harnesses/node_modules/.bin/claude"
        );
        let native = mapped(&task, "native", true);
        assert_eq!(native["adapter"]["kind"], "native");
        let input = native["task"]["files"][format!("{NATIVE_DIR}/input.json")]
            .as_str()
            .unwrap();
        let input: Value = serde_json::from_str(input).unwrap();
        assert_eq!(input["task"]["prompt"], "Fix it.\n");
        assert_eq!(input["model"]["name"], "policy");
        let cmd = mapped(&task, "make solve", true);
        assert_eq!(
            cmd["adapter"]["argv"],
            json!(["/bin/sh", "-c", "make solve"])
        );
        assert_eq!(cmd["adapter"]["env"]["ROLLPOINT_INSTRUCTION"], "Fix it.\n");
    }

    #[test]
    fn what_rollpoint_cannot_give_is_refused_by_name() {
        for (toml, says) in [
            ("[environment]\ndocker_image = \"r\"\ngpus = 1\n", "gpus"),
            (
                "[environment]\ndocker_image = \"r\"\nenv = { K = \"${OPENAI_API_KEY}\" }\n",
                "environment.env.K",
            ),
            (
                "[environment]\ndocker_image = \"r\"\n[verifier]\nuser = \"root\"\n",
                "verifier.user",
            ),
            (
                "[environment]\ndocker_image = \"r\"\n[verifier]\nnetwork_mode = \"no-network\"\n",
                "network",
            ),
            (
                "[environment]\ncpus = 1\n",
                "neither environment.docker_image",
            ),
        ] {
            let d = tempfile::tempdir().unwrap();
            let t = d.path().join("t");
            std::fs::create_dir_all(t.join("tests")).unwrap();
            std::fs::write(t.join("task.toml"), toml).unwrap();
            std::fs::write(t.join("instruction.md"), "x").unwrap();
            std::fs::write(t.join("tests/test.sh"), "exit 0").unwrap();
            let e = HarborTask::read(&t).unwrap_err();
            assert!(matches!(e, HarborError::Refused { .. }), "{says}: {e}");
            assert!(e.to_string().contains(says), "{says}: {e}");
        }
    }
}
