//! A damaged checkpoint through the real binaries (root): two checkpoints,
//! SIGKILL, one byte of the newest one's records (or manifest) damaged; the
//! resume names the damaged checkpoint and what is wrong with it, falls back
//! to the one before, keeps every byte of the damaged one, and every task
//! finishes exactly once. Attempts dispatched after the older checkpoint
//! start over as their next attempt. `--checkpoint` with an unknown or a
//! damaged id fails naming it, and nothing is changed.

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_driver::{RolloutResult, Status};
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);

/// `count` counting tasks (ids `<tag><i>`), the first much quicker than the
/// rest, and a config with no timer: only the signals and resumes
/// checkpoint.
fn setup(dir: &Path, tag: &str, count: usize) -> (PathBuf, PathBuf) {
    let rows: Vec<serde_json::Value> = (0..count)
        .map(|i| command_task(&format!("{tag}{i}"), if i == 0 { 60 } else { 300 }))
        .collect();
    let tasks = dir.join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    let config = dir.join("run.toml");
    std::fs::write(&config, "v = 1\nconcurrency = 8\ncheckpoint_every_s = 0\n").expect("config");
    (tasks, config)
}

fn start(tasks: &Path, config: &Path, run_dir: &Path, log: &Path) -> Child {
    let sup = supervisor_bin();
    let args: Vec<&OsStr> = run_args(tasks, config, run_dir, &sup);
    let child = spawn(&args, log);
    wait_file(&run_dir.join("run.json"), LIMIT, log);
    child
}

fn latest(run_dir: &Path) -> Option<String> {
    std::fs::read_to_string(run_dir.join("checkpoints/LATEST"))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// Waits until LATEST names a checkpoint other than `before`, failing at
/// once if `child` ends first.
fn wait_latest_after(
    child: &mut Child,
    run_dir: &Path,
    before: Option<&str>,
    log: &Path,
) -> String {
    let end = Instant::now() + LIMIT;
    loop {
        if let Some(now) = latest(run_dir).filter(|n| Some(n.as_str()) != before) {
            return now;
        }
        let exited = child.try_wait().expect("wait");
        assert!(
            exited.is_none() && Instant::now() < end,
            "no new checkpoint after {before:?} (exited: {exited:?}):\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pid(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).expect("pid"))
}

/// SIGUSR1, then the id of the checkpoint it published.
fn checkpoint(child: &mut Child, run_dir: &Path, log: &Path) -> String {
    let before = latest(run_dir);
    kill(pid(child), Signal::SIGUSR1).expect("SIGUSR1");
    wait_latest_after(child, run_dir, before.as_deref(), log)
}

fn crash(child: &mut Child, log: &Path) {
    kill(pid(child), Signal::SIGKILL).expect("SIGKILL");
    let status = wait(child, LIMIT, log);
    assert!(!status.success(), "killed");
}

/// The share of `kind` in checkpoint `id`: its manifest and records file.
fn share(run_dir: &Path, id: &str, kind: &str) -> (PathBuf, PathBuf) {
    let kind_dir = run_dir.join("checkpoints").join(id).join(kind);
    let instance = std::fs::read_dir(&kind_dir)
        .expect("kind dir")
        .flatten()
        .next()
        .expect("an instance")
        .path();
    let records = std::fs::read_dir(&instance)
        .expect("instance dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".jsonl"))
        .expect("records file");
    (instance.join("manifest.json"), records)
}

fn flip_middle_byte(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).expect("write");
}

/// Every file under `dir` and its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if let Ok(bytes) = std::fs::read(&p) {
                out.insert(p, bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

/// What a resume may change: the checkpoints, run.json, the results and the
/// names under the run directory and its sandboxes.
fn state_of(run_dir: &Path) -> (BTreeMap<PathBuf, Vec<u8>>, Vec<String>) {
    let mut files = tree(&run_dir.join("checkpoints"));
    for f in ["run.json", "results.jsonl"] {
        if let Ok(b) = std::fs::read(run_dir.join(f)) {
            files.insert(run_dir.join(f), b);
        }
    }
    let mut names = Vec::new();
    for d in [run_dir.to_owned(), run_dir.join("owner/sandboxes")] {
        if let Ok(entries) = std::fs::read_dir(&d) {
            names.extend(entries.flatten().map(|e| e.path().display().to_string()));
        }
    }
    names.sort();
    (files, names)
}

/// `rollpoint resume RUN_DIR ARGS...` to the end: success and what it said.
fn resume(run_dir: &Path, args: &[&str], log: &Path) -> (bool, String) {
    let before = std::fs::read_to_string(log).unwrap_or_default().len();
    let mut all: Vec<&OsStr> = vec![OsStr::new("resume"), run_dir.as_os_str()];
    all.extend(args.iter().map(OsStr::new));
    let mut child = spawn(&all, log);
    let status = wait(&mut child, LIMIT, log);
    let text = std::fs::read_to_string(log).unwrap_or_default();
    (status.success(), text[before..].to_owned())
}

/// Every task exactly once, verified: every line exactly once.
fn check_results(run_dir: &Path, tag: &str, count: usize, log: &Path) -> Vec<RolloutResult> {
    let rows = rollpoint_run::read_results(run_dir).expect("results");
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in &rows {
        *seen.entry(r.rollout.clone()).or_default() += 1;
    }
    let mut want: Vec<String> = (0..count).map(|i| format!("{tag}{i}")).collect();
    want.sort();
    assert_eq!(seen.keys().cloned().collect::<Vec<_>>(), want, "{text}");
    assert!(seen.values().all(|n| *n == 1), "one row each: {seen:?}");
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:?}\n{text}");
        assert_eq!(r.reward, Some(1.0), "every line exactly once: {r:?}");
    }
    rows
}

#[test]
fn root_a_damaged_newest_checkpoint_falls_back_to_the_one_before() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("f{:04x}", fastrand::u16(..));
    let count = 4;
    let (tasks, config) = setup(dir.path(), &tag, count);
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");

    let mut child = start(&tasks, &config, &run_dir, &log);
    std::thread::sleep(Duration::from_millis(1200));
    let older = checkpoint(&mut child, &run_dir, &log);
    std::thread::sleep(Duration::from_millis(1200));
    let newest = checkpoint(&mut child, &run_dir, &log);
    std::thread::sleep(Duration::from_millis(300));
    crash(&mut child, &log);
    assert!(
        run_dir.join("checkpoints").join(&older).is_dir(),
        "retained"
    );

    // One byte of the newest checkpoint's agent records.
    let (_, records) = share(&run_dir, &newest, "agent");
    flip_middle_byte(&records);
    let damaged = tree(&run_dir.join("checkpoints").join(&newest));

    // Asked for explicitly, an unknown id or the damaged one fails naming
    // it, and nothing is changed (not even the crashed run's sandboxes).
    let before = state_of(&run_dir);
    let (ok, said) = resume(&run_dir, &["--checkpoint", "ck-nope"], &log);
    assert!(!ok, "{said}");
    assert!(
        said.contains("checkpoint ck-nope") && said.contains("no such published checkpoint"),
        "{said}"
    );
    assert!(
        state_of(&run_dir) == before,
        "an unknown id changed nothing"
    );
    let (ok, said) = resume(&run_dir, &["--checkpoint", &newest], &log);
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!("checkpoint {newest}"))
            && said.contains("damaged")
            && said.contains(&records.display().to_string()),
        "{said}"
    );
    assert!(state_of(&run_dir) == before, "a damaged id changed nothing");

    // Left to choose, the resume falls back to the older checkpoint.
    let (ok, said) = resume(&run_dir, &[], &log);
    assert!(ok, "{said}");
    assert!(
        said.contains("checkpoint is damaged")
            && said.contains(&format!("checkpoint={newest}"))
            && said.contains(&records.display().to_string())
            && said.contains("sha256"),
        "names the damaged checkpoint and what is wrong: {said}"
    );
    assert!(
        said.contains("restored rollouts from a checkpoint")
            && said.contains(&format!("checkpoint={older}")),
        "{said}"
    );
    let rows = check_results(&run_dir, &tag, count, &log);
    assert!(rows.iter().any(|r| r.attempt == 1), "{rows:?}");

    // Every byte of the damaged checkpoint is still there, marked; the
    // older one is kept beside the resume's own checkpoint.
    let mut now = tree(&run_dir.join("checkpoints").join(&newest));
    let marker = now
        .remove(&run_dir.join("checkpoints").join(&newest).join("DAMAGED"))
        .expect("marked damaged");
    assert!(String::from_utf8_lossy(&marker).contains("sha256"));
    assert!(now == damaged, "nothing of the damaged checkpoint changed");
    assert!(run_dir.join("checkpoints").join(&older).is_dir());
    assert_ne!(latest(&run_dir).as_deref(), Some(newest.as_str()));
}

#[test]
fn root_attempts_dispatched_after_the_older_checkpoint_start_over() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("g{:04x}", fastrand::u16(..));
    let count = 4;
    let (tasks, config) = setup(dir.path(), &tag, count);
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");

    let mut child = start(&tasks, &config, &run_dir, &log);
    std::thread::sleep(Duration::from_millis(1200));
    let older = checkpoint(&mut child, &run_dir, &log);
    crash(&mut child, &log);

    // The first resume restores from the older checkpoint as attempt 1
    // and pins those attempts in a checkpoint at once; it is killed then.
    let mut first = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    let newest = wait_latest_after(&mut first, &run_dir, Some(&older), &log);
    std::thread::sleep(Duration::from_millis(300));
    crash(&mut first, &log);
    let done_before: BTreeMap<String, u32> = rollpoint_run::read_results(&run_dir)
        .expect("results")
        .into_iter()
        .map(|r| (r.rollout, r.attempt))
        .collect();

    // One byte of the newest checkpoint's agent manifest.
    let (manifest, _) = share(&run_dir, &newest, "agent");
    flip_middle_byte(&manifest);

    let (ok, said) = resume(&run_dir, &[], &log);
    assert!(ok, "{said}");
    assert!(
        said.contains("checkpoint is damaged")
            && said.contains(&format!("checkpoint={newest}"))
            && said.contains(&manifest.display().to_string()),
        "names the damaged checkpoint and what is wrong: {said}"
    );
    assert!(
        said.contains("resuming from the newest intact checkpoint")
            && said.contains(&format!("checkpoint={older}")),
        "{said}"
    );
    // The older checkpoint saved attempt 0; attempt 1 ran since: it is
    // retired and every unfinished rollout starts over as attempt 2.
    assert!(
        said.contains("rollouts start over as their next attempt"),
        "{said}"
    );
    let rows = check_results(&run_dir, &tag, count, &log);
    for r in &rows {
        match done_before.get(&r.rollout) {
            Some(attempt) => assert_eq!(r.attempt, *attempt, "{r:?}"),
            None => assert_eq!(r.attempt, 2, "started over as the next attempt: {r:?}"),
        }
    }
    assert!(rows.iter().any(|r| r.attempt == 2), "{rows:?}\n{said}");
    assert!(
        run_dir
            .join("checkpoints")
            .join(&newest)
            .join("DAMAGED")
            .is_file()
    );
}

/// A run with a checkpoint store: its checkpoints are published there too, so after a
/// SIGKILL and the loss of every checkpoint under RUN_DIR the resume fetches them back from
/// the store (a real S3 server), restores the newest, and every task finishes exactly once.
#[test]
fn root_a_run_whose_local_checkpoints_are_lost_resumes_from_the_checkpoint_store() {
    require_root();
    let s3 = rollpoint_testkit::s3::S3Server::start();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("s{:04x}", fastrand::u16(..));
    let count = 3;
    let (tasks, config) = setup(dir.path(), &tag, count);
    s3.options_file(dir.path(), "");
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "checkpoint_store = \"{}\"\ncheckpoint_store_options = \"store.env\"\n",
        s3.url("run")
    ));
    std::fs::write(&config, text).expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let mut child = start(&tasks, &config, &run_dir, &log);
    checkpoint(&mut child, &run_dir, &log);
    let newest = checkpoint(&mut child, &run_dir, &log);
    crash(&mut child, &log);

    std::fs::remove_dir_all(run_dir.join("checkpoints")).expect("lose the checkpoints");
    let (ok, said) = resume(&run_dir, &[], &log);
    assert!(ok, "resume failed:\n{said}");
    assert!(said.contains("checkpoint store read"), "{said}");
    assert!(
        said.contains(&format!(
            "restored rollouts from a checkpoint checkpoint={newest}"
        )),
        "the resume restored the store's newest checkpoint:\n{said}"
    );
    let rows = check_results(&run_dir, &tag, count, &log);
    let restored = rows.iter().filter(|r| r.attempt > 0).count();
    assert!(
        restored > 0,
        "some rollout continued from the store's checkpoint: {rows:?}"
    );
    let store_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !store_log.contains(rollpoint_testkit::s3::SECRET),
        "the store's secret reached the run's output"
    );
    // The run's own files (not the sandboxes' store image, gigabytes of sparse file).
    for part in ["checkpoints", "run.json", "results.jsonl", "events.jsonl"] {
        let holding = files_holding(
            &run_dir.join(part),
            rollpoint_testkit::s3::SECRET.as_bytes(),
        );
        assert!(
            holding.is_empty(),
            "files holding the store's secret: {holding:?}"
        );
    }
}
