//! The fields a request gets so a vLLM upstream returns its token ids: on chat completions
//! `return_token_ids` (vLLM 0.10.2 and later), and `logprobs` with
//! `return_tokens_as_token_ids` unless the harness asked for logprobs itself (then its own
//! settings stand and it sees them); on Responses `enable_response_messages`, whose
//! `input_messages` and `output_messages` carry the raw tokens. Only what the harness did
//! not already ask for is added, and only that is taken out of the reply.

use bytes::Bytes;

use super::Added;
use super::json_edit::{Edits, Object};
use crate::conversation::Route;

/// The request to send upstream and what was added to it; `None` when nothing is added (a
/// route capture does not cover, a body that is not an object). With `logprobs` false only
/// the ids are asked for: the replies stay about as small as without capture.
#[must_use]
pub fn ask(route: Route, body: &[u8], logprobs: bool) -> Option<(Bytes, Added)> {
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
            if logprobs && obj.get("logprobs") != Some("true") {
                obj.set("logprobs", "true", &mut edits);
                obj.set("return_tokens_as_token_ids", "true", &mut edits);
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

    #[test]
    fn chat_gets_token_ids_and_logprobs_unless_it_asked() {
        let (body, added) = ask(Route::Chat, br#"{"model":"m","messages":[]}"#, true).unwrap();
        assert_eq!(
            &body[..],
            br#"{"model":"m","messages":[],"return_token_ids":true,"logprobs":true,"return_tokens_as_token_ids":true}"#
        );
        assert!(added.token_ids && added.logprobs && !added.response_messages);
        let (body, added) =
            ask(Route::Chat, br#"{"logprobs":true,"top_logprobs":2}"#, true).unwrap();
        assert_eq!(
            &body[..],
            br#"{"logprobs":true,"top_logprobs":2,"return_token_ids":true}"#
        );
        assert!(added.token_ids && !added.logprobs);
        let (body, added) = ask(Route::Chat, br#"{"model":"m"}"#, false).unwrap();
        assert_eq!(&body[..], br#"{"model":"m","return_token_ids":true}"#);
        assert!(added.token_ids && !added.logprobs);
    }

    #[test]
    fn responses_get_response_messages_and_messages_nothing() {
        let (body, added) = ask(Route::Responses, br#"{"input":"x"}"#, true).unwrap();
        assert_eq!(
            &body[..],
            br#"{"input":"x","enable_response_messages":true}"#
        );
        assert!(added.response_messages);
        assert!(ask(Route::Messages, b"{}", true).is_none());
        assert!(ask(Route::Chat, b"[1]", true).is_none());
    }
}
