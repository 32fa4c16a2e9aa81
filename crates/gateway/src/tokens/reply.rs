//! Reading a call's tokens out of its reply and taking out what capture added, as the reply
//! passes: a whole JSON body at its end, a stream event by event (each complete event is
//! passed on as soon as it is read, so streaming stays streaming).
//!
//! Chat completions (vLLM): `prompt_token_ids` at the top (in a stream, its first chunk),
//! each choice's `token_ids` (in a stream, the delta's ids) and `logprobs.content[].logprob`;
//! with `return_tokens_as_token_ids` each logprob's `token` is `token_id:N`, which gives the
//! completion ids where `token_ids` is absent (vLLM before 0.10.2). Responses (vLLM):
//! `input_messages` and `output_messages`, each message's `tokens` (in a stream, in the
//! `response` of its events). Only the first choice is captured.
//!
//! Taking out: added id fields are removed, an added `logprobs` is put back to `null` (a
//! choice's value when none were asked for); every other byte stays the upstream's.

use bytes::Bytes;
use serde_json::Value;

use super::json_edit::{RawObject, edit_elements, edit_member};
use super::{Added, CallTokens, Captured, FaultKind, TOKENS_VERSION, TokenFault};
use crate::conversation::Route;

/// The capture of one reply in progress.
#[derive(Debug)]
pub struct Capture {
    route: Route,
    added: Added,
    sse: bool,
    /// The upstream answered with success: otherwise bytes pass untouched.
    ok: bool,
    call_id: String,
    buf: Vec<u8>,
    acc: Acc,
}

#[derive(Debug, Default)]
struct Acc {
    prompt_ids: Option<Vec<u32>>,
    completion_ids: Option<Vec<u32>>,
    /// Ids read from `token_id:N` logprob tokens.
    logprob_ids: Vec<u32>,
    logprobs: Option<Vec<f64>>,
    finish_reason: Option<String>,
    model: Option<String>,
    weights_version: Option<String>,
    /// The first malformed field met.
    malformed: Option<String>,
}

impl Capture {
    /// A capture of the reply of `call_id` on `route`, an SSE stream if `sse`, answered with
    /// success if `ok`.
    #[must_use]
    pub fn new(route: Route, added: Added, sse: bool, ok: bool, call_id: &str) -> Self {
        Self {
            route,
            added,
            sse,
            ok,
            call_id: call_id.to_owned(),
            buf: Vec::new(),
            acc: Acc::default(),
        }
    }

    /// Takes the next bytes of the reply and returns what can be passed on now.
    pub fn feed(&mut self, bytes: &[u8]) -> Option<Bytes> {
        if !self.ok {
            return Some(Bytes::copy_from_slice(bytes));
        }
        self.buf.extend_from_slice(bytes);
        if !self.sse {
            return None;
        }
        let mut out = Vec::new();
        while let Some(end) = event_end(&self.buf) {
            let event: Vec<u8> = self.buf.drain(..end).collect();
            out.extend_from_slice(&self.event(&event));
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// Ends the capture: what is left to pass on, and the tokens or why there are none.
    /// `broken` says the reply ended early.
    pub fn end(mut self, broken: bool) -> (Option<Bytes>, Captured) {
        let rest = std::mem::take(&mut self.buf);
        let rest = if !self.ok || rest.is_empty() {
            None
        } else if self.sse {
            Some(Bytes::from(self.event(&rest)))
        } else {
            Some(Bytes::from(self.whole(&rest)))
        };
        let captured = if !self.ok {
            Err(self.fault(FaultKind::Incomplete, "the upstream answered with an error"))
        } else if broken {
            Err(self.fault(FaultKind::Incomplete, "the reply broke off"))
        } else {
            self.tokens()
        };
        (rest, captured)
    }

    fn fault(&self, kind: FaultKind, what: &str) -> TokenFault {
        TokenFault::new(kind, format!("call {}: {what}", self.call_id))
    }

    /// A whole JSON body: read and edited.
    fn whole(&mut self, body: &[u8]) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(body) else {
            self.acc.malformed_once("the reply is not UTF-8");
            return body.to_vec();
        };
        let edited = match self.route {
            Route::Chat => {
                let Some(obj) = RawObject::parse(text) else {
                    self.acc.malformed_once("the reply is not a JSON object");
                    return body.to_vec();
                };
                self.acc.chat(obj, self.added, false)
            }
            Route::Responses => {
                let Ok(value) = serde_json::from_str::<Value>(text) else {
                    self.acc.malformed_once("the reply is not JSON");
                    return body.to_vec();
                };
                self.acc.response(&value);
                strip_responses(self.added, text)
            }
            Route::Messages | Route::Models => None,
        };
        edited.map_or_else(|| body.to_vec(), String::into_bytes)
    }

    /// One SSE event: its data read and edited, its other lines kept.
    fn event(&mut self, event: &[u8]) -> Vec<u8> {
        let Ok(text) = std::str::from_utf8(event) else {
            return event.to_vec();
        };
        let crlf = text.contains("\r\n");
        let lines: Vec<&str> = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .collect();
        let data: Vec<&str> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            return event.to_vec();
        }
        let joined = data.join("\n");
        let edited = match self.route {
            // `[DONE]` and other data that is not an object pass as they are.
            Route::Chat => match RawObject::parse(&joined) {
                Some(obj) => self.acc.chat(obj, self.added, true),
                None => None,
            },
            Route::Responses => match serde_json::from_str::<Value>(&joined)
                .ok()
                .as_ref()
                .and_then(|v| v.get("response"))
            {
                Some(response) if response.is_object() => {
                    self.acc.response(response);
                    let added = self.added;
                    edit_member(&joined, "response", |r| strip_responses(added, r))
                }
                _ => None,
            },
            Route::Messages | Route::Models => None,
        };
        let Some(new) = edited else {
            return event.to_vec();
        };
        let newline = if crlf { "\r\n" } else { "\n" };
        let mut out = String::with_capacity(event.len());
        let mut wrote_data = false;
        // `lines` ends with the empty lines of the event's end; they are written back as read.
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("data:") {
                if !wrote_data {
                    out.push_str("data: ");
                    out.push_str(&new);
                    out.push_str(newline);
                    wrote_data = true;
                }
                continue;
            }
            out.push_str(line);
            if i + 1 < lines.len() {
                out.push_str(newline);
            }
        }
        out.into_bytes()
    }

    fn tokens(self) -> Captured {
        let acc = self.acc;
        let fault =
            |kind, what: String| TokenFault::new(kind, format!("call {}: {what}", self.call_id));
        if let Some(what) = acc.malformed {
            return Err(fault(FaultKind::Malformed, what));
        }
        let (prompt_field, completion_field) = match self.route {
            Route::Responses => ("input_messages", "output_messages"),
            _ => ("prompt_token_ids", "token_ids"),
        };
        let Some(prompt_ids) = acc.prompt_ids else {
            return Err(fault(
                FaultKind::Missing,
                format!("the upstream returned no `{prompt_field}`"),
            ));
        };
        let completion_ids = match acc.completion_ids {
            Some(ids) => ids,
            None if !acc.logprob_ids.is_empty() => acc.logprob_ids,
            None => {
                return Err(fault(
                    FaultKind::Missing,
                    format!("the upstream returned no `{completion_field}`"),
                ));
            }
        };
        if let Some(lp) = &acc.logprobs
            && lp.len() != completion_ids.len()
        {
            return Err(fault(
                FaultKind::Malformed,
                format!(
                    "`logprobs` has {} entries for {} completion ids",
                    lp.len(),
                    completion_ids.len()
                ),
            ));
        }
        Ok(CallTokens {
            v: TOKENS_VERSION,
            prompt_ids,
            completion_ids,
            logprobs: acc.logprobs,
            finish_reason: acc.finish_reason,
            model: acc.model,
            weights_version: acc.weights_version,
        })
    }
}

impl Acc {
    fn malformed_once(&mut self, what: impl Into<String>) {
        self.malformed.get_or_insert_with(|| what.into());
    }

    fn meta(&mut self, v: &Value) {
        if let Some(m) = v.get("model").and_then(Value::as_str) {
            self.model = Some(m.to_owned());
        }
        if let Some(f) = v.get("system_fingerprint").and_then(Value::as_str) {
            self.weights_version = Some(f.to_owned());
        }
    }

    /// A chat completion or a stream's chunk (whose ids add up), read and edited in one pass
    /// over its raw members: the text less what capture added, `None` if nothing was.
    fn chat(&mut self, mut obj: RawObject<'_>, added: Added, chunk: bool) -> Option<String> {
        if let Some(m) = obj
            .get("model")
            .and_then(|r| serde_json::from_str::<String>(r).ok())
        {
            self.model = Some(m);
        }
        if let Some(f) = obj
            .get("system_fingerprint")
            .and_then(|r| serde_json::from_str::<String>(r).ok())
        {
            self.weights_version = Some(f);
        }
        match obj
            .get("prompt_token_ids")
            .map(serde_json::from_str::<Option<Vec<u32>>>)
        {
            None | Some(Ok(None)) => {}
            Some(Ok(Some(ids))) => self.prompt_ids = Some(ids),
            Some(Err(_)) => self.malformed_once("`prompt_token_ids` is not a list of token ids"),
        }
        if added.token_ids {
            obj.remove("prompt_token_ids");
        }
        let mut first = true;
        let choices = obj.get("choices").and_then(|choices| {
            edit_elements(choices, |c| {
                let mut c = RawObject::parse(c)?;
                if std::mem::take(&mut first) {
                    self.choice(&c, chunk);
                }
                if added.token_ids {
                    c.remove("token_ids");
                }
                if added.logprobs && c.get("logprobs").is_some_and(|l| l != "null") {
                    c.set("logprobs", "null".to_owned());
                }
                c.changed().then(|| c.write())
            })
        });
        if let Some(new) = choices {
            obj.set("choices", new);
        }
        obj.changed().then(|| obj.write())
    }

    /// The first choice's finish reason, ids and logprobs.
    fn choice(&mut self, c: &RawObject<'_>, chunk: bool) {
        if let Some(Ok(Some(f))) = c
            .get("finish_reason")
            .map(serde_json::from_str::<Option<String>>)
        {
            self.finish_reason = Some(f);
        }
        match c
            .get("token_ids")
            .map(serde_json::from_str::<Option<Vec<u32>>>)
        {
            None | Some(Ok(None)) => {}
            Some(Ok(Some(ids))) if chunk => {
                self.completion_ids.get_or_insert_default().extend(ids);
            }
            Some(Ok(Some(ids))) => self.completion_ids = Some(ids),
            Some(Err(_)) => {
                self.malformed_once("`choices[0].token_ids` is not a list of token ids");
            }
        }
        let Some(raw) = c.get("logprobs") else { return };
        match serde_json::from_str::<Option<LogprobsView<'_>>>(raw) {
            Ok(None | Some(LogprobsView { content: None })) => {}
            Ok(Some(LogprobsView {
                content: Some(entries),
            })) => {
                let lp = self.logprobs.get_or_insert_default();
                for e in entries {
                    lp.push(e.logprob);
                    if let Some(id) = e
                        .token
                        .as_deref()
                        .and_then(|t| t.strip_prefix("token_id:"))
                        .and_then(|n| n.parse().ok())
                    {
                        self.logprob_ids.push(id);
                    }
                }
            }
            Err(_) => self.malformed_once(
                "`choices[0].logprobs.content` is not a list of entries with a numeric `logprob`",
            ),
        }
    }

    /// A Responses response object.
    fn response(&mut self, v: &Value) {
        self.meta(v);
        if let Some(status) = v.get("status").and_then(Value::as_str) {
            let reason = v
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                .unwrap_or(status);
            self.finish_reason = Some(reason.to_owned());
        }
        for field in ["input_messages", "output_messages"] {
            let ids = match v.get(field) {
                None | Some(Value::Null) => continue,
                Some(Value::Array(messages)) => messages
                    .iter()
                    .map(|m| m.get("tokens").and_then(ids_of))
                    .collect::<Option<Vec<Vec<u32>>>>()
                    .map(|parts| parts.concat()),
                Some(_) => None,
            };
            let Some(ids) = ids else {
                self.malformed_once(format!("`{field}` is not a list of messages with `tokens`"));
                return;
            };
            if field == "input_messages" {
                self.prompt_ids = Some(ids);
            } else {
                self.completion_ids = Some(ids);
            }
        }
        let lps: Vec<f64> = v
            .get("output")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|item| item.get("content").and_then(Value::as_array))
            .flatten()
            .filter_map(|part| part.get("logprobs").and_then(Value::as_array))
            .flatten()
            .filter_map(|e| e.get("logprob").and_then(Value::as_f64))
            .collect();
        if !lps.is_empty() {
            self.logprobs = Some(lps);
        }
    }
}

/// A choice's `logprobs`, read without building a tree: only what capture keeps.
#[derive(serde::Deserialize)]
struct LogprobsView<'a> {
    #[serde(borrow, default)]
    content: Option<Vec<LogprobEntry<'a>>>,
}

#[derive(serde::Deserialize)]
struct LogprobEntry<'a> {
    logprob: f64,
    #[serde(borrow, default)]
    token: Option<std::borrow::Cow<'a, str>>,
}

/// A list of token ids.
fn ids_of(v: &Value) -> Option<Vec<u32>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect()
}

/// The end of the first complete SSE event in `buf` (after its blank line).
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn strip_responses(added: Added, text: &str) -> Option<String> {
    let mut obj = RawObject::parse(text)?;
    if added.response_messages {
        obj.remove("input_messages");
        obj.remove("output_messages");
    }
    obj.changed().then(|| obj.write())
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    const ALL: Added = Added {
        token_ids: true,
        logprobs: true,
        response_messages: false,
    };

    #[test]
    fn a_whole_chat_reply_gives_its_ids_and_loses_them() {
        let body = br#"{"id":"x","choices":[{"finish_reason":"stop","index":0,"logprobs":{"content":[{"logprob":-0.5,"token":"token_id:7"},{"logprob":-1.0,"token":"token_id:8"}]},"message":{"content":"hi","role":"assistant"},"token_ids":[7,8]}],"model":"m","prompt_token_ids":[1,2,3]}"#;
        let mut c = Capture::new(Route::Chat, ALL, false, true, "k#0");
        assert!(c.feed(&body[..20]).is_none());
        assert!(c.feed(&body[20..]).is_none());
        let (rest, tokens) = c.end(false);
        assert_eq!(
            &rest.unwrap()[..],
            br#"{"id":"x","choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"hi","role":"assistant"}}],"model":"m"}"#
        );
        let t = tokens.unwrap();
        assert_eq!(t.prompt_ids, [1, 2, 3]);
        assert_eq!(t.completion_ids, [7, 8]);
        assert_eq!(t.logprobs, Some(vec![-0.5, -1.0]));
        assert_eq!(t.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn a_streamed_chat_reply_adds_up_its_deltas_event_by_event() {
        let events = [
            "data: {\"choices\":[{\"delta\":{\"content\":\"\"},\"index\":0,\"logprobs\":null}],\"prompt_token_ids\":[5,6]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"index\":0,\"logprobs\":{\"content\":[{\"logprob\":-0.25,\"token\":\"token_id:9\"}]},\"token_ids\":[9]}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"index\":0,\"logprobs\":null,\"token_ids\":[]}]}\n\ndata: [DONE]\n\n",
        ];
        let mut c = Capture::new(Route::Chat, ALL, true, true, "k#1");
        let mut out = Vec::new();
        let all = events.concat();
        // Split mid-event: an event passes once it is whole.
        for piece in all.as_bytes().chunks(7) {
            if let Some(b) = c.feed(piece) {
                out.extend_from_slice(&b);
            }
        }
        let (rest, tokens) = c.end(false);
        assert!(rest.is_none());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "data: {\"choices\":[{\"delta\":{\"content\":\"\"},\"index\":0,\"logprobs\":null}]}\n\n\
             data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"index\":0,\"logprobs\":null}]}\n\n\
             data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"index\":0,\"logprobs\":null}]}\n\ndata: [DONE]\n\n"
        );
        let t = tokens.unwrap();
        assert_eq!((t.prompt_ids, t.completion_ids), (vec![5, 6], vec![9]));
    }

    #[test]
    fn an_upstream_that_ignores_the_fields_gets_a_marker_not_ids() {
        let mut c = Capture::new(Route::Chat, ALL, false, true, "k#2");
        c.feed(br#"{"choices":[{"message":{"content":"x"}}]}"#);
        let (_, tokens) = c.end(false);
        let fault = tokens.unwrap_err();
        assert_eq!(fault.kind, FaultKind::Missing);
        assert!(fault.message.contains("k#2") && fault.message.contains("prompt_token_ids"));
        let mut c = Capture::new(Route::Chat, ALL, false, true, "k#3");
        c.feed(br#"{"prompt_token_ids":[1,"two"],"choices":[]}"#);
        let fault = c.end(false).1.unwrap_err();
        assert_eq!(fault.kind, FaultKind::Malformed, "{fault:?}");
    }

    #[test]
    fn a_responses_stream_loses_its_messages_in_the_response_of_each_event() {
        let added = Added {
            response_messages: true,
            ..Added::default()
        };
        let mut c = Capture::new(Route::Responses, added, true, true, "k#4");
        let ev = "event: response.completed\ndata: {\"response\":{\"input_messages\":[{\"tokens\":[1,2],\"type\":\"raw_message_tokens\"}],\"output_messages\":[{\"tokens\":[3]}],\"status\":\"completed\"},\"type\":\"response.completed\"}\n\n";
        let out = c.feed(ev.as_bytes()).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "event: response.completed\ndata: {\"response\":{\"status\":\"completed\"},\"type\":\"response.completed\"}\n\n"
        );
        let t = c.end(false).1.unwrap();
        assert_eq!((t.prompt_ids, t.completion_ids), (vec![1, 2], vec![3]));
        assert_eq!(t.finish_reason.as_deref(), Some("completed"));
    }
}
