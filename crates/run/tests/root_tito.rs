//! Token-in/token-out through the whole stack (root): the native worker for ten turns
//! against the scripted model serving `/v1/completions` on token ids under a BPE tokenizer
//! trained here, with a Qwen3-style template that drops the reasoning of every earlier turn.
//! The runner is killed after a checkpoint and resumed. The exported trajectory is one token
//! sequence (no token break, one segment) that still holds every turn's reasoning, and every
//! call's prompt and completion ids are exactly those the upstream was sent and answered.

mod common;

use std::ffi::OsStr;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);
const TURNS: u32 = 10;

fn log_entries(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn root_a_ten_turn_rollout_through_a_crash_is_one_token_sequence_of_the_upstream_s_ids() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rt")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let d = dir.path();
    let (tokenizer, template) = rollpoint_testkit::tito::write_model(d);
    let id = format!("t{:04x}", fastrand::u16(..));
    let tasks = d.join("tasks.jsonl");
    write_jsonl(&tasks, &[rollpoint_testkit::native_task(&id, TURNS)]);
    std::fs::write(
        d.join("model.json"),
        rollpoint_testkit::native_model_script(TURNS, 300).to_string(),
    )
    .expect("script");
    let config = d.join("run.toml");
    std::fs::write(
        &config,
        format!(
            "v = 1\ncheckpoint_every_s = 1\nmodel_script = \"model.json\"\nmodel_tokens = \"tito\"\n\
             model_tokenizer = \"{}\"\nmodel_chat_template = \"{}\"\n",
            tokenizer.display(),
            template.display()
        ),
    )
    .expect("config");
    let run_dir = d.join("r");
    let log = d.join("stderr.log");
    let sup = supervisor_bin();
    let mut child = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    let model_log = run_dir.join("model-script.log");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    // Past the fourth turn and a checkpoint: the runner dies.
    let end = Instant::now() + LIMIT;
    while log_entries(&model_log).len() < 4 || !run_dir.join("checkpoints/LATEST").exists() {
        assert!(Instant::now() < end, "no progress:\n{}", text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGKILL).expect("kill the run");
    assert!(!wait(&mut child, LIMIT, &log).success());
    let mut resume = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    assert!(
        wait(&mut resume, LIMIT, &log).success(),
        "resume:\n{}",
        text()
    );

    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 1);
    assert_eq!(
        results[0].status,
        rollpoint_driver::Status::Verified,
        "{:?}\n{}",
        results[0],
        text()
    );
    rollpoint_testkit::assert_no_repeated_model_call(&model_log);
    let asked = log_entries(&model_log);
    assert!(
        asked.iter().all(|e| e["api"] == "completions"),
        "every call went upstream as token ids"
    );
    let trajectories = rollpoint_run::export::trajectories(&run_dir, None).expect("export");
    assert_eq!(trajectories.len(), 1);
    let t = &trajectories[0];
    assert!(t.trainable, "{:?}", t.not_trainable);
    assert!(t.token_breaks.is_empty(), "{:?}", t.token_breaks);
    assert_eq!(t.segments.len(), 1, "one token sequence");
    // Ten tool turns and the last answer, and a turn more when the crash cut a tool off (the
    // strict model asks for an interrupted call again).
    assert!(
        t.calls.len() > TURNS as usize,
        "{:?}",
        t.calls.iter().map(|c| &c.call_id).collect::<Vec<_>>()
    );
    // Every call's ids are the upstream's own, call by call.
    for c in &t.calls {
        let found = asked.iter().any(|e| {
            ids(&e["prompt_ids"]) == c.prompt_ids && ids(&e["completion_ids"]) == c.completion_ids
        });
        assert!(
            found,
            "call {}: no upstream request with its ids",
            c.call_id
        );
    }
    // The template drops earlier reasoning; the sequence keeps what the model generated.
    let tokenizer = tokenizers::Tokenizer::from_file(&tokenizer).expect("tokenizer");
    let whole = tokenizer
        .decode(&t.segments[0].tokens, false)
        .expect("decode");
    for step in 0..TURNS {
        assert!(
            whole.contains(&format!("<think>step {step}</think>")),
            "turn {step}'s reasoning is in the sequence"
        );
    }
    assert!(
        t.calls.iter().any(|c| c.call_id.contains("-a")),
        "the resumed attempt's calls are on the chain"
    );
}
