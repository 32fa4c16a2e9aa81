//! The park and cancel paths of the stage machine, one by one: what each
//! outcome of a pause, continue or stop leads to.

use std::collections::BTreeMap;

use rollpoint_driver::machine::{Effect, Event, Machine, ParkKind, PauseOutcome, Setup, StopWhy};
use rollpoint_driver::{Bookmark, Collected, LaunchEnd, Next, Status, VerifyMode};

fn machine(pauses: bool) -> Machine {
    let setup = Setup {
        task_id: "t".into(),
        checkpointing: true,
        pauses,
        verify_mode: VerifyMode::Owner,
    };
    Machine::new(setup, Bookmark::seed("r", 0, 100), 0)
}

fn seeded(capturable: bool) -> Event {
    Event::Seeded {
        session: "s".into(),
        sandbox: "sb".into(),
        workdir: "/w".into(),
        capturable,
        cookies: BTreeMap::new(),
        state: serde_json::json!({}),
    }
}

/// The action among `effects` (the last one), checking the bookmarks
/// before it are valid.
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

/// Drives a machine to a running launch; returns its launch id.
fn to_wait(m: &mut Machine, capturable: bool) -> String {
    assert_eq!(action(m.step(110, Event::Start)), Effect::Seed);
    assert!(matches!(
        action(m.step(120, seeded(capturable))),
        Effect::Access { .. }
    ));
    let launch = action(m.step(
        130,
        Event::Accessed {
            sandbox: "sb".into(),
            workdir: "/w".into(),
        },
    ));
    let Effect::Launch {
        launch_id, resume, ..
    } = launch
    else {
        panic!("{launch:?}")
    };
    assert!(!resume);
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
    launch_id
}

#[test]
fn a_park_during_the_launch_holds_it_with_the_pause_file() {
    let mut m = machine(true);
    assert_eq!(action(m.step(110, Event::Start)), Effect::Seed);
    action(m.step(120, seeded(true)));
    let Effect::Launch { launch_id, .. } = action(m.step(
        130,
        Event::Accessed {
            sandbox: "sb".into(),
            workdir: "/w".into(),
        },
    )) else {
        panic!()
    };
    assert!(
        m.step(135, Event::ParkRequested).is_empty(),
        "only a flag while in flight"
    );
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
        action(m.step(150, Event::Paused(PauseOutcome::Held))),
        Effect::Park(ParkKind::Held)
    );
    assert_eq!(
        action(m.step(450, Event::Opened)),
        Effect::Continue {
            launch_id: launch_id.clone(),
            hold: true
        }
    );
    assert_eq!(
        action(m.step(460, Event::Continued { error: None })),
        Effect::Wait {
            launch_id: launch_id.clone()
        }
    );
    let l = &m.progress().expect("progress").launches[0];
    assert_eq!((l.pauses, l.paused_ms), (1, 310));
}

#[test]
fn an_unconfirmed_pause_falls_back_to_stop_and_relaunch() {
    let mut m = machine(true);
    let id = to_wait(&mut m, true);
    assert_eq!(
        action(m.step(200, Event::ParkRequested)),
        Effect::Pause {
            launch_id: id.clone(),
            hold: false
        }
    );
    assert_eq!(
        action(m.step(
            210,
            Event::Paused(PauseOutcome::Failed {
                reason: "pid 9: D".into()
            })
        )),
        Effect::Stop {
            launch_id: id.clone(),
            why: StopWhy::PauseFailed
        }
    );
    let stopped = Event::Stopped {
        ended_on_its_own: false,
        exit_code: None,
        confirmed: true,
        reason: None,
    };
    assert_eq!(
        action(m.step(220, stopped)),
        Effect::Park(ParkKind::Stopped)
    );
    let mark = m.bookmark();
    let p = mark.progress().expect("harness");
    assert!(p.resume);
    assert_eq!(p.launches[0].end, Some(LaunchEnd::Interrupted));
    assert!(
        p.launches[0]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("pid 9: D"))
    );
    assert!(matches!(
        action(m.step(300, Event::Opened)),
        Effect::Access { .. }
    ));
    assert!(matches!(
        action(m.step(
            310,
            Event::Accessed {
                sandbox: "sb".into(),
                workdir: "/w".into()
            }
        )),
        Effect::ResumeDecision { .. }
    ));
    let Effect::Launch {
        launch_id, resume, ..
    } = action(m.step(
        320,
        Event::Decided {
            resume: true,
            reason: "saved".into(),
        },
    ))
    else {
        panic!()
    };
    assert!(resume);
    assert_ne!(launch_id, id, "a relaunch has a new id");
}

#[test]
fn a_paused_launch_that_cannot_continue_is_stopped_and_relaunched() {
    let mut m = machine(true);
    let id = to_wait(&mut m, true);
    action(m.step(200, Event::ParkRequested));
    assert_eq!(
        action(m.step(210, Event::Paused(PauseOutcome::Confirmed))),
        Effect::Park(ParkKind::Paused)
    );
    action(m.step(300, Event::Opened));
    assert_eq!(
        action(m.step(
            310,
            Event::Continued {
                error: Some("gone".into())
            }
        )),
        Effect::Stop {
            launch_id: id,
            why: StopWhy::ContinueFailed
        }
    );
    let stopped = Event::Stopped {
        ended_on_its_own: false,
        exit_code: None,
        confirmed: true,
        reason: None,
    };
    assert!(
        matches!(action(m.step(320, stopped)), Effect::Access { .. }),
        "relaunch at once"
    );
}

#[test]
fn a_launch_that_ended_before_the_pause_keeps_its_result() {
    let mut m = machine(true);
    to_wait(&mut m, true);
    action(m.step(200, Event::ParkRequested));
    assert_eq!(
        action(m.step(
            210,
            Event::Paused(PauseOutcome::AlreadyEnded { exit_code: Some(3) })
        )),
        Effect::Park(ParkKind::AtBookmark),
    );
    assert_eq!(m.bookmark().next(), Next::Verify);
    let l = &m.progress().expect("progress").launches[0];
    assert_eq!((l.end, l.exit_code), (Some(LaunchEnd::Failed), Some(3)));
    assert!(matches!(
        action(m.step(300, Event::Opened)),
        Effect::Verify { .. }
    ));
}

#[test]
fn an_adapter_that_does_not_pause_is_stopped() {
    let mut m = machine(false);
    let id = to_wait(&mut m, true);
    assert_eq!(
        action(m.step(200, Event::ParkRequested)),
        Effect::Stop {
            launch_id: id,
            why: StopWhy::Park
        }
    );
}

#[test]
fn cancelling_a_paused_run_kills_its_launch_then_closes_the_session() {
    let mut m = machine(true);
    let id = to_wait(&mut m, true);
    action(m.step(200, Event::ParkRequested));
    action(m.step(210, Event::Paused(PauseOutcome::Confirmed)));
    assert_eq!(
        action(m.step(220, Event::CancelRequested)),
        Effect::Stop {
            launch_id: id,
            why: StopWhy::Cancel
        }
    );
    let stopped = Event::Stopped {
        ended_on_its_own: false,
        exit_code: None,
        confirmed: true,
        reason: None,
    };
    assert_eq!(
        action(m.step(230, stopped)),
        Effect::CloseSession {
            session: "s".into()
        }
    );
    let done = m.step(240, Event::Closed { error: None });
    assert_eq!(done.len(), 1, "a cancelled run records no return bookmark");
    let Effect::Return(r) = &done[0] else {
        panic!()
    };
    assert_eq!(r.status, Status::Cancelled);
    assert_eq!(
        m.bookmark().next(),
        Next::Harness,
        "its last bookmark stands"
    );
}

#[test]
fn a_restart_is_never_parked_and_stops_its_sandbox_when_it_fails() {
    let mut m = machine(true);
    to_wait(&mut m, false);
    assert!(m.restart());
    assert!(!m.wants_park());
    assert!(m.step(200, Event::ParkRequested).is_empty());
    assert_eq!(m.bookmark().next(), Next::Seed, "a restart starts over");
    assert!(matches!(
        action(m.step(300, Event::Ended { exit_code: Some(0) })),
        Effect::Verify { .. }
    ));
    assert_eq!(
        action(m.step(
            310,
            Event::Failed {
                class: rollpoint_driver::InfraClass::SandboxLost,
                error: "verify: boom".into()
            }
        )),
        Effect::StopSandbox {
            session: "s".into()
        }
    );
}

#[test]
fn a_continuation_at_return_returns_the_stored_result() {
    let mut m = machine(true);
    to_wait(&mut m, true);
    action(m.step(300, Event::Ended { exit_code: Some(0) }));
    let effects = m.step(
        310,
        Event::Verified {
            verdict: None,
            collected: Collected::default(),
        },
    );
    assert!(
        matches!(action(effects), Effect::CloseSession { .. }),
        "no verdict: close"
    );
    let effects = m.step(320, Event::Closed { error: None });
    let Some(Effect::RecordBookmark(mark)) = effects.first().cloned() else {
        panic!()
    };
    assert_eq!(mark.next(), Next::Return);
    let setup = Setup {
        task_id: "t".into(),
        checkpointing: true,
        pauses: true,
        verify_mode: VerifyMode::Owner,
    };
    let mut again = Machine::new(setup, mark, 1);
    let effects = again.step(400, Event::Start);
    assert_eq!(effects.len(), 1);
    let Effect::Return(r) = &effects[0] else {
        panic!()
    };
    assert_eq!(r.status, Status::Unverified);
    assert_eq!(r.attempt, 0, "the stored result, unchanged");
}

#[test]
fn a_launch_past_its_time_limit_is_stopped_as_failed_and_graded() {
    let mut m = machine(true);
    let id = to_wait(&mut m, true);
    assert_eq!(
        action(m.step(500, Event::TimedOut)),
        Effect::Stop {
            launch_id: id,
            why: StopWhy::TimedOut
        }
    );
    let stopped = Event::Stopped {
        ended_on_its_own: false,
        exit_code: None,
        confirmed: true,
        reason: None,
    };
    assert!(matches!(
        action(m.step(510, stopped)),
        Effect::Verify { .. }
    ));
    let l = &m.progress().expect("progress").launches[0];
    assert_eq!(l.end, Some(LaunchEnd::Failed));
    assert!(
        l.note.as_deref().is_some_and(|n| n.contains("time limit")),
        "{l:?}"
    );
}
