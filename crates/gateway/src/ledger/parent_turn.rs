//! The turn a token-in/token-out call extends: the parent call's prompt and completion ids
//! (of the call it replayed, for a replay) and how many messages its request held.

use rusqlite::{Connection, OptionalExtension as _, params};

use crate::errors::GatewayError;
use crate::ledger::bodies;
use crate::tito::prompt::ParentTurn;
use crate::tokens::CallTokens;

/// The parent turn `call_id` names, or `None` when it has no tokens or request on record.
pub(crate) fn parent_turn(
    conn: &Connection,
    call_id: &str,
) -> Result<Option<ParentTurn>, GatewayError> {
    let row = |id: &str| {
        conn.prepare_cached(
            "SELECT request_digest, tokens_digest, replayed_from FROM calls WHERE call_id = ?1",
        )
        .and_then(|mut s| {
            s.query_row(params![id], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                ))
            })
            .optional()
        })
        .map_err(GatewayError::ledger("parent turn"))
    };
    let Some((request, mut tokens, mut from)) = row(call_id)? else {
        return Ok(None);
    };
    // A replay's tokens are its source's; the bound stops a malformed loop.
    for _ in 0..64 {
        if tokens.is_some() {
            break;
        }
        let Some(source) = from.take() else { break };
        if let Some((_, t, f)) = row(&source)? {
            (tokens, from) = (t, f);
        }
    }
    let (Some(request), Some(tokens)) = (request, tokens) else {
        return Ok(None);
    };
    let (Some(request), Some(tokens)) = (bodies::get(conn, &request)?, bodies::get(conn, &tokens)?)
    else {
        return Ok(None);
    };
    let Ok(tokens) = CallTokens::decode(&tokens) else {
        return Ok(None);
    };
    let messages = serde_json::from_slice::<serde_json::Value>(&request)
        .ok()
        .and_then(|v| v["messages"].as_array().map(Vec::len));
    let Some(messages) = messages else {
        return Ok(None);
    };
    let mut ids = tokens.prompt_ids;
    ids.extend(tokens.completion_ids);
    Ok(Some(ParentTurn {
        call_id: call_id.to_owned(),
        ids,
        messages,
    }))
}
