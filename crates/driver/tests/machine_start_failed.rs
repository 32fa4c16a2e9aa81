//! A launch whose harness could not be started (`Event::StartFailed`): the
//! launch is logged as failed with why, the rollout fails naming it without
//! being graded, and its session is closed. Whether it failed before the
//! launch was logged (an adapter's check), while it was waited on (the
//! supervisor's spawn), or while a park was holding it.

use std::collections::BTreeMap;

use rollpoint_driver::machine::{Effect, Event, Machine, Setup};
use rollpoint_driver::{Bookmark, LaunchEnd, Next, RolloutResult, Status, VerifyMode};

fn machine() -> Machine {
    let setup = Setup {
        task_id: "t".into(),
        checkpointing: true,
        pauses: true,
        verify_mode: VerifyMode::Owner,
    };
    Machine::new(setup, Bookmark::seed("r", 0, 100), 0)
}

/// The action among `effects`, checking the bookmarks before it decode.
fn action(effects: Vec<Effect>) -> Effect {
    let mut out = None;
    for e in effects {
        match e {
            Effect::RecordBookmark(b) => {
                Bookmark::decode(&b.encode()).expect("recorded bookmark decodes");
            }
            other => {
                assert!(out.is_none(), "two actions in one step");
                out = Some(other);
            }
        }
    }
    out.expect("an action")
}

/// Drives a machine to its launch effect; returns the launch id.
fn to_launch(m: &mut Machine) -> String {
    assert_eq!(action(m.step(110, Event::Start)), Effect::Seed);
    action(m.step(
        120,
        Event::Seeded {
            session: "s".into(),
            sandbox: "sb".into(),
            workdir: "/w".into(),
            capturable: true,
            cookies: BTreeMap::new(),
            state: serde_json::json!({}),
        },
    ));
    let Effect::Launch { launch_id, .. } = action(m.step(
        130,
        Event::Accessed {
            sandbox: "sb".into(),
            workdir: "/w".into(),
        },
    )) else {
        panic!("no launch")
    };
    launch_id
}

fn start_failed(launch_id: &str, exit_code: Option<i32>) -> Event {
    Event::StartFailed {
        launch_id: launch_id.to_owned(),
        exit_code,
        error: "failed to start the harness \"/no/such/bin\": No such file or directory".into(),
        tier: None,
    }
}

/// The session is closed, then the failed result returned (and recorded).
fn closed_and_returned(m: &mut Machine) -> RolloutResult {
    let Effect::Return(result) = action(m.step(300, Event::Closed { error: None })) else {
        panic!("no return")
    };
    assert_eq!(m.bookmark().next(), Next::Return);
    *result
}

fn assert_failed(result: &RolloutResult, launch_id: &str, exit_code: Option<i32>) {
    assert_eq!(result.status, Status::InfraError, "{result:?}");
    assert_eq!(
        result.infra_class,
        Some(rollpoint_driver::InfraClass::LaunchFailed)
    );
    assert_eq!(result.verdict, None);
    let error = result.error.as_deref().unwrap_or_default();
    assert!(
        error.contains(launch_id) && error.contains("/no/such/bin"),
        "{error}"
    );
    assert_eq!(result.launches.len(), 1, "{result:?}");
    let l = &result.launches[0];
    assert_eq!(l.launch_id, launch_id);
    assert_eq!(l.end, Some(LaunchEnd::Failed));
    assert_eq!(l.exit_code, exit_code);
    assert!(l.ended_at_ms.is_some());
    let note = l.note.as_deref().unwrap_or_default();
    assert!(
        note.starts_with("not started: ") && note.contains("/no/such/bin"),
        "{note}"
    );
}

#[test]
fn a_spawn_failure_while_waiting_fails_the_launch_and_the_rollout() {
    let mut m = machine();
    let launch_id = to_launch(&mut m);
    assert_eq!(
        action(m.step(
            140,
            Event::Launched {
                launch_id: launch_id.clone(),
                tier: None,
            }
        )),
        Effect::Wait {
            launch_id: launch_id.clone()
        }
    );
    assert_eq!(
        action(m.step(200, start_failed(&launch_id, Some(127)))),
        Effect::CloseSession {
            session: "s".into()
        },
        "not graded: closed"
    );
    assert_failed(&closed_and_returned(&mut m), &launch_id, Some(127));
}

#[test]
fn a_check_failure_before_the_launch_logs_it_as_failed() {
    let mut m = machine();
    let launch_id = to_launch(&mut m);
    assert_eq!(
        action(m.step(140, start_failed(&launch_id, None))),
        Effect::CloseSession {
            session: "s".into()
        }
    );
    let result = closed_and_returned(&mut m);
    assert_failed(&result, &launch_id, None);
    assert_eq!(result.launches[0].reason, "first launch of the rollout");
}

#[test]
fn a_spawn_failure_seen_by_a_park_fails_instead_of_parking() {
    let mut m = machine();
    let launch_id = to_launch(&mut m);
    assert!(m.step(135, Event::ParkRequested).is_empty());
    assert_eq!(
        action(m.step(
            140,
            Event::Launched {
                launch_id: launch_id.clone(),
                tier: None,
            }
        )),
        Effect::Pause {
            launch_id: launch_id.clone(),
            hold: true
        }
    );
    assert_eq!(
        action(m.step(150, start_failed(&launch_id, Some(127)))),
        Effect::CloseSession {
            session: "s".into()
        }
    );
    assert_failed(&closed_and_returned(&mut m), &launch_id, Some(127));
}

#[test]
fn a_cancel_meanwhile_still_ends_cancelled() {
    let mut m = machine();
    let launch_id = to_launch(&mut m);
    assert!(m.step(135, Event::CancelRequested).is_empty());
    action(m.step(140, start_failed(&launch_id, None)));
    let Effect::Return(result) = action(m.step(300, Event::Closed { error: None })) else {
        panic!("no return")
    };
    assert_eq!(result.status, Status::Cancelled, "{result:?}");
    assert_eq!(result.launches[0].end, Some(LaunchEnd::Failed));
}

#[test]
fn another_launchs_start_failure_is_ignored() {
    let mut m = machine();
    let launch_id = to_launch(&mut m);
    action(m.step(
        140,
        Event::Launched {
            launch_id: launch_id.clone(),
            tier: None,
        },
    ));
    assert!(
        m.step(160, start_failed("r-a0-l9", None)).is_empty(),
        "another launch's failure is ignored"
    );
    // Its own launch's end still counts.
    assert!(matches!(
        action(m.step(170, Event::Ended { exit_code: Some(0) })),
        Effect::Verify { .. }
    ));
}
