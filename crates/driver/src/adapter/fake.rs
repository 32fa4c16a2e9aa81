//! The fake adapter: a shell loop that appends one line per step to a
//! progress file in the sandbox and resumes from the lines already there.
//! It has a real saved session (the file, carried by snapshots), real
//! processes to pause, and a resume decision read from the sandbox, so the
//! driver's park and relaunch paths are exercised without a model.

use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::contract::{Adapter, Cx, Decision, LaunchCommand};
use super::fields::{default_true, state_str};
use crate::errors::AdapterError;

const NAME: &str = "fake";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeSettings {
    /// Steps until the harness is done.
    pub steps: u32,
    /// Time per step.
    pub tick_ms: u64,
    /// Exit code once done.
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default = "default_true")]
    pub pauses: bool,
}

impl FakeSettings {
    pub(crate) fn validate(&self) -> Result<(), (String, String)> {
        if self.steps == 0 {
            return Err(("steps".into(), "must be above 0".into()));
        }
        if self.tick_ms == 0 || self.tick_ms > 60_000 {
            return Err(("tick_ms".into(), "must be 1 to 60000".into()));
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct FakeAdapter {
    settings: FakeSettings,
}

impl FakeAdapter {
    pub fn new(settings: FakeSettings) -> Self {
        Self { settings }
    }
}

/// `$1` is the state directory, `$2` `fresh` or `resume`.
const SCRIPT: &str = r#"d="$1"; mkdir -p "$d" || exit 3
[ "$2" = fresh ] && rm -f "$d/progress"
echo "$ROLLPOINT_LAUNCH $2" >> "$d/launches"
n=0; [ -f "$d/progress" ] && n=$(wc -l < "$d/progress")
while [ "$n" -lt "$3" ]; do n=$((n+1)); echo "step $n $ROLLPOINT_LAUNCH" >> "$d/progress"; sleep "$4"; done
exit "$5""#;

impl Adapter for FakeAdapter {
    fn name(&self) -> &'static str {
        NAME
    }

    fn new_state(&self, workdir: &str, _rollout: &str) -> serde_json::Value {
        serde_json::json!({ "dir": format!("{}/.fake-harness", workdir.trim_end_matches('/')) })
    }

    fn resume_decision<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Decision, AdapterError>> {
        async move {
            let dir = state_str(NAME, state, "dir")?;
            let path = format!("{dir}/progress");
            Ok(match cx.owner.download(&cx.session, &path, 1 << 20).await {
                Ok(bytes) if !bytes.is_empty() => {
                    let done = bytes.iter().filter(|b| **b == b'\n').count();
                    Decision {
                        resume: true,
                        reason: format!(
                            "saved session holds {done} of {} steps",
                            self.settings.steps
                        ),
                    }
                }
                Ok(_) => Decision {
                    resume: false,
                    reason: "saved session is empty: start over".into(),
                },
                Err(e) => Decision {
                    resume: false,
                    reason: format!("no saved session ({e}): start over"),
                },
            })
        }
        .boxed()
    }

    fn command(
        &self,
        state: &serde_json::Value,
        resume: bool,
    ) -> Result<LaunchCommand, AdapterError> {
        let dir = state_str(NAME, state, "dir")?;
        let tick = format!(
            "{:.3}",
            Duration::from_millis(self.settings.tick_ms).as_secs_f64()
        );
        Ok(LaunchCommand {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                SCRIPT.into(),
                "fake-harness".into(),
                dir.into(),
                if resume { "resume" } else { "fresh" }.into(),
                self.settings.steps.to_string(),
                tick,
                self.settings.exit_code.to_string(),
            ],
            env: Default::default(),
        })
    }

    fn pauses_at_checkpoints(&self) -> bool {
        self.settings.pauses
    }
}
