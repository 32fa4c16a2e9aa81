//! Deciding the answer to one request from the script: which step, which turn, which delays.
//! Pure, so the same request always gets the same answer (unless the script asks for
//! `{sample}`, the number of times that request was asked before).

use sha2::{Digest, Sha256};

use crate::render::Params;
use crate::request::Request;
use crate::script::{Fail, Script, StepKey};
use crate::tools::{pick_shell, shell_arguments};
use crate::turn::{Call, Turn};

/// What to send back.
#[derive(Debug, Clone)]
pub enum Reply {
    Turn { turn: Turn, params: Params },
    Fail(Fail),
}

/// The answer to one request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub step: usize,
    pub reply: Reply,
    pub delay_ms: u64,
    pub chunk_delay_ms: u64,
    pub break_after_events: Option<usize>,
    /// The tool called, if any.
    pub tool: Option<String>,
}

/// Answers `req` (whose raw body is `body`); `counter` is the number of earlier requests and
/// `sample` the number of earlier requests with this same body (a sampling model answers a
/// repeated prompt differently: `{sample}` in a step's text or command).
#[must_use]
pub fn answer(
    script: &Script,
    req: &Request,
    body: &[u8],
    counter: usize,
    sample: usize,
) -> Answer {
    let index = match script.key {
        StepKey::Position => req.position,
        StepKey::Counter => counter,
        StepKey::ToolResults => req.results,
        StepKey::FinishedToolResults => req.finished,
    };
    let step = script.step(index);
    let seed = hex12(body);
    let subst = |s: &str| {
        s.replace("{step}", &index.to_string())
            .replace("{position}", &req.position.to_string())
            .replace("{sample}", &sample.to_string())
    };
    let mut tool_name = None;
    let reply = if let Some(fail) = step.fail.clone() {
        Reply::Fail(fail)
    } else {
        let shell = if step.shell.is_empty() {
            None
        } else {
            pick_shell(&req.tools, step.tool.as_deref())
        };
        let turn = match shell {
            Some(tool) => {
                tool_name = Some(tool.name.clone());
                let calls = step
                    .shell
                    .iter()
                    .enumerate()
                    .map(|(i, cmd)| Call {
                        id: format!("call_{seed}_{i}"),
                        name: tool.name.clone(),
                        arguments: shell_arguments(tool, &subst(cmd), index).to_string(),
                    })
                    .collect();
                Turn { text: None, calls }
            }
            None => {
                let text = match (&step.text, req.tools.is_empty(), &script.no_tools_text) {
                    (_, true, Some(t)) => subst(t),
                    (Some(t), _, _) => subst(t),
                    (None, _, _) => format!("no shell tool offered for step {index}"),
                };
                Turn {
                    text: Some(text),
                    calls: Vec::new(),
                }
            }
        };
        Reply::Turn {
            turn,
            params: Params {
                id: seed,
                model: req.model.clone(),
                chunks: step.chunks.unwrap_or(script.stream_chunks),
                input_tokens: (body.len() / 4) as u64,
                include_usage: req.include_usage,
                tokens: None,
            },
        }
    };
    Answer {
        step: index,
        reply,
        delay_ms: step.delay_ms,
        chunk_delay_ms: step.chunk_delay_ms.unwrap_or(script.chunk_delay_ms),
        break_after_events: step.break_after_events,
        tool: tool_name,
    }
}

/// Hex SHA-256 of `bytes`.
#[must_use]
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn hex12(bytes: &[u8]) -> String {
    let mut s = sha256_hex(bytes);
    s.truncate(12);
    s
}
