//! The native adapter: runs `rollpoint-worker` in the sandbox. The worker's
//! checkpoint file lives in the sandbox (under the workdir), so a snapshot
//! carries it and a relaunch in the fork continues from its last model or
//! tool boundary. The resume decision is the worker's own, made on a copy
//! of that file.

use std::collections::BTreeMap;
use std::io::Write as _;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_owner::task::resolve;
use serde::{Deserialize, Serialize};

use super::contract::{Adapter, Cx, Decision, LaunchCommand};
use super::fields::{default_true, state_str};
use crate::errors::AdapterError;
use crate::result::Collected;
use crate::result::Usage;

const NAME: &str = "native";

/// Largest checkpoint or result read back from the sandbox.
const READ_LIMIT: u64 = 1 << 30;

fn default_worker() -> String {
    "rollpoint-worker".to_owned()
}

/// Exit code of [`MISSING_SCRIPT`] when something is missing; its stdout
/// says what.
const MISSING_EXIT: i32 = 3;

/// `$1` the input file, `$2` the worker: each must be there before the
/// worker starts (else it would only fail, reading nothing, graded as if it
/// had run).
const MISSING_SCRIPT: &str = r#"if [ ! -e "$1" ]; then echo "input file $1 is missing"; exit 3; fi
if [ ! -f "$1" ] || [ ! -r "$1" ]; then echo "input file $1 is not a readable file"; exit 3; fi
case "$2" in
  */*) [ -f "$2" ] && [ -x "$2" ] || { echo "worker $2 is missing or not executable"; exit 3; } ;;
  *) command -v "$2" >/dev/null 2>&1 || { echo "worker $2 is not on PATH"; exit 3; } ;;
esac
exit 0"#;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NativeSettings {
    /// The worker's input file in the sandbox (a task file, usually).
    pub input: String,
    /// The worker binary in the sandbox.
    #[serde(default = "default_worker")]
    pub worker: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_true")]
    pub pauses: bool,
}

impl NativeSettings {
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        if self.input.is_empty() {
            return Err(("input".into(), "is empty".into()));
        }
        if self.worker.is_empty() {
            return Err(("worker".into(), "is empty".into()));
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct NativeAdapter {
    settings: NativeSettings,
}

impl NativeAdapter {
    pub fn new(settings: NativeSettings) -> Self {
        Self { settings }
    }
}

impl Adapter for NativeAdapter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn new_state(&self, workdir: &str, rollout: &str) -> serde_json::Value {
        let dir = resolve(workdir, &format!(".rollpoint/worker/{rollout}"));
        serde_json::json!({
            "input": resolve(workdir, &self.settings.input),
            "result": format!("{dir}/result.json"),
            "checkpoint": format!("{dir}/checkpoint"),
            "dir": dir,
        })
    }

    fn prepare<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), AdapterError>> {
        async move {
            let dir = state_str(NAME, state, "dir")?;
            let argv = vec!["mkdir".into(), "-p".into(), dir.into()];
            let out = run(cx, argv, BTreeMap::new(), &format!("create {dir}")).await?;
            if out.exit_code != Some(0) {
                return Err(AdapterError::new(
                    NAME,
                    format!("create {dir}: {}", out.stderr.trim()),
                ));
            }
            Ok(())
        }
        .boxed()
    }

    fn missing<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Option<String>, AdapterError>> {
        async move {
            let input = state_str(NAME, state, "input")?;
            let argv = vec![
                "/bin/sh".into(),
                "-c".into(),
                MISSING_SCRIPT.into(),
                "native".into(),
                input.into(),
                self.settings.worker.clone(),
            ];
            // The launch's own environment, so PATH is the one it runs with.
            let env = self.settings.env.clone();
            let out = run(cx, argv, env, &format!("check {input}")).await?;
            match out.exit_code {
                Some(0) => Ok(None),
                Some(MISSING_EXIT) => Ok(Some(format!(
                    "adapter {NAME}: {} in the sandbox of session {}",
                    out.stdout.trim(),
                    cx.session
                ))),
                code => Err(AdapterError::new(
                    NAME,
                    format!("check {input}: exit {code:?}: {}", out.stderr.trim()),
                )),
            }
        }
        .boxed()
    }

    fn resume_decision<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Decision, AdapterError>> {
        async move {
            let checkpoint = state_str(NAME, state, "checkpoint")?;
            let bytes = match cx.owner.download(&cx.session, checkpoint, READ_LIMIT).await {
                Ok(b) => b,
                Err(e) => {
                    return Ok(Decision {
                        resume: false,
                        reason: format!("no checkpoint at {checkpoint} ({e}): start fresh"),
                    });
                }
            };
            // The worker's own reader decides, on a private copy.
            let decision = tokio::task::spawn_blocking(move || {
                let mut file = tempfile::NamedTempFile::new()?;
                file.write_all(&bytes)?;
                file.flush()?;
                Ok::<_, std::io::Error>(rollpoint_worker::resume_decision(file.path()))
            })
            .await
            .map_err(|e| AdapterError::new(NAME, format!("resume decision: {e}")))?
            .map_err(|e| AdapterError::new(NAME, format!("copy of {checkpoint}: {e}")))?;
            Ok(Decision {
                resume: decision.resume,
                reason: decision
                    .reason
                    .replace(&std::env::temp_dir().display().to_string(), "<copy>"),
            })
        }
        .boxed()
    }

    fn command(
        &self,
        state: &serde_json::Value,
        resume: bool,
    ) -> Result<LaunchCommand, AdapterError> {
        let input = state_str(NAME, state, "input")?;
        let result = state_str(NAME, state, "result")?;
        let checkpoint = state_str(NAME, state, "checkpoint")?;
        let worker = self.settings.worker.clone();
        let argv = if resume {
            vec![
                worker,
                input.into(),
                result.into(),
                "--checkpoint".into(),
                checkpoint.into(),
            ]
        } else {
            // The worker refuses to run on an unusable checkpoint, and a
            // fresh start must not pick up a stale one either.
            vec![
                "/bin/sh".into(),
                "-c".into(),
                r#"rm -f "$3" "$4" && exec "$1" "$2" "$3" --checkpoint "$4""#.into(),
                "native".into(),
                worker,
                input.into(),
                result.into(),
                checkpoint.into(),
            ]
        };
        Ok(LaunchCommand {
            argv,
            env: self.settings.env.clone(),
        })
    }

    fn collect<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Collected, AdapterError>> {
        async move {
            let path = state_str(NAME, state, "result")?;
            let bytes = cx
                .owner
                .download(&cx.session, path, READ_LIMIT)
                .await
                .map_err(|e| AdapterError::new(NAME, format!("result {path}: {e}")))?;
            let result: rollpoint_worker::result::WorkerResult = serde_json::from_slice(&bytes)
                .map_err(|e| AdapterError::new(NAME, format!("result {path}: {e}")))?;
            let u = result.usage;
            Ok(Collected {
                usage: Some(Usage {
                    model_calls: u64::from(u.model_calls),
                    prompt_tokens: u.prompt_tokens,
                    completion_tokens: u.completion_tokens,
                    total_tokens: u.total_tokens,
                }),
                response: result.response,
                transcript: Vec::new(),
            })
        }
        .boxed()
    }

    fn pauses_at_checkpoints(&self) -> bool {
        self.settings.pauses
    }
}

/// Runs `argv` with `env` in the sandbox (30 s limit, 4 KiB of output); a
/// failure to run it names `what`.
async fn run(
    cx: &Cx,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    what: &str,
) -> Result<rollpoint_proto::anchor::ExecOutput, AdapterError> {
    let req = rollpoint_proto::anchor::ExecRequest {
        argv,
        env,
        cwd: cx.workdir.clone(),
        timeout_ms: 30_000,
        output_limit: 4096,
        stdin: None,
    };
    cx.owner
        .exec(&cx.session, req)
        .await
        .map_err(|e| AdapterError::new(NAME, format!("{what}: {e}")))
}
