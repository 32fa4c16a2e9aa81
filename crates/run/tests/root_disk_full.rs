//! A full disk under the checkpoints (root: a small tmpfs mounted at
//! `RUN_DIR/checkpoints`, then filled): every checkpoint taken while it is
//! full fails and says so, the run goes on, the checkpoint published before
//! stays published and byte for byte as it was, and once space is back the
//! next checkpoint is published and every task ends once, verified.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use rollpoint_driver::Status;
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);

/// Every file under `dir` with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let name = p.strip_prefix(dir).expect("under").display().to_string();
                out.insert(name, std::fs::read(&p).expect("read"));
            }
        }
    }
    out
}

fn latest(run_dir: &Path) -> Option<String> {
    std::fs::read_to_string(run_dir.join("checkpoints/LATEST"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Unmounts `dir` when dropped.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
fn root_checkpoints_on_a_full_disk_fail_keep_the_published_one_and_recover() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rf")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let tag = format!("f{:04x}", fastrand::u16(..));
    let rows: Vec<serde_json::Value> = (0..4)
        .map(|i| command_task(&format!("{tag}c{i}"), 500))
        .collect();
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "v = 1\nconcurrency = 4\ncheckpoint_every_s = 1\nstore = \"copy\"\n",
    )
    .expect("config");
    let run_dir = dir.path().join("r");
    let checkpoints = run_dir.join("checkpoints");
    std::fs::create_dir_all(&checkpoints).expect("checkpoints dir");
    nix::mount::mount(
        Some("tmpfs"),
        &checkpoints,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=4m,mode=0700"),
    )
    .expect("mount a tmpfs for the checkpoints");
    let _mounted = Mounted(checkpoints.clone());
    let log = dir.path().join("stderr.log");
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    let sup = supervisor_bin();

    let mut run = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    let end = Instant::now() + LIMIT;
    let first = loop {
        if let Some(id) = latest(&run_dir) {
            break id;
        }
        assert!(
            Instant::now() < end,
            "no checkpoint was published:\n{}",
            text()
        );
        assert!(run.try_wait().expect("try_wait").is_none(), "{}", text());
        std::thread::sleep(Duration::from_millis(50));
    };
    // Fill the disk: one file as large as it will grow.
    let filler = checkpoints.join("filler");
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&filler).expect("filler");
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }
    // The checkpoint being written as the disk filled may still publish; the
    // published state is read once no write can land.
    std::thread::sleep(Duration::from_millis(1500));
    let held = latest(&run_dir).expect("a published checkpoint");
    let before = files(&checkpoints.join(&held));
    let failures_before = text().matches("the run goes on").count();
    std::thread::sleep(Duration::from_millis(3000));
    assert!(
        run.try_wait().expect("try_wait").is_none(),
        "the run stopped on a full disk:\n{}",
        text()
    );
    assert!(
        text().matches("the run goes on").count() > failures_before,
        "no checkpoint failed on the full disk:\n{}",
        text()
    );
    assert_eq!(
        latest(&run_dir).as_deref(),
        Some(held.as_str()),
        "LATEST moved while the disk was full"
    );
    assert_eq!(
        files(&checkpoints.join(&held)),
        before,
        "the published checkpoint changed while the disk was full"
    );

    std::fs::remove_file(&filler).expect("free the disk");
    let status = wait(&mut run, LIMIT, &log);
    assert!(status.success(), "the run failed ({status}):\n{}", text());
    assert_ne!(
        latest(&run_dir).as_deref(),
        Some(held.as_str()),
        "no checkpoint was published once space was back:\n{}",
        text()
    );
    assert_ne!(first, "", "the first checkpoint has an id");
    // What the failed checkpoints began is gone: only published ones and LATEST.
    let mut left = Vec::new();
    for e in std::fs::read_dir(&checkpoints)
        .expect("checkpoints")
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "LATEST" && !e.path().join("checkpoint.json").exists() {
            left.push(name);
        }
    }
    assert!(left.is_empty(), "failed checkpoints left {left:?}");
    // And so are the snapshots they took.
    let owner = run_dir.join("owner");
    let retained = retained_snapshots(&owner);
    let records: Vec<String> = names(&owner.join("snapshots"))
        .into_iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
        .filter(|n| !retained.contains(n))
        .collect();
    assert!(
        records.is_empty(),
        "snapshots of failed checkpoints left: {records:?}"
    );
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 4, "{results:?}");
    for r in &results {
        assert_eq!(r.status, Status::Verified, "{r:?}\n{}", text());
    }
}
