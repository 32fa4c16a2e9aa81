//! A member blocked in uninterruptible I/O: waited for within the D budget,
//! then reported by pid, and the failed pause undone.
//!
//! The block is real: a write to an ext4 image frozen with `fsfreeze`
//! sleeps in `D` until the filesystem is thawed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rollpoint_proto::receipt::Outcome;
use rollpoint_testkit::{
    Supervised, launch_id, per_strategy, receipt, require_root, state, wait_for,
};

const LONG: Duration = Duration::from_secs(60);

fn sh(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loop-mounted ext4 filesystem, frozen while this value lives.
struct FrozenFs {
    mnt: PathBuf,
    _dir: tempfile::TempDir,
    frozen: bool,
}

impl FrozenFs {
    fn new() -> Self {
        require_root();
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mnt");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(32 << 20))
            .expect("image");
        sh("mkfs.ext4", &["-q", img.to_str().expect("utf8")]);
        sh(
            "mount",
            &[
                "-o",
                "loop",
                img.to_str().expect("utf8"),
                mnt.to_str().expect("utf8"),
            ],
        );
        sh("fsfreeze", &["-f", mnt.to_str().expect("utf8")]);
        Self {
            mnt,
            _dir: dir,
            frozen: true,
        }
    }

    fn thaw(&mut self) {
        if self.frozen {
            sh("fsfreeze", &["-u", self.mnt.to_str().expect("utf8")]);
            self.frozen = false;
        }
    }
}

impl Drop for FrozenFs {
    fn drop(&mut self) {
        let m = self.mnt.display().to_string();
        if self.frozen {
            let _ = Command::new("fsfreeze").args(["-u", &m]).status();
        }
        let _ = Command::new("umount").arg(&m).status();
    }
}

/// Starts a launch with one writer blocked in D; returns it and the pid.
fn blocked_launch(name: &str, strategy: &str, fs: &FrozenFs, opts: &[&str]) -> (Supervised, u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready").display().to_string();
    let target = fs.mnt.join("blocked").display().to_string();
    let mut all = vec!["--freeze", strategy];
    all.extend_from_slice(opts);
    let s = Supervised::fake(
        &launch_id(name),
        &all,
        &[
            "dwrite", &target, "flat", "3", "ready", &ready, "sleep", "3600",
        ],
    );
    wait_for(LONG, "ready", || Path::new(&ready).exists().then_some(()));
    let blocked = wait_for(LONG, "a member in D", || {
        s.tree()
            .into_iter()
            .find(|id| state(*id) == Some('D'))
            .map(|id| id.pid)
    });
    std::mem::forget(dir);
    (s, blocked)
}

/// The v1 freezer counts a task in a freezable sleep (a write waiting on
/// a frozen filesystem is one, since Linux 6.1) as frozen in place: the
/// pause is confirmed at once, and the write must not land until continue.
fn v1_freezes_the_blocked_writer_in_place(s: &Supervised, fs: &mut FrozenFs) {
    let (code, reply) = s.ask("pause", &[]);
    let r = receipt("pause", &reply);
    assert_eq!((code, r.outcome), (0, Outcome::Confirmed), "{r:?}");
    fs.thaw();
    let target = fs.mnt.join("blocked");
    std::thread::sleep(Duration::from_millis(500));
    let written = std::fs::read(&target).unwrap_or_default();
    assert!(written.is_empty(), "the frozen writer wrote {written:?}");
    let (code, _) = s.ask("continue", &[]);
    assert_eq!(code, 0);
    wait_for(LONG, "the write to land after continue", || {
        (!std::fs::read(&target).unwrap_or_default().is_empty()).then_some(())
    });
}

fn reported_by_pid_and_undone(strategy: &str) {
    let mut fs = FrozenFs::new();
    let (s, blocked) = blocked_launch(
        "dfail",
        strategy,
        &fs,
        &["--d-budget", "1", "--confirm-budget", "0.3"],
    );
    if strategy == "cgroup-v1" {
        return v1_freezes_the_blocked_writer_in_place(&s, &mut fs);
    }
    let tree = s.tree();
    let (code, reply) = s.ask("pause", &[]);
    let r = receipt("pause", &reply);
    assert_eq!((code, r.outcome), (1, Outcome::Failed), "{r:?}");
    let reason = r.reason.expect("a reason");
    assert!(reason.contains(&format!("pid {blocked} in D")), "{reason}");
    assert!(reason.contains("undone"), "{reason}");
    // Undone: nothing is left stopped or frozen.
    for id in &tree {
        assert!(
            !matches!(state(*id), Some('T')),
            "pid {} left stopped",
            id.pid
        );
    }
    if let Some(cg) = s.record().cgroup_v2 {
        let events = std::fs::read_to_string(Path::new(&cg).join("cgroup.events")).expect("events");
        assert!(events.contains("frozen 0"), "{events}");
    }
    fs.thaw();
}
per_strategy!(
    root_blocked_member_is_reported_by_pid,
    reported_by_pid_and_undone
);

fn waited_for_within_budget(strategy: &str) {
    let mut fs = FrozenFs::new();
    let (s, _blocked) = blocked_launch(
        "dwait",
        strategy,
        &fs,
        // Once the write lands, the writer has to run to take its stop: on
        // a loaded machine that can take longer than a tight budget.
        &["--d-budget", "30", "--confirm-budget", "3"],
    );
    if strategy == "cgroup-v1" {
        return v1_freezes_the_blocked_writer_in_place(&s, &mut fs);
    }
    let session = s.session.clone();
    let pause = std::thread::spawn(move || rollpoint_testkit::ask(&session, "pause", &[]));
    std::thread::sleep(Duration::from_millis(1500));
    fs.thaw();
    let (code, reply) = pause.join().expect("pause thread");
    let r = receipt("pause", &reply);
    assert_eq!((code, r.outcome), (0, Outcome::Confirmed), "{r:?}");
    assert!(
        r.duration_us >= 1_000_000,
        "the pause waited for the blocked write: {r:?}"
    );
    let (code, _) = s.ask("continue", &[]);
    assert_eq!(code, 0);
}
per_strategy!(
    root_blocked_member_is_waited_for_within_budget,
    waited_for_within_budget
);

/// A batch of pauses (a checkpoint's prepare) with one launch blocked in D:
/// the others are confirmed frozen, the blocked one alone fails past its
/// budgets, named by pid, and is undone (its cgroup thawed), so only its
/// rollout's pause falls back to a stop.
#[test]
fn root_batched_pause_fails_only_the_blocked_launch() {
    use rollpoint_proctree::Budgets;
    use rollpoint_proctree::cgroup::{Kind, RealFs};
    use rollpoint_proctree::freeze::batch::{freeze_many, thaw_many};

    let mut fs = FrozenFs::new();
    let (blocked, pid) = blocked_launch("dbatch", "cgroup-v2", &fs, &[]);
    let sleepers: Vec<Supervised> = (0..2)
        .map(|i| {
            Supervised::fake(
                &launch_id(&format!("dbatch-ok{i}")),
                &["--freeze", "cgroup-v2"],
                &["sleep", "3600"],
            )
        })
        .collect();
    let dirs: Vec<std::path::PathBuf> = [&sleepers[0], &blocked, &sleepers[1]]
        .iter()
        .map(|s| s.record().cgroup_v2.expect("a v2 launch cgroup").into())
        .collect();
    let targets: Vec<(Kind, &Path)> = dirs.iter().map(|d| (Kind::V2, d.as_path())).collect();
    let budgets = Budgets {
        command: Duration::from_secs(30),
        confirm: Duration::from_millis(300),
        d_state: Duration::from_secs(1),
        stop_grace: Duration::from_secs(1),
    };
    let out = freeze_many(&RealFs, &targets, budgets);
    let events = |d: &Path| std::fs::read_to_string(d.join("cgroup.events")).expect("events");
    for i in [0, 2] {
        let c = out[i].as_ref().expect("the others are confirmed");
        assert!(!c.members.is_empty());
        assert!(events(&dirs[i]).contains("frozen 1"));
    }
    let failed = out[1].as_ref().expect_err("the blocked launch fails");
    assert!(!failed.gone);
    assert!(
        failed.text.contains(&format!("pid {pid} in D")),
        "{}",
        failed.text
    );
    assert!(failed.text.contains("undone"), "{}", failed.text);
    assert!(
        events(&dirs[1]).contains("frozen 0"),
        "the failed one is thawed"
    );
    let thawed = thaw_many(&RealFs, &[targets[0], targets[2]], budgets);
    assert!(thawed.iter().all(Result::is_ok), "{thawed:?}");
    fs.thaw();
}
