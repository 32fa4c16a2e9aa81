//! One chat call through token-in/token-out: admitted into the ledger first (its lineage
//! names the turn it extends), rendered and tokenized, sent to the upstream's completion
//! endpoint as ids (vLLM's `prompt` as ids, `return_token_ids`, `logprobs`), waited out
//! through outages like any call, read back as a chat turn, recorded with its tokens and
//! delivered through the gate. A replayed call is answered from the ledger as any other.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::chat::{ReplyMeta, write};
use super::prompt::{Prompt, Tito};
use crate::conversation::{Route, Turn, fingerprint};
use crate::gate::Ticket;
use crate::ledger::{self, CallStatus, Finish, NewCall};
use crate::lineage::Lineage;
use crate::proxy::deliver;
use crate::proxy::reply::{error_response, skip_upstream};
use crate::proxy::types::now_ms;
use crate::response::read_response;
use crate::shared::{Recording, Shared};
use crate::tokens::{CallTokens, FaultKind, TokenFault};
use crate::upstream::Upstream;
use crate::upstream::send::{Outbound, Sent, send};

/// Completion tokens asked for when the request names no limit.
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// An admitted chat call for token-in/token-out.
pub(crate) struct TitoCall {
    pub ticket: Ticket,
    pub recording: Recording,
    pub call_id: String,
    pub call: NewCall,
    pub upstream: Arc<Upstream>,
    pub headers: HeaderMap,
    pub attempt: String,
    pub rollout: String,
    pub model_turns: Vec<Turn>,
}

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
}

pub(crate) async fn call(shared: &Arc<Shared>, tito: &Tito, c: TitoCall) -> Response {
    let TitoCall {
        ticket,
        recording,
        call_id,
        call,
        upstream,
        headers,
        attempt,
        rollout,
        model_turns,
    } = c;
    let request = call.request.clone();
    let begun = match shared
        .ledger
        .run(move |conn| ledger::begin(conn, &call))
        .await
    {
        Ok(b) => b,
        Err(e) => return crate::proxy::reply::ledger_refused(&call_id, &e),
    };
    if let Some(r) = begun.replay {
        drop(recording);
        return deliver::replay(shared, ticket, call_id, r).await;
    }
    let upstream_ms = now_ms();
    let outcome = answer(
        shared,
        tito,
        &Ask {
            request: &request,
            lineage: &begun.lineage,
            upstream: &upstream,
            headers: &headers,
            attempt: &attempt,
            rollout: &rollout,
            call_id: &call_id,
        },
    )
    .await;
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
    let id = call_id.clone();
    if let Err(e) = shared
        .ledger
        .run_committed(move |conn| ledger::finish(conn, &id, &finish))
        .await
    {
        tracing::error!(call = %call_id, error = %e, "ledger: failed to record the end of the call");
    }
    drop(recording);
    match reply {
        Ok((content_type, body, stream)) => {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let _gone = tx.send(Ok(Bytes::from(body)));
            drop(tx);
            deliver::upstream(
                shared,
                ticket,
                call_id,
                StatusCode::OK,
                &headers,
                stream,
                rx,
            )
            .await
        }
        Err(e) => {
            ticket.deliver().await;
            error_response(e.http, e.status.as_str(), &e.message, Some(&call_id))
        }
    }
}

struct Ask<'a> {
    request: &'a [u8],
    lineage: &'a Lineage,
    upstream: &'a Upstream,
    headers: &'a HeaderMap,
    attempt: &'a str,
    rollout: &'a str,
    call_id: &'a str,
}

struct Answered {
    content_type: &'static str,
    body: Vec<u8>,
    stream: bool,
    first_byte_ms: i64,
    tokens: Result<CallTokens, TokenFault>,
    version: Option<String>,
}

async fn answer(shared: &Arc<Shared>, tito: &Tito, ask: &Ask<'_>) -> Result<Answered, Ended> {
    let req: Value = serde_json::from_slice(ask.request)
        .map_err(|e| Ended::template(format!("call {}: {e}", ask.call_id)))?;
    let messages = req["messages"].as_array().ok_or_else(|| {
        Ended::template(format!("call {}: `messages` is not a list", ask.call_id))
    })?;
    let tools = req.get("tools").filter(|t| !t.is_null());
    let parent = match ask.lineage {
        Lineage::Resolved(parent) => {
            let id = parent.clone();
            shared
                .ledger
                .run(move |conn| ledger::parent_turn(conn, &id))
                .await
                .map_err(|e| Ended {
                    status: CallStatus::TemplateFailed,
                    http: StatusCode::INTERNAL_SERVER_ERROR,
                    message: format!("call {}: the parent turn does not read: {e}", ask.call_id),
                })?
        }
        Lineage::Root(_) => None,
    };
    let Prompt { ids, rerendered } = tito
        .prompt(messages, tools, parent.as_ref())
        .map_err(|e| Ended::template(format!("call {}: {e}", ask.call_id)))?;
    if let Some(why) = &rerendered {
        tracing::warn!(call = %ask.call_id, "token-in/token-out rendered the whole conversation: {why}");
    }
    let model = req["model"].as_str().unwrap_or_default().to_owned();
    let mut body = json!({
        "model": model,
        "prompt": ids,
        "max_tokens": req.get("max_completion_tokens").or_else(|| req.get("max_tokens"))
            .and_then(Value::as_u64).unwrap_or(DEFAULT_MAX_TOKENS),
        "return_token_ids": true,
        "skip_special_tokens": false,
        "stream": false,
    });
    for k in [
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
    ] {
        if let Some(v) = req.get(k).filter(|v| !v.is_null()) {
            body[k] = v.clone();
        }
    }
    if shared.config.token_logprobs {
        body["logprobs"] = json!(1);
    }
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
    let sent = send(
        shared,
        ask.upstream,
        &outbound,
        ask.attempt,
        ask.rollout,
        ask.call_id,
    )
    .await;
    let (status, reply_headers, mut chunks, version) = match sent {
        Sent::Reply {
            status,
            headers,
            chunks,
            version,
            ..
        } => (status, headers, chunks, version),
        Sent::Failed { message } => {
            return Err(Ended {
                status: CallStatus::UpstreamUnreachable,
                http: StatusCode::BAD_GATEWAY,
                message,
            });
        }
    };
    let first_byte_ms = now_ms();
    let mut bytes = Vec::new();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(b) => bytes.extend_from_slice(&b),
            Err(e) => {
                return Err(Ended {
                    status: CallStatus::UpstreamBroken,
                    http: StatusCode::BAD_GATEWAY,
                    message: format!(
                        "upstream broke off the completion of call {} after {} bytes: {e}",
                        ask.call_id,
                        bytes.len()
                    ),
                });
            }
        }
    }
    if !status.is_success() {
        return Err(Ended {
            status: CallStatus::UpstreamStatus,
            http: status,
            message: format!(
                "upstream answered {status} for call {}: {}",
                ask.call_id,
                String::from_utf8_lossy(&bytes)
            ),
        });
    }
    let named = reply_headers
        .get(crate::proxy::forward::POLICY_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| rollpoint_proto::limits::name_problem(v).is_none())
        .map(str::to_owned);
    let done: Value = serde_json::from_slice(&bytes).map_err(|e| Ended {
        status: CallStatus::UpstreamBroken,
        http: StatusCode::BAD_GATEWAY,
        message: format!("the completion of call {} is not JSON: {e}", ask.call_id),
    })?;
    let choice = &done["choices"][0];
    let fault = |m: String| TokenFault::new(FaultKind::Missing, m);
    let completion: Option<Vec<u32>> = choice["token_ids"].as_array().map(|a| {
        a.iter()
            .filter_map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    });
    let text = match choice["text"].as_str() {
        Some(t) => t.to_owned(),
        None => completion
            .as_deref()
            .map(|ids| tito.decode(ids))
            .transpose()
            .map_err(Ended::template)?
            .unwrap_or_default(),
    };
    let finish_reason = choice["finish_reason"]
        .as_str()
        .unwrap_or("stop")
        .to_owned();
    let tokens = match completion {
        None => Err(fault(format!(
            "call {}: the completion has no `token_ids` (does the upstream take \
             `return_token_ids`?)",
            ask.call_id
        ))),
        Some(completion_ids) => {
            let upstream_prompt: Option<Vec<u64>> = done["prompt_token_ids"]
                .as_array()
                .or_else(|| choice["prompt_token_ids"].as_array())
                .map(|a| a.iter().filter_map(Value::as_u64).collect());
            match upstream_prompt {
                Some(p) if !p.iter().copied().eq(ids.iter().map(|&i| u64::from(i))) => {
                    Err(TokenFault::new(
                        FaultKind::Malformed,
                        format!(
                            "call {}: the upstream's prompt ids differ from the ids sent",
                            ask.call_id
                        ),
                    ))
                }
                _ => Ok(CallTokens {
                    logprobs: choice["logprobs"]["token_logprobs"]
                        .as_array()
                        .map(|a| a.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect()),
                    prompt_ids: ids.clone(),
                    completion_ids,
                    finish_reason: Some(finish_reason.clone()),
                    model: done["model"].as_str().map(str::to_owned),
                    weights_version: None,
                }),
            }
        }
    };
    let turn = tito.tool_parser.parse(&text);
    let stream = req["stream"].as_bool().unwrap_or(false);
    let created = u64::try_from(now_ms() / 1000).unwrap_or(0);
    let completion_len = tokens.as_ref().map_or(0, |t| t.completion_ids.len());
    let (content_type, body) = write(
        &turn,
        &ReplyMeta {
            id: &format!("chatcmpl-{}", ask.call_id.replace('#', "-")),
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
        first_byte_ms,
        tokens,
        version: named.or(version),
    })
}
