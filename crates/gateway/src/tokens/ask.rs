//! The fields a request gets so a vLLM upstream returns its token ids: on chat completions
//! `return_token_ids` (vLLM 0.10.2 and later), and `logprobs` with
//! `return_tokens_as_token_ids` unless the harness asked for logprobs itself (then its own
//! settings stand and it sees them); on Responses `enable_response_messages`, whose
//! `input_messages` and `output_messages` carry the raw tokens. Only what the harness did
//! not already ask for is added, and only that is taken out of the reply.
//!
//! `return_tokens_as_token_ids` stands in for `return_token_ids` on a server that does not
//! list `token_ids` (vLLM before 0.10.2). It makes every logprob entry spell its token as
//! `token_id:N`, with that text's bytes, which nearly doubles the logprob JSON; so it is asked
//! for only until the upstream has shown it lists `token_ids` ([`Wanted::logprob_ids`]).

use bytes::Bytes;

use super::Added;
use super::json_edit::{Edits, Object};
use crate::conversation::Route;

/// What a request asks for besides the ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// `logprobs` (chat). Without them the replies stay about as small as without capture.
    pub logprobs: bool,
    /// With the logprobs, `return_tokens_as_token_ids`: the completion's ids read from the
    /// logprob tokens, for an upstream not known to list `token_ids`.
    pub logprob_ids: bool,
}

/// The request to send upstream and what was added to it; `None` when nothing is added (a
/// route capture does not cover, a body that is not an object).
#[must_use]
pub fn ask(route: Route, body: &[u8], wanted: Wanted) -> Option<(Bytes, Added)> {
    let text = std::str::from_utf8(body).ok()?;
    let obj = Object::parse(text)?;
    let mut edits = Edits::new(text);
    let mut added = Added::default();
    match route {
        Route::Chat => {
            if obj.get("return_token_ids") != Some("true") {
                obj.set("return_token_ids", "true", &mut edits);
                added.token_ids = true;
            }
            if wanted.logprobs && obj.get("logprobs") != Some("true") {
                obj.set("logprobs", "true", &mut edits);
                if wanted.logprob_ids {
                    obj.set("return_tokens_as_token_ids", "true", &mut edits);
                }
                added.logprobs = true;
            }
        }
        Route::Responses => {
            if obj.get("enable_response_messages") != Some("true") {
                obj.set("enable_response_messages", "true", &mut edits);
                added.response_messages = true;
            }
        }
        Route::Messages | Route::Models => return None,
    }
    let out = match edits.finish() {
        Some(edited) => Bytes::from(edited),
        None => Bytes::copy_from_slice(body),
    };
    Some((out, added))
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    const ALL: Wanted = Wanted {
        logprobs: true,
        logprob_ids: true,
    };
    const IDS: Wanted = Wanted {
        logprobs: false,
        logprob_ids: false,
    };

    #[test]
    fn logprob_token_ids_are_asked_for_only_while_wanted() {
        let known = Wanted {
            logprob_ids: false,
            ..ALL
        };
        let (body, added) = ask(Route::Chat, br#"{"model":"m"}"#, known).unwrap();
        assert_eq!(
            &body[..],
            br#"{"model":"m","return_token_ids":true,"logprobs":true}"#
        );
        assert!(added.token_ids && added.logprobs);
    }

    #[test]
    fn chat_gets_token_ids_and_logprobs_unless_it_asked() {
        let (body, added) = ask(Route::Chat, br#"{"model":"m","messages":[]}"#, ALL).unwrap();
        assert_eq!(
            &body[..],
            br#"{"model":"m","messages":[],"return_token_ids":true,"logprobs":true,"return_tokens_as_token_ids":true}"#
        );
        assert!(added.token_ids && added.logprobs && !added.response_messages);
        let (body, added) =
            ask(Route::Chat, br#"{"logprobs":true,"top_logprobs":2}"#, ALL).unwrap();
        assert_eq!(
            &body[..],
            br#"{"logprobs":true,"top_logprobs":2,"return_token_ids":true}"#
        );
        assert!(added.token_ids && !added.logprobs);
        let (body, added) = ask(Route::Chat, br#"{"model":"m"}"#, IDS).unwrap();
        assert_eq!(&body[..], br#"{"model":"m","return_token_ids":true}"#);
        assert!(added.token_ids && !added.logprobs);
    }

    #[test]
    fn responses_get_response_messages_and_messages_nothing() {
        let (body, added) = ask(Route::Responses, br#"{"input":"x"}"#, ALL).unwrap();
        assert_eq!(
            &body[..],
            br#"{"input":"x","enable_response_messages":true}"#
        );
        assert!(added.response_messages);
        assert!(ask(Route::Messages, b"{}", ALL).is_none());
        assert!(ask(Route::Chat, b"[1]", ALL).is_none());
    }
}
