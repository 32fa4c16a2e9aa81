//! What the real coding-agent harness adapters (OpenCode, Codex CLI, Claude
//! Code, Pi) share: their task settings, where each rollout's harness state
//! lives in the sandbox, the launch script, and small sandbox file helpers.
//!
//! The launch is a bash script rather than the bare harness argv because
//! three things are only known inside the sandbox at launch time: the
//! gateway route of this attempt (`$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY`
//! changes with every attempt), whether the data directory of a fresh start
//! must be moved aside, and the harness's config files, which carry that
//! route. The script does those, then `exec`s the harness, so the harness
//! is the launch's process and nothing stays in between.

use std::collections::BTreeMap;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use rollpoint_proto::anchor::{ExecOutput, ExecRequest};
use serde::{Deserialize, Serialize};

use super::contract::{Adapter, Cx, Decision, LaunchCommand};
use super::fields::{default_true, state_str};
use crate::errors::AdapterError;
use crate::launchlog::RecoveryTier;
use crate::result::{Collected, TranscriptEntry, Usage};

/// Where the pinned harnesses are installed (host and sandbox see the same
/// path: the sandbox's base is the host root unless the task says
/// otherwise).
pub const HARNESS_DIR_VAR: &str = "ROLLPOINT_HARNESS_DIR";
/// The default of [`HARNESS_DIR_VAR`].
pub const DEFAULT_HARNESS_DIR: &str = "/opt/rollpoint/harnesses";
/// The command that installs the pinned harnesses.
pub const INSTALL_COMMAND: &str = "scripts/install-harnesses";
/// Where each rollout's harness state lives in the sandbox:
/// `<STATE_ROOT>/<harness>/<rollout>`. Outside the workdir, so the harness's
/// own file tools never see it; inside the sandbox, so snapshots carry it;
/// under the sandbox's state directory, which is the sandbox user's.
pub const STATE_ROOT: &str = "/var/lib/rollpoint/harness";
/// The variable the launch script sets to this attempt's gateway route
/// (`<gateway>/<capture key>`, without `/v1`).
pub const MODEL_BASE_VAR: &str = "ROLLPOINT_MODEL_BASE";
/// Largest harness file read back from the sandbox.
pub const READ_LIMIT: u64 = 256 << 20;

fn default_model() -> String {
    "rollpoint-scripted".to_owned()
}

/// A harness task's adapter settings (the same fields for every harness).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessSettings {
    /// The task: the harness's one user message.
    pub prompt: String,
    /// The harness binary in the sandbox; by default the pinned install's
    /// (`$ROLLPOINT_HARNESS_DIR/node_modules/.bin/<binary>`).
    #[serde(default)]
    pub bin: Option<String>,
    /// The model name the harness asks the gateway for.
    #[serde(default = "default_model")]
    pub model: String,
    /// Added to the harness's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Paused in place at checkpoints (else stopped and relaunched).
    #[serde(default = "default_true")]
    pub pauses: bool,
}

impl HarnessSettings {
    /// Checks the settings; the error names the field.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.prompt.trim().is_empty() {
            return Err(("prompt".into(), "is empty".into()));
        }
        if self.model.is_empty() {
            return Err(("model".into(), "is empty".into()));
        }
        if let Some(bin) = &self.bin
            && !bin.starts_with('/')
        {
            return Err(("bin".into(), format!("`{bin}` is not an absolute path")));
        }
        Ok(())
    }

    /// The harness binary: the task's, or the pinned install's.
    pub fn binary(&self, name: &str) -> String {
        self.bin.clone().unwrap_or_else(|| {
            let dir = std::env::var(HARNESS_DIR_VAR)
                .ok()
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| DEFAULT_HARNESS_DIR.to_owned());
            format!("{}/node_modules/.bin/{name}", dir.trim_end_matches('/'))
        })
    }
}

/// The state directory of one rollout's harness.
pub fn state_dir(harness: &str, rollout: &str) -> String {
    format!("{STATE_ROOT}/{harness}/{rollout}")
}

/// One file the launch script writes before the harness starts. Every
/// `@MODEL_BASE@` in `contents` becomes this attempt's gateway route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchFile {
    pub path: String,
    pub contents: String,
}

/// The placeholder [`LaunchFile`] contents use for the gateway route.
pub const MODEL_BASE_PLACEHOLDER: &str = "@MODEL_BASE@";

/// A harness launch, built into the script described in the module docs.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// The harness's state directory.
    pub dir: String,
    /// Start over: move any earlier state in `dir` aside first.
    pub fresh: bool,
    /// Written (mode 0600) after the move, before the harness starts.
    pub files: Vec<LaunchFile>,
    /// The harness argv; `$ROLLPOINT_MODEL_BASE` is not expanded in it, so
    /// pass the route through `env` or a file.
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// The launch script. Its arguments are: the state directory, `fresh`
/// (1 or 0), the number of files N, then N path/contents pairs, then the
/// harness argv.
const LAUNCH_SCRIPT: &str = r#"set -euo pipefail
dir=$1 fresh=$2 n=$3; shift 3
if [ -z "${ROLLPOINT_GATEWAY:-}" ] || [ -z "${ROLLPOINT_CAPTURE_KEY:-}" ]; then
  echo "rollpoint: ROLLPOINT_GATEWAY and ROLLPOINT_CAPTURE_KEY must be set for a harness launch" >&2
  exit 97
fi
export ROLLPOINT_MODEL_BASE="${ROLLPOINT_GATEWAY%/}/$ROLLPOINT_CAPTURE_KEY"
if [ "$fresh" = 1 ] && [ -e "$dir" ]; then
  mv -- "$dir" "$dir.stale-$(date +%s%N)"
fi
mkdir -p -- "$dir"
chmod 0700 -- "$dir"
umask 077
while [ "$n" -gt 0 ]; do
  mkdir -p -- "$(dirname -- "$1")"
  printf '%s' "${2//@MODEL_BASE@/$ROLLPOINT_MODEL_BASE}" > "$1"
  shift 2; n=$((n - 1))
done
exec "$@"
"#;

impl Launch {
    /// HOME at `home` and the XDG directories in their usual places under
    /// it, unless the task's environment sets them.
    pub fn set_home(&mut self, home: &str) {
        for (k, v) in [
            ("HOME", home.to_owned()),
            ("XDG_CONFIG_HOME", format!("{home}/.config")),
            ("XDG_DATA_HOME", format!("{home}/.local/share")),
            ("XDG_CACHE_HOME", format!("{home}/.cache")),
            ("XDG_STATE_HOME", format!("{home}/.local/state")),
        ] {
            self.env.entry(k.to_owned()).or_insert(v);
        }
    }

    pub fn into_command(self) -> LaunchCommand {
        let mut argv = vec![
            "/bin/bash".to_owned(),
            "-c".to_owned(),
            LAUNCH_SCRIPT.to_owned(),
            "rollpoint-launch".to_owned(),
            self.dir,
            if self.fresh { "1" } else { "0" }.to_owned(),
            self.files.len().to_string(),
        ];
        for f in self.files {
            argv.push(f.path);
            argv.push(f.contents);
        }
        argv.extend(self.argv);
        LaunchCommand {
            argv,
            env: self.env,
        }
    }
}

/// What a harness's saved session holds, as far as resuming goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedSession {
    /// The harness's session id (for the launch log).
    pub id: String,
    /// The first user message is the task's prompt.
    pub starts_with_task: bool,
    /// Model responses the session recorded as complete.
    pub completed_responses: usize,
}

/// One real harness: what differs between OpenCode, Codex CLI, Claude Code
/// and Pi. [`HarnessAdapter`] turns it into an [`Adapter`], so the resume
/// rule and the launch script are the same for all of them. The four impls
/// look alike (the same signatures, `inspect` reading then parsing), but
/// what each reads and how it parses is the harness's own session format:
/// only the shape repeats, so it stays per adapter.
pub trait Harness: Send + Sync + std::fmt::Debug + 'static {
    /// The adapter's name (the task's `adapter.kind`).
    fn name(&self) -> &'static str;

    /// The binary's name under `node_modules/.bin` of the pinned install.
    fn binary(&self) -> &'static str;

    /// How faithfully a relaunch continues a saved session.
    fn tier(&self) -> RecoveryTier;

    /// Reads the session saved under the state directory `dir`; `None`
    /// when there is none.
    fn inspect<'a>(
        &'a self,
        cx: &'a Cx,
        settings: &'a HarnessSettings,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<Option<SavedSession>, AdapterError>>;

    /// The launch of a fresh start (`resume` false) or a continuation.
    /// The state directory, `fresh`, and the binary are filled in already.
    fn launch(&self, settings: &HarnessSettings, launch: Launch, resume: bool) -> Launch;

    /// Makes a saved session ready to be continued, once the decision is to
    /// resume: a harness whose own repair would drop a tool call the crash
    /// interrupted writes that call's result here, in its session's own
    /// format, so the model is told the call was interrupted. Returns what
    /// it did, for the launch log. Default: nothing.
    fn before_resume<'a>(
        &'a self,
        _cx: &'a Cx,
        _dir: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, AdapterError>> {
        async { Ok(None) }.boxed()
    }

    /// Usage, the final answer and the transcript, read once the harness
    /// is done.
    fn collect<'a>(
        &'a self,
        cx: &'a Cx,
        settings: &'a HarnessSettings,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<Collected, AdapterError>>;
}

/// The resume rule every harness follows: continue only a session that
/// starts with the task and holds a completed model response.
pub fn decide(harness: &str, dir: &str, saved: Option<&SavedSession>) -> Decision {
    let (resume, reason) = match saved {
        None => (
            false,
            format!("no saved {harness} session in {dir}: start over"),
        ),
        Some(s) if !s.starts_with_task => (
            false,
            format!(
                "saved session {} does not start with the task: start over in a fresh data directory",
                s.id
            ),
        ),
        Some(s) if s.completed_responses == 0 => (
            false,
            format!(
                "saved session {} holds no completed model response: start over in a fresh data directory",
                s.id
            ),
        ),
        Some(s) => (
            true,
            format!(
                "continue saved session {} ({} completed model responses)",
                s.id, s.completed_responses
            ),
        ),
    };
    Decision { resume, reason }
}

/// A [`Harness`] as a driver adapter.
#[derive(Debug)]
pub struct HarnessAdapter<H> {
    harness: H,
    settings: HarnessSettings,
}

impl<H: Harness> HarnessAdapter<H> {
    pub fn new(harness: H, settings: HarnessSettings) -> Self {
        Self { harness, settings }
    }
}

impl<H: Harness> Adapter for HarnessAdapter<H> {
    fn name(&self) -> &'static str {
        self.harness.name()
    }

    fn new_state(&self, workdir: &str, rollout: &str) -> serde_json::Value {
        serde_json::json!({
            "dir": state_dir(self.harness.name(), rollout),
            "workdir": workdir,
        })
    }

    fn prepare<'a>(
        &'a self,
        cx: &'a Cx,
        _state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<(), AdapterError>> {
        async move {
            let binary = self.settings.binary(self.harness.binary());
            ensure_installed(self.harness.name(), cx, &binary).await
        }
        .boxed()
    }

    fn resume_decision<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Decision, AdapterError>> {
        async move {
            let dir = state_str(self.harness.name(), state, "dir")?;
            let saved = self.harness.inspect(cx, &self.settings, dir).await?;
            let mut decision = decide(self.harness.name(), dir, saved.as_ref());
            if decision.resume
                && let Some(done) = self.harness.before_resume(cx, dir).await?
            {
                decision.reason = format!("{}; {done}", decision.reason);
            }
            Ok(decision)
        }
        .boxed()
    }

    fn command(
        &self,
        state: &serde_json::Value,
        resume: bool,
    ) -> Result<LaunchCommand, AdapterError> {
        let dir = state_str(self.harness.name(), state, "dir")?;
        let mut env = self.settings.env.clone();
        env.entry("ROLLPOINT_HARNESS_STATE".to_owned())
            .or_insert_with(|| dir.to_owned());
        let base = Launch {
            dir: dir.to_owned(),
            fresh: !resume,
            files: Vec::new(),
            argv: vec![self.settings.binary(self.harness.binary())],
            env,
        };
        Ok(self
            .harness
            .launch(&self.settings, base, resume)
            .into_command())
    }

    fn collect<'a>(
        &'a self,
        cx: &'a Cx,
        state: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Collected, AdapterError>> {
        async move {
            let dir = state_str(self.harness.name(), state, "dir")?;
            self.harness.collect(cx, &self.settings, dir).await
        }
        .boxed()
    }

    fn pauses_at_checkpoints(&self) -> bool {
        self.settings.pauses
    }

    fn recovery_tier(&self) -> Option<RecoveryTier> {
        Some(self.harness.tier())
    }
}

/// Runs `argv` in the sandbox (30 s limit, 1 MiB of output).
pub async fn exec(
    adapter: &'static str,
    cx: &Cx,
    argv: Vec<String>,
) -> Result<ExecOutput, AdapterError> {
    let what = argv.join(" ");
    let req = ExecRequest {
        argv,
        env: BTreeMap::new(),
        cwd: cx.workdir.clone(),
        timeout_ms: 30_000,
        output_limit: 1 << 20,
        stdin: None,
    };
    cx.owner
        .exec(&cx.session, req)
        .await
        .map_err(|e| AdapterError::new(adapter, format!("`{what}` in {}: {e}", cx.session)))
}

/// Fails, naming the install command, when the harness binary is missing
/// from the sandbox.
pub async fn ensure_installed(
    adapter: &'static str,
    cx: &Cx,
    binary: &str,
) -> Result<(), AdapterError> {
    let out = exec(
        adapter,
        cx,
        vec!["test".into(), "-x".into(), binary.to_owned()],
    )
    .await?;
    if out.exit_code == Some(0) {
        return Ok(());
    }
    Err(AdapterError::new(
        adapter,
        format!(
            "harness binary {binary} is missing in sandbox {}: install the pinned harnesses with \
             `{INSTALL_COMMAND}` (or set {HARNESS_DIR_VAR}, or the task's `bin`)",
            cx.session
        ),
    ))
}

/// The most recently modified file named `pattern` under `root` (at exactly
/// `depth` levels below it, or any depth), with its text; `None` when there
/// is none or no `root`. A state directory holds one rollout's sessions, so
/// the newest session file is the one the harness is writing.
pub async fn newest_file(
    adapter: &'static str,
    cx: &Cx,
    root: &str,
    pattern: &str,
    depth: Option<u32>,
) -> Result<Option<(String, String)>, AdapterError> {
    let depth = depth.map_or_else(String::new, |d| format!("-mindepth {d} -maxdepth {d}"));
    let out = exec(
        adapter,
        cx,
        vec![
            "/bin/sh".into(),
            "-c".into(),
            format!(
                r#"test -d "$1" || exit 0; find "$1" {depth} -type f -name "$2" -printf '%T@ %p\n'"#
            ),
            "newest".into(),
            root.to_owned(),
            pattern.to_owned(),
        ],
    )
    .await?;
    if out.exit_code != Some(0) {
        return Err(AdapterError::new(
            adapter,
            format!("list {root}: {}", out.stderr.trim()),
        ));
    }
    let newest = out
        .stdout
        .lines()
        .filter_map(|l| {
            let (t, p) = l.split_once(' ')?;
            Some((t.parse::<f64>().ok()?, p))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    let Some((_, path)) = newest else {
        return Ok(None);
    };
    // `find` just listed it: no second existence check.
    let text = download_text(adapter, cx, path).await?;
    Ok(Some((path.to_owned(), text)))
}

/// A file of the sandbox as text, or `None` when it does not exist.
pub async fn read_text(
    adapter: &'static str,
    cx: &Cx,
    path: &str,
) -> Result<Option<String>, AdapterError> {
    let out = exec(
        adapter,
        cx,
        vec!["test".into(), "-e".into(), path.to_owned()],
    )
    .await?;
    if out.exit_code != Some(0) {
        return Ok(None);
    }
    download_text(adapter, cx, path).await.map(Some)
}

/// A file of the sandbox known to exist, as text.
async fn download_text(adapter: &'static str, cx: &Cx, path: &str) -> Result<String, AdapterError> {
    let bytes = cx
        .owner
        .download(&cx.session, path, READ_LIMIT)
        .await
        .map_err(|e| AdapterError::new(adapter, format!("read {path}: {e}")))?;
    String::from_utf8(bytes).map_err(|_| AdapterError::new(adapter, format!("{path} is not UTF-8")))
}

/// What a harness's messages add up to: each model call counted with its
/// tokens, the last answer that said something, and the transcript.
#[derive(Debug, Default)]
pub(super) struct Tally {
    usage: Usage,
    response: Option<String>,
    transcript: Vec<TranscriptEntry>,
}

impl Tally {
    /// One model call that read `input` tokens, wrote `output` and answered `text`.
    pub(super) fn call(&mut self, input: u64, output: u64, text: &str) {
        self.usage.model_calls += 1;
        self.usage.prompt_tokens += input;
        self.usage.completion_tokens += output;
        if !text.is_empty() {
            self.response = Some(text.to_owned());
        }
    }

    /// One message of the transcript.
    pub(super) fn push(&mut self, role: &str, text: String, tool_calls: Vec<String>) {
        self.transcript
            .push(TranscriptEntry::new(role, text, tool_calls));
    }

    pub(super) fn collected(mut self) -> Collected {
        self.usage.total_tokens = self.usage.prompt_tokens + self.usage.completion_tokens;
        Collected {
            usage: Some(self.usage),
            response: self.response,
            transcript: self.transcript,
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn harness_state_is_under_the_sandbox_users_state_directory() {
        assert!(STATE_ROOT.starts_with(&format!("{}/", rollpoint_sandbox::SANDBOX_STATE_DIR)));
    }

    fn run(cmd: &LaunchCommand, env: &[(&str, &str)]) -> std::process::Output {
        std::process::Command::new(&cmd.argv[0])
            .args(&cmd.argv[1..])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    #[test]
    fn the_script_writes_files_with_the_route_and_moves_a_stale_dir_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state").display().to_string();
        std::fs::create_dir_all(format!("{dir}/old")).unwrap();
        let launch = Launch {
            dir: dir.clone(),
            fresh: true,
            files: vec![LaunchFile {
                path: format!("{dir}/conf/c.json"),
                contents: "{\"url\": \"@MODEL_BASE@/v1\"}\n$HOME `x`".into(),
            }],
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo \"$ROLLPOINT_MODEL_BASE\"".into(),
            ],
            env: BTreeMap::new(),
        };
        let out = run(
            &launch.into_command(),
            &[
                ("ROLLPOINT_GATEWAY", "http://127.0.0.1:9/r/"),
                ("ROLLPOINT_CAPTURE_KEY", "t-1-a2"),
            ],
        );
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "http://127.0.0.1:9/r/t-1-a2\n"
        );
        let conf = std::fs::read_to_string(format!("{dir}/conf/c.json")).unwrap();
        assert_eq!(
            conf,
            "{\"url\": \"http://127.0.0.1:9/r/t-1-a2/v1\"}\n$HOME `x`"
        );
        assert!(!std::path::Path::new(&format!("{dir}/old")).exists());
        let stale: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("state.stale-"))
            .collect();
        assert_eq!(stale.len(), 1, "{stale:?}");
    }

    #[test]
    fn a_resume_keeps_the_state_and_a_missing_route_refuses_to_launch() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state").display().to_string();
        std::fs::create_dir_all(format!("{dir}/session")).unwrap();
        let launch = Launch {
            dir: dir.clone(),
            fresh: false,
            argv: vec!["/bin/true".into()],
            ..Launch::default()
        };
        let cmd = launch.into_command();
        let out = run(&cmd, &[]);
        assert_eq!(out.status.code(), Some(97), "{out:?}");
        let out = run(
            &cmd,
            &[
                ("ROLLPOINT_GATEWAY", "http://127.0.0.1:9/r"),
                ("ROLLPOINT_CAPTURE_KEY", "t"),
            ],
        );
        assert!(out.status.success(), "{out:?}");
        assert!(std::path::Path::new(&format!("{dir}/session")).exists());
    }

    #[test]
    fn only_a_session_that_starts_with_the_task_and_holds_a_response_continues() {
        let d = decide("pi", "/s", None);
        assert!(!d.resume);
        assert!(
            d.reason.contains("no saved pi session in /s"),
            "{}",
            d.reason
        );
        let mut s = SavedSession {
            id: "abc".into(),
            starts_with_task: false,
            completed_responses: 3,
        };
        let d = decide("pi", "/s", Some(&s));
        assert!(!d.resume && d.reason.contains("does not start with the task"));
        s.starts_with_task = true;
        s.completed_responses = 0;
        let d = decide("pi", "/s", Some(&s));
        assert!(!d.resume && d.reason.contains("no completed model response"));
        s.completed_responses = 2;
        let d = decide("pi", "/s", Some(&s));
        assert!(d.resume && d.reason.contains("continue saved session abc"));
    }

    #[test]
    fn settings_name_the_bad_field() {
        let mut s: HarnessSettings = serde_json::from_str(r#"{"prompt": "do it"}"#).unwrap();
        assert_eq!(s.model, "rollpoint-scripted");
        assert!(s.pauses);
        s.bin = Some("opencode".into());
        assert_eq!(s.validate().unwrap_err().0, "bin");
        s.bin = None;
        s.prompt = " ".into();
        assert_eq!(s.validate().unwrap_err().0, "prompt");
    }
}
