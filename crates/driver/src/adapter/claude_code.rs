//! The Claude Code adapter (`@anthropic-ai/claude-code` 2.1.197, `claude -p`).
//!
//! Claude Code speaks the Anthropic Messages API; `ANTHROPIC_BASE_URL` is the
//! gateway route (Claude Code appends `/v1/messages` itself). The route
//! changes with every attempt and the launch argv is not expanded, so it
//! reaches Claude Code through the `env` block of the `settings.json` the
//! launch script writes. `HOME` and `CLAUDE_CONFIG_DIR` live in the rollout's
//! state directory, so a snapshot carries the session.
//!
//! In print mode Claude Code continues a saved session only with a prompt
//! (without one it asks for a deferred-tool marker and exits), so a relaunch
//! adds one user turn, [`CONTINUE_TEXT`]: the text Claude Code itself uses
//! when it resumes an interrupted turn. The tier is `continue_turn`. Claude
//! Code also repairs the interrupted turn on its own before that prompt (see
//! docs/design/harness-claude-code.md); the transcript keeps what it adds.
//! That repair drops a `tool_use` a crash interrupted, so before a relaunch
//! the adapter writes the call's result into the saved session, in Claude
//! Code's own line format ([`interrupted_results`]): the model is told the
//! call was interrupted instead of silently losing it (and asking for it
//! again). Parsing the session JSONL is pure ([`parse_session`]); reading
//! and writing it go through the sandbox.

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use serde_json::Value;

use super::contract::Cx;
use super::harness::{
    Harness, HarnessSettings, Launch, LaunchFile, MODEL_BASE_PLACEHOLDER, SavedSession, newest_file,
};
use crate::errors::AdapterError;
use crate::launchlog::RecoveryTier;
use crate::result::Collected;
use crate::result::{TranscriptEntry, Usage};

const NAME: &str = "claude-code";

/// The one user message a relaunch adds.
pub const CONTINUE_TEXT: &str = "Continue from where you left off.";

/// The result written for a tool call a crash interrupted.
pub const INTERRUPTED_TEXT: &str = "The command was interrupted: the rollout was restored from a \
checkpoint taken while it ran, so it may have run in part or not at all, and its output is lost.";

/// The model name Claude Code writes on the assistant messages it makes up
/// itself (never sent by a model).
const SYNTHETIC_MODEL: &str = "<synthetic>";

/// The user turns a relaunch after an interrupted turn leaves in the
/// conversation, in order: Claude Code's own marker (`isMeta`, joined to the
/// last tool result when sent), then the adapter's prompt. Between them
/// Claude Code writes a made-up assistant turn, "No response requested.".
pub const RESUME_USER_TURNS: [&str; 2] = [CONTINUE_TEXT, CONTINUE_TEXT];

/// Claude Code as a [`Harness`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ClaudeCode;

fn home(dir: &str) -> String {
    format!("{dir}/home")
}

fn config_dir(dir: &str) -> String {
    format!("{dir}/home/.claude")
}

/// `settings.json`: the gateway route, and every switch that would reach
/// past 127.0.0.1 off.
fn settings_json() -> String {
    serde_json::json!({
        "env": {
            "ANTHROPIC_BASE_URL": MODEL_BASE_PLACEHOLDER,
        },
        "autoUpdates": false,
    })
    .to_string()
}

impl Harness for ClaudeCode {
    fn name(&self) -> &'static str {
        NAME
    }

    fn binary(&self) -> &'static str {
        "claude"
    }

    fn tier(&self) -> RecoveryTier {
        RecoveryTier::ContinueTurn
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
            path: format!("{}/settings.json", config_dir(&dir)),
            contents: settings_json(),
        });
        launch.set_home(&home(&dir));
        for (k, v) in [
            ("CLAUDE_CONFIG_DIR", config_dir(&dir)),
            ("ANTHROPIC_API_KEY", "rollpoint".to_owned()),
            ("DISABLE_AUTOUPDATER", "1".to_owned()),
            ("DISABLE_TELEMETRY", "1".to_owned()),
            ("DISABLE_ERROR_REPORTING", "1".to_owned()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
            // Lets root use --dangerously-skip-permissions: the sandbox is
            // the boundary.
            ("IS_SANDBOX", "1".to_owned()),
        ] {
            launch.env.entry(k.to_owned()).or_insert(v);
        }
        launch.argv.extend(
            [
                "-p",
                "--model",
                &settings.model,
                "--dangerously-skip-permissions",
            ]
            .map(String::from),
        );
        if resume {
            // The state directory holds this rollout's sessions only, so
            // the most recent one in this workdir is the one to continue.
            launch.argv.push("--continue".into());
            launch.argv.push("--".into());
            launch.argv.push(CONTINUE_TEXT.into());
        } else {
            launch.argv.push("--".into());
            launch.argv.push(settings.prompt.clone());
        }
        launch
    }

    fn before_resume<'a>(
        &'a self,
        cx: &'a Cx,
        dir: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, AdapterError>> {
        async move {
            let projects = format!("{}/projects", config_dir(dir));
            let Some((path, text)) = newest_file(NAME, cx, &projects, "*.jsonl", Some(2)).await?
            else {
                return Ok(None);
            };
            let Some((lines, ids)) = interrupted_results(&text, &now_iso(), &fresh_uuid) else {
                return Ok(None);
            };
            let mut bytes = text.into_bytes();
            if bytes.last().is_some_and(|b| *b != b'\n') {
                bytes.push(b'\n');
            }
            bytes.extend_from_slice(lines.as_bytes());
            cx.owner
                .upload(&cx.session, &path, bytes, SESSION_MODE)
                .await
                .map_err(|e| AdapterError::new(NAME, format!("write {path}: {e}")))?;
            Ok(Some(format!(
                "wrote an interrupted result for tool call {} into the session",
                ids.join(", ")
            )))
        }
        .boxed()
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
                    format!("no session file under {}/projects", config_dir(dir)),
                )
            })?;
            Ok(parse_session(&text, &settings.prompt).collected)
        }
        .boxed()
    }
}

/// The most recently written session file under the state directory, as
/// text (`projects/<cwd slug>/<session>.jsonl`).
async fn session_text(cx: &Cx, dir: &str) -> Result<Option<String>, AdapterError> {
    let projects = format!("{}/projects", config_dir(dir));
    Ok(newest_file(NAME, cx, &projects, "*.jsonl", Some(2))
        .await?
        .map(|(_, text)| text))
}

/// Mode of a session file, as Claude Code writes it.
const SESSION_MODE: u32 = 0o600;

/// The session lines that give every tool call of the session's last model
/// response a result, when that response is the last message (a crash
/// interrupted its calls), with the ids answered; `None` when nothing is
/// interrupted. Each line is a `user` line as Claude Code writes a tool
/// result: chained to the last message by `parentUuid`, the same session,
/// cwd and version, `is_error` set and the text [`INTERRUPTED_TEXT`].
pub fn interrupted_results(
    text: &str,
    now: &str,
    uuid: &dyn Fn(&str) -> String,
) -> Option<(String, Vec<String>)> {
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let messages: Vec<&Value> = lines
        .iter()
        .filter(|v| matches!(v["type"].as_str(), Some("user" | "assistant")))
        .collect();
    let last_user = messages.iter().rposition(|v| v["type"] == "user");
    let tail = &messages[last_user.map_or(0, |i| i + 1)..];
    let calls: Vec<(&str, &str)> = tail
        .iter()
        .flat_map(|v| v["message"]["content"].as_array().into_iter().flatten())
        .filter(|p| p["type"] == "tool_use")
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str().unwrap_or_default())))
        .collect();
    let last = tail.last()?;
    if calls.is_empty() {
        return None;
    }
    let mut parent = lines
        .iter()
        .rev()
        .find_map(|v| v["uuid"].as_str())?
        .to_owned();
    let mut out = String::new();
    for (id, name) in &calls {
        let this = uuid(&parent);
        let mut line = serde_json::json!({
            "parentUuid": parent,
            "isSidechain": false,
            "type": "user",
            "message": {"role": "user", "content": [{
                "tool_use_id": id,
                "type": "tool_result",
                "content": INTERRUPTED_TEXT,
                "is_error": true,
            }]},
            "uuid": this,
            "timestamp": now,
            "sourceToolAssistantUUID": last["uuid"],
            "userType": "external",
            "entrypoint": last["entrypoint"],
            "cwd": last["cwd"],
            "sessionId": last["sessionId"],
            "version": last["version"],
            "gitBranch": last["gitBranch"],
        });
        if *name == "Bash" {
            line["toolUseResult"] = serde_json::json!({
                "stdout": "", "stderr": INTERRUPTED_TEXT, "interrupted": true,
                "isImage": false, "noOutputExpected": false,
            });
        }
        out.push_str(&line.to_string());
        out.push('\n');
        parent = this;
    }
    Some((out, calls.iter().map(|(id, _)| (*id).to_owned()).collect()))
}

/// Now, as Claude Code writes timestamps (`2026-12-01T22:08:02.463Z`).
fn now_iso() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

/// The civil date of a day count since 1970-01-01 (Howard Hinnant's
/// algorithm; written out here rather than pulling a date crate into the
/// driver for one timestamp).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

/// A fresh random-looking UUID (version 4 layout) for a session line: 128
/// bits hashed from the parent's uuid, the clock, the pid and a counter. It
/// only has to be unique within one session file.
fn fresh_uuid(parent: &str) -> String {
    use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let half = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        (parent, salt, n, std::process::id()).hash(&mut h);
        std::time::SystemTime::now().hash(&mut h);
        h.finish()
    };
    let (a, b) = (half(1), half(2));
    let hi = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
    let lo = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// What one session file says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub saved: SavedSession,
    pub collected: Collected,
}

/// Reads a Claude Code session file. Claude Code writes each content block
/// of a model response as its own `assistant` line (same `message.id`); a
/// response is complete once a line of it carries a `stop_reason`. The
/// lines Claude Code makes up itself (`isMeta` user text, assistant lines of
/// `model: "<synthetic>"`) are part of what the model is sent, so they stay
/// in the transcript, but they are no model response and carry no usage.
/// Lines that do not parse are skipped.
pub fn parse_session(text: &str, prompt: &str) -> Parsed {
    let mut out = Parsed::default();
    // (message id, usage, complete)
    let mut responses: Vec<(String, Value, bool)> = Vec::new();
    let mut first_user: Option<String> = None;
    let mut last_answer: Option<String> = None;
    let mut last_id = String::new();
    let transcript = &mut out.collected.transcript;
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if out.saved.id.is_empty()
            && let Some(id) = v["sessionId"].as_str()
        {
            out.saved.id = id.to_owned();
        }
        let msg = &v["message"];
        match v["type"].as_str() {
            Some("user") => {
                let content = &msg["content"];
                if let Some(s) = content.as_str() {
                    first_user.get_or_insert_with(|| s.to_owned());
                    transcript.push(TranscriptEntry::new("user", s.to_owned(), Vec::new()));
                    continue;
                }
                for part in content.as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("tool_result") => {
                            transcript.push(TranscriptEntry::new(
                                "tool",
                                result_text(&part["content"]),
                                vec![],
                            ));
                        }
                        Some("text") => {
                            let s = part["text"].as_str().unwrap_or_default().to_owned();
                            first_user.get_or_insert_with(|| s.clone());
                            transcript.push(TranscriptEntry::new("user", s, Vec::new()));
                        }
                        _ => {}
                    }
                }
            }
            Some("assistant") => {
                let id = msg["id"].as_str().unwrap_or_default().to_owned();
                let complete = !msg["stop_reason"].is_null();
                if msg["model"] != SYNTHETIC_MODEL {
                    match responses.iter_mut().find(|r| r.0 == id) {
                        Some(r) => {
                            r.1 = msg["usage"].clone();
                            r.2 |= complete;
                        }
                        None => responses.push((id.clone(), msg["usage"].clone(), complete)),
                    }
                }
                if id != last_id || transcript.last().is_none_or(|e| e.role != "assistant") {
                    transcript.push(TranscriptEntry::new("assistant", String::new(), Vec::new()));
                    last_id = id;
                }
                let Some(e) = transcript.last_mut() else {
                    continue;
                };
                for part in msg["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("text") => {
                            if !e.text.is_empty() {
                                e.text.push('\n');
                            }
                            e.text.push_str(part["text"].as_str().unwrap_or_default());
                        }
                        Some("tool_use") => {
                            let input = &part["input"];
                            e.tool_calls.push(
                                input["command"]
                                    .as_str()
                                    .map_or_else(|| input.to_string(), str::to_owned),
                            );
                        }
                        _ => {}
                    }
                }
                if !e.text.is_empty() {
                    last_answer = Some(e.text.clone());
                }
            }
            _ => {}
        }
    }
    let mut usage = Usage::default();
    for (_, u, _) in &responses {
        let n = |k: &str| u[k].as_u64().unwrap_or(0);
        let prompt_tokens =
            n("input_tokens") + n("cache_creation_input_tokens") + n("cache_read_input_tokens");
        usage.prompt_tokens += prompt_tokens;
        usage.completion_tokens += n("output_tokens");
        usage.total_tokens += prompt_tokens + n("output_tokens");
    }
    usage.model_calls = responses.len() as u64;
    out.saved.completed_responses = responses.iter().filter(|r| r.2).count();
    out.saved.starts_with_task = first_user.as_deref() == Some(prompt);
    out.collected.usage = Some(usage);
    out.collected.response = last_answer;
    out
}

/// A tool result's content: a string or text blocks.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The shape of a session file of Claude Code 2.1.197, cut to the fields
    /// read, from a run killed while its second tool call ran and resumed
    /// once.
    const FILE: &str = r#"{"type":"queue-operation","sessionId":"f792-s"}
{"type":"user","sessionId":"f792-s","message":{"role":"user","content":"Append the lines."}}
{"type":"attachment","sessionId":"f792-s"}
{"type":"assistant","sessionId":"f792-s","message":{"id":"msg_1","model":"rollpoint-scripted","stop_reason":"tool_use","usage":{"input_tokens":100,"output_tokens":20},"content":[{"type":"tool_use","id":"c1","name":"Bash","input":{"command":"echo 1 >> lines","description":"step"}}]}}
{"type":"user","sessionId":"f792-s","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"(Bash completed with no output)"}]}}
{"type":"assistant","sessionId":"f792-s","message":{"id":"msg_2","model":"rollpoint-scripted","stop_reason":"tool_use","usage":{"input_tokens":120,"output_tokens":20},"content":[{"type":"tool_use","id":"c2","name":"Bash","input":{"command":"echo 2 >> lines; sleep 8"}}]}}
{"type":"user","isMeta":true,"sessionId":"f792-s","message":{"role":"user","content":[{"type":"text","text":"Continue from where you left off."}]}}
{"type":"assistant","sessionId":"f792-s","message":{"id":"7c1e","model":"<synthetic>","stop_reason":"stop_sequence","content":[{"type":"text","text":"No response requested."}]}}
{"type":"user","sessionId":"f792-s","message":{"role":"user","content":"Continue from where you left off."}}
{"type":"assistant","sessionId":"f792-s","message":{"id":"msg_3","model":"rollpoint-scripted","stop_reason":null,"usage":{"input_tokens":140,"output_tokens":1},"content":[{"type":"text","text":"all"}]}}
{"type":"assistant","sessionId":"f792-s","message":{"id":"msg_3","model":"rollpoint-scripted","stop_reason":"end_turn","usage":{"input_tokens":140,"cache_read_input_tokens":5,"output_tokens":3},"content":[{"type":"text","text":"done"}]}}
{"type":"last-prompt","sessionId":"f792-s"}
{"type":"assis"#;

    #[test]
    fn a_session_file_gives_the_session_usage_and_transcript() {
        let p = parse_session(FILE, "Append the lines.");
        assert_eq!(
            p.saved,
            SavedSession {
                id: "f792-s".into(),
                starts_with_task: true,
                completed_responses: 3,
            }
        );
        let usage = p.collected.usage.unwrap();
        assert_eq!(
            (
                usage.model_calls,
                usage.prompt_tokens,
                usage.completion_tokens
            ),
            (3, 365, 43)
        );
        assert_eq!(p.collected.response.as_deref(), Some("all\ndone"));
        let t = &p.collected.transcript;
        let roles: Vec<&str> = t.iter().map(|e| e.role.as_str()).collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "tool",
                "assistant",
                "user",
                "assistant",
                "user",
                "assistant"
            ]
        );
        assert_eq!(t[3].tool_calls, ["echo 2 >> lines; sleep 8"]);
        assert_eq!(t[5].text, "No response requested.");
        let users: Vec<&str> = t
            .iter()
            .filter(|e| e.role == "user")
            .map(|e| e.text.as_str())
            .skip(1)
            .collect();
        assert_eq!(users, RESUME_USER_TURNS);
    }

    #[test]
    fn a_response_without_a_stop_reason_is_not_complete() {
        let cut: String = FILE.lines().take(2).collect::<Vec<_>>().join("\n")
            + "\n"
            + r#"{"type":"assistant","sessionId":"f792-s","message":{"id":"msg_1","model":"m","stop_reason":null,"content":[{"type":"text","text":"par"}]}}"#;
        let p = parse_session(&cut, "Append the lines.");
        assert!(p.saved.starts_with_task);
        assert_eq!(p.saved.completed_responses, 0);
        assert!(!parse_session(FILE, "Other.").saved.starts_with_task);
    }

    #[test]
    fn the_launch_sets_the_route_in_settings_and_a_resume_adds_the_documented_turn() {
        let s: HarnessSettings =
            serde_json::from_value(serde_json::json!({"prompt": "-do it"})).unwrap();
        let base = || Launch {
            dir: "/s/claude-code/r1".into(),
            argv: vec!["/opt/claude".into()],
            ..Launch::default()
        };
        let fresh = ClaudeCode.launch(&s, base(), false);
        assert_eq!(
            fresh.argv[1..],
            [
                "-p",
                "--model",
                "rollpoint-scripted",
                "--dangerously-skip-permissions",
                "--",
                "-do it"
            ]
        );
        let settings: Value = serde_json::from_str(&fresh.files[0].contents).unwrap();
        assert_eq!(settings["env"]["ANTHROPIC_BASE_URL"], "@MODEL_BASE@");
        assert_eq!(
            fresh.files[0].path,
            "/s/claude-code/r1/home/.claude/settings.json"
        );
        assert_eq!(
            fresh.env["CLAUDE_CONFIG_DIR"],
            "/s/claude-code/r1/home/.claude"
        );
        let resumed = ClaudeCode.launch(&s, base(), true);
        assert_eq!(resumed.argv[5..], ["--continue", "--", CONTINUE_TEXT]);
    }

    #[test]
    fn codex_and_claude_code_tasks_decode_and_a_bad_setting_is_named() {
        let task = |adapter: &str| {
            format!(
                r#"{{"v": 1, "task": {{"id": "t1", "verify": {{"command": ["true"]}}}}, "adapter": {adapter}}}"#
            )
        };
        let ok = crate::RolloutTask::decode(
            task(r#"{"kind": "claude-code", "prompt": "go", "model": "m"}"#).as_bytes(),
        )
        .unwrap();
        assert!(
            matches!(ok.adapter, crate::AdapterSpec::ClaudeCode(ref s) if s.prompt == "go" && s.model == "m")
        );
        let ok =
            crate::RolloutTask::decode(task(r#"{"kind": "codex", "prompt": "go"}"#).as_bytes())
                .unwrap();
        assert!(matches!(ok.adapter, crate::AdapterSpec::Codex(ref s) if s.pauses));
        for (adapter, field) in [
            (
                r#"{"kind": "claude-code", "prompt": ""}"#,
                "task.adapter.prompt",
            ),
            (
                r#"{"kind": "codex", "prompt": "go", "model": ""}"#,
                "task.adapter.model",
            ),
            (
                r#"{"kind": "codex", "prompt": "go", "bin": "codex"}"#,
                "task.adapter.bin",
            ),
        ] {
            match crate::RolloutTask::decode(task(adapter).as_bytes()) {
                Err(crate::DriverError::Task { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{adapter}: {other:?}"),
            }
        }
        match crate::RolloutTask::decode(
            task(r#"{"kind": "claude_code", "prompt": "go"}"#).as_bytes(),
        ) {
            Err(crate::DriverError::Task { message, .. }) => {
                assert!(message.contains("claude_code"), "{message}");
            }
            other => panic!("the kind is spelled claude-code: {other:?}"),
        }
    }

    /// The shape of a real 2.1.197 session killed while its second Bash
    /// call ran (fields cut to those the repair reads and writes).
    const CUT: &str = r#"{"type":"queue-operation","operation":"dequeue","sessionId":"ada9"}
{"parentUuid":null,"type":"user","message":{"role":"user","content":"Append the lines."},"uuid":"u1","cwd":"/w","sessionId":"ada9","version":"2.1.197"}
{"parentUuid":"u1","type":"assistant","message":{"id":"m1","content":[{"id":"c1","input":{"command":"echo 1 >> lines"},"name":"Bash","type":"tool_use"}]},"uuid":"a1","cwd":"/w","sessionId":"ada9","version":"2.1.197"}
{"parentUuid":"a1","type":"user","message":{"role":"user","content":[{"tool_use_id":"c1","type":"tool_result","content":"(Bash completed with no output)","is_error":false}]},"uuid":"u2","cwd":"/w","sessionId":"ada9","version":"2.1.197"}
{"parentUuid":"u2","type":"assistant","message":{"id":"m2","content":[{"id":"c2","input":{"command":"echo 2 >> lines; sleep 8"},"name":"Bash","type":"tool_use"}]},"uuid":"a2","entrypoint":"sdk-cli","cwd":"/w","sessionId":"ada9","version":"2.1.197","gitBranch":"HEAD"}
"#;

    #[test]
    fn an_interrupted_tool_call_gets_a_result_in_the_session_format() {
        let uuid = |parent: &str| format!("after-{parent}");
        let (lines, ids) = interrupted_results(CUT, "2026-12-01T00:00:00.000Z", &uuid).unwrap();
        assert_eq!(ids, ["c2"]);
        let v: Value = serde_json::from_str(lines.trim_end()).unwrap();
        assert_eq!(v["type"], "user");
        assert_eq!(v["parentUuid"], "a2");
        assert_eq!(v["uuid"], "after-a2");
        assert_eq!(v["sourceToolAssistantUUID"], "a2");
        assert_eq!(
            (v["sessionId"].as_str(), v["cwd"].as_str()),
            (Some("ada9"), Some("/w"))
        );
        let part = &v["message"]["content"][0];
        assert_eq!(part["type"], "tool_result");
        assert_eq!(part["tool_use_id"], "c2");
        assert_eq!(part["is_error"], true);
        assert_eq!(part["content"], INTERRUPTED_TEXT);
        assert_eq!(v["toolUseResult"]["interrupted"], true);

        // Once repaired, nothing is interrupted any more; the transcript
        // shows the result, and a session whose last message is complete
        // needs nothing.
        let repaired = format!("{CUT}{lines}");
        assert!(interrupted_results(&repaired, "t", &uuid).is_none());
        let t = parse_session(&repaired, "Append the lines.")
            .collected
            .transcript;
        assert_eq!(t.last().map(|e| e.text.as_str()), Some(INTERRUPTED_TEXT));
        assert!(interrupted_results(FILE, "t", &uuid).is_none());
    }

    #[test]
    fn fresh_uuids_are_distinct_and_shaped() {
        let a = fresh_uuid("p");
        let b = fresh_uuid("p");
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(a.as_bytes()[14], b'4');
        assert!(
            now_iso().ends_with('Z') && now_iso().len() == 24,
            "{}",
            now_iso()
        );
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
    }
}
