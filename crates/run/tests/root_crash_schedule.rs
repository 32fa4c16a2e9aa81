//! A crash schedule: `rollpoint run`, then `rollpoint resume` again and
//! again, each SIGKILLed at a random moment, then a last resume to the end.
//! Checked: every task ends in `results.jsonl` exactly once and verified,
//! and nothing of the run is left (no process, mount, cgroup or loop device;
//! no sandbox, upper or snapshot but what the retained checkpoints name).
//! No model call reaches the upstream twice: the run's gateway is a process
//! of its own that records the calls in flight at a kill, and no gateway of
//! the run is left at the end (docs/design/gateway.md).
//!
//! Seeded and printed, so a failure replays: `ROLLPOINT_CRASH_SEED=<seed>`.
//! `ROLLPOINT_CRASH_KILLS` (default 50) kills, within
//! `ROLLPOINT_CRASH_BUDGET_S` (default 600) seconds of killing.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_driver::Status;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn root_a_crash_schedule_of_runs_and_resumes_loses_and_leaves_nothing() {
    require_root();
    let seed = env_u64("ROLLPOINT_CRASH_SEED", fastrand::u64(..));
    let kills = env_u64("ROLLPOINT_CRASH_KILLS", 50);
    let budget = Duration::from_secs(env_u64("ROLLPOINT_CRASH_BUDGET_S", 600));
    eprintln!(
        "crash schedule seed {seed}: {kills} kills (replay with ROLLPOINT_CRASH_SEED={seed})"
    );
    let mut rng = fastrand::Rng::with_seed(seed);

    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("s{:04x}", rng.u16(..));
    let commands = 10;
    let mut rows: Vec<serde_json::Value> = (0..commands)
        .map(|i| command_task(&format!("{tag}c{i}"), 150))
        .collect();
    let natives = 3;
    for i in 0..natives {
        rows.push(native_task(&format!("{tag}n{i}")));
    }
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    // Each answer takes 200 ms, so kills land while calls are generating.
    let mut script = model_script(300);
    for step in script["steps"].as_array_mut().expect("steps") {
        step["delay_ms"] = serde_json::json!(200);
    }
    std::fs::write(dir.path().join("model.json"), script.to_string()).expect("script");
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "v = 1\nconcurrency = 6\ncheckpoint_every_s = 1\nmodel_script = \"model.json\"\nstore = \"copy\"\n",
    )
    .expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();
    let text = || std::fs::read_to_string(&log).unwrap_or_default();

    let started = Instant::now();
    let mut done = 0;
    let mut finished_early = false;
    while done < kills && started.elapsed() < budget {
        // A run killed before it wrote its state never began: it is started again, not resumed.
        let mut child = if done == 0 || !run_dir.join("run.json").exists() {
            spawn(&run_args(&tasks, &config, &run_dir, &sup), &log)
        } else {
            spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log)
        };
        let after = rng.u64(0..1500);
        std::thread::sleep(Duration::from_millis(after));
        if let Some(status) = child.try_wait().expect("try_wait") {
            // It ran to its end (or failed) before the kill.
            assert!(
                status.success(),
                "kill {done} (seed {seed}): the process failed by itself ({status}):\n{}",
                text()
            );
            finished_early = true;
            break;
        }
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        kill(pid, Signal::SIGKILL).expect("kill");
        let _ = wait(&mut child, LIMIT, &log);
        done += 1;
    }
    eprintln!(
        "crash schedule seed {seed}: {done} kills in {:?}{}",
        started.elapsed(),
        if finished_early {
            ", then it finished"
        } else {
            ""
        }
    );
    assert!(done >= 1, "no kill landed (seed {seed})");

    let mut last = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    let status = wait(&mut last, LIMIT, &log);
    assert!(
        status.success(),
        "the last resume failed (seed {seed}):\n{}",
        text()
    );

    // Every task exactly once, verified.
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in &results {
        *seen.entry(r.rollout.clone()).or_default() += 1;
        assert_eq!(r.status, Status::Verified, "seed {seed}: {r:?}\n{}", text());
        assert_eq!(
            r.reward,
            Some(1.0),
            "seed {seed}: every line exactly once: {r:?}"
        );
    }
    assert_eq!(
        seen.len(),
        commands + natives,
        "seed {seed}: every task has a row: {seen:?}"
    );
    assert!(
        seen.values().all(|n| *n == 1),
        "seed {seed}: one row each: {seen:?}"
    );

    // Nothing left running, mounted, in a cgroup or on a loop device.
    if let Err(left) = wait_nothing_left(&tag, &run_dir, Duration::from_secs(30)) {
        panic!("seed {seed}: {left}");
    }
    let loops = std::process::Command::new("losetup")
        .arg("-a")
        .output()
        .expect("losetup");
    let loops = String::from_utf8_lossy(&loops.stdout);
    assert!(
        !loops.contains(&run_dir.display().to_string()),
        "seed {seed}: loop devices left: {loops}"
    );

    // Storage: no sandbox and no upper; every snapshot and snapshot record
    // is one a retained checkpoint names.
    let owner = run_dir.join("owner");
    assert!(
        names(&owner.join("sandboxes")).is_empty(),
        "seed {seed}: sandboxes left"
    );
    assert!(
        names(&owner.join("store/uppers")).is_empty(),
        "seed {seed}: uppers left: {:?}",
        names(&owner.join("store/uppers"))
    );
    let retained = retained_snapshots(&owner);
    let records: BTreeSet<String> = names(&owner.join("snapshots"))
        .into_iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
        .collect();
    let stored: BTreeSet<String> = names(&owner.join("store/snapshots"))
        .into_iter()
        .filter_map(|n| n.strip_suffix(".tar").map(str::to_owned))
        .collect();
    let stray_records: Vec<_> = records.difference(&retained).collect();
    assert!(
        stray_records.is_empty(),
        "seed {seed}: snapshot records no checkpoint names: {stray_records:?}"
    );
    let dangling: Vec<_> = records.difference(&stored).collect();
    assert!(
        dangling.is_empty(),
        "seed {seed}: snapshot records whose snapshot is gone: {dangling:?}"
    );
    let stray: Vec<_> = stored.difference(&retained).collect();
    assert!(
        stray.is_empty(),
        "seed {seed}: snapshots no checkpoint names: {stray:?}"
    );

    // Repeated upstream calls: counted (0 unless a kill caught one generating).
    let log_path = run_dir.join("model-script.log");
    let mut digests: BTreeMap<String, usize> = BTreeMap::new();
    for line in std::fs::read_to_string(&log_path)
        .unwrap_or_default()
        .lines()
    {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
            && let Some(d) = v["request_sha256"].as_str()
        {
            *digests.entry(d.to_owned()).or_default() += 1;
        }
    }
    let repeated: usize = digests.values().map(|n| n - 1).sum();
    eprintln!(
        "crash schedule seed {seed}: {} upstream calls, {repeated} repeated",
        digests.values().sum::<usize>()
    );
    if repeated > 0 {
        let twice: Vec<&String> = digests
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(d, _)| d)
            .collect();
        panic!(
            "seed {seed}: {repeated} model calls sent upstream more than once; the ledger's rows of those requests:\n{}\n{}",
            ledger_rows(&run_dir.join("gateway/ledger.sqlite"), &twice),
            text()
        );
    }
    let ledger = run_dir.join("gateway/ledger.sqlite").display().to_string();
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let left = rollpoint_testkit::processes_naming(&ledger);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < end,
            "seed {seed}: gateways of the run left: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The ledger's rows whose request digest is one of `digests`, one line each.
fn ledger_rows(ledger: &std::path::Path, digests: &[&String]) -> String {
    let conn = match rusqlite::Connection::open_with_flags(
        ledger,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    ) {
        Ok(c) => c,
        Err(e) => return format!("{}: {e}", ledger.display()),
    };
    let mut out = Vec::new();
    for d in digests {
        let rows = conn
            .prepare(
                "SELECT call_id, status, lineage, replayed_from, admitted_ms, upstream_ms, finished_ms \
                 FROM calls WHERE request_digest = ?1 ORDER BY admitted_ms",
            )
            .and_then(|mut s| {
                s.query_map([d], |r| {
                    Ok(format!(
                        "{d:.12} {} {} {} from={:?} admitted={:?} upstream={:?} finished={:?}",
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<i64>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                    ))
                })
                .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            });
        match rows {
            Ok(rows) => out.extend(rows),
            Err(e) => out.push(format!("{d}: {e}")),
        }
    }
    out.join("\n")
}
