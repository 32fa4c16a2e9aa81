//! Pausing real process trees under the supervisor, with each strategy.

use std::path::Path;
use std::time::Duration;

use rollpoint_proto::launch::LaunchPhase;
use rollpoint_proto::receipt::{Method, Outcome};
use rollpoint_proto::session::PAUSE_FILE;
use rollpoint_testkit::{Supervised, alive, launch_id, lines, per_strategy, receipt, state, wait_for};

const LONG: Duration = Duration::from_secs(60);

fn method_of(strategy: &str) -> Method {
    match strategy {
        "cgroup-v2" => Method::CgroupV2,
        "cgroup-v1" => Method::CgroupV1,
        _ => Method::Sigstop,
    }
}

fn sizes(files: &[std::path::PathBuf]) -> Vec<u64> {
    files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .collect()
}

fn holds_every_process(strategy: &str) {
    let id = launch_id("hold");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    let main = format!("{d}/tick-main");
    let s = Supervised::fake(
        &id,
        &["--freeze", strategy],
        &["tickers", &d, "4", "20", "100000", "tick", &main, "20", "100000"],
    );
    let files: Vec<_> = (0..4)
        .map(|k| dir.path().join(format!("tick-{k}")))
        .chain([dir.path().join("tick-main")])
        .collect();
    wait_for(LONG, "every ticker to tick", || files.iter().all(|f| lines(f) >= 3).then_some(()));

    let (code, reply) = s.ask("pause", &[]);
    let r = receipt("pause", &reply);
    assert_eq!((code, r.outcome), (0, Outcome::Confirmed), "{r:?}");
    assert_eq!(r.method, method_of(strategy));
    assert!(r.members.len() >= 5, "all five tickers are members: {r:?}");
    let tree = s.tree();
    if strategy == "sigstop" {
        for id in &tree {
            assert_eq!(state(*id), Some('T'), "pid {} not stopped", id.pid);
        }
    }
    if strategy == "cgroup-v2" {
        let cg = s.record().cgroup_v2.expect("a v2 cgroup");
        let events = std::fs::read_to_string(Path::new(&cg).join("cgroup.events")).expect("events");
        assert!(events.contains("frozen 1"), "{events}");
    }
    let before = sizes(&files);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(sizes(&files), before, "no file may change while paused");
    assert!(alive(&tree).len() == tree.len(), "pausing killed nothing");

    let (code, reply) = s.ask("continue", &[]);
    let r = receipt("continue", &reply);
    assert_eq!((code, r.outcome), (0, Outcome::Confirmed), "{r:?}");
    for id in &tree {
        assert_ne!(state(*id), Some('T'), "pid {} left stopped", id.pid);
    }
    wait_for(LONG, "ticking to resume", || {
        files.iter().zip(&before).all(|(f, b)| std::fs::metadata(f).map_or(0, |m| m.len()) > *b).then_some(())
    });
}
per_strategy!(holds_every_process_while_paused, holds_every_process);

fn two_pauses(strategy: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("ticks");
    let fs = f.display().to_string();
    let mut s = Supervised::fake(&launch_id("twice"), &["--freeze", strategy], &["tick", &fs, "20", "50"]);
    for after in [5, 25] {
        wait_for(LONG, "ticks", || (lines(&f) > after).then_some(()));
        let (code, reply) = s.ask("pause", &[]);
        assert_eq!(code, 0, "{reply:?}");
        let held = lines(&f);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(lines(&f), held, "paused launch wrote");
        let (code, reply) = s.ask("continue", &[]);
        assert_eq!(code, 0, "{reply:?}");
    }
    let status = s.wait(LONG);
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&f).expect("ticks");
    let got: Vec<&str> = text.lines().collect();
    assert!(got[0].starts_with("start "), "{got:?}");
    let expected: Vec<String> = (1..=50).map(|n| format!("step {n}")).collect();
    assert_eq!(&got[1..], expected.as_slice(), "every step once, in order, one start");
    let rec = s.record();
    assert_eq!(rec.ended.and_then(|e| e.exit_code), Some(0));
}
per_strategy!(two_pauses_lose_no_step, two_pauses);

fn cancel_paused(strategy: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready").display().to_string();
    let mut s = Supervised::fake(
        &launch_id("cancel"),
        &["--freeze", strategy, "--stop-grace", "1"],
        &["flat", "5", "setsid", "daemon", "clearenv", "ready", &ready, "sleep", "3600"],
    );
    wait_for(LONG, "ready", || Path::new(&ready).exists().then_some(()));
    std::thread::sleep(Duration::from_millis(100));
    let tree = s.tree();
    assert!(tree.len() >= 9, "tree: {tree:?}");
    let (code, _) = s.ask("pause", &[]);
    assert_eq!(code, 0);
    let (code, reply) = s.ask("stop", &[]);
    let r = receipt("stop", &reply);
    assert_eq!((code, r.cleanup_confirmed), (0, Some(true)), "{r:?}");
    s.wait(LONG);
    assert!(alive(&tree).is_empty(), "left alive: {:?}", alive(&tree));
}
per_strategy!(cancelling_a_paused_launch_kills_everything, cancel_paused);

#[test]
fn pause_file_holds_a_launch_until_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("ticks");
    let argv = vec![
        rollpoint_testkit::fake_harness_bin().display().to_string(),
        "tick".into(),
        f.display().to_string(),
        "10".into(),
        "5".into(),
    ];
    let mut s = Supervised::start(&launch_id("held"), &[], &argv, |session| {
        std::fs::write(session.join(PAUSE_FILE), b"").expect("pause file");
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!f.exists(), "a held launch must not start");
    assert_eq!(s.record().phase, LaunchPhase::Held);
    let (_, reply) = s.ask("pause", &[]);
    assert_eq!(receipt("pause", &reply).outcome, Outcome::NotRunning);
    std::fs::remove_file(s.session.join(PAUSE_FILE)).expect("remove pause file");
    assert_eq!(s.wait(LONG).code(), Some(0));
    assert_eq!(lines(&f), 6);
}

#[test]
fn a_launch_that_ended_keeps_its_result_and_is_not_paused() {
    // The supervisor is still cleaning up a child that ignores SIGINT when
    // the pause arrives: the launch has ended, so nothing is paused.
    let dir = tempfile::tempdir().expect("tempdir");
    let ready = dir.path().join("ready").display().to_string();
    let mut s = Supervised::fake(
        &launch_id("ended"),
        &["--stop-grace", "3", "--freeze", "sigstop"],
        &["ignore-int", "setsid", "ready", &ready, "exit", "7"],
    );
    wait_for(LONG, "ended in the record", || s.record().ended);
    let (code, reply) = s.ask("pause", &[]);
    let r = receipt("pause", &reply);
    assert_eq!((code, r.outcome, r.exit_code), (0, Outcome::AlreadyEnded, Some(7)), "{r:?}");
    for id in s.tree() {
        assert_ne!(state(id), Some('T'), "pid {} was paused", id.pid);
    }
    assert_eq!(s.wait(LONG).code(), Some(7));
    // With the supervisor gone, the client answers from the record.
    let (code, reply) = s.ask("pause", &[]);
    let r = receipt("pause", &reply);
    assert_eq!((code, r.outcome, r.exit_code), (0, Outcome::AlreadyEnded, Some(7)));
}
