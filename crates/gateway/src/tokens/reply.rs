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

use std::ops::Range;

use bytes::Bytes;
use serde_json::Value;

use super::json_edit::{
    Edits, Object, each_element, each_member, ids_at, ids_into, number, string, token_at,
};
use super::{Added, CallTokens, Captured, FaultKind, TokenFault};
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
        if !self.sse {
            self.buf.extend_from_slice(bytes);
            return None;
        }
        let mut out = Vec::with_capacity(self.buf.len() + bytes.len());
        if self.buf.is_empty() {
            // The usual chunk: whole events, read where they arrived.
            let at = self.events(bytes, &mut out);
            self.buf.extend_from_slice(&bytes[at..]);
        } else {
            self.buf.extend_from_slice(bytes);
            let mut buf = std::mem::take(&mut self.buf);
            let at = self.events(&buf, &mut out);
            buf.drain(..at);
            self.buf = buf;
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// Passes the whole events at the start of `buf` to `out`; returns where they end.
    fn events(&mut self, buf: &[u8], out: &mut Vec<u8>) -> usize {
        let mut at = 0;
        while let Some(end) = event_end(&buf[at..]) {
            self.event(&buf[at..at + end], out);
            at += end;
        }
        at
    }

    /// For a chat reply answered with success, whether it listed its completion's
    /// `token_ids`, so far (a whole body's once [`Capture::rest`] was taken); `None` for
    /// other replies.
    #[must_use]
    pub fn listed_token_ids(&self) -> Option<bool> {
        (self.route == Route::Chat && self.ok).then_some(self.acc.completion_ids.is_some())
    }

    /// Ends the capture: what is left to pass on, and the tokens or why there are none.
    /// `broken` says the reply ended early.
    pub fn end(mut self, broken: bool) -> (Option<Bytes>, Captured) {
        let rest = self.rest();
        (rest, self.captured(broken))
    }

    /// What is left to pass on once the reply has ended: a whole body, read and edited, or a
    /// last event without its blank line.
    pub fn rest(&mut self) -> Option<Bytes> {
        let rest = std::mem::take(&mut self.buf);
        if !self.ok || rest.is_empty() {
            None
        } else if self.sse {
            let mut out = Vec::with_capacity(rest.len());
            self.event(&rest, &mut out);
            Some(Bytes::from(out))
        } else {
            Some(Bytes::from(self.whole(&rest)))
        }
    }

    /// The tokens, or why there are none, once [`Capture::rest`] was taken. `broken` says
    /// the reply ended early.
    pub fn captured(self, broken: bool) -> Captured {
        if !self.ok {
            Err(self.fault(FaultKind::Incomplete, "the upstream answered with an error"))
        } else if broken {
            Err(self.fault(FaultKind::Incomplete, "the reply broke off"))
        } else {
            self.tokens()
        }
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
        let mut edits = Edits::new(text);
        match self.route {
            Route::Chat => {
                if !self.acc.chat(text, &mut edits, self.added, false) {
                    self.acc.malformed_once("the reply is not a JSON object");
                    return body.to_vec();
                }
            }
            Route::Responses => {
                let Ok(value) = serde_json::from_str::<Value>(text) else {
                    self.acc.malformed_once("the reply is not JSON");
                    return body.to_vec();
                };
                self.acc.response(&value);
                if let Some(obj) = Object::parse(text) {
                    strip_responses(self.added, &obj, &mut edits);
                }
            }
            Route::Messages | Route::Models => {}
        }
        let mut out = Vec::with_capacity(body.len());
        edits.write_to(&mut out);
        out
    }

    /// One SSE event, written to `out`: its data read and edited, every other byte kept.
    fn event(&mut self, event: &[u8], out: &mut Vec<u8>) {
        let Ok(text) = std::str::from_utf8(event) else {
            out.extend_from_slice(event);
            return;
        };
        match data_lines(text) {
            (0, _) | (_, None) => out.extend_from_slice(event),
            // The usual event: one data line, edited where it stands.
            (1, Some(span)) => {
                let data = &text[span.clone()];
                let mut edits = Edits::new(data);
                self.data(data, &mut edits);
                out.extend_from_slice(&event[..span.start]);
                edits.write_to(out);
                out.extend_from_slice(&event[span.end..]);
            }
            _ => self.split_event(text, out),
        }
    }

    /// An event whose data spans several lines: joined, edited, written back as one line.
    fn split_event(&mut self, text: &str, out: &mut Vec<u8>) {
        let crlf = text.contains("\r\n");
        let lines: Vec<&str> = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .collect();
        let joined = lines
            .iter()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect::<Vec<_>>()
            .join("\n");
        let mut edits = Edits::new(&joined);
        self.data(&joined, &mut edits);
        let Some(new) = edits.finish() else {
            out.extend_from_slice(text.as_bytes());
            return;
        };
        let newline = if crlf { "\r\n" } else { "\n" };
        let mut wrote_data = false;
        // `lines` ends with the empty lines of the event's end; they are written back as read.
        for (i, line) in lines.iter().enumerate() {
            if line.starts_with("data:") {
                if !wrote_data {
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(new.as_bytes());
                    out.extend_from_slice(newline.as_bytes());
                    wrote_data = true;
                }
                continue;
            }
            out.extend_from_slice(line.as_bytes());
            if i + 1 < lines.len() {
                out.extend_from_slice(newline.as_bytes());
            }
        }
    }

    /// An event's data: read, and what capture added cut into `edits`. `[DONE]` and other
    /// data that is not an object pass as they are.
    fn data<'a>(&mut self, data: &'a str, edits: &mut Edits<'a>) {
        match self.route {
            Route::Chat => {
                self.acc.chat(data, edits, self.added, true);
            }
            Route::Responses => {
                let value = serde_json::from_str::<Value>(data).ok();
                let Some(response) = value
                    .as_ref()
                    .and_then(|v| v.get("response"))
                    .filter(|r| r.is_object())
                else {
                    return;
                };
                self.acc.response(response);
                if let Some(inner) = Object::parse(data)
                    .and_then(|top| top.span("response"))
                    .and_then(|span| Object::at(data, span))
                {
                    strip_responses(self.added, &inner, edits);
                }
            }
            Route::Messages | Route::Models => {}
        }
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

    /// A chat completion or a stream's chunk (whose ids add up), read in one pass, and what
    /// capture added cut into `edits`; false if `text` is not an object (nothing is cut).
    /// Members are matched by their raw keys, as vLLM writes them (no escapes).
    fn chat<'a>(
        &mut self,
        text: &'a str,
        edits: &mut Edits<'a>,
        added: Added,
        chunk: bool,
    ) -> bool {
        // The choices' cuts are kept apart until the whole object has been read: a text that
        // breaks off after them is passed on untouched.
        let mut cuts = Edits::new(text);
        let obj = Object::parse_with(text, |key, at| match key {
            "\"model\"" => self.text_field(text, at, Field::Model),
            "\"system_fingerprint\"" => self.text_field(text, at, Field::WeightsVersion),
            "\"prompt_token_ids\"" => match ids_at(text, at) {
                Some((ids, end)) => {
                    if ids.is_some() {
                        self.prompt_ids = ids;
                    }
                    Some(end)
                }
                None => {
                    self.malformed_once("`prompt_token_ids` is not a list of token ids");
                    None
                }
            },
            "\"choices\"" => {
                let mut first = true;
                each_element(text, at, |at| {
                    let choice = Object::read(text, at, |key, at| {
                        if !first {
                            return None;
                        }
                        self.choice_field(text, key, at, chunk)
                    })?;
                    first = false;
                    if added.token_ids {
                        choice.remove(&["token_ids"], &mut cuts);
                    }
                    if added.logprobs
                        && let Some(span) = choice.span("logprobs")
                        && &text[span.clone()] != "null"
                    {
                        cuts.replace(span, "null".into());
                    }
                    Some(choice.end())
                })
            }
            _ => None,
        });
        let Some(obj) = obj else {
            // An object cut short or broken may have given ids before the break: fail closed.
            if chunk && text.trim_start().starts_with('{') {
                self.malformed_once("an event's data is not a whole JSON object");
            }
            return false;
        };
        if added.token_ids {
            obj.remove(&["prompt_token_ids"], edits);
        }
        edits.extend(cuts);
        true
    }

    /// A string member of the reply kept as is (`model`, `system_fingerprint`): its end.
    fn text_field(&mut self, text: &str, at: usize, field: Field) -> Option<usize> {
        let raw = token_at(text, at)?;
        if let Some(value) = string(raw) {
            let slot = match field {
                Field::Model => &mut self.model,
                Field::WeightsVersion => &mut self.weights_version,
            };
            if slot.as_deref() != Some(&value) {
                *slot = Some(value.into_owned());
            }
        }
        Some(at + raw.len())
    }

    /// A member of the first choice: its finish reason, ids and logprobs. Returns the
    /// member's end when read here.
    fn choice_field(&mut self, text: &str, key: &str, at: usize, chunk: bool) -> Option<usize> {
        match key {
            "\"finish_reason\"" => {
                let raw = token_at(text, at)?;
                if let Some(f) = string(raw) {
                    self.finish_reason = Some(f.into_owned());
                }
                Some(at + raw.len())
            }
            "\"token_ids\"" => {
                // A chunk's ids add to the completion's, read in place; a whole body's are it.
                let mut ids = if chunk {
                    self.completion_ids.take()
                } else {
                    None
                };
                let had = ids.is_some();
                let read = ids_into(text, at, ids.get_or_insert_with(|| Vec::with_capacity(256)));
                match read {
                    Some((true, end)) => {
                        self.completion_ids = ids;
                        Some(end)
                    }
                    // `null`, or not a list of ids: nothing was added.
                    other => {
                        if chunk && had {
                            self.completion_ids = ids;
                        }
                        if other.is_none() {
                            self.malformed_once(
                                "`choices[0].token_ids` is not a list of token ids",
                            );
                        }
                        other.map(|(_, end)| end)
                    }
                }
            }
            "\"logprobs\"" => {
                let end = self.logprobs_at(text, at);
                if end.is_none() {
                    self.malformed_once(
                        "`choices[0].logprobs.content` is not a list of entries with a numeric `logprob`",
                    );
                }
                end
            }
            _ => None,
        }
    }

    /// Adds the logprobs (and `token_id:N` ids) of a choice's `logprobs` at `at` and returns
    /// its end; `None` if they are malformed. `null`, or no `content`, has none.
    fn logprobs_at(&mut self, text: &str, at: usize) -> Option<usize> {
        if text[at..].starts_with("null") {
            return Some(at + 4);
        }
        each_member(text, at, |key, at| {
            if key != "\"content\"" || text[at..].starts_with("null") {
                return None;
            }
            let lp = self.logprobs.get_or_insert_with(|| Vec::with_capacity(256));
            // `token_id:N` ids stand in for `token_ids` only: once those came, they are
            // not read.
            let want_ids = self.completion_ids.is_none();
            let ids = &mut self.logprob_ids;
            each_element(text, at, |at| {
                let mut logprob = None;
                let end = each_member(text, at, |key, at| match key {
                    "\"logprob\"" => {
                        let raw = token_at(text, at)?;
                        // A finite number: `-1e999` reads as infinity, which no document holds.
                        logprob = number(raw).filter(|x| x.is_finite());
                        Some(at + raw.len())
                    }
                    "\"token\"" if want_ids => {
                        let raw = token_at(text, at)?;
                        if let Some(id) =
                            string(raw).and_then(|t| t.strip_prefix("token_id:")?.parse().ok())
                        {
                            ids.push(id);
                        }
                        Some(at + raw.len())
                    }
                    _ => None,
                })?;
                lp.push(logprob?);
                Some(end)
            })
        })
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

/// A list of token ids.
fn ids_of(v: &Value) -> Option<Vec<u32>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
        .collect()
}

/// The string members of a reply kept as they are.
#[derive(Debug, Clone, Copy)]
enum Field {
    Model,
    WeightsVersion,
}

/// The end of the first complete SSE event in `buf` (after its blank line).
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = memchr::memmem::find(buf, b"\n\n").map(|i| i + 2);
    // Most streams have no CR: the second search runs only where one is.
    let crlf = memchr::memchr(b'\r', buf)
        .and_then(|_| memchr::memmem::find(buf, b"\r\n\r\n"))
        .map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Cuts the message lists capture asked for out of a Responses response object.
fn strip_responses<'a>(added: Added, response: &Object<'a>, edits: &mut Edits<'a>) {
    if added.response_messages {
        response.remove(&["input_messages", "output_messages"], edits);
    }
}

/// How many lines of an SSE event are data lines, and the value span of the last one (after
/// `data:` and its optional space, before the line's end).
fn data_lines(text: &str) -> (usize, Option<Range<usize>>) {
    let mut count = 0;
    let mut span = None;
    let mut at = 0;
    let ends = memchr::memchr_iter(b'\n', text.as_bytes()).chain(Some(text.len()));
    for end in ends {
        if at > text.len() {
            break;
        }
        let body = &text[at..end];
        let body = body.strip_suffix('\r').unwrap_or(body);
        if let Some(rest) = body.strip_prefix("data:") {
            count += 1;
            let start = at + body.len() - rest.len() + usize::from(rest.starts_with(' '));
            span = Some(start..at + body.len());
        }
        at = end + 1;
    }
    (count, span)
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
    fn without_token_ids_the_logprob_tokens_give_the_completion_ids() {
        // An older vLLM: `return_token_ids` ignored, logprob tokens as `token_id:N`.
        let only_lp = Added {
            token_ids: false,
            ..ALL
        };
        let events = [
            "data: {\"choices\":[{\"index\":0,\"logprobs\":{\"content\":[{\"token\":\"token_id:4\",\"logprob\":-0.5}]}}],\"prompt_token_ids\":[1]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"logprobs\":{\"content\":[{\"token\":\"token_id:5\",\"logprob\":-1.5},{\"token\":\"token_id:6\",\"logprob\":-2.5}]}}]}\n\n",
        ];
        let mut c = Capture::new(Route::Chat, only_lp, true, true, "k#5");
        c.feed(events.concat().as_bytes());
        let t = c.end(false).1.unwrap();
        assert_eq!((t.prompt_ids, t.completion_ids), (vec![1], vec![4, 5, 6]));
        assert_eq!(t.logprobs, Some(vec![-0.5, -1.5, -2.5]));
    }

    #[test]
    fn a_logprob_beyond_f64_is_malformed_not_infinite() {
        let body = br#"{"choices":[{"index":0,"logprobs":{"content":[{"logprob":-1e999,"token":"a"}]},"token_ids":[7]}],"prompt_token_ids":[1]}"#;
        let mut c = Capture::new(Route::Chat, ALL, false, true, "k#6");
        c.feed(body);
        let fault = c.end(false).1.unwrap_err();
        assert_eq!(fault.kind, FaultKind::Malformed);
        assert!(
            fault.message.contains("k#6") && fault.message.contains("logprob"),
            "{fault:?}"
        );
    }

    #[test]
    fn a_broken_event_passes_as_it_came_and_marks_the_call_malformed() {
        let mut c = Capture::new(Route::Chat, ALL, true, true, "k#5");
        let broken = "data: {\"prompt_token_ids\":[1,2],\"choices\":[{\"token_ids\":[3]}\n\n";
        let out = c.feed(broken.as_bytes()).unwrap();
        assert_eq!(std::str::from_utf8(&out).unwrap(), broken);
        let fault = c.end(false).1.unwrap_err();
        assert_eq!(fault.kind, FaultKind::Malformed, "{fault:?}");
        assert!(fault.message.contains("k#5"), "{fault:?}");
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
