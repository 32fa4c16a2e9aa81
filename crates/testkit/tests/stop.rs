//! Stopping launches of every shape leaves nothing of them alive and
//! touches no other launch.

use std::path::Path;
use std::time::Duration;

use rollpoint_proto::launch::LaunchPhase;
use rollpoint_proto::receipt::Outcome;
use rollpoint_proto::session::{NEVER_STARTED_EXIT, PAUSE_FILE, STOP_FILE};
use rollpoint_testkit::{
    Supervised, alive, fake_harness_bin, launch_id, receipt, tagged, wait_for,
};

const LONG: Duration = Duration::from_secs(60);

/// Runs `shape` under a supervisor next to a bystander launch, stops it,
/// and checks that every process it had is gone and the bystander lives.
fn stop_shape(name: &str, shape: &[&str], cgroups: bool) {
    let mut opts = vec!["--stop-grace", "1"];
    if !cgroups {
        opts.push("--no-cgroup");
    }
    let bystander = Supervised::fake(
        &launch_id(&format!("{name}-by")),
        &opts,
        &["flat", "2", "sleep", "3600"],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready").display().to_string();
    let mut steps: Vec<&str> = shape.to_vec();
    steps.extend(["ready", &ready, "sleep", "3600"]);
    let id = launch_id(name);
    let mut s = Supervised::fake(&id, &opts, &steps);
    wait_for(LONG, "ready", || Path::new(&ready).exists().then_some(()));
    std::thread::sleep(Duration::from_millis(200));
    let tree = s.tree();
    assert!(tree.len() >= 2, "{name}: tree {tree:?}");
    let by_tree = wait_for(LONG, "bystander tree", || {
        let t = bystander.tree();
        (t.len() >= 3).then_some(t)
    });

    let (code, reply) = s.ask("stop", &[]);
    let r = receipt("stop", &reply);
    assert_eq!(
        (code, r.outcome, r.cleanup_confirmed),
        (0, Outcome::Confirmed, Some(true)),
        "{name}: {r:?}"
    );
    s.wait(LONG);
    assert!(
        alive(&tree).is_empty(),
        "{name}: left alive {:?}",
        alive(&tree)
    );
    assert!(
        tagged(&id).is_empty(),
        "{name}: tagged processes left: {:?}",
        tagged(&id)
    );
    assert_eq!(
        alive(&by_tree).len(),
        by_tree.len(),
        "{name}: the bystander was touched"
    );
}

macro_rules! shapes {
    ($($name:ident: [$($step:expr),*];)*) => {
        mod root_with_cgroups {
            $(#[test] fn $name() {
                rollpoint_testkit::require_root();
                super::stop_shape(stringify!($name), &[$($step),*], true);
            })*
        }
        mod without_cgroups {
            $(#[test] fn $name() { super::stop_shape(stringify!($name), &[$($step),*], false); })*
        }
    };
}

shapes! {
    install_burst: ["burst", "burst"];
    own_session: ["setsid"];
    detached_daemon: ["daemon"];
    cleared_environment: ["clearenv"];
    ignores_sigint: ["ignore-int", "flat", "3"];
    everything_at_once: ["ignore-int", "burst", "setsid", "daemon", "clearenv", "flat", "3"];
}

/// Starts a launch whose harness would create a marker file, with `file`
/// placed in the session dir first; `act` runs before the supervisor exits.
/// The harness must never have run.
fn never_starts(name: &str, file: &str, act: impl FnOnce(&Supervised)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("started");
    let argv = vec![
        fake_harness_bin().display().to_string(),
        "ready".into(),
        marker.display().to_string(),
    ];
    let mut s = Supervised::start(&launch_id(name), &[], &argv, |session| {
        std::fs::write(session.join(file), b"").expect("session file");
    });
    act(&s);
    assert_eq!(s.wait(LONG).code(), Some(NEVER_STARTED_EXIT));
    assert!(!marker.exists(), "the harness ran");
    assert_eq!(s.record().phase, LaunchPhase::NeverStarted);
}

#[test]
fn stop_file_means_the_launch_never_starts() {
    never_starts("stopfile", STOP_FILE, |_| {});
}

#[test]
fn stop_while_held_means_the_launch_never_starts() {
    never_starts("heldstop", PAUSE_FILE, |s| {
        let (code, reply) = s.ask("stop", &[]);
        assert_eq!(
            (code, receipt("stop", &reply).outcome),
            (1, Outcome::NotRunning)
        );
    });
}
