//! Stage 2, admit: a checked request waits its turn at the gate, is counted until its reply
//! is recorded, and gets its [`CallId`]; a refused one gets a finished ledger row and its
//! error. The ledger row of an admitted call is begun by the stage that sends it:
//! [`begin`] waits for the row (and the ledger's answer to a repeated call), [`post`] does
//! not.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;

use super::reply::{error_response, ledger_refused};
use super::route::{Checked, Refused};
use super::types::Admitted;
use crate::ledger::{self, Begun, NewCall, Rejected, RowKey};
use crate::shared::Shared;

/// Admits `checked`, or answers why it cannot be.
pub(crate) async fn admit(
    shared: &Shared,
    checked: Checked,
    admitted_ms: i64,
) -> Result<Admitted, Response> {
    let Checked {
        route,
        key,
        bytes,
        view,
        upstream,
    } = checked;
    let ticket = shared.gate.admit(&key).await;
    // Counted from here until its reply is recorded, so a drain waits for it; refused if the
    // drain began while it was read or waited at the gate: it has not gone upstream.
    let Some(recording) = shared.start_recording() else {
        return Err(closed(shared, &key.to_string()));
    };
    let id = match shared.next_call(&key).await {
        Ok(id) => id,
        Err(e) => {
            let msg = format!("ledger refused call of key {key}: {e}");
            return Err(error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "ledger_error",
                &msg,
                None,
            ));
        }
    };
    tracing::Span::current().record("call", id.to_string().as_str());
    ticket.set_call(&id);
    // Only a later attempt can repeat a recorded call: only then wait for the ledger's answer.
    let replay = shared.config.replay && key.attempt() > 0;
    let stream = view.as_ref().is_some_and(|v| v.stream);
    let model_turns = view
        .as_ref()
        .map(|v| v.model_turns.clone())
        .unwrap_or_default();
    let row = NewCall {
        id: id.clone(),
        route,
        request: bytes.clone(),
        view,
        admitted_ms,
        replay,
    };
    Ok(Admitted {
        id,
        ticket,
        recording,
        route,
        request: bytes,
        stream,
        model_turns,
        upstream,
        row,
    })
}

/// Begins the call's ledger row and waits for it: its lineage, and the ledger's answer
/// when the call repeats one recorded before.
pub(crate) async fn begin(shared: &Shared, row: NewCall) -> Result<Begun, Response> {
    let id = row.id.clone();
    shared
        .ledger
        .run(move |c| ledger::begin(c, &row))
        .await
        .map_err(|e| ledger_refused(&id, &e))
}

/// Begins the call's ledger row behind the call, which goes on without waiting for it.
pub(crate) fn post(shared: &Shared, row: NewCall) {
    shared.ledger.post(move |c| {
        if let Err(e) = ledger::begin(c, &row) {
            tracing::error!(call = %row.id, error = %e, "ledger: failed to record the call");
        }
    });
}

/// 503 `gateway_closed`: a draining gateway sends nothing more upstream. No row: the call
/// never became one.
pub(crate) fn closed(shared: &Shared, key: &str) -> Response {
    shared.metrics.ended("gateway_closed");
    let msg = format!("the gateway takes no new call: the run it serves is gone (key {key})");
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "gateway_closed",
        &msg,
        None,
    )
}

/// Answers a refused request with its error and records a ledger row that says so.
pub(crate) async fn refuse(shared: &Arc<Shared>, refused: Refused, admitted_ms: i64) -> Response {
    let Refused {
        refusal,
        key,
        route,
        read,
    } = refused;
    shared.metrics.ended(refusal.code.as_str());
    let rejected = |seq| Rejected {
        key: key.clone(),
        seq,
        route,
        request: read.clone(),
        status: refusal.code,
        http_status: refusal.status.as_u16(),
        error: refusal.message.clone(),
        admitted_ms,
    };
    let call_id = match &key {
        // Its id is known at once: the row is written behind the reply.
        RowKey::Attempt(attempt) => match shared.next_call(attempt).await {
            Ok(id) => {
                let row = rejected(Some(id.seq));
                shared.ledger.post(move |c| {
                    if let Err(e) = ledger::reject(c, &row) {
                        tracing::error!(error = %e, "ledger: failed to record a refused request");
                    }
                });
                Some(id.to_string())
            }
            Err(_) => None,
        },
        // A route that names no attempt: its rows' sequence is the ledger's alone.
        RowKey::Unparsed(_) => {
            let row = rejected(None);
            shared
                .ledger
                .run(move |c| ledger::reject(c, &row))
                .await
                .map_err(
                    |e| tracing::error!(error = %e, "ledger: failed to record a refused request"),
                )
                .ok()
        }
    };
    error_response(
        refusal.status,
        refusal.code.as_str(),
        &refusal.message,
        call_id.as_deref(),
    )
}
