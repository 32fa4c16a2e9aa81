//! The HTTP server: routes for the three generation APIs and `/v1/models`, per-step delays,
//! streamed frames, scripted faults, and a JSONL request log.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use serde::Serialize;
use serde_json::json;
use tokio::net::TcpListener;

use crate::answer::{Answer, Reply, answer, sha256_hex};
use crate::errors::{OutageError, ScriptError};
use crate::render::render;
use crate::request::{Api, Request};
use crate::script::Script;
use crate::tokens::TokenAsk;

/// The log record format version.
pub const LOG_VERSION: u32 = 1;

/// One line of the request log.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LogEntry {
    pub v: u32,
    pub seq: usize,
    pub api: &'static str,
    pub stream: bool,
    pub position: usize,
    pub step: usize,
    /// `text`, `tool_call`, `fail`, or `outage` (answered by a queued outage, not the
    /// script; `seq` then counts outages).
    pub reply: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// SHA-256 of the request body as received.
    pub request_sha256: String,
    /// How many times this same body was asked before (`{sample}` in the script).
    pub sample: usize,
    /// `/v1/completions`: the prompt's ids as given and the completion's ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_ids: Option<Vec<u32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_ids: Option<Vec<u32>>,
}

/// A failure of the server itself, answered to the next generation request instead of the
/// model (as an overloaded or failing replica would): it never reaches the script, the
/// counter or the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// An error status (429, 503, ...), with `Retry-After` seconds if given.
    Status {
        status: u16,
        retry_after_s: Option<u32>,
    },
    /// `200` and the head of a stream, then the connection is cut before the first byte.
    Cut,
}

impl std::str::FromStr for Outage {
    type Err = OutageError;

    /// `cut`, `STATUS` or `STATUS:RETRY_AFTER_S` (e.g. `429:1`).
    fn from_str(s: &str) -> Result<Self, OutageError> {
        if s == "cut" {
            return Ok(Self::Cut);
        }
        let (status, after) = match s.split_once(':') {
            Some((st, af)) => (st, Some(af)),
            None => (s, None),
        };
        let status: u16 = status
            .parse()
            .ok()
            .filter(|s| (400..600).contains(s))
            .ok_or_else(|| OutageError::Spec(s.to_owned()))?;
        let retry_after_s = after
            .map(|a| {
                a.parse().map_err(|source| OutageError::RetryAfter {
                    spec: s.to_owned(),
                    source,
                })
            })
            .transpose()?;
        Ok(Self::Status {
            status,
            retry_after_s,
        })
    }
}

struct Shared {
    script: Script,
    counter: AtomicUsize,
    /// Outages answered before the model, first first.
    outages: Mutex<std::collections::VecDeque<Outage>>,
    /// Requests answered with an outage.
    outaged: AtomicUsize,
    /// `/v1/completions` on token ids, once a tokenizer is given.
    completer: std::sync::OnceLock<crate::completions::Completer>,
    /// Requests seen per body digest.
    asked: Mutex<std::collections::HashMap<String, usize>>,
    entries: Mutex<Vec<LogEntry>>,
    log: Option<Mutex<std::fs::File>>,
}

/// A running scripted model server.
#[derive(Debug)]
pub struct ScriptServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl ScriptServer {
    /// Binds `addr` (use port 0 for any) and serves `script`, logging to `log` if given.
    pub async fn start(
        script: Script,
        addr: SocketAddr,
        log: Option<PathBuf>,
    ) -> Result<Self, ScriptError> {
        let log = match log {
            Some(path) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(|source| ScriptError::Log { path, source })?,
            )),
            None => None,
        };
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ScriptError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ScriptError::Bind { addr, source })?;
        let shared = Arc::new(Shared {
            script,
            counter: AtomicUsize::new(0),
            outages: Mutex::new(std::collections::VecDeque::new()),
            outaged: AtomicUsize::new(0),
            completer: std::sync::OnceLock::new(),
            asked: Mutex::new(std::collections::HashMap::new()),
            entries: Mutex::new(Vec::new()),
            log,
        });
        let app = router(shared.clone());
        // Streamed events are small writes: without TCP_NODELAY each waits on a delayed ACK.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(address = %addr, error = %e, "the scripted model's server failed");
            }
        });
        Ok(Self {
            addr,
            shared,
            stop: Some(stop),
            task,
        })
    }

    /// The bound address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the base URL to give a harness or gateway (append `/v1`
    /// where the client wants it).
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Number of generation requests answered so far.
    #[must_use]
    pub fn requests(&self) -> usize {
        self.shared.counter.load(Ordering::SeqCst)
    }

    /// Answers the next generation requests with `outages`, in order, before the model
    /// answers again.
    pub fn queue_outages(&self, outages: impl IntoIterator<Item = Outage>) {
        self.shared
            .outages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(outages);
    }

    /// Serves `POST /v1/completions` on token ids under the tokenizer at `path`
    /// ([`crate::completions`]).
    pub fn serve_completions(&self, path: &std::path::Path) -> Result<(), ScriptError> {
        let completer = crate::completions::Completer::load(path)?;
        self.shared
            .completer
            .set(completer)
            .map_err(|_| ScriptError::CompletionsServed)
    }

    /// Requests answered with an outage so far.
    #[must_use]
    pub fn outaged(&self) -> usize {
        self.shared.outaged.load(Ordering::SeqCst)
    }

    /// Every logged request so far.
    #[must_use]
    pub fn log_entries(&self) -> Vec<LogEntry> {
        self.shared
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops the server and waits for it (in-flight streams are cut).
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    /// Runs until the process is interrupted (for the command line).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/v1/chat/completions",
            post(|s: State<Arc<Shared>>, b: Bytes| generate(s, Api::Chat, b)),
        )
        .route(
            "/v1/responses",
            post(|s: State<Arc<Shared>>, b: Bytes| generate(s, Api::Responses, b)),
        )
        .route(
            "/v1/messages",
            post(|s: State<Arc<Shared>>, b: Bytes| generate(s, Api::Messages, b)),
        )
        .route("/v1/completions", post(complete))
        .route("/v1/models", get(models))
        .layer(DefaultBodyLimit::max(256 * 1024 * 1024))
        .with_state(shared)
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let _ = &shared;
    let body = json!({"object": "list", "data": [
        {"id": "scripted-model", "object": "model", "created": 0, "owned_by": "rollpoint"}]});
    json_response(StatusCode::OK, body.to_string())
}

fn json_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn generate(State(shared): State<Arc<Shared>>, api: Api, body: Bytes) -> Response {
    let parsed: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let msg = json!({"error": {"type": "invalid_request_error",
                                       "message": format!("request body is not JSON: {e}")}});
            return json_response(StatusCode::BAD_REQUEST, msg.to_string());
        }
    };
    let req = Request::read(api, &parsed);
    if let Some(failed) = outage(&shared, req.api.name(), req.stream, &body) {
        return failed;
    }
    let seq = shared.counter.fetch_add(1, Ordering::SeqCst);
    let digest = sha256_hex(&body);
    let sample = {
        let mut asked = shared.asked.lock().unwrap_or_else(PoisonError::into_inner);
        let n = asked.entry(digest.clone()).or_insert(0);
        *n += 1;
        *n - 1
    };
    // In token mode the fields that only ask for tokens do not change the answer: its ids
    // and sizes come from the request without them, so a call with capture gets the same
    // reply as one without.
    let meaning = match &shared.script.tokens {
        Some(_) => Bytes::from(without_token_fields(&parsed)),
        None => body.clone(),
    };
    let mut ans = answer(&shared.script, &req, &meaning, seq, sample);
    if let (Some(mode), Reply::Turn { params, .. }) = (&shared.script.tokens, &mut ans.reply) {
        params.tokens = TokenAsk::read(mode, api, &parsed, req.position);
    }
    log(&shared, &req, &ans, seq, digest, sample);
    if ans.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(ans.delay_ms)).await;
    }
    match ans.reply {
        Reply::Fail(fail) => {
            let status =
                StatusCode::from_u16(fail.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            json_response(status, fail.body)
        }
        Reply::Turn { turn, params } => {
            let rendered = render(api, req.stream, &turn, &params);
            let ct = HeaderValue::from_static(rendered.content_type);
            let frames = rendered.frames;
            if !req.stream && ans.break_after_events.is_none() {
                let body = frames.concat();
                return (StatusCode::OK, [(header::CONTENT_TYPE, ct)], body).into_response();
            }
            let gap = Duration::from_millis(ans.chunk_delay_ms);
            let cut = ans.break_after_events;
            let stream = futures_util::stream::unfold(0usize, move |i| {
                let frame = frames.get(i).cloned();
                async move {
                    if cut == Some(i) {
                        return Some((Err(std::io::Error::other("scripted break")), usize::MAX));
                    }
                    let frame = frame?;
                    if i > 0 && !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                    Some((Ok::<_, std::io::Error>(Bytes::from(frame)), i + 1))
                }
            });
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, ct)],
                Body::from_stream(stream),
            )
                .into_response()
        }
    }
}

async fn complete(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Some(completer) = shared.completer.get() else {
        let msg = json!({"error": {"type": "not_found",
            "message": "this scripted model serves /v1/completions only with --tokenizer"}});
        return json_response(StatusCode::NOT_FOUND, msg.to_string());
    };
    let parsed: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let msg = json!({"error": {"type": "invalid_request_error",
                                       "message": format!("request body is not JSON: {e}")}});
            return json_response(StatusCode::BAD_REQUEST, msg.to_string());
        }
    };
    if let Some(failed) = outage(&shared, "completions", false, &body) {
        return failed;
    }
    let seq = shared.counter.fetch_add(1, Ordering::SeqCst);
    match completer.complete(&shared.script, &parsed, seq) {
        Ok(done) => {
            write_entry(
                &shared,
                LogEntry {
                    v: LOG_VERSION,
                    seq,
                    api: "completions",
                    stream: false,
                    position: 0,
                    step: done.step,
                    reply: done.reply,
                    tool: None,
                    request_sha256: sha256_hex(&body),
                    sample: 0,
                    prompt_ids: Some(done.prompt_ids),
                    completion_ids: Some(done.completion_ids),
                },
            );
            json_response(StatusCode::OK, done.body.to_string())
        }
        Err(e) => {
            let msg = json!({"error": {"type": "invalid_request_error", "message": e.to_string()}});
            json_response(StatusCode::BAD_REQUEST, msg.to_string())
        }
    }
}

/// The next queued outage's reply to a request of `api`, logged, if one is queued.
fn outage(shared: &Shared, api: &'static str, stream: bool, body: &[u8]) -> Option<Response> {
    let outage = shared
        .outages
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop_front()?;
    let seq = shared.outaged.fetch_add(1, Ordering::SeqCst);
    write_entry(
        shared,
        LogEntry {
            v: LOG_VERSION,
            seq,
            api,
            stream,
            position: 0,
            step: 0,
            reply: "outage",
            tool: None,
            request_sha256: sha256_hex(body),
            sample: 0,
            prompt_ids: None,
            completion_ids: None,
        },
    );
    Some(outage_response(outage))
}

fn outage_response(outage: Outage) -> Response {
    match outage {
        Outage::Status {
            status,
            retry_after_s,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            let body = json!({"error": {"type": "overloaded", "message": "the replica is busy"}});
            let mut response = json_response(status, body.to_string());
            if let Some(s) = retry_after_s {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(s));
            }
            response
        }
        Outage::Cut => {
            let stream = futures_util::stream::once(async {
                Err::<Bytes, _>(std::io::Error::other("the replica went away"))
            });
            (
                StatusCode::OK,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                )],
                Body::from_stream(stream),
            )
                .into_response()
        }
    }
}

/// The request less vLLM's output-control fields.
fn without_token_fields(parsed: &serde_json::Value) -> String {
    let mut v = parsed.clone();
    if let Some(o) = v.as_object_mut() {
        for k in [
            "return_token_ids",
            "logprobs",
            "return_tokens_as_token_ids",
            "enable_response_messages",
        ] {
            o.remove(k);
        }
    }
    v.to_string()
}

fn log(shared: &Shared, req: &Request, ans: &Answer, seq: usize, digest: String, sample: usize) {
    let entry = LogEntry {
        v: LOG_VERSION,
        seq,
        api: req.api.name(),
        stream: req.stream,
        position: req.position,
        step: ans.step,
        reply: match &ans.reply {
            Reply::Fail(_) => "fail",
            Reply::Turn { turn, .. } if turn.calls.is_empty() => "text",
            Reply::Turn { .. } => "tool_call",
        },
        tool: ans.tool.clone(),
        request_sha256: digest,
        sample,
        prompt_ids: None,
        completion_ids: None,
    };
    write_entry(shared, entry);
}

fn write_entry(shared: &Shared, entry: LogEntry) {
    if let Some(file) = &shared.log {
        let mut line = serde_json::to_vec(&entry).unwrap_or_default();
        line.push(b'\n');
        let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = file.write_all(&line) {
            tracing::error!(error = %e, "the scripted model failed to append to its request log");
        }
    }
    shared
        .entries
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(entry);
}
