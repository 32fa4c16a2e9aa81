//! Test support: a scripted model server speaking chat completions (and the Responses API) on
//! 127.0.0.1:0 that answers by conversation position and logs every request, plus helpers to
//! lay out a rollout's files and launch the worker binary.
#![allow(dead_code)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One scripted model turn: tool calls, or a final answer.
#[derive(Debug, Clone)]
pub enum Turn {
    Tool { name: String, args: Value },
    Answer(String),
}

pub fn bash(command: &str) -> Turn {
    Turn::Tool {
        name: "bash".to_owned(),
        args: json!({ "command": command }),
    }
}

pub fn tool(name: &str, args: Value) -> Turn {
    Turn::Tool {
        name: name.to_owned(),
        args,
    }
}

/// One request the server saw.
#[derive(Debug, Clone)]
pub struct Logged {
    /// Model replies already in the conversation: the turn this request asks for.
    pub position: usize,
    /// Digest of the request body: equal digests are the same request.
    pub digest: u64,
    pub idempotency_key: String,
    /// Whether a reply was written to a live connection.
    pub answered: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Chat,
    Responses,
}

pub struct ScriptedModel {
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<Logged>>>,
    /// Requests whose body has been read (answered or not yet).
    pub received: Arc<AtomicUsize>,
}

impl ScriptedModel {
    /// Serves `script`; every reply waits `delay` first.
    pub fn start(script: Vec<Turn>, wire: Wire, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the scripted model");
        let addr = listener.local_addr().expect("local addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(script);
        let received = Arc::new(AtomicUsize::new(0));
        let shared_log = Arc::clone(&log);
        let shared_received = Arc::clone(&received);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let script = Arc::clone(&script);
                let log = Arc::clone(&shared_log);
                let received = Arc::clone(&shared_received);
                std::thread::spawn(move || serve(stream, &script, wire, delay, &log, &received));
            }
        });
        Self {
            addr,
            log,
            received,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far, once each has its entry: a reply's
    /// entry is logged after the write returns, by when the client may have
    /// read it, recorded it and been killed (up to 10 s).
    pub fn log(&self) -> Vec<Logged> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log.lock().expect("log lock").clone();
            if log.len() >= self.received.load(Ordering::SeqCst) || Instant::now() >= deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn serve(
    stream: TcpStream,
    script: &[Turn],
    wire: Wire,
    delay: Duration,
    log: &Mutex<Vec<Logged>>,
    received: &AtomicUsize,
) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        let mut key = String::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap_or(0),
                "idempotency-key" => key = value.trim().to_owned(),
                _ => {}
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        received.fetch_add(1, Ordering::SeqCst);
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let position = position(&request, wire);
        let mut hasher = DefaultHasher::new();
        body.hash(&mut hasher);
        let mut entry = Logged {
            position,
            digest: hasher.finish(),
            idempotency_key: key,
            answered: false,
        };
        std::thread::sleep(delay);
        if !alive(&stream) {
            log.lock().expect("log lock").push(entry);
            return;
        }
        let (status, reply) = match script.get(position) {
            Some(turn) => (200, reply(turn, position, wire)),
            None => (
                500,
                json!({"error": format!("no scripted turn {position}")}),
            ),
        };
        let reply = reply.to_string();
        let response = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
            reply.len()
        );
        entry.answered = stream.write_all(response.as_bytes()).is_ok();
        log.lock().expect("log lock").push(entry);
    }
}

/// Whether the client still holds the connection (it closes it when killed).
fn alive(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut probe = [0u8; 1];
    let alive = match stream.peek(&mut probe) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    };
    let _ = stream.set_nonblocking(false);
    alive
}

fn position(request: &Value, wire: Wire) -> usize {
    match wire {
        Wire::Chat => request["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count()),
        Wire::Responses => request["input"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|i| i["type"] == "function_call" || i["role"] == "assistant")
                .count()
        }),
    }
}

fn reply(turn: &Turn, position: usize, wire: Wire) -> Value {
    let usage_chat = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
    let usage_resp = json!({"input_tokens": 100, "output_tokens": 10, "total_tokens": 110});
    let id = format!("call_{position}");
    match (turn, wire) {
        (Turn::Tool { name, args }, Wire::Chat) => json!({
            "id": format!("r{position}"),
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": id, "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}}]}}],
            "usage": usage_chat,
        }),
        (Turn::Answer(text), Wire::Chat) => json!({
            "id": format!("r{position}"),
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": text}}],
            "usage": usage_chat,
        }),
        (Turn::Tool { name, args }, Wire::Responses) => json!({
            "id": format!("r{position}"), "status": "completed",
            "output": [{"type": "function_call", "call_id": id, "name": name,
                "arguments": args.to_string()}],
            "usage": usage_resp,
        }),
        (Turn::Answer(text), Wire::Responses) => json!({
            "id": format!("r{position}"), "status": "completed",
            "output": [{"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text}]}],
            "usage": usage_resp,
        }),
    }
}

/// A rollout's files: `state/` holds input, result and checkpoint; `work/` is the workdir.
pub struct Rollout {
    pub root: tempfile::TempDir,
    pub state: PathBuf,
    pub work: PathBuf,
}

impl Rollout {
    pub fn new() -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let state = root.path().join("state");
        let work = root.path().join("work");
        std::fs::create_dir(&state).expect("state dir");
        std::fs::create_dir(&work).expect("work dir");
        Self { root, state, work }
    }

    pub fn input(&self) -> PathBuf {
        self.state.join("input.json")
    }

    pub fn result(&self) -> PathBuf {
        self.state.join("result.json")
    }

    pub fn checkpoint(&self) -> PathBuf {
        self.state.join("checkpoint")
    }

    /// Writes an input for `base_url` with `api`; `limits` is merged into the defaults.
    pub fn write_input(&self, base_url: &str, api: &str, limits: Value) {
        let input = json!({
            "v": 1,
            "rollout_id": "rollout-1",
            "task": {"prompt": "Do the task.", "system": "You are a coding agent."},
            "model": {"base_url": base_url, "api": api, "name": "scripted"},
            "workdir": self.work,
            "limits": limits,
        });
        std::fs::write(self.input(), input.to_string()).expect("write input");
    }

    pub fn command(&self) -> Command {
        let mut command = Command::new(worker_bin());
        command
            .arg(self.input())
            .arg(self.result())
            .arg("--checkpoint")
            .arg(self.checkpoint())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    pub fn spawn(&self) -> Child {
        self.command().spawn().expect("spawn the worker")
    }

    pub fn result_json(&self) -> Value {
        let bytes = std::fs::read(self.result()).expect("read result");
        serde_json::from_slice(&bytes).expect("result is json")
    }

    pub fn state_listing(&self) -> Vec<String> {
        listing(&self.state)
    }
}

/// The worker binary under test: `ROLLPOINT_WORKER_BIN` (e.g. the static musl build), or the
/// one cargo built for this test run.
pub fn worker_bin() -> PathBuf {
    std::env::var_os("ROLLPOINT_WORKER_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_rollpoint-worker")),
        PathBuf::from,
    )
}

pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Waits for `child` to exit, at most `limit`; kills it and panics past that.
pub fn wait_with_limit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            panic!("worker still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads the rest of a finished child's stderr.
pub fn stderr_of(child: &mut Child) -> String {
    let mut out = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut out);
    }
    out
}

/// Whether `value` holds a key named `name` at any depth.
pub fn has_key(value: &Value, name: &str) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| k == name || has_key(v, name)),
        Value::Array(items) => items.iter().any(|v| has_key(v, name)),
        _ => false,
    }
}

/// A small xorshift generator; the seed is printed so a failure can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn from_env_or_time() -> Self {
        let seed = std::env::var("ROLLPOINT_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64 | 1)
            });
        eprintln!("seed: ROLLPOINT_TEST_SEED={seed}");
        Self(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
