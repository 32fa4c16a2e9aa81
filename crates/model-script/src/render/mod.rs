//! Rendering one model turn as the bytes of each API, streamed (SSE events) or not.
//! Pure: the same turn and parameters always give the same bytes, so a repeated request
//! gets a byte-identical answer.

mod chat;
mod messages;
mod responses;

use crate::request::Api;

pub use crate::turn::{Call, Turn};

/// Everything besides the turn that shapes the bytes.
#[derive(Debug, Clone)]
pub struct Params {
    /// Deterministic seed for ids.
    pub id: String,
    pub model: String,
    pub chunks: usize,
    pub input_tokens: u64,
    pub include_usage: bool,
    /// Token mode: what the request asked for, and its prompt's ids.
    pub tokens: Option<crate::tokens::TokenAsk>,
}

impl Params {
    fn output_tokens(&self, turn: &Turn) -> u64 {
        let text = turn.text.as_deref().map_or(0, str::len);
        let args: usize = turn
            .calls
            .iter()
            .map(|c| c.arguments.len() + c.name.len())
            .sum();
        ((text + args) / 4 + 1) as u64
    }
}

/// The rendered answer: one body, or a list of SSE events.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub content_type: &'static str,
    pub frames: Vec<Vec<u8>>,
}

/// Renders `turn` for `api`.
#[must_use]
pub fn render(api: Api, stream: bool, turn: &Turn, params: &Params) -> Rendered {
    if stream {
        let frames = match api {
            Api::Chat => chat::stream(turn, params),
            Api::Responses => responses::stream(turn, params),
            Api::Messages => messages::stream(turn, params),
        };
        Rendered {
            content_type: "text/event-stream",
            frames,
        }
    } else {
        let body = match api {
            Api::Chat => chat::whole(turn, params),
            Api::Responses => responses::whole(turn, params),
            Api::Messages => messages::whole(turn, params),
        };
        Rendered {
            content_type: "application/json",
            frames: vec![body.to_string().into_bytes()],
        }
    }
}

/// Splits `text` into at most `n` non-empty pieces on char boundaries.
fn split(text: &str, n: usize) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let n = n.clamp(1, chars.len());
    let per = chars.len().div_ceil(n);
    let mut out = Vec::with_capacity(n);
    let mut i = 0;
    while i < chars.len() {
        let start = chars[i].0;
        let end = chars.get(i + per).map_or(text.len(), |c| c.0);
        out.push(&text[start..end]);
        i += per;
    }
    out
}

/// An SSE frame with an event name.
fn named_event(name: &str, data: &serde_json::Value) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

/// An SSE frame with data only.
fn data_event(data: &str) -> Vec<u8> {
    format!("data: {data}\n\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_every_char() {
        let pieces = split("héllo wörld", 4);
        assert_eq!(pieces.concat(), "héllo wörld");
        assert!(pieces.len() <= 4);
        assert!(split("", 3).is_empty());
        assert_eq!(split("ab", 5), vec!["a", "b"]);
    }
}
