//! Time per checkpoint boundary at 100, 1,000 and 10,000 messages: the append-only journal
//! (one record, fdatasync) against the common baseline (serialize the whole
//! transcript as JSON, write a temp file, fsync, rename, fsync the directory).
//!
//! Run: `cargo bench -p rollpoint-worker --bench checkpoint` (files go under target/tmp, on
//! the same disk as the build).
#![expect(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use rollpoint_worker::atomic;
use rollpoint_worker::journal::Journal;
use rollpoint_worker::journal::record::{Header, ModelResponse, Record, ToolFinished, ToolStarted};
use rollpoint_worker::transcript::{AssistantMessage, CallUsage, State, ToolCall, ToolStatus};

const SIZES: [usize; 3] = [100, 1_000, 10_000];
/// Boundaries timed per size for the journal, and for the (much slower) baseline.
const JOURNAL_SAMPLES: usize = 300;
const BASELINE_SAMPLES: usize = 30;

/// The records of one tool turn (two messages): a reply asking for a command, its output.
fn turn(call: u32) -> [Record; 3] {
    let id = format!("call-{call}");
    let arguments = format!(
        "{{\"command\":\"cd /testbed && python -m pytest tests/test_module_{call}.py -x -q 2>&1 | tail -n 40\"}}"
    );
    [
        Record::ModelResponse(ModelResponse {
            call,
            message: AssistantMessage {
                content: Some("Let me run the failing test to see the traceback.".to_owned()),
                tool_calls: vec![ToolCall {
                    id: id.clone(),
                    name: "bash".to_owned(),
                    arguments,
                }],
            },
            usage: CallUsage {
                prompt_tokens: 1_000 + u64::from(call),
                completion_tokens: 60,
                total_tokens: 1_060 + u64::from(call),
            },
            elapsed_ms: u64::from(call),
        }),
        Record::ToolStarted(ToolStarted {
            call_id: id.clone(),
            elapsed_ms: u64::from(call),
        }),
        Record::ToolFinished(ToolFinished {
            call_id: id,
            content: "tests/test_module.py::test_case FAILED\n".repeat(20),
            status: ToolStatus::Error,
            exit_code: Some(1),
            duration_ms: 120,
            truncated_bytes: 0,
            elapsed_ms: u64::from(call),
        }),
    ]
}

fn state_with(messages: usize) -> State {
    let mut state = State::new("bench", Some("You are a coding agent."), "Fix the bug.");
    let mut call = 0;
    while state.messages.len() < messages {
        for record in turn(call) {
            state.apply(&record).unwrap();
        }
        call += 1;
    }
    state
}

struct Stats {
    median: Duration,
    min: Duration,
    max: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    Stats {
        median: samples[samples.len() / 2],
        min: samples[0],
        max: samples[samples.len() - 1],
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

/// One boundary per sample: apply a record, append it, fdatasync.
fn journal_samples(dir: &Path, messages: usize) -> (Vec<Duration>, Duration) {
    let path = dir.join(format!("journal-{messages}"));
    let _ = std::fs::remove_file(&path);
    let mut state = state_with(messages);
    let header = Header {
        rollout_id: "bench".to_owned(),
        partial: true,
        created_unix_ms: 0,
        worker: "bench".to_owned(),
    };
    let began = Instant::now();
    let mut journal = Journal::create(&path, header, &state).unwrap();
    let rewrite = began.elapsed();
    let mut call = state.usage.model_calls;
    let mut samples = Vec::with_capacity(JOURNAL_SAMPLES);
    'outer: loop {
        for record in turn(call) {
            state.apply(&record).unwrap();
            let began = Instant::now();
            journal
                .append(std::slice::from_ref(&record), &state)
                .unwrap();
            samples.push(began.elapsed());
            if samples.len() == JOURNAL_SAMPLES {
                break 'outer;
            }
        }
        call += 1;
    }
    std::fs::remove_file(&path).unwrap();
    (samples, rewrite)
}

/// One boundary per sample: the whole transcript as JSON, written atomically.
fn baseline_samples(dir: &Path, messages: usize) -> Vec<Duration> {
    let path = dir.join(format!("baseline-{messages}.json"));
    let mut state = state_with(messages);
    let mut call = state.usage.model_calls;
    let mut samples = Vec::with_capacity(BASELINE_SAMPLES);
    'outer: loop {
        for record in turn(call) {
            state.apply(&record).unwrap();
            let began = Instant::now();
            let bytes = serde_json::to_vec(&state.messages).unwrap();
            atomic::write_atomic(&path, &bytes).unwrap();
            samples.push(began.elapsed());
            if samples.len() == BASELINE_SAMPLES {
                break 'outer;
            }
        }
        call += 1;
    }
    std::fs::remove_file(&path).unwrap();
    samples
}

fn main() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("checkpoint-bench");
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "checkpoint write per boundary, ms ({JOURNAL_SAMPLES} journal / {BASELINE_SAMPLES} baseline samples per size; dir {})",
        dir.display()
    );
    println!(
        "{:>8} | {:>24} | {:>27} | {:>7} | {:>12}",
        "messages", "journal median/min/max", "baseline median/min/max", "ratio", "rewrite once"
    );
    for messages in SIZES {
        let (journal, rewrite) = journal_samples(&dir, messages);
        let journal = stats(journal);
        let baseline = stats(baseline_samples(&dir, messages));
        let ratio = baseline.median.as_secs_f64() / journal.median.as_secs_f64();
        println!(
            "{messages:>8} | {:>24} | {:>27} | {:>6.1}x | {:>12}",
            format!(
                "{}/{}/{}",
                ms(journal.median),
                ms(journal.min),
                ms(journal.max)
            ),
            format!(
                "{}/{}/{}",
                ms(baseline.median),
                ms(baseline.min),
                ms(baseline.max)
            ),
            ratio,
            ms(rewrite),
        );
    }
    println!(
        "ratio = baseline median / journal median; rewrite once = one compaction at that size"
    );
}
