//! Pi (`@mariozechner/pi-coding-agent`, pinned in harnesses/package.json)
//! as a harness.
//!
//! Its state lives under the rollout's state directory through `HOME` and
//! `PI_CODING_AGENT_DIR`: the session is one JSONL file under
//! `agent/sessions/<cwd slug>/`, written once the first model response is
//! in. The provider is OpenAI-compatible chat completions at the gateway
//! route, in `agent/models.json`, written at every launch, since the route
//! changes with each attempt.
//!
//! The pinned CLI continues a session only with a new prompt, so a relaunch
//! runs a small Node script instead that opens the same session through
//! Pi's own SDK (the same services and tools the CLI builds) and calls its
//! agent's `continue()`, which goes on from the saved conversation with no
//! message added. A tool call the crash interrupted first gets the result
//! Pi's provider layer gives every unanswered call ("No result provided",
//! an error), saved to the session as Pi would save a tool result. The tier
//! is exact. See docs/design/harness-pi.md.

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;

use super::contract::Cx;
use super::harness::{
    Harness, HarnessSettings, Launch, LaunchFile, MODEL_BASE_PLACEHOLDER, SavedSession, Tally,
    newest_file,
};
use crate::errors::AdapterError;
use crate::launchlog::RecoveryTier;
use crate::result::Collected;

const NAME: &str = "pi";
/// The provider id `models.json` declares.
const PROVIDER: &str = "rollpoint";
/// The text of the result a relaunch records for an interrupted tool call:
/// the one Pi's own provider layer sends for an unanswered call.
pub const INTERRUPTED_RESULT: &str = "No result provided";

/// The fresh launch: the prompt goes in on stdin, so a prompt that starts
/// with `@` or `-` is not taken for a file or an option.
const FRESH_SCRIPT: &str = r#"bin=$1 model=$2 prompt=$3
exec "$bin" --offline --provider rollpoint --model "$model" -p < <(printf '%s' "$prompt")"#;

/// The relaunch: Node runs [`CONTINUE_JS`] with the pinned CLI's path.
const RESUME_SCRIPT: &str = r#"exec node "$2/continue.mjs" "$1""#;

/// Continues the most recent session of the working directory (module
/// docs). Written into the state directory at every relaunch.
const CONTINUE_JS: &str = r#"// Continues the most recent Pi session of the working directory with no
// new user message, through the pinned Pi's own SDK (written by rollpoint).
import { realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

const cli = process.argv[2];
const pi = await import(pathToFileURL(join(dirname(realpathSync(cli)), "index.js")).href);
const cwd = process.cwd();
const sessionManager = pi.SessionManager.continueRecent(cwd);
if (sessionManager.buildSessionContext().messages.length === 0) {
  console.error(`rollpoint: no saved pi session for ${cwd}`);
  process.exit(98);
}
const services = await pi.createAgentSessionServices({ cwd, authStorage: pi.AuthStorage.create() });
const { session } = await pi.createAgentSessionFromServices({ services, sessionManager });
const messages = session.agent.state.messages;
let last = messages[messages.length - 1];
if (last?.role === "assistant" && (last.stopReason === "error" || last.stopReason === "aborted")) {
  // A failed model turn is left out of the context, as Pi's own retry does.
  messages.pop();
  last = messages[messages.length - 1];
}
if (last?.role === "assistant") {
  const calls = last.content.filter((b) => b.type === "toolCall");
  if (calls.length === 0) {
    process.exit(0);
  }
  for (const call of calls) {
    const result = {
      role: "toolResult",
      toolCallId: call.id,
      toolName: call.name,
      content: [{ type: "text", text: "No result provided" }],
      isError: true,
      timestamp: Date.now(),
    };
    sessionManager.appendMessage(result);
    messages.push(result);
  }
}
await session.agent.continue();
await session.agent.waitForIdle();
const end = session.agent.state.messages.at(-1);
for (const b of end?.content ?? []) {
  if (b.type === "text") process.stdout.write(`${b.text}\n`);
}
session.dispose();
process.exit(end?.stopReason === "error" || end?.stopReason === "aborted" ? 1 : 0);
"#;

#[derive(Debug, Clone, Copy, Default)]
pub struct Pi;

/// The saved session file's entries. Pure.
#[derive(Debug, Default)]
struct Session {
    id: String,
    /// The `message` entries' messages, in order.
    messages: Vec<serde_json::Value>,
}

impl Session {
    fn parse(path: &str, text: &str) -> Result<Self, String> {
        let mut s = Session::default();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry: serde_json::Value = match serde_json::from_str(line) {
                Ok(e) => e,
                // A crash can tear the last line; Pi drops it too.
                Err(_) if n + 1 == text.lines().count() => break,
                Err(e) => return Err(format!("{path} line {}: {e}", n + 1)),
            };
            match entry["type"].as_str() {
                Some("session") => {
                    s.id = entry["id"].as_str().unwrap_or_default().to_owned();
                }
                Some("message") => s.messages.push(entry["message"].clone()),
                _ => {}
            }
        }
        Ok(s)
    }

    fn text(m: &serde_json::Value) -> String {
        match &m["content"] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(blocks) => blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    fn completed(m: &serde_json::Value) -> bool {
        m["role"] == "assistant" && !matches!(m["stopReason"].as_str(), Some("error" | "aborted"))
    }

    fn saved(&self, prompt: &str) -> SavedSession {
        let first_user = self.messages.iter().find(|m| m["role"] == "user");
        SavedSession {
            id: self.id.clone(),
            // Pi trims the prompt it reads from stdin.
            starts_with_task: first_user.is_some_and(|m| Self::text(m) == prompt.trim()),
            completed_responses: self.messages.iter().filter(|m| Self::completed(m)).count(),
        }
    }

    fn collected(&self) -> Collected {
        let mut tally = Tally::default();
        for m in &self.messages {
            let text = Self::text(m);
            let role = match m["role"].as_str() {
                Some("toolResult") => "tool",
                Some(r) => r,
                None => continue,
            };
            let mut tool_calls = Vec::new();
            if role == "assistant" {
                let u = &m["usage"];
                let tokens = |k: &str| u[k].as_u64().unwrap_or(0);
                tally.call(tokens("input"), tokens("output"), &text);
                if let Some(blocks) = m["content"].as_array() {
                    tool_calls = blocks
                        .iter()
                        .filter(|b| b["type"] == "toolCall")
                        .map(|b| match b["arguments"]["command"].as_str() {
                            Some(c) => c.to_owned(),
                            None => format!(
                                "{} {}",
                                b["name"].as_str().unwrap_or("tool"),
                                b["arguments"]
                            ),
                        })
                        .collect();
                }
            }
            tally.push(role, text, tool_calls);
        }
        tally.collected()
    }
}

/// `models.json`: the gateway route as the only provider.
fn models(model: &str) -> String {
    let doc = serde_json::json!({
        "providers": {
            PROVIDER: {
                "baseUrl": format!("{MODEL_BASE_PLACEHOLDER}/v1"),
                "api": "openai-completions",
                "apiKey": "rollpoint",
                "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
                "models": [{"id": model, "name": model, "reasoning": false, "input": ["text"],
                    "contextWindow": 128_000, "maxTokens": 4096}]
            }
        }
    });
    format!("{doc:#}\n")
}

/// The newest session file under the state directory, read; `None` when
/// Pi saved none (it writes the file once a model response is in).
async fn load(cx: &Cx, dir: &str) -> Result<Option<Session>, AdapterError> {
    let sessions = format!("{dir}/agent/sessions");
    let Some((path, text)) = newest_file(NAME, cx, &sessions, "*.jsonl", None).await? else {
        return Ok(None);
    };
    Session::parse(&path, &text)
        .map(Some)
        .map_err(|e| AdapterError::new(NAME, e))
}

impl Harness for Pi {
    fn name(&self) -> &'static str {
        NAME
    }

    fn binary(&self) -> &'static str {
        "pi"
    }

    fn tier(&self) -> RecoveryTier {
        RecoveryTier::Exact
    }

    fn inspect<'a>(
        &'a self,
        cx: &'a Cx,
        settings: &'a HarnessSettings,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<Option<SavedSession>, AdapterError>> {
        async move {
            Ok(load(cx, dir)
                .await?
                .filter(|s| !s.messages.is_empty())
                .map(|s| s.saved(&settings.prompt)))
        }
        .boxed()
    }

    fn launch(&self, settings: &HarnessSettings, mut launch: Launch, resume: bool) -> Launch {
        let dir = launch.dir.clone();
        for (k, v) in [
            ("HOME", format!("{dir}/home")),
            ("PI_CODING_AGENT_DIR", format!("{dir}/agent")),
            ("PI_OFFLINE", "1".into()),
            ("PI_SKIP_VERSION_CHECK", "1".into()),
            ("PI_TELEMETRY", "0".into()),
        ] {
            launch.env.insert(k.into(), v);
        }
        launch.files.push(LaunchFile {
            path: format!("{dir}/agent/models.json"),
            contents: models(&settings.model),
        });
        let bin = launch.argv.remove(0);
        launch.argv = if resume {
            launch.files.push(LaunchFile {
                path: format!("{dir}/continue.mjs"),
                contents: CONTINUE_JS.into(),
            });
            vec![
                "/bin/bash".into(),
                "-c".into(),
                RESUME_SCRIPT.into(),
                "pi-launch".into(),
                bin,
                dir,
            ]
        } else {
            vec![
                "/bin/bash".into(),
                "-c".into(),
                FRESH_SCRIPT.into(),
                "pi-launch".into(),
                bin,
                settings.model.clone(),
                settings.prompt.clone(),
            ]
        };
        launch
    }

    fn collect<'a>(
        &'a self,
        cx: &'a Cx,
        _settings: &'a HarnessSettings,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<Collected, AdapterError>> {
        async move {
            Ok(load(cx, dir)
                .await?
                .map(|s| s.collected())
                .unwrap_or_default())
        }
        .boxed()
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn file() -> String {
        [
            r#"{"type":"session","version":3,"id":"0193","cwd":"/w"}"#,
            r#"{"type":"model_change","id":"a","provider":"rollpoint","modelId":"m"}"#,
            r#"{"type":"message","id":"b","message":{"role":"user","content":[{"type":"text","text":"do it"}]}}"#,
            r#"{"type":"message","id":"c","message":{"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"bash","arguments":{"command":"echo 1"}}],"usage":{"input":50,"output":5},"stopReason":"toolUse"}}"#,
            r#"{"type":"message","id":"d","message":{"role":"toolResult","toolCallId":"t1","content":[{"type":"text","text":"No result provided"}],"isError":true}}"#,
            r#"{"type":"message","id":"e","message":{"role":"assistant","content":[{"type":"text","text":"done"}],"usage":{"input":60,"output":1},"stopReason":"stop"}}"#,
            r#"{"type":"message","id":"f","message":{"role":"assis"#,
        ]
        .join("\n")
    }

    #[test]
    fn a_saved_session_counts_completed_responses_and_drops_a_torn_last_line() {
        let s = Session::parse("/x.jsonl", &file()).unwrap();
        let saved = s.saved("  do it\n");
        assert_eq!(saved.id, "0193");
        assert!(saved.starts_with_task);
        assert_eq!(saved.completed_responses, 2);
        assert!(!s.saved("other").starts_with_task);
        let err = Session::parse("/x.jsonl", "{\n{}\n").unwrap_err();
        assert!(err.starts_with("/x.jsonl line 1"), "{err}");
    }

    #[test]
    fn the_transcript_holds_turns_tool_calls_and_results() {
        let c = Session::parse("/x.jsonl", &file()).unwrap().collected();
        let roles: Vec<&str> = c.transcript.iter().map(|e| e.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
        assert_eq!(c.transcript[1].tool_calls, ["echo 1"]);
        assert_eq!(c.transcript[2].text, INTERRUPTED_RESULT);
        assert_eq!(c.response.as_deref(), Some("done"));
        let u = c.usage.unwrap();
        assert_eq!(
            (u.model_calls, u.prompt_tokens, u.total_tokens),
            (2, 110, 116)
        );
    }

    #[test]
    fn the_launch_keeps_state_in_the_dir_and_a_relaunch_writes_the_script() {
        let settings: HarnessSettings = serde_json::from_str(r#"{"prompt": "@a -b"}"#).unwrap();
        let launch = Launch {
            dir: "/s".into(),
            argv: vec!["/bin/pi".into()],
            ..Launch::default()
        };
        let l = Pi.launch(&settings, launch.clone(), false);
        assert_eq!(l.env["PI_CODING_AGENT_DIR"], "/s/agent");
        assert_eq!(l.argv[4..], ["/bin/pi", "rollpoint-scripted", "@a -b"]);
        let m: serde_json::Value = serde_json::from_str(&l.files[0].contents).unwrap();
        assert_eq!(m["providers"]["rollpoint"]["baseUrl"], "@MODEL_BASE@/v1");
        let r = Pi.launch(&settings, launch, true);
        assert_eq!(r.files[1].path, "/s/continue.mjs");
        assert!(r.files[1].contents.contains(INTERRUPTED_RESULT));
        assert_eq!(r.argv[4..], ["/bin/pi", "/s"]);
    }

    #[test]
    fn a_pi_task_decodes_and_a_bad_setting_is_named() {
        let task = |adapter: &str| {
            format!(
                r#"{{"v": 1, "task": {{"id": "t1", "verify": {{"command": ["true"]}}}}, "adapter": {adapter}}}"#
            )
        };
        let ok = crate::RolloutTask::decode(task(r#"{"kind": "pi", "prompt": "go"}"#).as_bytes())
            .unwrap();
        assert!(matches!(ok.adapter, crate::AdapterSpec::Pi(ref s) if s.prompt == "go"));
        for (adapter, field) in [
            (r#"{"kind": "pi", "prompt": " "}"#, "task.adapter.prompt"),
            (
                r#"{"kind": "opencode", "prompt": "go", "bin": "pi"}"#,
                "task.adapter.bin",
            ),
        ] {
            match crate::RolloutTask::decode(task(adapter).as_bytes()) {
                Err(crate::DriverError::Task { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{adapter}: {other:?}"),
            }
        }
    }
}
