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
            "disk_bytes": c.storage_mb.saturating_mul(1 << 20),
        },
        "network": network(c.agent_network()),
    });
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
    let bytes = serde_json::to_vec(&rollout).map_err(|e| HarborError::Build {
        task: task.id.clone(),
        message: e.to_string(),
    })?;
    RolloutTask::decode(&bytes).map_err(|source| HarborError::Task {
        task: task.id.clone(),
        source,
    })
}
