//! Limits under load: one run of 8 rollouts, checkpointed every second, in
//! which a fork bomb, a memory balloon, a disk filler and a CPU hog each run
//! in a sandbox of their own with the default isolation and network. Each offender ends
//! with an error naming the limit that stopped it, the other rollouts
//! verify, checkpoints publish, and the host's process count stays bounded.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rollpoint_driver::Status;
use rollpoint_testkit::{require_root, supervisor_bin};

fn offender(id: &str, script: &str, limits: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "v": 1,
        "task": {
            "id": id,
            "sandbox": {"limits": limits},
            "verify": {"command": ["/bin/sh", "-c", "true"]}
        },
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", script], "pauses": true}
    })
}

/// Threads on the host now (the fourth field of /proc/loadavg).
fn host_threads() -> u64 {
    let text = std::fs::read_to_string("/proc/loadavg").expect("loadavg");
    let field = text.split_whitespace().nth(3).expect("runnable/total");
    field
        .split('/')
        .nth(1)
        .and_then(|t| t.parse().ok())
        .expect("total")
}

#[test]
fn root_offenders_end_naming_their_limits_and_the_rest_verify() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rl")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let tag = format!("l{:04x}", fastrand::u16(..));
    let mut rows: Vec<serde_json::Value> = (0..4)
        .map(|i| command_task(&format!("{tag}ok{i}"), 200))
        .collect();
    rows.push(offender(
        &format!("{tag}forks"),
        "for i in $(seq 300); do sleep 3 & done 2>/dev/null; wait",
        serde_json::json!({"pids": 64}),
    ));
    rows.push(offender(
        &format!("{tag}memory"),
        "python3 -c 'b = bytearray(1 << 30); print(len(b))'",
        serde_json::json!({"memory_bytes": 64 << 20}),
    ));
    rows.push(offender(
        &format!("{tag}disk"),
        "dd if=/dev/zero of=/tmp/fill bs=1M count=256; sync",
        serde_json::json!({"disk_bytes": 16 << 20}),
    ));
    rows.push(offender(
        &format!("{tag}cpu"),
        "end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do :; done",
        serde_json::json!({"cpu_millis": 100}),
    ));
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "v = 1\nconcurrency = 8\ncheckpoint_every_s = 1\nstore = \"btrfs\"\n",
    )
    .expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();
    let before = host_threads();
    let mut run = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    let end = Instant::now() + Duration::from_secs(300);
    let mut most = before;
    while run.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < end, "the run did not end");
        most = most.max(host_threads());
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let status = wait(&mut run, Duration::from_secs(10), &log);
    assert!(status.success(), "the run failed ({status}):\n{text}");
    // 300 processes the fork bomb asked for are never all on the host.
    assert!(
        most < before + 300,
        "host threads rose from {before} to {most}"
    );
    assert!(
        text.contains("checkpoint") && run_dir.join("checkpoints/LATEST").exists(),
        "no checkpoint was published:\n{text}"
    );
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 8, "{results:?}");
    for r in &results {
        let resources = r.resources.as_ref().expect("every row says what it used");
        let error = r.error.clone().unwrap_or_default();
        let want = if r.rollout.ends_with("forks") {
            Some("pids: ")
        } else if r.rollout.ends_with("memory") {
            Some("memory: killed by its memory limit of 64 MiB")
        } else if r.rollout.ends_with("disk") {
            Some("disk: ")
        } else if r.rollout.ends_with("cpu") {
            Some("cpu: throttled")
        } else {
            None
        };
        match want {
            Some(limit) => {
                assert!(
                    error.contains(limit),
                    "{}: {error:?} {resources:?}",
                    r.rollout
                );
                assert!(
                    resources
                        .limits_hit
                        .iter()
                        .any(|l| l.starts_with(&limit[..4])),
                    "{}: {resources:?}",
                    r.rollout
                );
            }
            None => {
                assert_eq!(r.status, Status::Verified, "{r:?}");
                assert_eq!(r.reward, Some(1.0), "{r:?}");
                assert!(resources.limits_hit.is_empty(), "{r:?}");
                assert!(
                    resources.cpu_ms > 0 && resources.disk_bytes > 0,
                    "{resources:?}"
                );
            }
        }
    }
}
