//! OpenCode (`opencode-ai`, pinned in harnesses/package.json) as a harness.
//!
//! Its whole state lives under the rollout's state directory through the
//! XDG variables: the session is the SQLite database
//! `data/opencode/opencode.db` (tables `session`, `message`, `part`). The
//! provider is OpenAI-compatible chat completions at the gateway route,
//! written into the global config at every launch, since the route changes
//! with each attempt.
//!
//! A relaunch re-enters the saved user turn without adding a message: the
//! pinned version's `run` refuses to start without a message, so the resume
//! script starts a loopback `opencode serve` with a random password and
//! posts the session's last user message back by its id with no parts.
//! OpenCode upserts that message (its parts stay as they were) and runs its
//! loop on the saved conversation; the script then checks that the saved
//! user turns are unchanged. The tier is exact. See
//! docs/design/harness-opencode.md.

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use serde::Deserialize;

use super::contract::Cx;
use super::harness::{
    Harness, HarnessSettings, Launch, LaunchFile, MODEL_BASE_PLACEHOLDER, Tally, exec, read_text,
};
use crate::errors::AdapterError;
use crate::launchlog::RecoveryTier;
use crate::result::Collected;

const NAME: &str = "opencode";
/// The provider id the config declares.
const PROVIDER: &str = "rollpoint";

/// The session database, relative to the state directory.
pub const DB: &str = "data/opencode/opencode.db";

/// The fresh launch: the prompt goes in on stdin, because `run` quotes a
/// message argument that holds a space before saving it.
const FRESH_SCRIPT: &str = r#"exec "$1" run < <(printf '%s' "$2")"#;

/// The relaunch (module docs). Exit 98: nothing to continue; 99: the saved
/// user turns changed. The request goes through bash's `/dev/tcp`, so the
/// sandbox needs no HTTP client.
const RESUME_SCRIPT: &str = r#"set -euo pipefail
bin=$1 dir=$2 db=$2/data/opencode/opencode.db
sql() { sqlite3 -batch "$db" "$1"; }
sid=$(sql "select id from session where parent_id is null order by time_created, id limit 1")
[ -n "$sid" ] || { echo "rollpoint: no saved opencode session in $db" >&2; exit 98; }
mid=$(sql "select id from message where session_id = '$sid' and json_extract(data, '$.role') = 'user' order by id desc limit 1")
[ -n "$mid" ] || { echo "rollpoint: session $sid has no user message" >&2; exit 98; }
turns="select p.id, p.data from message m join part p on p.message_id = m.id where m.session_id = '$sid' and json_extract(m.data, '$.role') = 'user' order by m.id, p.id"
before=$(sql "$turns")
OPENCODE_SERVER_PASSWORD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export OPENCODE_SERVER_PASSWORD
: > "$dir/serve.out"
"$bin" serve --hostname 127.0.0.1 --port 0 > "$dir/serve.out" 2> "$dir/serve.err" &
server=$!
trap 'kill "$server" 2> /dev/null || true; wait "$server" 2> /dev/null || true' EXIT
url=
for _ in $(seq 1200); do
  url=$(sed -n 's|^opencode server listening on \(http://[^ ]*\).*|\1|p' "$dir/serve.out")
  [ -n "$url" ] && break
  kill -0 "$server" 2> /dev/null || { echo "rollpoint: opencode serve exited" >&2; cat "$dir/serve.err" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "rollpoint: opencode serve did not listen" >&2; exit 1; }
port=${url##*:}; port=${port%%/*}
body="{\"messageID\":\"$mid\",\"parts\":[]}"
auth=$(printf 'opencode:%s' "$OPENCODE_SERVER_PASSWORD" | base64 -w0)
exec 3<> "/dev/tcp/127.0.0.1/$port"
printf 'POST /session/%s/message HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nAuthorization: Basic %s\r\nContent-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' \
  "$sid" "$port" "$auth" "${#body}" "$body" >&3
cat <&3 > "$dir/continue.http"
exec 3<&-
status=$(head -n 1 "$dir/continue.http" | tr -d '\r')
case $status in
  "HTTP/1.1 200"*) ;;
  *) echo "rollpoint: opencode answered the continuation with: $status" >&2; exit 1 ;;
esac
after=$(sql "$turns")
[ "$before" = "$after" ] || { echo "rollpoint: the saved user turns of $sid changed" >&2; exit 99; }
"#;

/// The query behind `inspect` and `collect`: every message of the root
/// session with its parts, in order.
const QUERY: &str = "select m.session_id as session, m.id as message, m.data as info, p.data as part \
     from message m left join part p on p.message_id = m.id \
     where m.session_id = (select id from session where parent_id is null order by time_created, id limit 1) \
     order by m.id, p.id";

#[derive(Debug, Clone, Copy, Default)]
pub struct OpenCode;

/// One row of [`QUERY`] (`sqlite3 -json`).
#[derive(Debug, Deserialize)]
struct Row {
    session: String,
    message: String,
    info: String,
    #[serde(default)]
    part: Option<String>,
}

/// One saved message with its parts.
#[derive(Debug, Default)]
struct Message {
    info: serde_json::Value,
    parts: Vec<serde_json::Value>,
}

/// The saved session, read from the rows of [`QUERY`]. Pure.
#[derive(Debug, Default)]
struct Session {
    id: String,
    messages: Vec<Message>,
}

impl Session {
    fn parse(json: &str) -> Result<Option<Self>, String> {
        if json.trim().is_empty() {
            return Ok(None);
        }
        let rows: Vec<Row> = serde_json::from_str(json).map_err(|e| format!("rows: {e}"))?;
        let mut s = Session::default();
        let mut last: Option<String> = None;
        for row in rows {
            s.id.clone_from(&row.session);
            if last.as_deref() != Some(row.message.as_str()) {
                let info = serde_json::from_str(&row.info)
                    .map_err(|e| format!("message {}: {e}", row.message))?;
                s.messages.push(Message {
                    info,
                    parts: Vec::new(),
                });
                last = Some(row.message.clone());
            }
            if let Some(part) = row.part {
                let part = serde_json::from_str(&part)
                    .map_err(|e| format!("part of message {}: {e}", row.message))?;
                if let Some(m) = s.messages.last_mut() {
                    m.parts.push(part);
                }
            }
        }
        Ok(if s.messages.is_empty() { None } else { Some(s) })
    }

    fn role(m: &Message) -> &str {
        m.info["role"].as_str().unwrap_or_default()
    }

    fn text(m: &Message) -> String {
        m.parts
            .iter()
            .filter(|p| p["type"] == "text" && p["synthetic"] != true)
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn saved(&self, prompt: &str) -> super::harness::SavedSession {
        let first_user = self.messages.iter().find(|m| Self::role(m) == "user");
        super::harness::SavedSession {
            id: self.id.clone(),
            starts_with_task: first_user.is_some_and(|m| Self::text(m) == prompt),
            completed_responses: self
                .messages
                .iter()
                .filter(|m| Self::role(m) == "assistant" && m.info["time"]["completed"].is_u64())
                .count(),
        }
    }

    fn collected(&self) -> Collected {
        let mut tally = Tally::default();
        for m in &self.messages {
            let role = Self::role(m);
            let text = Self::text(m);
            if role == "assistant" {
                let t = &m.info["tokens"];
                let tokens = |k: &str| t[k].as_u64().unwrap_or(0);
                tally.call(tokens("input"), tokens("output"), &text);
            }
            let tools: Vec<&serde_json::Value> =
                m.parts.iter().filter(|p| p["type"] == "tool").collect();
            tally.push(role, text, tools.iter().map(|p| tool_input(p)).collect());
            for p in tools {
                let state = &p["state"];
                let text = match state["status"].as_str() {
                    Some("completed") => state["output"].as_str().unwrap_or_default().to_owned(),
                    Some("error") => state["error"].as_str().unwrap_or_default().to_owned(),
                    other => format!("[{}]", other.unwrap_or("no result")),
                };
                tally.push("tool", text, Vec::new());
            }
        }
        tally.collected()
    }
}

/// A tool part's input: the shell command, else the input as JSON.
fn tool_input(part: &serde_json::Value) -> String {
    let input = &part["state"]["input"];
    match input["command"].as_str() {
        Some(c) => c.to_owned(),
        None => format!("{} {input}", part["tool"].as_str().unwrap_or("tool")),
    }
}

/// The global config: the gateway route as the only provider, sharing,
/// updates and web fetches off, every edit and shell command allowed.
fn config(model: &str) -> String {
    let model_key = serde_json::Value::String(model.to_owned());
    let config = serde_json::json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "rollpoint gateway",
                "options": {"baseURL": format!("{MODEL_BASE_PLACEHOLDER}/v1"), "apiKey": "rollpoint"},
                "models": {model: {"name": model_key, "tool_call": true, "limit": {"context": 128_000, "output": 4096}}}
            }
        },
        "model": format!("{PROVIDER}/{model}"),
        "small_model": format!("{PROVIDER}/{model}"),
        "enabled_providers": [PROVIDER],
        "autoupdate": false,
        "share": "disabled",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny", "external_directory": "allow"}
    });
    format!("{config:#}\n")
}

/// Runs [`QUERY`] on the state directory's database, through a file (a
/// long session outgrows an exec's output cap). `None`: no database.
async fn query(cx: &Cx, dir: &str) -> Result<Option<Session>, AdapterError> {
    let db = format!("{dir}/{DB}");
    let out_path = format!("{dir}/rollpoint-session.json");
    let out = exec(
        NAME,
        cx,
        vec![
            "/bin/sh".into(),
            "-c".into(),
            r#"test -e "$1" || exit 3; sqlite3 -batch -json "$1" "$2" > "$3""#.into(),
            "query".into(),
            db.clone(),
            QUERY.into(),
            out_path.clone(),
        ],
    )
    .await?;
    match out.exit_code {
        Some(0) => {}
        Some(3) => return Ok(None),
        code => {
            return Err(AdapterError::new(
                NAME,
                format!(
                    "read {db} with sqlite3 (exit {code:?}): {}",
                    out.stderr.trim()
                ),
            ));
        }
    }
    let json = read_text(NAME, cx, &out_path).await?.unwrap_or_default();
    Session::parse(&json).map_err(|e| AdapterError::new(NAME, format!("{db}: {e}")))
}

impl Harness for OpenCode {
    fn name(&self) -> &'static str {
        NAME
    }

    fn binary(&self) -> &'static str {
        "opencode"
    }

    fn tier(&self) -> RecoveryTier {
        RecoveryTier::Exact
    }

    fn inspect<'a>(
        &'a self,
        cx: &'a Cx,
        settings: &'a HarnessSettings,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<Option<super::harness::SavedSession>, AdapterError>> {
        async move { Ok(query(cx, dir).await?.map(|s| s.saved(&settings.prompt))) }.boxed()
    }

    fn launch(&self, settings: &HarnessSettings, mut launch: Launch, resume: bool) -> Launch {
        let dir = launch.dir.clone();
        for (k, sub) in [
            ("HOME", "home"),
            ("XDG_CONFIG_HOME", "config"),
            ("XDG_DATA_HOME", "data"),
            ("XDG_CACHE_HOME", "cache"),
            ("XDG_STATE_HOME", "state"),
        ] {
            launch.env.insert(k.into(), format!("{dir}/{sub}"));
        }
        for k in [
            "OPENCODE_DISABLE_AUTOUPDATE",
            "OPENCODE_DISABLE_MODELS_FETCH",
            "OPENCODE_DISABLE_LSP_DOWNLOAD",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS",
            "OPENCODE_DISABLE_SHARE",
            "OPENCODE_DISABLE_CLAUDE_CODE",
            "OPENCODE_DISABLE_EXTERNAL_SKILLS",
            "OPENCODE_DISABLE_EMBEDDED_WEB_UI",
        ] {
            launch.env.insert(k.into(), "1".into());
        }
        launch.files.push(LaunchFile {
            path: format!("{dir}/config/opencode/opencode.json"),
            contents: config(&settings.model),
        });
        let bin = launch.argv.remove(0);
        let (script, arg) = if resume {
            (RESUME_SCRIPT, dir)
        } else {
            (FRESH_SCRIPT, settings.prompt.clone())
        };
        launch.argv = vec![
            "/bin/bash".into(),
            "-c".into(),
            script.into(),
            "opencode-launch".into(),
            bin,
            arg,
        ];
        launch
    }

    fn collect<'a>(
        &'a self,
        cx: &'a Cx,
        _settings: &'a HarnessSettings,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<Collected, AdapterError>> {
        async move {
            Ok(query(cx, dir)
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

    fn row(
        msg: &str,
        info: serde_json::Value,
        part: Option<serde_json::Value>,
    ) -> serde_json::Value {
        serde_json::json!({
            "session": "ses_1",
            "message": msg,
            "info": info.to_string(),
            "part": part.map(|p| p.to_string()),
        })
    }

    fn rows() -> String {
        let user = serde_json::json!({"role": "user", "time": {"created": 1}});
        let a1 = serde_json::json!({"role": "assistant", "time": {"created": 2, "completed": 3},
            "finish": "tool-calls", "tokens": {"input": 100, "output": 10}});
        let a2 = serde_json::json!({"role": "assistant", "time": {"created": 4},
            "tokens": {"input": 0, "output": 0}});
        serde_json::Value::Array(vec![
            row(
                "msg_1",
                user,
                Some(serde_json::json!({"type": "text", "text": "do it"})),
            ),
            row(
                "msg_2",
                a1.clone(),
                Some(serde_json::json!({"type": "step-start"})),
            ),
            row(
                "msg_2",
                a1,
                Some(serde_json::json!({"type": "tool", "tool": "bash",
                "state": {"status": "completed", "input": {"command": "echo 1"}, "output": "ok"}})),
            ),
            row(
                "msg_3",
                a2,
                Some(serde_json::json!({"type": "tool", "tool": "bash",
                "state": {"status": "running", "input": {"command": "echo 2; sleep 9"}}})),
            ),
        ])
        .to_string()
    }

    #[test]
    fn a_saved_session_counts_completed_responses_and_checks_the_task() {
        let s = Session::parse(&rows()).unwrap().unwrap();
        let saved = s.saved("do it");
        assert_eq!(saved.id, "ses_1");
        assert!(saved.starts_with_task);
        assert_eq!(saved.completed_responses, 1);
        assert!(!s.saved("another task").starts_with_task);
        assert!(Session::parse("").unwrap().is_none());
        assert!(Session::parse("[]").unwrap().is_none());
        let err = Session::parse("[{\"session\": 1}]").unwrap_err();
        assert!(err.starts_with("rows:"), "{err}");
    }

    #[test]
    fn the_transcript_holds_turns_tool_calls_and_results() {
        let c = Session::parse(&rows()).unwrap().unwrap().collected();
        let roles: Vec<&str> = c.transcript.iter().map(|e| e.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant", "tool"]);
        assert_eq!(c.transcript[0].text, "do it");
        assert_eq!(c.transcript[1].tool_calls, ["echo 1"]);
        assert_eq!(c.transcript[2].text, "ok");
        assert_eq!(c.transcript[4].text, "[running]");
        let u = c.usage.unwrap();
        assert_eq!(
            (u.model_calls, u.prompt_tokens, u.total_tokens),
            (2, 100, 110)
        );
    }

    #[test]
    fn the_config_points_at_the_route_and_the_launch_keeps_state_in_the_dir() {
        let settings: HarnessSettings = serde_json::from_str(r#"{"prompt": "a b"}"#).unwrap();
        let launch = Launch {
            dir: "/s".into(),
            argv: vec!["/bin/opencode".into()],
            ..Launch::default()
        };
        let l = OpenCode.launch(&settings, launch.clone(), false);
        assert_eq!(l.env["XDG_DATA_HOME"], "/s/data");
        assert_eq!(l.argv[4], "/bin/opencode");
        assert_eq!(l.argv[5], "a b");
        let conf: serde_json::Value = serde_json::from_str(&l.files[0].contents).unwrap();
        assert_eq!(
            conf["provider"]["rollpoint"]["options"]["baseURL"],
            "@MODEL_BASE@/v1"
        );
        assert_eq!(conf["model"], "rollpoint/rollpoint-scripted");
        let r = OpenCode.launch(&settings, launch, true);
        assert_eq!(r.argv[2], RESUME_SCRIPT);
        assert_eq!(r.argv[5], "/s");
    }
}
