//! Forking a rollout of a live run 8 ways from a checkpoint taken mid-rollout, over the run's
//! control endpoint: every branch finishes and verifies with a result row naming where it
//! came from; the calls made before the checkpoint reached the model once in all, the first
//! call after it once per branch (a sampling model answers each differently), and every later
//! call once; every branch's
//! files start from the snapshot (a file the source wrote after the checkpoint is in no
//! branch); the source's own row is as if nothing happened. Bad forks name what is wrong.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use rollpoint_driver::Status;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);
const TOKEN: &str = "fork-token";
const BRANCHES: usize = 8;

/// The native worker's script, where each step's line names how many times its request was
/// asked before (`{sample}`): branches asking the same thing get different lines.
fn sampling_script() -> serde_json::Value {
    let steps: Vec<serde_json::Value> = (1..=STEPS)
        .map(|n| {
            serde_json::json!({"shell": [format!("echo step {n} sample {{sample}} >> work.txt; sleep 0.4")]})
        })
        .collect();
    serde_json::json!({"version": 1, "steps": steps, "after_last": {"text": "done"}})
}

fn model_log(run_dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run_dir.join("model-script.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A run of one native task `<tag>n` with the sampling script, serving its control endpoint.
struct Started {
    _dir: tempfile::TempDir,
    source: String,
    run_dir: PathBuf,
    log: PathBuf,
    token_file: PathBuf,
    args: Vec<std::ffi::OsString>,
}

impl Started {
    fn new(letter: char, concurrency: usize) -> Self {
        require_root();
        let dir = tempfile::Builder::new()
            .prefix("rp")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let source = format!("{letter}{:04x}n", fastrand::u16(..));
        let tasks = dir.path().join("tasks.jsonl");
        write_jsonl(&tasks, &[native_task(&source)]);
        std::fs::write(dir.path().join("model.json"), sampling_script().to_string())
            .expect("script");
        let config = dir.path().join("run.toml");
        std::fs::write(
            &config,
            format!(
                "v = 1\nconcurrency = {concurrency}\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\n"
            ),
        )
        .expect("config");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
        let run_dir = dir.path().join("r");
        let args = run_args_listening(&tasks, &config, &run_dir, &supervisor_bin(), &token_file);
        Self {
            log: dir.path().join("stderr.log"),
            _dir: dir,
            source,
            run_dir,
            token_file,
            args,
        }
    }

    /// Once the rollout has asked for its second step, a checkpoint over the control
    /// endpoint; returns its id.
    fn checkpoint_mid_rollout(&self) -> String {
        let end = Instant::now() + LIMIT;
        while !model_log(&self.run_dir)
            .iter()
            .any(|e| e["step"].as_u64() >= Some(1))
        {
            assert!(
                Instant::now() < end,
                "the rollout did not get going:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let report = checkpoint_held(&self.run_dir, TOKEN, 0);
        report["id"].as_str().expect("id").to_owned()
    }

    /// Starts the run and waits for its control endpoint.
    fn spawn(&self) -> std::process::Child {
        let args: Vec<&OsStr> = self
            .args
            .iter()
            .map(std::ffi::OsString::as_os_str)
            .collect();
        let child = spawn(&args, &self.log);
        wait_file(&self.run_dir.join("control.json"), LIMIT, &self.log);
        child
    }
}

#[test]
fn root_a_rollout_forked_eight_ways_shares_its_prefix_and_diverges_after_it() {
    let started = Started::new('f', 12);
    let mut child = started.spawn();
    let (source, run_dir, log) = (&started.source, &started.run_dir, &started.log);
    let text = || std::fs::read_to_string(log).unwrap_or_default();
    let checkpoint = started.checkpoint_mid_rollout();
    let asked_before: Vec<String> = model_log(run_dir)
        .iter()
        .filter_map(|e| e["request_sha256"].as_str().map(str::to_owned))
        .collect();
    // Written by the source after the checkpoint: no branch may see it.
    let source_ws = workspaces(run_dir, &format!("{source}-"));
    assert!(!source_ws.is_empty(), "the source's sandbox");
    for ws in &source_ws {
        std::fs::write(ws.join("after-the-checkpoint"), "source only\n").expect("marker");
    }

    // Bad forks change nothing and name the problem.
    for (body, says) in [
        (
            serde_json::json!({"v": 1, "checkpoint": checkpoint, "rollout": source, "n": 0}),
            "outside 1..=256",
        ),
        (
            serde_json::json!({"v": 1, "checkpoint": "ck-nope", "rollout": source, "n": 2}),
            "ck-nope",
        ),
        (
            serde_json::json!({"v": 1, "checkpoint": checkpoint, "rollout": "nobody", "n": 2}),
            "is not in checkpoint",
        ),
    ] {
        let (code, reply) = fork(run_dir, TOKEN, &body);
        assert!(code >= 400, "{body} was refused: {reply}");
        assert!(reply.to_string().contains(says), "{body}: {reply}");
    }

    let body =
        serde_json::json!({"v": 1, "checkpoint": checkpoint, "rollout": source, "n": BRANCHES});
    let (code, reply) = fork(run_dir, TOKEN, &body);
    assert_eq!(code, 200, "fork: {reply}\n{}", text());
    let branches = branch_ids(&reply);
    let expected: Vec<String> = (1..=BRANCHES).map(|i| format!("{source}~{i}")).collect();
    assert_eq!(branches, expected);

    // Each branch's sandbox starts from the snapshot.
    check_branches_start_from_the_snapshot(run_dir, BRANCHES, "work.txt", "after-the-checkpoint");

    let status = wait(&mut child, LIMIT, log);
    assert!(status.success(), "the run failed ({status}):\n{}", text());

    let rows = rollpoint_run::read_results(run_dir).expect("results");
    assert_eq!(rows.len(), 1 + BRANCHES, "{rows:?}");
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:?}\n{}", text());
        if &r.rollout == source {
            // Undisturbed: its one attempt, its one launch, its own calls.
            assert!(r.forked_from.is_none(), "{r:?}");
            assert_eq!((r.attempt, r.launches.len()), (0, 1), "{r:?}");
        } else {
            let from = r.forked_from.as_ref().expect("forked_from");
            assert_eq!(&from.rollout, source);
            assert_eq!(from.checkpoint, checkpoint);
            assert!(from.call.is_some(), "the branch point names a call: {r:?}");
        }
    }

    // The model: the prefix asked once in all; the first call after the checkpoint asked by
    // the source and every branch, each answered differently.
    let entries = model_log(run_dir);
    let mut asked: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for e in &entries {
        asked
            .entry(e["request_sha256"].as_str().expect("sha").to_owned())
            .or_default()
            .push(e["sample"].as_u64().expect("sample"));
    }
    // A call in flight at the checkpoint is the branch point itself: the branches ask it again.
    for d in &asked_before {
        let n = asked[d].len();
        assert!(
            n == 1 || n == 1 + BRANCHES,
            "a call made before the checkpoint went upstream {n} times: {d}"
        );
    }
    // The source asks it too when its request has the same bytes (a tool that finished); a
    // branch relaunched mid-tool says the tool was interrupted, and only the branches ask that.
    let branched: Vec<&Vec<u64>> = asked
        .values()
        .filter(|samples| samples.len() >= BRANCHES)
        .collect();
    assert_eq!(
        branched.len(),
        1,
        "exactly one request, the branch point, asked by every branch: {asked:?}"
    );
    let mut samples = branched[0].clone();
    samples.sort_unstable();
    assert_eq!(
        samples,
        (0..samples.len() as u64).collect::<Vec<_>>(),
        "each asker got its own answer"
    );
    assert!(
        asked
            .values()
            .all(|s| s.len() == 1 || s.len() == samples.len()),
        "every other request was asked once: {asked:?}"
    );

    // The fork is in the run's history.
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).expect("events");
    assert!(events.contains("\"kind\":\"forked\""), "{events}");
}

/// The latest published checkpoint and its scope's rollouts.
fn latest(run_dir: &Path) -> Option<(String, Vec<String>)> {
    let id = std::fs::read_to_string(run_dir.join("checkpoints/LATEST")).ok()?;
    let id = id.trim().to_owned();
    let doc = rollpoint_checkpoint::store::read_checkpoint(run_dir, &id).ok()?;
    let scope = doc
        .scope
        .iter()
        .map(|k| k.rollout().as_str().to_owned())
        .collect();
    Some((id, scope))
}

#[test]
fn root_branches_crash_and_resume_from_their_own_checkpoint_and_fork_works_on_a_stopped_run() {
    let started = Started::new('g', 8);
    let mut child = started.spawn();
    let (source, run_dir, log, token_file) = (
        &started.source,
        &started.run_dir,
        &started.log,
        &started.token_file,
    );
    let text = || std::fs::read_to_string(log).unwrap_or_default();
    let first = started.checkpoint_mid_rollout();
    let end = Instant::now() + LIMIT;

    // `rollpoint fork` of a live run asks its endpoint and prints the branches.
    let out = std::process::Command::new(rollpoint_bin())
        .arg("fork")
        .arg(run_dir)
        .args(["--checkpoint", &first, "--rollout", source, "--n", "3"])
        .arg("--control-token-file")
        .arg(token_file)
        .output()
        .expect("rollpoint fork");
    assert!(
        out.status.success(),
        "fork of a live run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let branches: Vec<String> = (1..=3).map(|i| format!("{source}~{i}")).collect();
    assert_eq!(printed.lines().collect::<Vec<_>>(), branches);

    // The branches are pinned by a checkpoint of their own; the run is killed after it.
    let pin = loop {
        if let Some((id, scope)) = latest(run_dir)
            && id != first
            && branches.iter().all(|b| scope.contains(b))
        {
            break id;
        }
        assert!(
            Instant::now() < end,
            "no checkpoint holds the branches:\n{}",
            text()
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("kill");
    let _ = wait(&mut child, LIMIT, log);

    // `rollpoint fork` of a run no process drives: a resume that also forks, to the end.
    let mut resumed = spawn(
        &[
            OsStr::new("fork"),
            run_dir.as_os_str(),
            OsStr::new("--checkpoint"),
            OsStr::new(&pin),
            OsStr::new("--rollout"),
            OsStr::new(&source),
            OsStr::new("--n"),
            OsStr::new("2"),
        ],
        log,
    );
    let status = wait(&mut resumed, LIMIT, log);
    assert!(
        status.success(),
        "fork of a stopped run ({status}):\n{}",
        text()
    );
    assert!(
        text().contains("restored rollouts from a checkpoint")
            && text().contains(&format!("checkpoint={pin}")),
        "the branches came back from their own checkpoint:\n{}",
        text()
    );

    let rows = rollpoint_run::read_results(run_dir).expect("results");
    let by: BTreeMap<&str, &rollpoint_driver::RolloutResult> =
        rows.iter().map(|r| (r.rollout.as_str(), r)).collect();
    assert_eq!(by.len(), 6, "the source and five branches: {rows:?}");
    assert_eq!(rows.len(), 6, "one row each: {rows:?}");
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:?}\n{}", text());
    }
    for b in &branches {
        let r = by[b.as_str()];
        assert_eq!(
            r.attempt, 2,
            "restored from the pin as its next attempt: {r:?}"
        );
        assert_eq!(
            r.forked_from.as_ref().map(|f| f.checkpoint.as_str()),
            Some(first.as_str())
        );
    }
    for i in 4..=5 {
        let r = by[format!("{source}~{i}").as_str()];
        assert_eq!(
            r.forked_from.as_ref().map(|f| f.checkpoint.as_str()),
            Some(pin.as_str()),
            "{r:?}"
        );
    }
    assert!(by[source.as_str()].forked_from.is_none());
}

#[test]
fn root_the_branch_rule_forks_every_rollout_of_the_tasks_file_once() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("h{:04x}", fastrand::u16(..));
    let sources: Vec<String> = (0..2).map(|i| format!("{tag}n{i}")).collect();
    let rows: Vec<serde_json::Value> = sources.iter().map(|s| native_task(s)).collect();
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    std::fs::write(dir.path().join("model.json"), sampling_script().to_string()).expect("script");
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "v = 1\nconcurrency = 8\ncheckpoint_every_s = 1\nmodel_script = \"model.json\"\n\
         [branch]\nat = \"every checkpoint\"\nn = 3\n",
    )
    .expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();
    let mut child = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    let status = wait(&mut child, LIMIT, &log);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "the run failed ({status}):\n{text}");

    let rows = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(
        rows.len(),
        2 + 2 * 3,
        "each source and its 3 branches: {rows:?}\n{text}"
    );
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:?}\n{text}");
    }
    for s in &sources {
        for i in 1..=3 {
            let b = format!("{s}~{i}");
            let r = rows.iter().find(|r| r.rollout == b).expect("branch row");
            assert_eq!(
                r.forked_from.as_ref().map(|f| f.rollout.as_str()),
                Some(s.as_str())
            );
        }
    }
    assert!(
        !rows.iter().any(|r| r.rollout.matches('~').count() > 1),
        "branches are not forked again: {rows:?}"
    );
    let state = rollpoint_run::RunState::load(&run_dir).expect("run.json");
    assert_eq!(
        state.branched.iter().cloned().collect::<Vec<_>>(),
        sources,
        "each source forked once by the rule"
    );
}
