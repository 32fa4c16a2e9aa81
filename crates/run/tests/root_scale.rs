//! Scale paths stay correct: 256 rollouts in flight at once through two
//! checkpoints over the control endpoint (each of all 256, batched), a
//! SIGKILL and a resume. Every task ends exactly once, verified, continuing
//! from its checkpointed state (each appends numbered lines, checked in
//! full), and nothing of the run is left. Runs alone (a `root_` test).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use rollpoint_driver::Status;
use rollpoint_testkit::{require_root, supervisor_bin};

const N: usize = 256;
const STEPS: u32 = 150;
const LIMIT: Duration = Duration::from_secs(900);

#[test]
fn root_256_rollouts_through_two_checkpoints_a_crash_and_a_resume() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let tag = format!("s{:04x}", fastrand::u16(..));
    let script = format!(
        "n=$(wc -l < lines 2>/dev/null || echo 0); while [ \"$n\" -lt {STEPS} ]; do n=$((n+1)); \
         echo \"$n\" >> lines; sleep 0.1; done"
    );
    let rows: Vec<serde_json::Value> = (0..N)
        .map(|i| {
            serde_json::json!({
                "v": 1,
                "task": {"id": format!("{tag}-{i}"), "verify": {"command": ["/bin/sh", "-c",
                    format!("seq 1 {STEPS} | cmp -s - lines")]}},
                "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", &script], "pauses": true}
            })
        })
        .collect();
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        format!("v = 1\nconcurrency = {N}\ncheckpoint_every_s = 0\nstore = \"btrfs\"\n"),
    )
    .expect("config");
    let token = "scale-token-0123456789";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).expect("token");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();
    let args = run_args_listening(&tasks, &config, &run_dir, &sup, &token_file);
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsString::as_os_str).collect();
    let mut child = spawn(&args, &log);

    // All 256 running: each has written its first line.
    let sandboxes = run_dir.join("owner/sandboxes");
    let deadline = Instant::now() + LIMIT;
    loop {
        let running = std::fs::read_dir(&sandboxes)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| rollpoint_testkit::sandbox_root(&e.path()))
                    .filter(|root| root.join("workspace/lines").exists())
                    .count()
            })
            .unwrap_or(0);
        if running >= N {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {running} of {N} running:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for round in 0..2 {
        let reply = checkpoint_held(&run_dir, token, 0);
        let scope = reply["scope"].as_array().map_or(0, Vec::len);
        assert_eq!(scope, N, "checkpoint {round} held every rollout: {reply}");
    }
    // Each checkpoint paused all N launches as one batch, in one file; a
    // run that had not yet gone back to waiting on its launch when the
    // second came (the first had just continued it) is paused by its
    // supervisor, which writes the receipt in the launch's own log.
    let by_supervisor = supervisor_pauses(&sandboxes);
    let receipts = run_dir.join("owner/receipts");
    let mut batches: Vec<String> = std::fs::read_dir(&receipts)
        .expect("the batches' receipts")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-pause.jsonl"))
        .collect();
    batches.sort();
    assert_eq!(batches.len(), 2, "{batches:?}");
    for (round, batch) in batches.iter().enumerate() {
        let text = std::fs::read_to_string(receipts.join(batch)).expect("a batch");
        let confirmed = text
            .lines()
            .map(|l| rollpoint_proto::receipt::Receipt::decode(l.as_bytes()).expect("a receipt"))
            .filter(|r| r.confirmed() && !r.members.is_empty())
            .map(|r| r.launch_id)
            .collect::<std::collections::BTreeSet<_>>();
        if round == 0 {
            assert_eq!(confirmed.len(), N, "{batch}: every launch confirmed once");
        } else {
            let missing: Vec<&String> = by_supervisor
                .iter()
                .filter(|l| !confirmed.contains(*l))
                .collect();
            assert_eq!(
                confirmed.len() + missing.len(),
                N,
                "{batch}: every launch confirmed once, in the batch or by its supervisor \
                 ({} in the batch)",
                confirmed.len()
            );
            assert!(
                confirmed.len() * 2 > N,
                "{batch}: most launches were paused in the batch, {} were",
                confirmed.len()
            );
        }
    }
    // Every rollout went on in place through both checkpoints: one launch each.
    let relaunched: Vec<String> = std::fs::read_dir(&sandboxes)
        .expect("sandboxes")
        .flatten()
        .filter(|s| {
            std::fs::read_dir(
                s.path()
                    .join("control")
                    .join(rollpoint_proto::anchor::LAUNCHES_DIR),
            )
            .map_or(0, Iterator::count)
                != 1
        })
        .map(|s| s.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        relaunched.is_empty(),
        "relaunched, not continued in place: {relaunched:?}"
    );
    child.kill().expect("SIGKILL");
    let _ = child.wait();

    let mut resume = spawn(&[std::ffi::OsStr::new("resume"), run_dir.as_os_str()], &log);
    let status = wait(&mut resume, LIMIT, &log);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "resume failed ({status}):\n{text}");

    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), N, "one row per task");
    let ids: BTreeSet<&str> = results.iter().map(|r| r.rollout.as_str()).collect();
    assert_eq!(ids.len(), N, "every task exactly once");
    for r in &results {
        assert_eq!(r.status, Status::Verified, "{r:?}");
        assert_eq!(r.reward, Some(1.0), "{r:?}");
    }
    wait_nothing_left(&tag, &run_dir, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    let left = std::fs::read_dir(&sandboxes).map_or(0, |d| d.count());
    assert_eq!(left, 0, "sandboxes left in {}", sandboxes.display());
}

/// The launches whose supervisors confirmed a pause (their own
/// `receipts.jsonl`), over every sandbox under `sandboxes`.
fn supervisor_pauses(sandboxes: &std::path::Path) -> std::collections::BTreeSet<String> {
    use rollpoint_proto::receipt::{Op, Receipt};
    let mut paused = std::collections::BTreeSet::new();
    for sandbox in std::fs::read_dir(sandboxes).expect("sandboxes").flatten() {
        let launches = sandbox
            .path()
            .join("control")
            .join(rollpoint_proto::anchor::LAUNCHES_DIR);
        for launch in std::fs::read_dir(launches).into_iter().flatten().flatten() {
            let log = launch.path().join(rollpoint_proto::session::RECEIPTS_FILE);
            let text = std::fs::read_to_string(log).unwrap_or_default();
            paused.extend(
                text.lines()
                    .filter_map(|l| Receipt::decode(l.as_bytes()).ok())
                    .filter(|r| r.op == Op::Pause && r.confirmed())
                    .map(|r| r.launch_id),
            );
        }
    }
    paused
}
