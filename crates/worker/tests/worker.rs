//! End-to-end tests of the worker binary: real subprocesses, real signals, real files, and a
//! scripted model server on 127.0.0.1.
#![expect(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod support;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_worker::journal;
use rollpoint_worker::result::{ErrorKind, Termination, WorkerResult};
use rollpoint_worker::transcript::{Message, ToolStatus};
use serde_json::{Value, json};
use support::{Rollout, ScriptedModel, Turn, Wire, bash, tool, wait_with_limit};

const LIMIT: Duration = Duration::from_secs(60);

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn parse_result(rollout: &Rollout) -> WorkerResult {
    let bytes = std::fs::read(rollout.result()).unwrap();
    WorkerResult::parse(&bytes).unwrap_or_else(|e| panic!("result does not validate: {e}"))
}

fn tool_statuses(result: &WorkerResult) -> Vec<ToolStatus> {
    result
        .trajectory
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.status),
            _ => None,
        })
        .collect()
}

fn multi_step_script() -> Vec<Turn> {
    vec![
        tool(
            "write",
            json!({"path": "notes/a.txt", "content": "alpha\nbeta\n"}),
        ),
        tool(
            "edit",
            json!({"path": "notes/a.txt", "old_string": "beta", "new_string": "gamma"}),
        ),
        bash("cat notes/a.txt && echo to-stderr >&2"),
        tool(
            "read",
            json!({"path": "notes/a.txt", "offset": 2, "limit": 1}),
        ),
        Turn::Answer("done: a.txt says alpha and gamma".to_owned()),
    ]
}

fn check_multi_step(rollout: &Rollout, model: &ScriptedModel) {
    let result = parse_result(rollout);
    assert_eq!(result.termination, Termination::Completed);
    assert_eq!(result.error, None);
    assert_eq!(
        result.response.as_deref(),
        Some("done: a.txt says alpha and gamma")
    );
    assert_eq!(result.usage.model_calls, 5);
    assert_eq!(result.usage.total_tokens, 550);
    assert_eq!(tool_statuses(&result), [ToolStatus::Ok; 4]);
    let outputs: Vec<&str> = result
        .trajectory
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(outputs[2], "alpha\ngamma\nto-stderr\n[exit code 0]");
    assert_eq!(outputs[3], "gamma\n");
    assert_eq!(
        std::fs::read_to_string(rollout.work.join("notes/a.txt")).unwrap(),
        "alpha\ngamma\n"
    );
    assert_eq!(result.observations.launches, 1);
    assert!(!support::has_key(&rollout.result_json(), "reward"));
    // Every request was sent once, in order.
    let positions: Vec<usize> = model.log().iter().map(|l| l.position).collect();
    assert_eq!(positions, [0, 1, 2, 3, 4]);
    assert!(model.log().iter().all(|l| l.answered));
    assert_eq!(mode(&rollout.result()), 0o600);
    assert_eq!(mode(&rollout.checkpoint()), 0o600);
    assert_eq!(
        rollout.state_listing(),
        ["checkpoint", "input.json", "result.json"]
    );
    let decision = rollpoint_worker::resume_decision(&rollout.checkpoint());
    assert!(decision.resume, "{}", decision.reason);
}

fn multi_step_through(wire: Wire, api: &str) {
    let model = ScriptedModel::start(multi_step_script(), wire, Duration::ZERO);
    let rollout = Rollout::new();
    rollout.write_input(&model.base_url(), api, json!({}));
    let output = rollout.command().output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    check_multi_step(&rollout, &model);
}

#[test]
fn multi_step_task_completes_and_the_result_validates() {
    multi_step_through(Wire::Chat, "chat_completions");
}

#[test]
fn responses_api_task_completes() {
    multi_step_through(Wire::Responses, "responses");
}

#[test]
fn model_call_limit_ends_the_run_without_error() {
    let script = vec![bash("true"), bash("true"), bash("true")];
    let model = ScriptedModel::start(script, Wire::Chat, Duration::ZERO);
    let rollout = Rollout::new();
    rollout.write_input(
        &model.base_url(),
        "chat_completions",
        json!({"max_model_calls": 2}),
    );
    let status = rollout.command().status().unwrap();
    assert_eq!(status.code(), Some(0));
    let result = parse_result(&rollout);
    assert_eq!(result.termination, Termination::MaxModelCalls);
    assert_eq!(result.response, None);
    assert_eq!(result.usage.model_calls, 2);
    assert_eq!(model.log().len(), 2);
}

#[test]
fn sigterm_mid_tool_gives_a_cancelled_result_and_leaves_no_temp_files() {
    let script = vec![
        bash("echo first"),
        bash("echo started; echo $$ > tool.pid; exec sleep 30"),
        Turn::Answer("never".to_owned()),
    ];
    let model = ScriptedModel::start(script, Wire::Chat, Duration::ZERO);
    let rollout = Rollout::new();
    rollout.write_input(&model.base_url(), "chat_completions", json!({}));
    let mut child = rollout.spawn();
    let pid_file = rollout.work.join("tool.pid");
    let began = Instant::now();
    while std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
        assert!(began.elapsed() < LIMIT, "the tool never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let tool_pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_with_limit(&mut child, Duration::from_secs(20));
    assert_eq!(
        status.code(),
        Some(143),
        "{}",
        support::stderr_of(&mut child)
    );
    // The tool's process (sleep 30) is gone: killed with its group, not left to run.
    let gone = Instant::now();
    while Path::new(&format!("/proc/{tool_pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{tool_pid}/stat"))
            .is_ok_and(|s| !s.contains(") Z "))
    {
        assert!(gone.elapsed() < Duration::from_secs(10), "tool still alive");
        std::thread::sleep(Duration::from_millis(10));
    }
    let result = parse_result(&rollout);
    assert_eq!(result.termination, Termination::Cancelled);
    assert_eq!(result.error.as_ref().unwrap().kind, ErrorKind::Cancelled);
    assert_eq!(result.response, None);
    assert_eq!(
        tool_statuses(&result),
        [ToolStatus::Ok, ToolStatus::Incomplete]
    );
    let Some(Message::Tool(last)) = result.trajectory.last() else {
        panic!("the running tool has no output in the result");
    };
    assert_eq!(last.content, "started\n");
    // The whole directory: no temp file of the result or the checkpoint is left.
    assert_eq!(
        rollout.state_listing(),
        ["checkpoint", "input.json", "result.json"]
    );
    assert_eq!(mode(&rollout.result()), 0o600);
    // The checkpoint holds completed steps only: the running tool is in flight, without output.
    let replayed = journal::replay(&rollout.checkpoint()).unwrap();
    assert_eq!(replayed.state.in_flight.as_deref(), Some("call_1"));
    assert_eq!(replayed.state.tools.len(), 1);
}

#[test]
fn sigterm_while_waiting_for_the_model_gives_a_cancelled_result() {
    let script = vec![bash("echo one"), Turn::Answer("late".to_owned())];
    let model = ScriptedModel::start(script, Wire::Chat, Duration::from_secs(30));
    let rollout = Rollout::new();
    rollout.write_input(&model.base_url(), "chat_completions", json!({}));
    let mut child = rollout.spawn();
    let began = Instant::now();
    while model.received.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(began.elapsed() < LIMIT, "no model request arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_with_limit(&mut child, Duration::from_secs(20));
    assert_eq!(status.code(), Some(143));
    let result = parse_result(&rollout);
    assert_eq!(result.termination, Termination::Cancelled);
    assert_eq!(result.usage.model_calls, 0);
    assert_eq!(result.trajectory.len(), 2, "system and user messages only");
    assert_eq!(
        rollout.state_listing(),
        ["checkpoint", "input.json", "result.json"]
    );
}

#[test]
fn wall_clock_deadline_stops_a_slow_tool_and_ends_the_run() {
    let script = vec![
        bash("echo begun; sleep 30"),
        Turn::Answer("never".to_owned()),
    ];
    let model = ScriptedModel::start(script, Wire::Chat, Duration::ZERO);
    let rollout = Rollout::new();
    rollout.write_input(
        &model.base_url(),
        "chat_completions",
        json!({"wall_clock_secs": 1}),
    );
    let output = rollout.command().output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let result = parse_result(&rollout);
    assert_eq!(result.termination, Termination::Deadline);
    assert_eq!(result.error, None);
    assert_eq!(tool_statuses(&result), [ToolStatus::TimedOut]);
    assert!(result.observations.elapsed_ms >= 1000);
    assert_eq!(model.log().len(), 1);
}

#[test]
fn checkpoint_of_another_rollout_or_task_is_refused() {
    let model = ScriptedModel::start(multi_step_script(), Wire::Chat, Duration::ZERO);
    let rollout = Rollout::new();
    rollout.write_input(&model.base_url(), "chat_completions", json!({}));
    assert!(rollout.command().status().unwrap().success());
    let original = std::fs::read_to_string(rollout.input()).unwrap();
    for (from, to, expected) in [
        ("rollout-1", "rollout-2", "belongs to rollout `rollout-1`"),
        ("Do the task.", "Another task.", "belongs to another task"),
    ] {
        std::fs::write(rollout.input(), original.replace(from, to)).unwrap();
        let output = rollout.command().output().unwrap();
        assert_eq!(output.status.code(), Some(1));
        let error = parse_result(&rollout).error.unwrap();
        assert_eq!(error.kind, ErrorKind::Fatal);
        assert!(error.message.contains(expected), "{}", error.message);
    }
    // The same input again continues the finished rollout and ends the same way, without
    // calling the model.
    std::fs::write(rollout.input(), original).unwrap();
    let calls = model.log().len();
    assert!(rollout.command().status().unwrap().success());
    let result = parse_result(&rollout);
    assert_eq!(result.termination, Termination::Completed);
    assert_eq!(result.observations.launches, 2);
    assert_eq!(model.log().len(), calls);
}

/// Counts the durable boundaries of a checkpoint (0 when it cannot be read yet).
fn durable_records(path: &Path) -> usize {
    journal::replay(path).map_or(0, |r| r.records)
}

#[test]
fn sigkill_at_random_boundaries_resumes_without_repeating_calls_or_tools() {
    const TURNS: usize = 6;
    let mut rng = support::Rng::from_env_or_time();
    // Every tool appends one line (a side effect) and then takes a while, and every reply
    // takes a while: a kill right after a boundary lands inside a tool or a model wait.
    let mut script: Vec<Turn> = (0..TURNS)
        .map(|i| bash(&format!("echo step-{i} >> side.log; sleep 0.05")))
        .collect();
    script.push(Turn::Answer("all steps done".to_owned()));
    let mut window_hits = 0;
    let mut interrupted_total = 0;
    for iteration in 0..20 {
        let model = ScriptedModel::start(script.clone(), Wire::Chat, Duration::from_millis(50));
        let rollout = Rollout::new();
        rollout.write_input(&model.base_url(), "chat_completions", json!({}));
        // Header + snapshot, then three records per tool turn and one for the answer.
        let total = 2 + 3 * TURNS;
        let target = 2 + rng.below((total - 2) as u64) as usize;
        let mut child = rollout.spawn();
        let began = Instant::now();
        while durable_records(&rollout.checkpoint()) < target {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("iteration {iteration}: worker exited early with {status}");
            }
            assert!(
                began.elapsed() < LIMIT,
                "iteration {iteration}: no progress"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!rollout.result().exists(), "SIGKILL must leave no result");
        let at_kill = journal::replay(&rollout.checkpoint()).unwrap();
        let first_launch = model.log();
        let answered_first = first_launch.iter().filter(|l| l.answered).count();
        let recorded = at_kill.state.usage.model_calls as usize;
        // A reply that arrived but was not yet durable when the kill landed is the one
        // request the worker alone cannot keep from being sent again.
        assert!(answered_first == recorded || answered_first == recorded + 1);
        window_hits += answered_first - recorded;

        let mut relaunch = rollout.spawn();
        let status = wait_with_limit(&mut relaunch, LIMIT);
        assert!(
            status.success(),
            "iteration {iteration}: relaunch failed: {}",
            support::stderr_of(&mut relaunch)
        );
        let result = parse_result(&rollout);
        assert_eq!(
            result.termination,
            Termination::Completed,
            "iteration {iteration}"
        );
        assert_eq!(result.observations.launches, 2);
        assert_eq!(result.usage.model_calls as usize, TURNS + 1);

        // No answered model call recorded in the checkpoint is sent again.
        let log = model.log();
        let second_launch = &log[first_launch.len()..];
        assert!(
            second_launch.iter().all(|l| l.position >= recorded),
            "iteration {iteration}: relaunch re-sent a recorded call"
        );
        let mut answered: HashMap<u64, usize> = HashMap::new();
        for entry in log.iter().filter(|l| l.answered) {
            *answered.entry(entry.digest).or_default() += 1;
        }
        let repeats = answered.values().filter(|n| **n > 1).count();
        assert_eq!(repeats, answered_first - recorded, "iteration {iteration}");

        // No tool ran twice: every step's line is there at most once, and exactly once for
        // every tool call that completed.
        let side = std::fs::read_to_string(rollout.work.join("side.log")).unwrap_or_default();
        let statuses = tool_statuses(&result);
        for (i, status) in statuses.iter().enumerate() {
            let count = side.lines().filter(|l| *l == format!("step-{i}")).count();
            match status {
                ToolStatus::Ok => assert_eq!(count, 1, "iteration {iteration}: step {i}"),
                ToolStatus::Interrupted => {
                    interrupted_total += 1;
                    assert!(count <= 1, "iteration {iteration}: step {i} ran twice");
                }
                other => panic!("iteration {iteration}: step {i} ended {other:?}"),
            }
        }
    }
    eprintln!(
        "20 kills: {interrupted_total} landed in a tool (reported interrupted, not rerun), \
         {window_hits} between a reply and its checkpoint (re-sent)"
    );
}

fn assert_fatal_naming(rollout: &Rollout, expected: &str) {
    let output = rollout.command().output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let result = parse_result(rollout);
    assert_eq!(result.termination, Termination::Error);
    let error = result.error.unwrap();
    assert_eq!(error.kind, ErrorKind::Fatal);
    assert!(
        error.message.contains(expected),
        "`{}` does not name {expected}",
        error.message
    );
    assert_eq!(mode(&rollout.result()), 0o600);
    assert!(
        !rollout.checkpoint().exists(),
        "no checkpoint before the loop"
    );
}

#[test]
fn malformed_or_extra_field_input_gives_a_fatal_result_naming_the_field() {
    let cases: [(Value, &str); 5] = [
        (json!({"extra_field": 1}), "`extra_field`"),
        (
            json!({"limits": {"max_model_calls": "many"}}),
            "`limits.max_model_calls`",
        ),
        (json!({"limits": {"bogus": 1}}), "`limits.bogus`"),
        (json!({"reward": 1.0}), "`reward`"),
        (json!({"verifier_metadata": {}}), "`verifier_metadata`"),
    ];
    for (patch, expected) in cases {
        let rollout = Rollout::new();
        rollout.write_input("http://127.0.0.1:9/v1", "chat_completions", json!({}));
        let mut input: Value =
            serde_json::from_slice(&std::fs::read(rollout.input()).unwrap()).unwrap();
        for (k, v) in patch.as_object().unwrap() {
            input[k] = v.clone();
        }
        std::fs::write(rollout.input(), input.to_string()).unwrap();
        assert_fatal_naming(&rollout, expected);
    }
    let rollout = Rollout::new();
    std::fs::write(rollout.input(), b"{\"v\": 1, \"rollout_id\": ").unwrap();
    assert_fatal_naming(&rollout, "not valid json");
    let rollout = Rollout::new();
    assert_fatal_naming(&rollout, "input.json: cannot read");
}

#[test]
fn corrupted_checkpoint_is_refused_naming_the_offset() {
    let model = ScriptedModel::start(multi_step_script(), Wire::Chat, Duration::ZERO);
    let rollout = Rollout::new();
    rollout.write_input(
        &model.base_url(),
        "chat_completions",
        json!({"max_model_calls": 3}),
    );
    assert!(rollout.command().status().unwrap().success());
    let mut bytes = std::fs::read(rollout.checkpoint()).unwrap();
    // Flip a byte inside the second record (the snapshot), which is followed by others.
    let second = 12 + 9 + u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    bytes[second + 30] ^= 0x55;
    std::fs::write(rollout.checkpoint(), &bytes).unwrap();
    std::fs::remove_file(rollout.result()).unwrap();
    let output = rollout.command().output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let error = parse_result(&rollout).error.unwrap();
    assert_eq!(error.kind, ErrorKind::Fatal);
    assert!(
        error.message.contains(&format!("offset {second}")),
        "{}",
        error.message
    );
    assert!(!rollpoint_worker::resume_decision(&rollout.checkpoint()).resume);
}

/// The offsets every framed record of a checkpoint starts at (the framing only, no checks).
fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut pos = 12;
    while pos + 9 <= bytes.len() {
        offsets.push(pos);
        pos += 9 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
    }
    offsets
}

/// Three bash steps, each appending a line to `side.log`, then an answer.
fn side_effect_script() -> Vec<Turn> {
    let mut script: Vec<Turn> = (0..3)
        .map(|i| bash(&format!("echo step-{i} >> side.log")))
        .collect();
    script.push(Turn::Answer("three steps done".to_owned()));
    script
}

fn side_log(rollout: &Rollout) -> String {
    std::fs::read_to_string(rollout.work.join("side.log")).unwrap()
}

#[test]
fn corrupted_length_in_the_middle_is_refused_and_the_checkpoint_kept_as_it_is() {
    let model = ScriptedModel::start(side_effect_script(), Wire::Chat, Duration::ZERO);
    let rollout = Rollout::new();
    rollout.write_input(
        &model.base_url(),
        "chat_completions",
        json!({"max_model_calls": 3}),
    );
    assert!(rollout.command().status().unwrap().success());
    assert_eq!(side_log(&rollout), "step-0\nstep-1\nstep-2\n");
    let mut bytes = std::fs::read(rollout.checkpoint()).unwrap();
    // Header, snapshot, then (reply, tool start, tool end) three times.
    let offsets = record_offsets(&bytes);
    assert_eq!(offsets.len(), 2 + 3 * 3);
    // The reply to call 1: its length now runs far past the end of the file, as a torn
    // tail's would, but whole records follow it.
    let middle = offsets[5];
    bytes[middle + 3] ^= 0x7f;
    bytes[middle + 2] ^= 0x10;
    std::fs::write(rollout.checkpoint(), &bytes).unwrap();
    std::fs::remove_file(rollout.result()).unwrap();
    let calls = model.log().len();

    let output = rollout.command().output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result = parse_result(&rollout);
    assert_eq!(result.termination, Termination::Error);
    let error = result.error.unwrap();
    assert_eq!(error.kind, ErrorKind::Fatal);
    assert!(
        error
            .message
            .contains(&format!("offset {middle} is corrupted")),
        "{}",
        error.message
    );
    // The evidence is kept byte for byte: not truncated, not compacted, nothing beside it.
    assert_eq!(std::fs::read(rollout.checkpoint()).unwrap(), bytes);
    assert_eq!(
        rollout.state_listing(),
        ["checkpoint", "input.json", "result.json"]
    );
    // Nothing was done again: no model call, no tool.
    assert_eq!(model.log().len(), calls);
    assert_eq!(side_log(&rollout), "step-0\nstep-1\nstep-2\n");
    let decision = rollpoint_worker::resume_decision(&rollout.checkpoint());
    assert!(!decision.resume);
    assert!(
        decision.reason.contains(&format!("offset {middle}")),
        "{}",
        decision.reason
    );
}

#[test]
fn torn_tail_is_dropped_and_the_run_continues_from_the_last_whole_record() {
    let whole = {
        let model = ScriptedModel::start(side_effect_script(), Wire::Chat, Duration::ZERO);
        let rollout = Rollout::new();
        rollout.write_input(&model.base_url(), "chat_completions", json!({}));
        assert!(rollout.command().status().unwrap().success());
        std::fs::read(rollout.checkpoint()).unwrap()
    };
    // The last record is the final answer (call 3). Cut it inside its header and inside its
    // payload: both are a write cut short by a crash.
    let offsets = record_offsets(&whole);
    assert_eq!(offsets.len(), 2 + 3 * 3 + 1);
    let last = *offsets.last().unwrap();
    for cut in [
        last + 5,
        last + 9 + (whole.len() - last - 9) / 2,
        whole.len() - 1,
    ] {
        let model = ScriptedModel::start(side_effect_script(), Wire::Chat, Duration::ZERO);
        let rollout = Rollout::new();
        rollout.write_input(&model.base_url(), "chat_completions", json!({}));
        std::fs::write(rollout.checkpoint(), &whole[..cut]).unwrap();
        std::fs::set_permissions(rollout.checkpoint(), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        // The three tools already ran (their lines are there); the relaunch must not rerun them.
        std::fs::write(rollout.work.join("side.log"), "step-0\nstep-1\nstep-2\n").unwrap();
        let replayed = journal::replay(&rollout.checkpoint()).unwrap();
        assert_eq!(replayed.torn_at, Some(last as u64), "cut at {cut}");
        assert_eq!(replayed.state.usage.model_calls, 3, "cut at {cut}");

        let output = rollout.command().output().unwrap();
        assert!(
            output.status.success(),
            "cut at {cut}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let result = parse_result(&rollout);
        assert_eq!(result.termination, Termination::Completed, "cut at {cut}");
        assert_eq!(result.response.as_deref(), Some("three steps done"));
        assert_eq!(result.usage.model_calls, 4);
        assert_eq!(result.observations.launches, 2);
        assert_eq!(tool_statuses(&result), [ToolStatus::Ok; 3]);
        // Only the torn reply is asked for again; no tool ran again.
        let positions: Vec<usize> = model.log().iter().map(|l| l.position).collect();
        assert_eq!(positions, [3], "cut at {cut}");
        assert_eq!(side_log(&rollout), "step-0\nstep-1\nstep-2\n");
        // The torn bytes are gone (compacted) and the checkpoint reads whole.
        let after = journal::replay(&rollout.checkpoint()).unwrap();
        assert_eq!(after.torn_at, None);
        assert_eq!(after.state.usage.model_calls, 4);
    }
}

#[test]
fn unreachable_endpoint_ends_transient_within_the_deadline() {
    // Nothing listens on this port: connections are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // This one accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("http://{}/v1", silent.local_addr().unwrap());
    for (url, what) in [
        (format!("http://127.0.0.1:{port}/v1"), "refused"),
        (silent_url, "silent"),
    ] {
        let rollout = Rollout::new();
        rollout.write_input(
            &url,
            "chat_completions",
            json!({"model_call_timeout_secs": 3, "model_retries": 3}),
        );
        let began = Instant::now();
        let output = rollout.command().output().unwrap();
        let took = began.elapsed();
        assert_eq!(output.status.code(), Some(1), "{what}");
        let result = parse_result(&rollout);
        assert_eq!(result.termination, Termination::Error, "{what}");
        assert_eq!(result.error.unwrap().kind, ErrorKind::Transient, "{what}");
        // The call deadline is 3 s; allow generous slack for a loaded machine.
        assert!(took < Duration::from_secs(20), "{what}: took {took:?}");
    }
    drop(silent);
}

#[test]
fn command_line_errors_write_a_fatal_result_when_they_can() {
    let rollout = Rollout::new();
    let output = Command::new(support::worker_bin())
        .arg(rollout.input())
        .arg(rollout.result())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let error = parse_result(&rollout).error.unwrap();
    assert!(error.message.contains("--checkpoint"), "{}", error.message);
}

/// Mounts a small tmpfs; unmounts it on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "root test: cannot mount a tmpfs at {} (these tests must run as root)",
            dir.display()
        );
        Self(dir.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn root_failing_checkpoint_write_does_not_fail_the_run() {
    let rollout = Rollout::new();
    let full = rollout.root.path().join("full");
    let _mount = Tmpfs::mount(&full, "64k");
    let filler = full.join("filler");
    // Tool 0 fills the disk the checkpoint is on; tool 1 runs on a full disk; tool 2 frees it.
    let script = vec![
        // Each output is 8 KB, so each record needs new pages of the full tmpfs.
        bash(&format!(
            "dd if=/dev/zero of={} bs=4k count=1000 2>/dev/null; head -c 8000 /dev/zero | tr '\\0' a",
            filler.display()
        )),
        bash("head -c 8000 /dev/zero | tr '\\0' b"),
        bash(&format!(
            "rm {}; head -c 8000 /dev/zero | tr '\\0' c",
            filler.display()
        )),
        Turn::Answer("finished".to_owned()),
    ];
    let model = ScriptedModel::start(script, Wire::Chat, Duration::ZERO);
    rollout.write_input(&model.base_url(), "chat_completions", json!({}));
    let checkpoint = full.join("checkpoint");
    let output = Command::new(support::worker_bin())
        .arg(rollout.input())
        .arg(rollout.result())
        .arg("--checkpoint")
        .arg(&checkpoint)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("checkpoint write failed (the run goes on)")
            && stderr.contains("No space left on device"),
        "the failure is not logged: {stderr}"
    );
    let result = parse_result(&rollout);
    assert_eq!(result.termination, Termination::Completed);
    assert_eq!(tool_statuses(&result), [ToolStatus::Ok; 3]);
    assert!(result.observations.checkpoint_failures >= 2);
    // Once space came back the checkpoint was rewritten whole: it holds every boundary and
    // the tmpfs holds nothing else (no temp file left by a failed write).
    let replayed = journal::replay(&checkpoint).unwrap();
    assert_eq!(replayed.state.usage.model_calls, 4);
    assert_eq!(replayed.state.tools.len(), 3);
    assert_eq!(support::listing(&full), ["checkpoint"]);
    assert_eq!(mode(&checkpoint), 0o600);
}

#[test]
fn root_a_reply_lost_before_its_checkpoint_is_requested_again_identically() {
    // The one case the worker alone cannot prevent, made deterministic: the reply to call 1
    // arrives, its checkpoint write fails (full disk), and the worker is killed. The relaunch
    // sends call 1 again with the same body and idempotency key, which is what lets the
    // gateway's ledger answer it from its recording instead of the model.
    let rollout = Rollout::new();
    let full = rollout.root.path().join("full");
    let _mount = Tmpfs::mount(&full, "64k");
    let filler = full.join("filler");
    let long_thought = "thinking ".repeat(1000);
    let script = vec![
        // Small output: its record still fits the journal's last page.
        bash(&format!(
            "dd if=/dev/zero of={} bs=4k count=1000 2>/dev/null; true",
            filler.display()
        )),
        // A long reply: its record needs new pages, so its checkpoint write fails.
        Turn::Tool {
            name: "bash".to_owned(),
            args: json!({
                "command": format!(
                    "if [ -e once ]; then echo again; else touch once; echo $$ > tool.pid; exec sleep 30; fi # {long_thought}"
                ),
            }),
        },
        Turn::Answer("done".to_owned()),
    ];
    let model = ScriptedModel::start(script, Wire::Chat, Duration::ZERO);
    rollout.write_input(&model.base_url(), "chat_completions", json!({}));
    let checkpoint = full.join("checkpoint");
    let command = || {
        let mut c = Command::new(support::worker_bin());
        c.arg(rollout.input())
            .arg(rollout.result())
            .arg("--checkpoint")
            .arg(&checkpoint)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        c
    };
    let mut child = command().spawn().unwrap();
    let pid_file = rollout.work.join("tool.pid");
    let began = Instant::now();
    while std::fs::read_to_string(&pid_file).map_or(true, |s| !s.ends_with('\n')) {
        assert!(began.elapsed() < LIMIT, "the second tool never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let stderr = support::stderr_of(&mut child);
    assert!(stderr.contains("checkpoint write failed"), "{stderr}");
    let at_kill = journal::replay(&checkpoint).unwrap();
    assert_eq!(
        at_kill.state.usage.model_calls, 1,
        "reply 1 never became durable"
    );
    std::fs::remove_file(&filler).unwrap();

    let output = command().output().unwrap();
    assert!(output.status.success());
    let result = parse_result(&rollout);
    assert_eq!(result.termination, Termination::Completed);
    assert_eq!(result.observations.launches, 2);
    let log = model.log();
    let positions: Vec<usize> = log.iter().map(|l| l.position).collect();
    assert_eq!(positions, [0, 1, 1, 2]);
    assert!(log.iter().all(|l| l.answered));
    assert_eq!(
        log[1].digest, log[2].digest,
        "the repeat carries the same body"
    );
    assert_eq!(log[1].idempotency_key, "rollout-1:1");
    assert_eq!(log[1].idempotency_key, log[2].idempotency_key);
}
