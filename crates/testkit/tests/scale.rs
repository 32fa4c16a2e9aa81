//! Large and churning trees pause and continue fully.

use std::path::Path;
use std::time::Duration;

use rollpoint_proto::receipt::Outcome;
use rollpoint_testkit::{Supervised, alive, launch_id, per_strategy, receipt, state, wait_for};

const BUILD: Duration = Duration::from_secs(240);

fn pause_and_continue(id: &str, strategy: &str, steps: &[&str], expect: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready").display().to_string();
    let mut all: Vec<&str> = steps.to_vec();
    all.extend(["ready", &ready, "sleep", "3600"]);
    let s = Supervised::fake(
        &launch_id(id),
        &["--freeze", strategy, "--stop-grace", "1"],
        &all,
    );
    wait_for(BUILD, "the tree to be built", || {
        Path::new(&ready).exists().then_some(())
    });
    let tree = s.tree();
    assert!(
        tree.len() >= expect,
        "{} processes, expected {expect}",
        tree.len()
    );

    let (code, reply) = s.ask("pause", &[]);
    let r = receipt("pause", &reply);
    assert_eq!((code, r.outcome), (0, Outcome::Confirmed), "{:?}", r.reason);
    assert!(
        r.members.len() >= expect,
        "{} members in the receipt",
        r.members.len()
    );
    if strategy == "sigstop" {
        let running: Vec<_> = tree
            .iter()
            .filter(|id| !matches!(state(**id), Some('T') | None))
            .collect();
        assert!(
            running.is_empty(),
            "{} not stopped, e.g. {:?}",
            running.len(),
            running.first()
        );
    }
    let (code, reply) = s.ask("continue", &[]);
    let r = receipt("continue", &reply);
    assert_eq!((code, r.outcome), (0, Outcome::Confirmed), "{:?}", r.reason);
    let stopped: Vec<_> = tree.iter().filter(|id| state(**id) == Some('T')).collect();
    assert!(stopped.is_empty(), "{} left stopped", stopped.len());
    assert_eq!(
        alive(&tree).len(),
        tree.len(),
        "pause and continue killed nothing"
    );
}

fn flat_1000(strategy: &str) {
    pause_and_continue("flat", strategy, &["flat", "1000"], 1001);
}
per_strategy!(root_flat_1000_pause_and_continue, flat_1000);

fn nested_2400(strategy: &str) {
    pause_and_continue("nested", strategy, &["chain", "2400"], 2400);
}
per_strategy!(root_nested_2400_pause_and_continue, nested_2400);

fn churn(strategy: &str) {
    let s = Supervised::fake(
        &launch_id("churn"),
        &["--freeze", strategy, "--stop-grace", "1"],
        &["churn", "sleep", "3600"],
    );
    wait_for(BUILD, "the churn to start", || {
        (s.tree().len() >= 3).then_some(())
    });
    for round in 0..20 {
        let (code, reply) = s.ask("pause", &["--confirm-budget", "10"]);
        let r = receipt("pause", &reply);
        assert_eq!(
            (code, r.outcome),
            (0, Outcome::Confirmed),
            "round {round}: {:?}",
            r.reason
        );
        let (code, reply) = s.ask("continue", &[]);
        assert_eq!(code, 0, "round {round}: {reply:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
per_strategy!(churning_shell_tree_never_hangs_a_pause, churn);
