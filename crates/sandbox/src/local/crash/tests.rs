//! Root tests: a crash at every step of create, fork, snapshot, delete,
//! destroy and the sweeps, then a fresh backend's sweep, leaves nothing of
//! the run's but what the retained checkpoint names: no upper in the store,
//! no sandbox directory, no snapshot or record it does not name, no mount,
//! no cgroup, no torn temporary file.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rollpoint_proto::anchor::ExecRequest;
use rollpoint_snapshot::{SnapshotIndex, StoreChoice, StoreOptions};
use rollpoint_testkit::{mounts_under, require_root, sandbox_cgroups, supervisor_bin};

use crate::SandboxSpec;
use crate::local::{LocalBackend, LocalOptions};

/// The checkpoint every sweep retains.
const KEPT: &str = "ck0";

fn open(dir: &Path, choice: StoreChoice) -> LocalBackend {
    let mut options = LocalOptions::new(supervisor_bin());
    options.store = StoreOptions {
        choice,
        ..StoreOptions::default()
    };
    LocalBackend::open(&dir.join("owner"), options).unwrap()
}

fn sh(b: &LocalBackend, id: &str, script: &str) -> String {
    let out = b
        .exec(
            id,
            &ExecRequest {
                timeout_ms: 30_000,
                output_limit: 1 << 16,
                ..rollpoint_testkit::shell(script)
            },
        )
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{id}: {script}: {out:?}");
    out.stdout.trim().to_owned()
}

/// A retained checkpoint naming one snapshot, made before any crash.
fn prepare(b: &LocalBackend) {
    b.create("keep", &SandboxSpec::default()).unwrap();
    sh(b, "keep", "echo kept > kept");
    b.snapshot("keep", "ck0--keep", KEPT).unwrap();
    b.destroy("keep").unwrap();
}

/// Every verb whose steps a crash can split: create, snapshot (for a
/// checkpoint that is pruned and for the retained one), fork, destroy,
/// delete, and the sweep after a prune. Ids end in `i`, since what the
/// retained checkpoint names stays from one round to the next.
fn workload(b: &LocalBackend, i: usize) {
    let (a, fork) = (format!("a{i}"), format!("b{i}"));
    b.create(&a, &SandboxSpec::default()).unwrap();
    b.snapshot(&a, &format!("ck1--{a}"), "ck1").unwrap();
    b.fork(&format!("ck1--{a}"), &fork).unwrap();
    b.destroy(&a).unwrap();
    b.snapshot(&fork, &format!("ck0--{fork}"), KEPT).unwrap();
    b.snapshot(&fork, &format!("ck2--{fork}"), "ck2").unwrap();
    b.delete_snapshot(&format!("ck1--{a}")).unwrap();
    b.sweep_snapshots(&[KEPT]).unwrap();
    b.destroy(&fork).unwrap();
}

/// What a resume does first.
fn sweep(b: &LocalBackend) {
    b.sweep_orphans().unwrap();
    b.sweep_snapshots(&[KEPT]).unwrap();
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// Nothing is left but what [`KEPT`] names, and every snapshot it names
/// has its record.
fn assert_clean(b: &LocalBackend, context: &str) {
    let store = b.store.list().unwrap();
    assert!(
        store.uppers.is_empty(),
        "{context}: uppers left in the store: {:?}",
        store.uppers
    );
    let sandboxes = names(&b.dir.join("sandboxes"));
    assert!(
        sandboxes.is_empty(),
        "{context}: sandbox directories left: {sandboxes:?}"
    );
    let index = SnapshotIndex::open(&b.index_path()).unwrap();
    let checkpoints: Vec<&String> = index.checkpoints().keys().collect();
    assert!(
        checkpoints.iter().all(|c| *c == KEPT),
        "{context}: index entries left: {checkpoints:?}"
    );
    let named = index.checkpoints().get(KEPT).cloned().unwrap_or_default();
    assert!(named.contains("ck0--keep"), "{context}: {named:?}");
    let snapshots: BTreeSet<String> = store.snapshots.into_iter().collect();
    assert_eq!(snapshots, named, "{context}: store snapshots");
    let records = names(&b.dir.join("snapshots"));
    let wanted: BTreeSet<String> = named.iter().map(|s| format!("{s}.json")).collect();
    assert_eq!(records, wanted, "{context}: snapshot records");
    let top: BTreeSet<String> = names(&b.dir)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(top.is_empty(), "{context}: torn files left: {top:?}");
    let mounts = mounts_under(&b.dir.join("sandboxes"));
    assert!(mounts.is_empty(), "{context}: mounts left: {mounts:?}");
    let prefix = format!("sandbox-{}-", b.key);
    let cgroups = sandbox_cgroups(|n| n.starts_with(&prefix));
    assert!(cgroups.is_empty(), "{context}: cgroups left: {cgroups:?}");
    // An anchor whose owner died leaves the sandbox's cgroups; it ends
    // once the sandbox's PID 1 is killed.
    let mut left = Vec::new();
    for _ in 0..500 {
        left = processes_naming(&b.dir);
        if left.is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{context}: processes left: {left:?}");
}

/// Live processes (not zombies) whose command line names `dir`.
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.as_os_str().as_encoded_bytes();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(path.join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'))
        });
        if !zombie && cmdline.windows(needle.len()).any(|w| w == needle) {
            out.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    out
}

/// Where to crash: every point of `trace`, each occurrence in turn.
fn crash_points(trace: &[&'static str]) -> Vec<(&'static str, usize)> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    trace
        .iter()
        .map(|p| {
            let n = seen.entry(p).or_default();
            *n += 1;
            (*p, *n - 1)
        })
        .collect()
}

/// What a child process does before it is killed.
#[derive(Debug, Clone, Copy)]
enum Scenario {
    /// [`workload`].
    Workload,
    /// [`leave`].
    Leave,
    /// [`sweep`].
    Sweep,
}

const DIR_ENV: &str = "ROLLPOINT_TEST_CRASH_DIR";
const STORE_ENV: &str = "ROLLPOINT_TEST_CRASH_STORE";
const SCENARIO_ENV: &str = "ROLLPOINT_TEST_CRASH_SCENARIO";
const ROUND_ENV: &str = "ROLLPOINT_TEST_CRASH_ROUND";

/// A crashed run: sandboxes live, snapshots of a pruned checkpoint and of
/// the retained one, all left as a SIGKILL leaves them.
fn leave(b: &LocalBackend, i: usize) {
    let a = format!("a{i}");
    b.create(&a, &SandboxSpec::default()).unwrap();
    b.snapshot(&a, &format!("ck1--{a}"), "ck1").unwrap();
    b.snapshot(&a, &format!("ck0--{a}"), KEPT).unwrap();
    b.fork(&format!("ck1--{a}"), &format!("b{i}")).unwrap();
}

/// Run by the crash tests in a child process: opens the backend, runs the
/// scenario and dies by SIGKILL, at the armed point or at the end.
#[test]
#[ignore = "run as a child process by the crash tests"]
fn crash_child() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let choice = std::env::var(STORE_ENV).unwrap().parse().unwrap();
    let round = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
    let b = open(Path::new(&dir), choice);
    match std::env::var(SCENARIO_ENV).unwrap().as_str() {
        "Workload" => workload(&b, round),
        "Leave" => leave(&b, round),
        "Sweep" => sweep(&b),
        other => panic!("unknown scenario {other}"),
    }
    if super::is_armed() {
        // The armed point was never reached.
        std::process::exit(3);
    }
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
}

/// Runs `scenario` in a child process that SIGKILLs itself at `at`.
fn in_child(
    dir: &Path,
    choice: StoreChoice,
    scenario: Scenario,
    round: usize,
    at: Option<(&str, usize)>,
) {
    use std::os::unix::process::ExitStatusExt;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--exact",
            "local::crash::tests::crash_child",
            "--ignored",
            "--nocapture",
        ])
        .env(DIR_ENV, dir)
        .env(STORE_ENV, store_name(choice))
        .env(SCENARIO_ENV, format!("{scenario:?}"))
        .env(ROUND_ENV, round.to_string())
        .env_remove(super::CRASH_AT_ENV);
    if let Some((name, n)) = at {
        child.env(super::CRASH_AT_ENV, format!("{name}#{n}"));
    }
    let status = child.status().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "{scenario:?} crashed at {at:?}: the child ended with {status}"
    );
}

fn store_name(choice: StoreChoice) -> &'static str {
    match choice {
        StoreChoice::Btrfs => "btrfs",
        StoreChoice::Copy => "copy",
        StoreChoice::Auto => "auto",
    }
}

/// A fork of the retained snapshot still holds its content.
fn assert_kept_forks(b: &LocalBackend) {
    b.fork("ck0--keep", "check").unwrap();
    assert_eq!(sh(b, "check", "cat kept"), "kept");
    b.destroy("check").unwrap();
}

/// The workload, killed at each of its steps in turn, then a fresh
/// backend's sweep.
fn every_crash_point_is_swept(choice: StoreChoice) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let b = open(dir.path(), choice);
    prepare(&b);
    let trace = super::trace(|| workload(&b, 0));
    for step in [
        "create: claimed",
        "create: upper made",
        "start: recorded",
        "start: mounted",
        "start: cgroups made",
        "start: anchor started",
        "start: anchor ready",
        "snapshot: frozen",
        "snapshot: taken",
        "snapshot: recorded",
        "fork: claimed",
        "fork: upper made",
        "teardown: killed",
        "teardown: upper destroyed",
        "delete: snapshot deleted",
        "sweep: index written",
        "remove: snapshot deleted",
    ] {
        assert!(trace.contains(&step), "{step:?} is not in {trace:?}");
    }
    sweep(&b);
    assert_clean(&b, "no crash");
    drop(b);

    for (i, (name, n)) in crash_points(&trace).into_iter().enumerate() {
        let context = format!("crash at {name:?} (pass {n})");
        in_child(
            dir.path(),
            choice,
            Scenario::Workload,
            i + 1,
            Some((name, n)),
        );
        let b = open(dir.path(), choice);
        sweep(&b);
        assert_clean(&b, &context);
    }
    let b = open(dir.path(), choice);
    assert_kept_forks(&b);
}

#[test]
fn root_every_crash_point_is_swept_copy() {
    every_crash_point_is_swept(StoreChoice::Copy);
}

#[test]
fn root_every_crash_point_is_swept_btrfs() {
    every_crash_point_is_swept(StoreChoice::Btrfs);
}

/// A crashed run's leftovers, a sweep killed at each of its steps in turn,
/// then another sweep.
fn a_crashed_sweep_is_finished_by_the_next(choice: StoreChoice) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let b = open(dir.path(), choice);
    prepare(&b);
    drop(b);
    in_child(dir.path(), choice, Scenario::Leave, 0, None);
    let b = open(dir.path(), choice);
    let trace = super::trace(|| sweep(&b));
    assert_clean(&b, "an uninterrupted sweep");
    for step in [
        "teardown: killed",
        "sweep: index written",
        "remove: snapshot deleted",
    ] {
        assert!(trace.contains(&step), "{step:?} is not in {trace:?}");
    }
    drop(b);

    for (i, (name, n)) in crash_points(&trace).into_iter().enumerate() {
        let context = format!("sweep crashed at {name:?} (pass {n})");
        in_child(dir.path(), choice, Scenario::Leave, i + 1, None);
        in_child(dir.path(), choice, Scenario::Sweep, 0, Some((name, n)));
        let b = open(dir.path(), choice);
        sweep(&b);
        assert_clean(&b, &context);
    }
}

#[test]
fn root_a_crashed_sweep_is_finished_by_the_next_copy() {
    a_crashed_sweep_is_finished_by_the_next(StoreChoice::Copy);
}

#[test]
fn root_a_crashed_sweep_is_finished_by_the_next_btrfs() {
    a_crashed_sweep_is_finished_by_the_next(StoreChoice::Btrfs);
}
