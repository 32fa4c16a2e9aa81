//! Stage 5, token-in/token-out (the other way a call goes upstream than [`super::forward`]):
//! a chat call begun in the ledger first (its lineage names the turn it extends), rendered
//! and tokenized, sent to the upstream's completion endpoint as ids (vLLM's `prompt` as ids,
//! `return_token_ids`, `logprobs`), waited out through outages like any call, read back as a
//! chat turn, recorded with its tokens and delivered through the gate. A replayed call is
//! answered from the ledger as any other.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::admit;
use super::deliver;
use super::record::commit;
use super::reply::{error_response, skip_upstream};
use super::send::{Outbound, Sent, send};
use super::types::{Admitted, now_ms};
use crate::conversation::{Route, fingerprint};
use crate::ledger::{self, CallId, CallStatus, Finish};
use crate::lineage::Lineage;
use crate::response::read_response;
use crate::shared::Shared;
use crate::tito::chat::{ReplyMeta, write};
use crate::tito::prompt::{ParentTurn, Prompt, Tito};
use crate::tokens::{CallTokens, FaultKind, TokenFault};
use crate::upstream::Upstream;

/// Completion tokens asked for when the request names no limit.
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Sampling fields passed from the chat request to the completion as they are.
const SAMPLING: [&str; 7] = [
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
];

/// Why a call ended without a model answer, for its row and its reply.
struct Ended {
    status: CallStatus,
    http: StatusCode,
    message: String,
}

impl Ended {
    fn template(message: String) -> Self {
        Self {
            status: CallStatus::TemplateFailed,
            http: StatusCode::BAD_REQUEST,
            message,
        }
    }

    fn upstream(status: CallStatus, message: String) -> Self {
        Self {
            status,
            http: StatusCode::BAD_GATEWAY,
            message,
        }
    }
}

/// A model answer, written as the chat reply the harness expects.
struct Answered {
    content_type: &'static str,
    body: Vec<u8>,
    stream: bool,
    first_byte_ms: i64,
    tokens: Result<CallTokens, TokenFault>,
    version: Option<String>,
}

/// Answers `call` through token-in/token-out; `headers` are the harness's request headers.
pub(crate) async fn call(
    shared: &Arc<Shared>,
    tito: &Tito,
    call: Admitted,
    headers: &HeaderMap,
) -> Response {
    let Admitted {
        id,
        ticket,
        recording,
        request,
        model_turns,
        upstream,
        row,
        ..
    } = call;
    // Its lineage names the turn it extends: the row is waited for.
    let begun = match admit::begin(shared, row).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    if let Some(r) = begun.replay {
        drop(recording);
        return deliver::replay(shared, ticket, id, r).await;
    }
    let upstream_ms = now_ms();
    let ask = Ask {
        request: &request,
        lineage: &begun.lineage,
        upstream: &upstream,
        headers,
        id: &id,
    };
    let outcome = answer(shared, tito, &ask).await;
    let (finish, reply) = match outcome {
        Ok(a) => {
            let view = read_response(Route::Chat, a.stream, &a.body);
            let output_fp = view.turn.map(|t| {
                let mut turns = model_turns;
                turns.push(t);
                fingerprint(&turns)
            });
            shared.metrics.ended(CallStatus::Ok.as_str());
            shared.metrics.answered(
                (now_ms() - upstream_ms).max(0) as f64 / 1000.0,
                view.usage.as_ref(),
            );
            let finish = Finish {
                http_status: Some(200),
                content_type: Some(a.content_type.to_owned()),
                response: Some(a.body.clone()),
                usage: view.usage,
                output_fp,
                upstream_ms: Some(upstream_ms),
                first_byte_ms: Some(a.first_byte_ms),
                tokens: Some(a.tokens),
                policy_version: a.version,
                ..Finish::ended(CallStatus::Ok, now_ms())
            };
            (finish, Ok((a.content_type, a.body, a.stream)))
        }
        Err(e) => {
            shared.metrics.ended(e.status.as_str());
            let finish = Finish {
                http_status: Some(e.http.as_u16()),
                error: Some(e.message.clone()),
                upstream_ms: Some(upstream_ms),
                ..Finish::ended(e.status, now_ms())
            };
            (finish, Err(e))
        }
    };
    commit(shared, &id, finish).await;
    drop(recording);
    match reply {
        Ok((content_type, body, stream)) => {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let _gone = tx.send(Ok(Bytes::from(body)));
            drop(tx);
            deliver::upstream(shared, ticket, id, StatusCode::OK, &headers, stream, rx).await
        }
        Err(e) => {
            ticket.deliver().await;
            error_response(e.http, e.status.as_str(), &e.message, Some(&id.to_string()))
        }
    }
}

/// What one answer is made from.
struct Ask<'a> {
    request: &'a [u8],
    lineage: &'a Lineage,
    upstream: &'a Upstream,
    headers: &'a HeaderMap,
    id: &'a CallId,
}

/// The completion the upstream gave, as read from its reply.
struct Completion {
    done: Value,
    first_byte_ms: i64,
    version: Option<String>,
}

async fn answer(shared: &Arc<Shared>, tito: &Tito, ask: &Ask<'_>) -> Result<Answered, Ended> {
    let id = ask.id;
    let req: Value = serde_json::from_slice(ask.request)
        .map_err(|e| Ended::template(format!("call {id}: {e}")))?;
    let messages = req["messages"]
        .as_array()
        .ok_or_else(|| Ended::template(format!("call {id}: `messages` is not a list")))?;
    let tools = req.get("tools").filter(|t| !t.is_null());
    let parent = parent_turn(shared, ask).await?;
    let Prompt { ids, rerendered } = tito
        .prompt(messages, tools, parent.as_ref())
        .map_err(|e| Ended::template(format!("call {id}: {e}")))?;
    if let Some(why) = &rerendered {
        tracing::warn!(call = %id, "token-in/token-out rendered the whole conversation: {why}");
    }
    let model = req["model"].as_str().unwrap_or_default().to_owned();
    let body = completion_request(&req, &model, &ids, shared.config.token_logprobs);
    let completion = complete(shared, ask, body).await?;
    let done = &completion.done;
    let choice = &done["choices"][0];
    let completion_ids: Option<Vec<u32>> = choice["token_ids"].as_array().map(|a| {
        a.iter()
            .filter_map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    });
    let text = match choice["text"].as_str() {
        Some(t) => t.to_owned(),
        None => completion_ids
            .as_deref()
            .map(|ids| tito.decode(ids))
            .transpose()
            .map_err(|e| Ended::template(e.to_string()))?
            .unwrap_or_default(),
    };
    let finish_reason = choice["finish_reason"]
        .as_str()
        .unwrap_or("stop")
        .to_owned();
    let tokens = tokens_of(done, completion_ids, &ids, &finish_reason, id);
    let turn = tito.tool_parser.parse(&text);
    let stream = req["stream"].as_bool().unwrap_or(false);
    let created = u64::try_from(now_ms() / 1000).unwrap_or(0);
    let completion_len = tokens.as_ref().map_or(0, |t| t.completion_ids.len());
    let (content_type, body) = write(
        &turn,
        &ReplyMeta {
            id: &format!("chatcmpl-{id}").replace('#', "-"),
            model: done["model"].as_str().unwrap_or(&model),
            created,
            finish_reason: &finish_reason,
            prompt_tokens: ids.len(),
            completion_tokens: completion_len,
            stream,
            include_usage: req
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        },
    );
    Ok(Answered {
        content_type,
        body,
        stream,
        first_byte_ms: completion.first_byte_ms,
        tokens,
        version: completion.version,
    })
}

/// The turn the call extends, read from the ledger through its lineage.
async fn parent_turn(shared: &Shared, ask: &Ask<'_>) -> Result<Option<ParentTurn>, Ended> {
    let Lineage::Resolved(parent) = ask.lineage else {
        return Ok(None);
    };
    let parent = parent.clone();
    shared
        .ledger
        .run(move |conn| ledger::parent_turn(conn, &parent))
        .await
        .map_err(|e| Ended {
            status: CallStatus::TemplateFailed,
            http: StatusCode::INTERNAL_SERVER_ERROR,
            message: format!("call {}: the parent turn does not read: {e}", ask.id),
        })
}

/// The completion request for prompt `ids`, with the chat request's limits and sampling.
fn completion_request(req: &Value, model: &str, ids: &[u32], logprobs: bool) -> Value {
    let mut body = json!({
        "model": model,
        "prompt": ids,
        "max_tokens": req.get("max_completion_tokens").or_else(|| req.get("max_tokens"))
            .and_then(Value::as_u64).unwrap_or(DEFAULT_MAX_TOKENS),
        "return_token_ids": true,
        "skip_special_tokens": false,
        "stream": false,
    });
    for k in SAMPLING {
        if let Some(v) = req.get(k).filter(|v| !v.is_null()) {
            body[k] = v.clone();
        }
    }
    if logprobs {
        body["logprobs"] = json!(1);
    }
    body
}

/// Sends `body` to the upstream's completion endpoint and reads the whole reply.
async fn complete(shared: &Arc<Shared>, ask: &Ask<'_>, body: Value) -> Result<Completion, Ended> {
    let id = ask.id;
    let mut headers = HeaderMap::new();
    for (name, value) in ask.headers {
        if !skip_upstream(name) && name != header::CONTENT_LENGTH {
            headers.append(name, value.clone());
        }
    }
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(credential) = &ask.upstream.credential {
        credential.apply(Route::Chat, &mut headers);
    }
    let outbound = Outbound {
        method: Method::POST,
        path: "v1/completions".to_owned(),
        headers,
        body: Bytes::from(body.to_string()),
    };
    let _turn = ask.upstream.turn().await;
    let (status, mut chunks, version) = match send(shared, ask.upstream, &outbound, id).await {
        Sent::Reply {
            status,
            chunks,
            version,
            ..
        } => (status, chunks, version),
        Sent::Failed { message } => {
            return Err(Ended::upstream(CallStatus::UpstreamUnreachable, message));
        }
    };
    let first_byte_ms = now_ms();
    let mut bytes = Vec::new();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(b) => bytes.extend_from_slice(&b),
            Err(e) => {
                let message = format!(
                    "upstream broke off the completion of call {id} after {} bytes: {e}",
                    bytes.len()
                );
                return Err(Ended::upstream(CallStatus::UpstreamBroken, message));
            }
        }
    }
    if !status.is_success() {
        return Err(Ended {
            status: CallStatus::UpstreamStatus,
            http: status,
            message: format!(
                "upstream answered {status} for call {id}: {}",
                String::from_utf8_lossy(&bytes)
            ),
        });
    }
    let done = serde_json::from_slice(&bytes).map_err(|e| {
        Ended::upstream(
            CallStatus::UpstreamBroken,
            format!("the completion of call {id} is not JSON: {e}"),
        )
    })?;
    Ok(Completion {
        done,
        first_byte_ms,
        version,
    })
}

/// The call's tokens from the completion, or why it has none.
fn tokens_of(
    done: &Value,
    completion: Option<Vec<u32>>,
    ids: &[u32],
    finish_reason: &str,
    id: &CallId,
) -> Result<CallTokens, TokenFault> {
    let choice = &done["choices"][0];
    let Some(completion_ids) = completion else {
        return Err(TokenFault::new(
            FaultKind::Missing,
            format!(
                "call {id}: the completion has no `token_ids` (does the upstream take \
                 `return_token_ids`?)"
            ),
        ));
    };
    let upstream_prompt: Option<Vec<u64>> = done["prompt_token_ids"]
        .as_array()
        .or_else(|| choice["prompt_token_ids"].as_array())
        .map(|a| a.iter().filter_map(Value::as_u64).collect());
    if let Some(p) = upstream_prompt
        && !p.iter().copied().eq(ids.iter().map(|&i| u64::from(i)))
    {
        return Err(TokenFault::new(
            FaultKind::Malformed,
            format!("call {id}: the upstream's prompt ids differ from the ids sent"),
        ));
    }
    Ok(CallTokens {
        logprobs: choice["logprobs"]["token_logprobs"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect()),
        prompt_ids: ids.to_vec(),
        completion_ids,
        finish_reason: Some(finish_reason.to_owned()),
        model: done["model"].as_str().map(str::to_owned),
        weights_version: None,
    })
}
