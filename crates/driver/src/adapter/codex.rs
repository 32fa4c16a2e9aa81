//! The Codex CLI adapter (`@openai/codex` 0.171.0).
//!
//! Codex speaks the Responses API only, so its provider points at the
//! gateway route's `/v1/responses`. Its whole home (`CODEX_HOME`, `HOME`,
//! the XDG directories) lives in the rollout's state directory, so a
//! snapshot carries the session. A fresh start is `codex exec PROMPT`.
//!
//! `codex exec resume` will not go on without a new user message, but
//! Codex's app server will: `thread/resume`, then `turn/start` with no input
//! runs the saved thread's next model turn and adds nothing to it. A
//! continuation is therefore [`CONTINUE_SCRIPT`], a small JSON-RPC client in
//! bash (the sandbox has bash, and nothing else of rollpoint's is on its
//! path) that drives `codex app-server` over stdio for that one turn; the
//! tier is `exact`. The session is the rollout JSONL under
//! `$CODEX_HOME/sessions/`; parsing it is pure ([`parse_session`]), reading
//! it goes through the sandbox.

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use serde_json::Value;

use super::contract::Cx;
use super::harness::{Harness, HarnessSettings, Launch, LaunchFile, SavedSession, newest_file};
use crate::errors::AdapterError;
use crate::launchlog::RecoveryTier;
use crate::result::Collected;
use crate::result::{TranscriptEntry, Usage};

const NAME: &str = "codex";

/// The continuation: `codex app-server` driven over stdio for one turn of
/// the newest saved thread with no input. Arguments: the Codex binary and
/// the sessions directory. Replies are matched by their compact prefix
/// (`{"id":N,"result"`), which is how this version writes them; a
/// notification is skipped, a request from the server (an approval, which
/// `approval_policy = "never"` rules out) ends the turn as failed. Exits 0
/// when the turn completes without error.
pub const CONTINUE_SCRIPT: &str = r#"set -euo pipefail
codex=$1 sessions=$2
name=$(find "$sessions" -type f -name 'rollout-*.jsonl' -printf '%f\n' 2>/dev/null | sort | tail -n 1 || true)
if [ -z "$name" ]; then
  echo "rollpoint: no codex session under $sessions to continue" >&2
  exit 98
fi
thread=${name%.jsonl}
thread=${thread: -36}
coproc CODEX { exec "$codex" app-server; }
# Own copies: bash drops CODEX and CODEX_PID when the server exits.
pid=$CODEX_PID
exec {from}<&"${CODEX[0]}" {to}>&"${CODEX[1]}"
eval "exec ${CODEX[0]}<&- ${CODEX[1]}>&-"
send() { printf '%s\n' "$1" >&"$to"; }
reply() {
  local line
  while IFS= read -r line <&"$from"; do
    case $line in
      "{\"id\":$1,\"result\""*) return 0 ;;
      "{\"id\":$1,\"error\""*)
        echo "rollpoint: codex app-server refused request $1 for thread $thread: $line" >&2
        return 1 ;;
    esac
  done
  echo "rollpoint: codex app-server ended before answering request $1" >&2
  return 1
}
send '{"id":1,"method":"initialize","params":{"clientInfo":{"name":"rollpoint","version":"1"}}}'
reply 1
send '{"method":"initialized"}'
send "{\"id\":2,\"method\":\"thread/resume\",\"params\":{\"threadId\":\"$thread\",\"excludeTurns\":true}}"
reply 2
send "{\"id\":3,\"method\":\"turn/start\",\"params\":{\"threadId\":\"$thread\",\"input\":[]}}"
reply 3
status=1
while IFS= read -r line <&"$from"; do
  case $line in
    '{"method":"turn/completed"'*)
      if [[ $line == *'"status":"completed","error":null'* ]]; then
        status=0
      else
        echo "rollpoint: codex turn did not complete: $line" >&2
      fi
      break ;;
    '{"id":'*)
      echo "rollpoint: codex app-server asked for an answer rollpoint cannot give: $line" >&2
      break ;;
  esac
done
# End of input ends the server.
exec {to}>&-
wait "$pid" || true
exit "$status"
"#;

/// The variable the provider's API key is read from (the gateway ignores it).
const KEY_VAR: &str = "ROLLPOINT_CODEX_KEY";

/// The Codex CLI as a [`Harness`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Codex;

fn home(dir: &str) -> String {
    format!("{dir}/home")
}

fn codex_home(dir: &str) -> String {
    format!("{dir}/home/.codex")
}

/// `config.toml`: the gateway as the only provider, Responses API, no
/// retries (the gateway replays), every update, plugin, app and analytics
/// switch off, so nothing leaves 127.0.0.1.
fn config_toml(model: &str) -> String {
    let model = toml_string(model);
    format!(
        r#"model = {model}
model_provider = "rollpoint"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.rollpoint]
name = "rollpoint gateway"
base_url = "@MODEL_BASE@/v1"
wire_api = "responses"
env_key = "{KEY_VAR}"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false
remote_plugin = false
apps = false
in_app_updates = false
daemon_auto_start = false
browser_use = false
computer_use = false

[analytics]
enabled = false
"#
    )
}

/// A TOML basic string (JSON string escapes are valid TOML ones).
fn toml_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

impl Harness for Codex {
    fn name(&self) -> &'static str {
        NAME
    }

    fn binary(&self) -> &'static str {
        "codex"
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
            let Some(text) = session_text(cx, dir).await? else {
                return Ok(None);
            };
            Ok(Some(parse_session(&text, &settings.prompt).saved))
        }
        .boxed()
    }

    fn launch(&self, settings: &HarnessSettings, mut launch: Launch, resume: bool) -> Launch {
        let dir = launch.dir.clone();
        launch.files.push(LaunchFile {
            path: format!("{}/config.toml", codex_home(&dir)),
            contents: config_toml(&settings.model),
        });
        launch.set_home(&home(&dir));
        for (k, v) in [
            ("CODEX_HOME", codex_home(&dir)),
            (KEY_VAR, "rollpoint".to_owned()),
            ("NO_COLOR", "1".to_owned()),
        ] {
            launch.env.entry(k.to_owned()).or_insert(v);
        }
        if resume {
            let codex = std::mem::take(&mut launch.argv);
            launch.argv = vec![
                "/bin/bash".into(),
                "-c".into(),
                CONTINUE_SCRIPT.into(),
                "rollpoint-codex-continue".into(),
            ];
            launch.argv.extend(codex);
            launch.argv.push(format!("{}/sessions", codex_home(&dir)));
        } else {
            launch.argv.push("exec".into());
            launch.argv.push("--skip-git-repo-check".into());
            launch.argv.push("--".into());
            launch.argv.push(settings.prompt.clone());
        }
        launch
    }

    fn collect<'a>(
        &'a self,
        cx: &'a Cx,
        settings: &'a HarnessSettings,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<Collected, AdapterError>> {
        async move {
            let text = session_text(cx, dir).await?.ok_or_else(|| {
                AdapterError::new(
                    NAME,
                    format!("no session file under {}/sessions", codex_home(dir)),
                )
            })?;
            Ok(parse_session(&text, &settings.prompt).collected)
        }
        .boxed()
    }
}

/// The newest rollout file under the state directory, as text.
async fn session_text(cx: &Cx, dir: &str) -> Result<Option<String>, AdapterError> {
    let sessions = format!("{}/sessions", codex_home(dir));
    Ok(newest_file(NAME, cx, &sessions, "rollout-*.jsonl", None)
        .await?
        .map(|(_, text)| text))
}

/// What one rollout file says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub saved: SavedSession,
    pub collected: Collected,
}

/// Reads a Codex rollout file. User turns are the `UserMessage` items
/// (Codex's own context messages are not among them); model turns and tool
/// calls are the `response_item`s; a model response counts as complete once
/// its `token_usage_record` is written, which Codex does after
/// `response.completed`. Lines that do not parse (a torn last line) are
/// skipped.
pub fn parse_session(text: &str, prompt: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut responses: Vec<String> = Vec::new();
    let mut usage = Usage::default();
    let mut first_user: Option<String> = None;
    let mut last_answer: Option<String> = None;
    let transcript = &mut out.collected.transcript;
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let payload = &v["payload"];
        match (v["type"].as_str(), payload["type"].as_str()) {
            (Some("session_meta"), _) => {
                if let Some(id) = payload["id"].as_str() {
                    out.saved.id = id.to_owned();
                }
            }
            (Some("event_msg"), Some("item_completed"))
                if payload["item"]["type"] == "UserMessage" =>
            {
                let text = join_text(&payload["item"]["content"]);
                first_user.get_or_insert_with(|| text.clone());
                transcript.push(TranscriptEntry::new("user", text, Vec::new()));
            }
            (Some("event_msg"), Some("task_complete")) => {
                if let Some(m) = payload["last_agent_message"].as_str() {
                    last_answer = Some(m.to_owned());
                }
            }
            (Some("response_item"), Some("message")) if payload["role"] == "assistant" => {
                let text = join_text(&payload["content"]);
                last_answer = Some(text.clone());
                transcript.push(TranscriptEntry::new("assistant", text, Vec::new()));
            }
            (Some("response_item"), Some("function_call" | "custom_tool_call")) => {
                let call = tool_input(payload);
                match transcript.last_mut() {
                    Some(e) if e.role == "assistant" => e.tool_calls.push(call),
                    _ => transcript.push(TranscriptEntry::new(
                        "assistant",
                        String::new(),
                        vec![call],
                    )),
                }
            }
            (Some("response_item"), Some("function_call_output" | "custom_tool_call_output")) => {
                let text = match &payload["output"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                transcript.push(TranscriptEntry::new("tool", text, Vec::new()));
            }
            (Some("token_usage_record"), _) => {
                let id = payload["response_id"].as_str().unwrap_or_default();
                if responses.iter().any(|r| r == id) {
                    continue;
                }
                responses.push(id.to_owned());
                let u = &payload["usage"];
                let n = |k: &str| u[k].as_u64().unwrap_or(0);
                usage.prompt_tokens += n("input_tokens");
                usage.completion_tokens += n("output_tokens");
                usage.total_tokens += n("total_tokens");
            }
            _ => {}
        }
    }
    usage.model_calls = responses.len() as u64;
    out.saved.completed_responses = responses.len();
    out.saved.starts_with_task = first_user.as_deref() == Some(prompt);
    out.collected.usage = Some(usage);
    out.collected.response = last_answer;
    out
}

/// The text parts of a content array, joined.
fn join_text(content: &Value) -> String {
    content
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A tool call's command (`cmd` of `exec_command`), else its raw input.
fn tool_input(payload: &Value) -> String {
    let raw = payload["arguments"]
        .as_str()
        .or_else(|| payload["input"].as_str())
        .unwrap_or_default();
    serde_json::from_str::<Value>(raw)
        .ok()
        .and_then(|a| {
            a["cmd"]
                .as_str()
                .or_else(|| a["command"].as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| raw.to_owned())
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The shape of a rollout file of codex 0.171.0, cut to the fields read,
    /// from a run killed while its second tool call ran and continued once
    /// through the app server (no user message added).
    const FILE: &str = r#"{"type":"session_meta","payload":{"id":"01a2-s","cwd":"/workspace"}}
{"type":"response_item","payload":{"type":"message","role":"developer","content":[{"type":"input_text","text":"<skills_instructions>"}]}}
{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>"}]}}
{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"Append the lines."}]}}
{"type":"event_msg","payload":{"type":"item_completed","item":{"type":"UserMessage","content":[{"type":"text","text":"Append the lines."}]}}}
{"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"echo 1 >> lines\"}","call_id":"c1"}}
{"type":"token_usage_record","payload":{"response_id":"resp_1","usage":{"input_tokens":100,"output_tokens":10,"total_tokens":110}}}
{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"Process exited with code 0"}}
{"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"echo 2 >> lines; sleep 8\"}","call_id":"c2"}}
{"type":"token_usage_record","payload":{"response_id":"resp_2","usage":{"input_tokens":120,"output_tokens":10,"total_tokens":130}}}
{"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"all done"}]}}
{"type":"token_usage_record","payload":{"response_id":"resp_3","usage":{"input_tokens":140,"output_tokens":3,"total_tokens":143}}}
{"type":"token_usage_record","payload":{"response_id":"resp_3","usage":{"input_tokens":140,"output_tokens":3,"total_tokens":143}}}
{"type":"event_msg","payload":{"type":"task_complete","last_agent_message":"all done"}}
{"type":"response_item","payload":{"type":"mess"#;

    #[test]
    fn a_rollout_file_gives_the_session_usage_and_transcript() {
        let p = parse_session(FILE, "Append the lines.");
        assert_eq!(
            p.saved,
            SavedSession {
                id: "01a2-s".into(),
                starts_with_task: true,
                completed_responses: 3,
            }
        );
        let usage = p.collected.usage.unwrap();
        assert_eq!(
            (usage.model_calls, usage.prompt_tokens, usage.total_tokens),
            (3, 360, 383)
        );
        assert_eq!(p.collected.response.as_deref(), Some("all done"));
        let roles: Vec<&str> = p
            .collected
            .transcript
            .iter()
            .map(|e| e.role.as_str())
            .collect();
        assert_eq!(
            roles,
            ["user", "assistant", "tool", "assistant", "assistant"]
        );
        assert_eq!(
            p.collected.transcript[3].tool_calls,
            ["echo 2 >> lines; sleep 8"]
        );
        assert_eq!(p.collected.transcript[4].text, "all done");
    }

    #[test]
    fn a_session_of_another_task_or_without_a_response_is_told_apart() {
        let first_turn = FILE.lines().take(6).collect::<Vec<_>>().join("\n");
        let p = parse_session(&first_turn, "Append the lines.");
        assert!(p.saved.starts_with_task);
        assert_eq!(p.saved.completed_responses, 0);
        let p = parse_session(FILE, "Another task.");
        assert!(!p.saved.starts_with_task);
        assert_eq!(parse_session("", "x").saved, SavedSession::default());
    }

    #[test]
    fn the_launch_configures_the_gateway_and_a_resume_drives_the_app_server() {
        let s: HarnessSettings =
            serde_json::from_value(serde_json::json!({"prompt": "do \"it\""})).unwrap();
        let base = || Launch {
            dir: "/var/lib/rollpoint/harness/codex/r1".into(),
            argv: vec!["/opt/codex".into()],
            ..Launch::default()
        };
        let fresh = Codex.launch(&s, base(), false);
        assert_eq!(
            fresh.argv,
            [
                "/opt/codex",
                "exec",
                "--skip-git-repo-check",
                "--",
                "do \"it\""
            ]
        );
        let conf = &fresh.files[0];
        assert_eq!(
            conf.path,
            "/var/lib/rollpoint/harness/codex/r1/home/.codex/config.toml"
        );
        assert!(conf.contents.contains("base_url = \"@MODEL_BASE@/v1\""));
        assert!(conf.contents.contains("wire_api = \"responses\""));
        assert!(conf.contents.contains("model = \"rollpoint-scripted\""));
        assert_eq!(
            fresh.env["CODEX_HOME"],
            "/var/lib/rollpoint/harness/codex/r1/home/.codex"
        );
        let resumed = Codex.launch(&s, base(), true);
        assert_eq!(resumed.argv[..3], ["/bin/bash", "-c", CONTINUE_SCRIPT]);
        assert_eq!(
            resumed.argv[4..],
            [
                "/opt/codex",
                "/var/lib/rollpoint/harness/codex/r1/home/.codex/sessions"
            ]
        );
        assert_eq!(resumed.files, fresh.files, "the route is rewritten");
    }

    /// A stand-in for `codex app-server`: logs what it reads, answers the
    /// three requests, then ends the turn with `$TURN` (`completed` or
    /// `failed`).
    const FAKE_SERVER: &str = r#"#!/bin/bash
[ "$1" = app-server ] || exit 64
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$LOG"
  case $line in
    *'"id":1,'*) echo '{"id":1,"result":{"userAgent":"fake"}}' ;;
    *'"id":2,'*) echo '{"method":"thread/status/changed","params":{}}'
                 echo '{"id":2,"result":{"thread":{}}}' ;;
    *'"id":3,'*) echo '{"id":3,"result":{"turn":{"status":"inProgress","error":null}}}'
                 echo '{"method":"item/completed","params":{"item":{"status":"completed","error":null}}}'
                 if [ "$TURN" = completed ]; then
                   echo '{"method":"turn/completed","params":{"turn":{"items":[],"status":"completed","error":null}}}'
                 else
                   echo '{"method":"turn/completed","params":{"turn":{"items":[],"status":"failed","error":{"message":"boom"}}}}'
                 fi ;;
  esac
done
echo eof >> "$LOG"
"#;

    fn continue_with(turn: &str, sessions: &std::path::Path) -> (std::process::Output, String) {
        let tmp = tempfile::tempdir().unwrap();
        let server = tmp.path().join("codex");
        std::fs::write(&server, FAKE_SERVER).unwrap();
        std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let log = tmp.path().join("log");
        let out = std::process::Command::new("/bin/bash")
            .args(["-c", CONTINUE_SCRIPT, "continue"])
            .arg(&server)
            .arg(sessions)
            .env("LOG", &log)
            .env("TURN", turn)
            .output()
            .unwrap();
        (out, std::fs::read_to_string(&log).unwrap_or_default())
    }

    #[test]
    fn the_continuation_resumes_the_newest_thread_and_starts_a_turn_with_no_input() {
        let tmp = tempfile::tempdir().unwrap();
        let day = tmp.path().join("2026/11/29");
        std::fs::create_dir_all(&day).unwrap();
        for name in [
            "rollout-2026-11-29T10-00-00-01a20000-0000-7000-8000-000000000001.jsonl",
            "rollout-2026-11-29T11-00-00-01a20000-0000-7000-8000-000000000002.jsonl",
        ] {
            std::fs::write(day.join(name), "").unwrap();
        }
        let (out, log) = continue_with("completed", tmp.path());
        assert!(out.status.success(), "{out:?}\n{log}");
        let sent: Vec<&str> = log.lines().collect();
        assert_eq!(sent.len(), 5, "{log}");
        assert!(sent[0].contains(r#""method":"initialize""#));
        assert_eq!(sent[1], r#"{"method":"initialized"}"#);
        assert!(sent[2].contains(r#""threadId":"01a20000-0000-7000-8000-000000000002""#));
        assert!(sent[2].contains("thread/resume"));
        assert_eq!(
            sent[3],
            r#"{"id":3,"method":"turn/start","params":{"threadId":"01a20000-0000-7000-8000-000000000002","input":[]}}"#
        );
        assert_eq!(sent[4], "eof", "the server's input is closed at the end");

        let (out, _) = continue_with("failed", tmp.path());
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("did not complete"));

        let empty = tempfile::tempdir().unwrap();
        let (out, log) = continue_with("completed", empty.path());
        assert_eq!(out.status.code(), Some(98), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no codex session under"));
        assert!(log.is_empty(), "no server started: {log}");
    }
}
