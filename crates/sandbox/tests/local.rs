//! Root tests of the local backend on real overlay mounts, namespaces and
//! cgroups, for both snapshot stores: forks see exactly the snapshot, a
//! SQLite database frozen mid-transaction survives, the view from inside
//! is the same in a fork, sandboxes are isolated, and destroy and sweeps
//! leave nothing behind.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_sandbox::{Backend, Error, Limits, SandboxSpec};
use rollpoint_snapshot::{StoreChoice, StoreOptions};
use rollpoint_testkit::{mounts_under, require_root, sandbox_cgroups, supervisor_bin, wait_for};

#[derive(Debug, Clone, Copy)]
enum Kind {
    Btrfs,
    Copy,
}

struct Fixture {
    dir: tempfile::TempDir,
    backend: Option<LocalBackend>,
}

impl Fixture {
    fn new(kind: Kind) -> Self {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let backend = open(dir.path(), kind);
        Self {
            dir,
            backend: Some(backend),
        }
    }

    fn b(&self) -> &LocalBackend {
        self.backend.as_ref().unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(b) = self.backend.take() {
            let _ = b.destroy_all();
        }
    }
}

fn open(dir: &Path, kind: Kind) -> LocalBackend {
    let mut options = LocalOptions::new(supervisor_bin());
    options.store = StoreOptions {
        choice: match kind {
            Kind::Btrfs => StoreChoice::Btrfs,
            Kind::Copy => StoreChoice::Copy,
        },
        ..StoreOptions::default()
    };
    LocalBackend::open(&dir.join("owner"), options).unwrap()
}

fn sh(backend: &LocalBackend, id: &str, script: &str) -> ExecOutput {
    let out = backend.exec(id, &rollpoint_testkit::shell(script)).unwrap();
    assert_eq!(
        out.exit_code,
        Some(0),
        "sandbox {id}: `{script}` failed: {}",
        out.stderr
    );
    out
}

fn stdout(backend: &LocalBackend, id: &str, script: &str) -> String {
    sh(backend, id, script).stdout.trim().to_owned()
}

fn spec() -> SandboxSpec {
    SandboxSpec {
        hostname: "task-7".into(),
        workdir: "/workspace/project".into(),
        env: [("HOME".to_owned(), "/home/agent".to_owned())].into(),
        ..SandboxSpec::default()
    }
}

fn fork_sees_exactly_the_snapshot(kind: Kind) {
    let fx = Fixture::new(kind);
    let b = fx.b();
    b.create("orig", &spec()).unwrap();
    sh(
        b,
        "orig",
        "set -e
         echo kept > kept; chmod 0640 kept
         ln -s kept link; ln kept hard
         echo gone > deleted-before; rm deleted-before
         ! rm /etc/os-release 2>/dev/null
         mkdir -p /home/agent && echo state > /home/agent/session.json
         echo scratch > /tmp/scratch
         python3 -c \"import os; os.setxattr('kept', 'user.rollpoint', b'xv')\"",
    );
    let snap = b.snapshot("orig", "ck1-orig", "ck1").unwrap();
    assert_eq!(snap.sandbox, "orig");
    sh(b, "orig", "echo late > written-after; rm kept");
    let forked = b.fork("ck1-orig", "fork1").unwrap();
    assert_eq!(forked.forked_from.as_deref(), Some("ck1-orig"));

    let report = stdout(
        b,
        "fork1",
        "cd /workspace/project
         stat -c '%a %h %i' kept; stat -c '%i' hard; readlink link; cat kept
         ls -A | sort | tr '\\n' ' '; echo
         test -e /etc/os-release && echo os-release-present || echo os-release-gone
         test -e /etc/shadow && echo shadow-present || echo shadow-gone
         cat /home/agent/session.json /tmp/scratch
         python3 -c \"import os; print(os.getxattr('kept', 'user.rollpoint').decode())\"",
    );
    let lines: Vec<&str> = report.lines().collect();
    let fields: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!(fields[0], "640", "mode kept: {report}");
    assert_eq!(fields[1], "2", "hard link count kept: {report}");
    assert_eq!(lines[1], fields[2], "hard link shares the inode: {report}");
    assert_eq!(lines[2], "kept", "symlink target: {report}");
    assert_eq!(lines[3], "kept");
    assert_eq!(
        lines[4].trim(),
        "hard kept link",
        "no late or deleted files: {report}"
    );
    assert_eq!(
        lines[5], "os-release-present",
        "the host's system files are read-only to a strict sandbox"
    );
    assert_eq!(
        lines[6], "shadow-gone",
        "a base file whited out stays whited out in a fork"
    );
    assert_eq!(lines[7], "state");
    assert_eq!(lines[8], "scratch", "/tmp is in the snapshot");
    assert_eq!(lines[9], "xv", "xattr kept");
    assert!(
        Path::new("/etc/os-release").exists(),
        "the host is untouched"
    );
}

#[test]
fn root_fork_sees_exactly_the_snapshot_btrfs() {
    fork_sees_exactly_the_snapshot(Kind::Btrfs);
}

#[test]
fn root_fork_sees_exactly_the_snapshot_copy() {
    fork_sees_exactly_the_snapshot(Kind::Copy);
}

const SQLITE_WRITER: &str = r#"
import os, sqlite3, time
db = sqlite3.connect('/workspace/project/app.db', isolation_level=None)
db.execute('PRAGMA journal_mode=WAL')
db.execute('CREATE TABLE t (n INTEGER, pad TEXT)')
for i in range(200):
    db.execute('INSERT INTO t VALUES (?, ?)', (i, 'x' * 500))
db.execute('BEGIN')
for i in range(200, 20000):
    db.execute('INSERT INTO t VALUES (?, ?)', (i, 'y' * 500))
open('/workspace/project/in-transaction', 'w').close()
while True:
    db.execute('INSERT INTO t VALUES (?, ?)', (-1, 'z' * 500))
    time.sleep(0.001)
"#;

fn sqlite_wal_survives(kind: Kind) {
    let fx = Fixture::new(kind);
    let b = fx.b();
    let info = b.create("db", &spec()).unwrap();
    b.upload(
        "db",
        Path::new("/workspace/project/writer.py"),
        SQLITE_WRITER.as_bytes(),
        0o644,
    )
    .unwrap();
    b.launch(
        "db",
        &LaunchRequest {
            launch_id: "writer".into(),
            argv: vec!["python3".into(), "writer.py".into()],
            env: BTreeMap::new(),
            cwd: String::new(),
            freeze: None,
            options: Vec::new(),
        },
    )
    .unwrap();
    let marker = info.root.join("workspace/project/in-transaction");
    wait_for(
        Duration::from_secs(60),
        "the writer's open transaction",
        || marker.exists().then_some(()),
    );
    b.snapshot("db", "ck-db", "ck").unwrap();
    b.fork("ck-db", "db-fork").unwrap();
    let out = stdout(
        b,
        "db-fork",
        "python3 -c \"import sqlite3; d = sqlite3.connect('app.db'); \
         print(d.execute('PRAGMA integrity_check').fetchone()[0]); \
         print(d.execute('SELECT count(*) FROM t').fetchone()[0])\"",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "ok", "integrity_check in the fork: {out}");
    assert_eq!(lines[1], "200", "only committed rows: {out}");
}

#[test]
fn root_sqlite_wal_frozen_mid_transaction_btrfs() {
    sqlite_wal_survives(Kind::Btrfs);
}

#[test]
fn root_sqlite_wal_frozen_mid_transaction_copy() {
    sqlite_wal_survives(Kind::Copy);
}

#[test]
fn root_paths_hostname_and_home_are_the_same_in_a_fork() {
    let fx = Fixture::new(Kind::Btrfs);
    let b = fx.b();
    b.create("a", &spec()).unwrap();
    let probe = "pwd; hostname; echo $HOME; readlink -f .";
    let before = stdout(b, "a", probe);
    b.snapshot("a", "ck-a", "ck").unwrap();
    b.fork("ck-a", "b").unwrap();
    let after = stdout(b, "b", probe);
    assert_eq!(before, after);
    let lines: Vec<&str> = before.lines().collect();
    let init = stdout(b, "b", "tr '\\0' ' ' < /proc/1/cmdline");
    assert_eq!(lines[0], "/workspace/project");
    assert_eq!(lines[1], "task-7");
    assert_eq!(lines[2], "/home/agent");
    assert_eq!(lines[3], "/workspace/project");
    assert!(
        init.contains("rollpoint-supervisor anchor"),
        "pid 1 is the anchor: {init}"
    );
}

#[test]
fn root_upload_and_download_refuse_escapes() {
    let fx = Fixture::new(Kind::Copy);
    let b = fx.b();
    b.create("files", &spec()).unwrap();
    sh(b, "files", "ln -s /etc out; ln -s ../../../../.. up");
    let err = b
        .upload("files", Path::new("/workspace/../etc/x"), b"x", 0o644)
        .unwrap_err();
    assert!(matches!(err, Error::ParentComponent { .. }), "{err}");
    assert!(err.to_string().contains("/workspace/../etc/x"), "{err}");
    for path in [
        "/workspace/project/out/passwd",
        "/workspace/project/up/etc/passwd",
    ] {
        let err = b.download("files", Path::new(path), 1 << 20).unwrap_err();
        assert!(matches!(err, Error::Escape { .. }), "{path}: {err}");
        assert!(err.to_string().contains(path), "{err}");
        let err = b.upload("files", Path::new(path), b"x", 0o644).unwrap_err();
        assert!(matches!(err, Error::Escape { .. }), "{path}: {err}");
    }
    b.upload(
        "files",
        Path::new("/workspace/project/in.txt"),
        b"hello",
        0o600,
    )
    .unwrap();
    assert_eq!(
        stdout(b, "files", "cat in.txt; echo; stat -c %a in.txt"),
        "hello\n600"
    );
    assert_eq!(
        b.download("files", Path::new("/workspace/project/in.txt"), 100)
            .unwrap(),
        b"hello"
    );
}

#[test]
fn root_sandboxes_cannot_see_or_signal_each_other_or_the_host() {
    let fx = Fixture::new(Kind::Copy);
    let b = fx.b();
    b.create("left", &spec()).unwrap();
    b.create("right", &spec()).unwrap();
    b.launch(
        "left",
        &LaunchRequest {
            launch_id: "sleeper".into(),
            argv: vec!["sleep".into(), "1000".into()],
            env: BTreeMap::new(),
            cwd: String::new(),
            freeze: None,
            options: Vec::new(),
        },
    )
    .unwrap();
    let host_pid = std::process::id();
    let seen = stdout(
        b,
        "right",
        &format!(
            "for p in /proc/[0-9]*; do cat $p/comm; done | sort | tr '\\n' ' '; echo
             kill -0 {host_pid} 2>/dev/null && echo signalled || echo refused
             pkill -0 sleep && echo sleeper-visible || echo sleeper-hidden"
        ),
    );
    let lines: Vec<&str> = seen.lines().collect();
    assert!(
        !lines[0].contains("sleep"),
        "the other sandbox is hidden: {seen}"
    );
    assert!(
        !lines[0].contains("cargo") && !lines[0].contains("nextest"),
        "the host is hidden: {seen}"
    );
    assert_eq!(lines[1], "refused");
    assert_eq!(lines[2], "sleeper-hidden");
    let left = stdout(b, "left", "pgrep -x sleep >/dev/null && echo sleeping");
    assert_eq!(left, "sleeping", "the sleeper runs in its own sandbox");

    // Strict sandboxes of one run share its user namespace (the anchors
    // take the owner's), which is not the host's and grants nothing across
    // sandboxes: a kill of everything `right` may signal leaves `left`'s
    // sleeper running.
    let ns = |id: &str| stdout(b, id, "readlink /proc/self/ns/user");
    let (l, r) = (ns("left"), ns("right"));
    assert_eq!(l, r, "one user namespace per run");
    let host = std::fs::read_link("/proc/self/ns/user").unwrap();
    assert_ne!(Path::new(&l), host, "not the host's");
    let killed = stdout(b, "right", "sleep 1000 & kill -KILL -1; wait $!; echo $?");
    assert_eq!(killed, "137", "the kill reached right's own sleeper");
    let left = stdout(b, "left", "pgrep -x sleep >/dev/null && echo sleeping");
    assert_eq!(
        left, "sleeping",
        "a kill of everything in `right` spares `left`"
    );
}

/// A strict sandbox on the host's root sees none of the host's homes and
/// secrets, nor does a fork of it. On the btrfs store (a filesystem of its
/// own) that is one layer every sandbox shares, and an upper holds none of
/// it; on the copy store each upper hides the host itself, and a fork's
/// upper hides it again (idempotently) whatever the snapshot held.
fn hides_the_host(kind: Kind) {
    let fx = Fixture::new(kind);
    let b = fx.b();
    b.create("seer", &spec()).unwrap();
    let look = "find /root /home -mindepth 1 | wc -l; test -e /etc/shadow && echo shadow || echo no-shadow; \
                test -r /etc/passwd && echo etc-intact";
    let want = "0\nno-shadow\netc-intact";
    assert_eq!(stdout(b, "seer", look), want, "{kind:?}");
    sh(
        b,
        "seer",
        "mkdir -p /root/own && echo mine > /root/own/file",
    );
    b.snapshot("seer", "seen", "ck-1").unwrap();
    b.fork("seen", "fork").unwrap();
    assert_eq!(
        stdout(b, "fork", "cat /root/own/file; ls -A /root"),
        "mine\nown",
        "{kind:?}: the fork has the sandbox's own /root and nothing of the host's"
    );
    assert_eq!(
        stdout(
            b,
            "fork",
            "test -e /etc/shadow && echo shadow || echo no-shadow"
        ),
        "no-shadow"
    );
    let store = fx.dir.path().join("owner/store");
    let upper = |id: &str| {
        ["btrfs/uppers", "copy/uppers", "uppers"]
            .iter()
            .map(|d| store.join(d).join(id).join("upper"))
            .find(|p| p.is_dir())
            .unwrap_or_else(|| panic!("{kind:?}: no upper of {id} under {}", store.display()))
    };
    let masks: Vec<_> = std::fs::read_dir(store.join("btrfs/layers"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("host-mask-"))
        .collect();
    match kind {
        Kind::Btrfs => {
            assert_eq!(masks.len(), 1, "one shared layer");
            assert!(
                !upper("seer").join("etc").exists() && !upper("seer").join("home").exists(),
                "the upper holds none of the hiding"
            );
        }
        Kind::Copy => {
            assert!(masks.is_empty());
            assert!(
                upper("seer").join("home").is_dir() && upper("fork").join("home").is_dir(),
                "each upper hides the host"
            );
        }
    }
}

#[test]
fn root_the_host_stays_hidden_btrfs() {
    hides_the_host(Kind::Btrfs);
}

#[test]
fn root_the_host_stays_hidden_copy() {
    hides_the_host(Kind::Copy);
}

#[test]
fn root_limits_apply_to_the_whole_sandbox() {
    let fx = Fixture::new(Kind::Copy);
    let b = fx.b();
    let mut spec = spec();
    spec.limits = Limits {
        memory_bytes: Some(256 << 20),
        pids: Some(24),
        cpu_millis: Some(500),
        cpu_weight: Some(50),
        ..Limits::default()
    };
    let info = b.create("limited", &spec).unwrap();
    // The anchor moved itself into every hierarchy's sandbox cgroup before
    // anything else (`--enter`): each line of its /proc/PID/cgroup names
    // the sandbox, in the v2 hierarchy and in each v1 one a limit went to.
    // A limit goes to v1 where the host mounts its controller there (this
    // hybrid host), else to v2 (a pure v2 host; `scripts/cgroup-v2-vm`).
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", info.anchor_pid)).unwrap();
    let hierarchies: Vec<&str> = own
        .lines()
        .filter(|l| l.ends_with("-limited"))
        .map(|l| l.split(':').nth(1).unwrap_or(""))
        .collect();
    let h = rollpoint_proctree::cgroup::Hierarchies::read();
    let cgroups = sandbox_cgroups(|name| name.ends_with("-limited"));
    let in_root = |root: &Path| {
        cgroups
            .iter()
            .find(|p| p.starts_with(root))
            .cloned()
            .unwrap_or_else(|| panic!("no sandbox cgroup under {}: {cgroups:?}", root.display()))
    };
    let v2_limited = in_root(h.v2.as_deref().expect("a cgroup2 mount"));
    // (the v1 hierarchy, its file and value, the v2 file and value)
    let rows = [
        (&h.pids, "pids.max", "24", "pids.max", "24"),
        (
            &h.cpu,
            "cpu.cfs_quota_us",
            "50000",
            "cpu.max",
            "50000 100000",
        ),
        (&h.cpu, "cpu.shares", "512", "cpu.weight", "50"),
        (
            &h.memory,
            "memory.limit_in_bytes",
            "268435456",
            "memory.max",
            "268435456",
        ),
    ];
    for (v1_root, v1_file, v1_value, v2_file, v2_value) in rows {
        let (file, want) = match v1_root {
            Some(root) => (in_root(root).join(v1_file), v1_value),
            None => (v2_limited.join(v2_file), v2_value),
        };
        let got = std::fs::read_to_string(&file).unwrap();
        assert_eq!(got.trim(), want, "{}", file.display());
    }
    // No swap unless asked, where the kernel accounts it.
    let swap = v2_limited.join("memory.swap.max");
    if h.memory.is_none() && swap.exists() {
        assert_eq!(std::fs::read_to_string(&swap).unwrap().trim(), "0");
    }
    let mut wanted = vec![""];
    for (name, root) in [
        ("freezer", &h.freezer),
        ("memory", &h.memory),
        ("pids", &h.pids),
        ("cpu", &h.cpu),
    ] {
        if root.is_some() {
            wanted.push(name);
        }
    }
    for want in wanted {
        assert!(
            hierarchies.iter().any(|h| h.split(',').any(|c| c == want)),
            "the anchor is not in the sandbox's {want:?} cgroup: {own}"
        );
    }
    let out = b
        .exec(
            "limited",
            &ExecRequest {
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "for i in $(seq 60); do sleep 30 & done 2>&1; wait".into(),
                ],
                env: BTreeMap::new(),
                cwd: String::new(),
                timeout_ms: 3_000,
                output_limit: 1 << 16,
                stdin: None,
            },
        )
        .unwrap();
    assert!(
        out.stderr.contains("fork")
            || out.stdout.contains("fork")
            || out.stderr.contains("Resource"),
        "the pids limit refuses forks: {out:?}"
    );
}

fn exec(backend: &LocalBackend, id: &str, argv: &[&str]) -> ExecOutput {
    backend
        .exec(
            id,
            &ExecRequest {
                argv: argv.iter().map(|a| (*a).to_owned()).collect(),
                env: BTreeMap::new(),
                cwd: String::new(),
                timeout_ms: 60_000,
                output_limit: 1 << 16,
                stdin: None,
            },
        )
        .unwrap()
}

#[test]
fn root_a_command_past_the_memory_limit_is_said_to_be_killed_by_it() {
    let fx = Fixture::new(Kind::Copy);
    let b = fx.b();
    let mut spec = spec();
    spec.limits.memory_bytes = Some(64 << 20);
    b.create("small", &spec).unwrap();
    // 512 MiB, every page written.
    let grow = "x = b'\\x01' * (512 << 20)";
    let out = exec(b, "small", &["python3", "-c", grow]);
    assert_eq!(out.signal, Some(9), "{out:?}");
    // The file of the hierarchy the limit went to (v1 where the host mounts it).
    let file = match rollpoint_proctree::cgroup::Hierarchies::read().memory {
        Some(_) => "memory.limit_in_bytes",
        None => "memory.max",
    };
    assert!(
        out.stderr.ends_with(&format!(
            "rollpoint: the command was killed by its memory limit of 64 MiB ({file}; 1 OOM kill)\n"
        )),
        "{out:?}"
    );
    // A shell that outlives the killed process exits 137.
    let script = format!("python3 -c \"{grow}\"; exit $?");
    let out = exec(b, "small", &["/bin/sh", "-c", &script]);
    assert_eq!(out.exit_code, Some(137), "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "rollpoint: a process of the command's sandbox was killed by its memory limit of \
             64 MiB ({file}; 1 OOM kill)"
        )),
        "only the kill during this command counts: {out:?}"
    );
    // Failures of another kind say nothing of memory.
    let out = exec(b, "small", &["/bin/sh", "-c", "exit 3"]);
    assert_eq!(out.exit_code, Some(3));
    assert!(!out.stderr.contains("memory"), "{out:?}");
    assert_eq!(stdout(b, "small", "echo still here"), "still here");
}

/// A sandbox frozen through the v1 freezer (whose tasks take no signal
/// until thawed) and through v2 is still destroyed, leaving nothing.
#[test]
fn root_a_frozen_sandbox_is_destroyed() {
    let fx = Fixture::new(Kind::Copy);
    let b = fx.b();
    let info = b.create("frozen", &spec()).unwrap();
    sh(b, "frozen", "sleep 1000 >/dev/null 2>&1 &");
    let cgroups = sandbox_cgroups(|name| name.ends_with("-frozen"));
    for dir in &cgroups {
        for (file, value) in [("freezer.state", "FROZEN"), ("cgroup.freeze", "1")] {
            if dir.join(file).exists() {
                std::fs::write(dir.join(file), value).unwrap();
            }
        }
    }
    let started = std::time::Instant::now();
    b.destroy("frozen").unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(!Path::new(&format!("/proc/{}", info.anchor_pid)).exists());
    let left = sandbox_cgroups(|name| name.ends_with("-frozen"));
    assert!(left.is_empty(), "{left:?}");
}

fn leaves_nothing(kind: Kind) {
    let fx = Fixture::new(kind);
    let b = fx.b();
    let a = b.create("a", &spec()).unwrap();
    b.launch(
        "a",
        &LaunchRequest {
            launch_id: "busy".into(),
            argv: vec!["sh".into(), "-c".into(), "sleep 1000 & sleep 1000".into()],
            env: BTreeMap::new(),
            cwd: String::new(),
            freeze: None,
            options: Vec::new(),
        },
    )
    .unwrap();
    b.create("other", &spec()).unwrap();
    b.snapshot("a", "ck1-a", "ck1").unwrap();
    b.snapshot("other", "ck1-other", "ck1").unwrap();
    b.snapshot("a", "ck2-a", "ck2").unwrap();
    b.destroy("other").unwrap();
    // The host's mount table holds none of the sandbox's mounts: its root
    // is attached in its anchor's namespace alone.
    let before_mounts = mounts_under(fx.dir.path());
    assert!(
        !before_mounts.iter().any(|m| m.contains("sandboxes")),
        "{before_mounts:?}"
    );
    let inside = std::fs::read_to_string(format!("/proc/{}/mountinfo", a.anchor_pid)).unwrap();
    assert!(
        inside
            .lines()
            .any(|l| l.split(' ').nth(4) == Some("/") && l.contains(" - overlay ")),
        "{inside}"
    );

    b.destroy("a").unwrap();
    assert!(
        !Path::new(&format!("/proc/{}", a.anchor_pid)).exists(),
        "the anchor is gone"
    );
    let after = mounts_under(fx.dir.path());
    assert!(
        !after.iter().any(|m| m.contains("sandboxes")),
        "no sandbox mount left: {after:?}"
    );
    let left = sandbox_cgroups(|name| name.ends_with("-a"));
    assert!(left.is_empty(), "cgroups left: {left:?}");
    assert!(!b.dir().join("sandboxes/a").exists());
    let listing = b.list().unwrap();
    assert!(listing.sandboxes.is_empty(), "{listing:?}");
    assert_eq!(listing.snapshots, ["ck1-a", "ck1-other", "ck2-a"]);

    let deleted = b.sweep_snapshots(&["ck1"]).unwrap();
    assert_eq!(deleted, ["ck2-a"], "both sandboxes' ck1 snapshots are kept");
    assert_eq!(b.list().unwrap().snapshots, ["ck1-a", "ck1-other"]);
    assert_eq!(b.sweep_snapshots(&["ck2"]).unwrap(), ["ck1-a", "ck1-other"]);
    assert!(b.list().unwrap().snapshots.is_empty());
}

#[test]
fn root_destroy_and_sweep_leave_nothing_btrfs() {
    leaves_nothing(Kind::Btrfs);
}

#[test]
fn root_destroy_and_sweep_leave_nothing_copy() {
    leaves_nothing(Kind::Copy);
}

/// Whoever starts a sandbox reaps it: destroying a sandbox hands no
/// process to the host. The test process is made a child subreaper, so
/// anything orphaned by a destroy (the sandbox's PID 1 outliving its
/// anchor) would become a zombie child of the test.
fn hands_nothing_to_the_host(kind: Kind) {
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let fx = Fixture::new(kind);
    let b = fx.b();
    let mut handed = Vec::new();
    for i in 0..4 {
        let id = format!("z{i}");
        b.create(&id, &spec()).unwrap();
        b.launch(
            &id,
            &LaunchRequest {
                launch_id: "busy".into(),
                argv: vec!["sh".into(), "-c".into(), "sleep 1000 & sleep 1000".into()],
                env: BTreeMap::new(),
                cwd: String::new(),
                freeze: None,
                options: Vec::new(),
            },
        )
        .unwrap();
        if i % 2 == 1 {
            b.snapshot(&id, &format!("ck-{id}"), "ck").unwrap();
        }
        b.destroy(&id).unwrap();
        // Give an orphan time to be re-parented and to die.
        std::thread::sleep(Duration::from_millis(200));
        loop {
            match nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
                Ok(nix::sys::wait::WaitStatus::StillAlive) | Err(nix::errno::Errno::ECHILD) => {
                    break;
                }
                Ok(status) => handed.push((id.clone(), format!("{status:?}"))),
                Err(e) => panic!("waitpid: {e}"),
            }
        }
    }
    assert!(
        handed.is_empty(),
        "destroyed sandboxes handed processes to their owner's parent: {handed:?}"
    );
}

#[test]
fn root_destroyed_sandboxes_hand_no_process_to_the_host_btrfs() {
    hands_nothing_to_the_host(Kind::Btrfs);
}

#[test]
fn root_destroyed_sandboxes_hand_no_process_to_the_host_copy() {
    hands_nothing_to_the_host(Kind::Copy);
}

/// Run by `root_orphans_of_a_crashed_owner_are_swept` in a child process:
/// makes a sandbox with a running launch and exits without cleaning up.
#[test]
#[ignore = "run as a child process by another test"]
fn crashing_owner() {
    let Some(dir) = std::env::var_os("ROLLPOINT_TEST_CRASH_DIR") else {
        return;
    };
    let b = open(Path::new(&dir), Kind::Btrfs);
    b.create("orphan", &spec()).unwrap();
    b.launch(
        "orphan",
        &LaunchRequest {
            launch_id: "busy".into(),
            argv: vec!["sleep".into(), "1000".into()],
            env: BTreeMap::new(),
            cwd: String::new(),
            freeze: None,
            options: Vec::new(),
        },
    )
    .unwrap();
    std::process::exit(0);
}

#[test]
fn root_orphans_of_a_crashed_owner_are_swept() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crashing_owner", "--ignored", "--nocapture"])
        .env("ROLLPOINT_TEST_CRASH_DIR", dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("owner/sandboxes/orphan/sandbox.json")).unwrap(),
    )
    .unwrap();
    let anchor = record["anchor_pid"].as_u64().unwrap();
    assert!(
        Path::new(&format!("/proc/{anchor}")).exists(),
        "the orphan still runs"
    );

    let b = open(dir.path(), Kind::Btrfs);
    let swept = b.sweep_orphans().unwrap();
    assert_eq!(swept, ["orphan"]);
    wait_for(
        Duration::from_secs(10),
        "the orphan's anchor to exit",
        || {
            let stat = std::fs::read_to_string(format!("/proc/{anchor}/stat")).unwrap_or_default();
            (stat.is_empty() || stat.contains(") Z")).then_some(())
        },
    );
    assert!(b.list().unwrap().sandboxes.is_empty());
    let mounts = mounts_under(dir.path());
    assert!(
        !mounts.iter().any(|m| m.contains("sandboxes")),
        "{mounts:?}"
    );
    drop(b);
    let mounts = mounts_under(dir.path());
    assert!(
        mounts.is_empty(),
        "the store's image is unmounted on close: {mounts:?}"
    );
}

#[test]
fn open_resolves_the_supervisor_and_names_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = LocalOptions::new(PathBuf::from("no/such/rollpoint-supervisor"));
    options.store.choice = StoreChoice::Copy;
    let err = LocalBackend::open(&dir.path().join("owner"), options).unwrap_err();
    assert!(
        err.to_string().contains("no/such/rollpoint-supervisor"),
        "{err}"
    );
}

#[test]
fn root_long_run_dirs_and_ids_still_reach_the_anchor() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("d".repeat(60)).join("e".repeat(40));
    std::fs::create_dir_all(&deep).unwrap();
    let b = open(&deep, Kind::Copy);
    let id = format!("task-{}", "x".repeat(100));
    let info = b.create(&id, &spec()).unwrap();
    assert!(
        info.control.join("anchor.sock").as_os_str().len() > 108,
        "the socket path is past the address limit"
    );
    assert_eq!(stdout(&b, &id, "hostname"), "task-7");
    b.destroy(&id).unwrap();
}

/// A checkpoint's sandboxes are one batch: all snapshotted together, and
/// when one of them fails the whole batch fails: no snapshot, record or
/// index entry of it is left, every sandbox runs on, and the checkpoint
/// before is untouched.
fn batch_is_all_or_nothing(kind: Kind) {
    let fx = Fixture::new(kind);
    let b = fx.b();
    let ids = ["ba", "bb", "bc"];
    for id in ids {
        b.create(id, &spec()).unwrap();
        sh(b, id, "echo one > state");
    }
    let items = |ck: &str| -> Vec<(String, String)> {
        ids.iter()
            .map(|id| ((*id).to_owned(), format!("{ck}-{id}")))
            .collect()
    };
    let taken = b.snapshot_all(&items("ck1"), "ck1").unwrap();
    assert_eq!(
        taken.iter().map(|s| s.sandbox.as_str()).collect::<Vec<_>>(),
        ids,
        "one snapshot per sandbox, in order"
    );
    for id in ids {
        sh(b, id, "echo two > state");
    }
    // `bb`'s snapshot name is taken already: its snapshot fails, the batch fails.
    let mut second = items("ck2");
    second[1].1 = "ck1-bb".into();
    let err = b.snapshot_all(&second, "ck2").unwrap_err().to_string();
    assert!(err.contains("bb") && err.contains("ck1-bb"), "{err}");
    let listing = b.list().unwrap();
    let mut snapshots = listing.snapshots.clone();
    snapshots.sort();
    assert_eq!(
        snapshots,
        ["ck1-ba", "ck1-bb", "ck1-bc"],
        "nothing of ck2 is left"
    );
    let records: Vec<String> = std::fs::read_dir(fx.dir.path().join("owner/snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        records.iter().all(|r| r.starts_with("ck1-")) && records.len() == 3,
        "{records:?}"
    );
    let index = std::fs::read_to_string(fx.dir.path().join("owner/index.json")).unwrap();
    assert!(!index.contains("ck2"), "{index}");
    for id in ids {
        assert_eq!(
            stdout(b, id, "cat state"),
            "two",
            "{id} was thawed and runs on"
        );
    }
    // The checkpoint before still forks as it was.
    let fork = b.fork("ck1-bb", "bb-fork").unwrap();
    assert_eq!(
        std::fs::read_to_string(fork.root.join("workspace/project/state")).unwrap(),
        "one\n"
    );
}

#[test]
fn root_a_failed_snapshot_fails_the_whole_batch_btrfs() {
    batch_is_all_or_nothing(Kind::Btrfs);
}

#[test]
fn root_a_failed_snapshot_fails_the_whole_batch_copy() {
    batch_is_all_or_nothing(Kind::Copy);
}

/// A disk filler meets its quota (EDQUOT) while a neighbour keeps writing;
/// the limited sandbox still snapshots, and its fork is limited again; the
/// copy store refuses the limit by name.
#[test]
fn root_a_disk_limit_stops_only_its_own_sandbox() {
    let fx = Fixture::new(Kind::Btrfs);
    let b = fx.b();
    let mut limited = spec();
    limited.limits.disk_bytes = Some(16 << 20);
    b.create("filler", &limited).unwrap();
    b.create("neighbour", &spec()).unwrap();
    let fill = "dd if=/dev/urandom of=/tmp/fill bs=1M count=64 2>&1; sync; echo rc=$?";
    let out = b.exec("filler", &rollpoint_testkit::shell(fill)).unwrap();
    assert!(
        out.stdout.contains("quota") || out.stdout.contains("Disk quota"),
        "the filler met its quota: {out:?}"
    );
    let usage = b.usage("filler").unwrap();
    assert!(
        usage.limits_hit.iter().any(|l| l.starts_with("disk: ")),
        "{usage:?}"
    );
    let out = sh(
        b,
        "neighbour",
        "dd if=/dev/zero of=/tmp/big bs=1M count=32 2>/dev/null && sync && echo ok",
    );
    assert_eq!(out.stdout.trim(), "ok");
    assert!(b.usage("neighbour").unwrap().limits_hit.is_empty());
    // The full sandbox snapshots, and a fork of it is limited again.
    b.snapshot("filler", "filled", "c1").unwrap();
    b.fork("filled", "refilled").unwrap();
    let out = b
        .exec(
            "refilled",
            &rollpoint_testkit::shell("dd if=/dev/zero of=/tmp/more bs=1M count=64 2>&1; sync"),
        )
        .unwrap();
    assert!(out.stdout.contains("quota"), "the fork is limited: {out:?}");

    let copy = Fixture::new(Kind::Copy);
    let err = copy.b().create("nope", &limited).unwrap_err().to_string();
    assert!(
        err.contains("sandbox.limits.disk_bytes") && err.contains("btrfs"),
        "{err}"
    );
}

/// The launch cgroup `launch` of sandbox `id`, in the v2 hierarchy.
fn launch_cgroup_v2(id: &str, launch: &str) -> PathBuf {
    let v2 = rollpoint_proctree::cgroup::Hierarchies::read().v2.unwrap();
    let sandbox = sandbox_cgroups(|n| n.ends_with(&format!("-{id}")))
        .into_iter()
        .find(|p| p.starts_with(&v2))
        .unwrap_or_else(|| panic!("no v2 cgroup of sandbox {id}"));
    sandbox.join("rollpoint").join(launch)
}

fn ticks(root: &Path) -> usize {
    std::fs::read_to_string(root.join("tmp/ticks"))
        .unwrap_or_default()
        .len()
}

/// A checkpoint's batched pause, on real sandboxes: every running launch of
/// three sandboxes frozen (its cgroup says so, its ticks stop) with a
/// confirmed receipt, all in one durable file; a launch that ended, one that
/// is not there and a sandbox that is not there are left to their
/// supervisors (no receipt); the batched continue thaws them and they go on.
#[test]
fn root_launches_of_many_sandboxes_pause_and_continue_as_one_batch() {
    use rollpoint_proto::receipt::{Method, Outcome, Receipt};
    use rollpoint_sandbox::LaunchRef;
    use std::os::unix::fs::PermissionsExt as _;

    let fx = Fixture::new(Kind::Btrfs);
    let b = fx.b();
    let launch = |id: &str, script: &str| {
        b.launch(
            id,
            &LaunchRequest {
                launch_id: "ticker".into(),
                argv: vec!["sh".into(), "-c".into(), script.into()],
                env: BTreeMap::new(),
                cwd: String::new(),
                freeze: None,
                options: Vec::new(),
            },
        )
        .unwrap()
    };
    let mut roots = Vec::new();
    for i in 0..3 {
        let id = format!("s{i}");
        roots.push(b.create(&id, &spec()).unwrap().root);
        launch(&id, "while :; do echo x >> /tmp/ticks; sleep 0.02; done");
    }
    b.create("ended", &spec()).unwrap();
    let ended = launch("ended", "exit 3");
    wait_for(Duration::from_secs(30), "the short launch's end", || {
        let record = std::fs::read(ended.session.join("launch.json")).ok()?;
        let record = rollpoint_proto::launch::LaunchRecord::decode(&record).ok()?;
        record.ended.map(|_| ())
    });
    wait_for(
        Duration::from_secs(30),
        "every ticker's first ticks",
        || roots.iter().all(|r| ticks(r) > 0).then_some(()),
    );
    let at = |sandbox: &str, launch_id: &str| LaunchRef {
        sandbox: sandbox.into(),
        launch_id: launch_id.into(),
    };
    let mut refs: Vec<LaunchRef> = (0..3).map(|i| at(&format!("s{i}"), "ticker")).collect();
    refs.extend([
        at("ended", "ticker"),
        at("s0", "no-such-launch"),
        at("no-such-sandbox", "ticker"),
    ]);

    let receipts = b.pause_launches(&refs).unwrap();
    for (i, r) in receipts.iter().take(3).enumerate() {
        let r = r.as_ref().unwrap_or_else(|| panic!("s{i}: no receipt"));
        assert_eq!(r.outcome, Outcome::Confirmed, "s{i}: {r:?}");
        assert_eq!(r.method, Method::CgroupV2);
        assert!(
            !r.members.is_empty() && r.members.iter().all(|m| m.state == 'F'),
            "s{i}: {r:?}"
        );
        let events = std::fs::read_to_string(
            launch_cgroup_v2(&format!("s{i}"), "ticker").join("cgroup.events"),
        )
        .unwrap();
        assert!(events.contains("frozen 1"), "s{i}: {events}");
    }
    assert_eq!(
        receipts[3..]
            .iter()
            .map(Option::is_some)
            .collect::<Vec<_>>(),
        vec![false, false, false],
        "an ended launch, an unknown launch and an unknown sandbox are left to their supervisors: {receipts:?}"
    );
    let before: Vec<usize> = roots.iter().map(|r| ticks(r)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let frozen: Vec<usize> = roots.iter().map(|r| ticks(r)).collect();
    assert_eq!(before, frozen, "a paused launch writes nothing");

    // One durable file for the whole batch.
    let dir = fx.dir.path().join("owner/receipts");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].to_string_lossy().ends_with("-pause.jsonl"));
    assert_eq!(
        std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let logged: Vec<Receipt> = std::fs::read_to_string(&files[0])
        .unwrap()
        .lines()
        .map(|l| Receipt::decode(l.as_bytes()).unwrap())
        .collect();
    assert_eq!(
        logged,
        receipts.iter().flatten().cloned().collect::<Vec<_>>()
    );

    let continued = b.continue_launches(&refs[..3]).unwrap();
    assert!(
        continued.iter().all(|r| r.outcome == Outcome::Confirmed),
        "{continued:?}"
    );
    wait_for(
        Duration::from_secs(30),
        "every ticker to tick again",
        || {
            roots
                .iter()
                .zip(&frozen)
                .all(|(r, n)| ticks(r) > *n)
                .then_some(())
        },
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        2,
        "the continue's batch file"
    );
}

fn mountinfo(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A sandbox's start copies nothing of the others: each overlay is attached
/// in its own sandbox's mount namespace alone, so the owner's mount table
/// (which a new sandbox's namespace starts as a copy of) holds none of them
/// with 64 sandboxes alive, and the 65th sandbox's namespace holds exactly
/// as many mounts as the first one's did when it was alone, none of
/// another sandbox.
#[test]
fn root_a_sandbox_s_namespace_holds_only_its_own_mounts() {
    let fx = Fixture::new(Kind::Btrfs);
    let b = fx.b();
    let host_before = mountinfo(std::process::id()).len();
    let first = b.create("mnt-000", &spec()).unwrap();
    let alone = mountinfo(first.anchor_pid);
    for i in 1..64 {
        b.create(&format!("mnt-{i:03}"), &spec()).unwrap();
    }
    let host = mountinfo(std::process::id());
    assert_eq!(
        host.len(),
        host_before,
        "64 sandboxes add nothing to the owner's mount table: {:?}",
        mounts_under(fx.dir.path())
    );
    let last = b.create("mnt-064", &spec()).unwrap();
    let inside = mountinfo(last.anchor_pid);
    assert_eq!(
        inside.len(),
        alone.len(),
        "the 65th sandbox holds as many mounts as the first did alone:\n{}\n---\n{}",
        inside.join("\n"),
        alone.join("\n")
    );
    for i in 0..64 {
        let other = format!("mnt-{i:03}");
        assert!(
            !inside.iter().any(|l| l.contains(&other)),
            "the 65th sandbox's namespace names {other}:\n{}",
            inside.join("\n")
        );
    }
    assert_eq!(
        sh(b, "mnt-064", "cat /proc/self/mountinfo | wc -l")
            .stdout
            .trim(),
        alone.len().to_string(),
        "and the sandbox sees the same from inside"
    );
}
