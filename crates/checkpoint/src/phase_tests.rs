//! The phase machine alone: every transition, and random call sequences
//! against its invariants.

use proptest::prelude::*;

use super::*;
use crate::participant::Readiness;
use crate::store::Manifest;

fn prepared(id: &str) -> PrepareReply {
    PrepareReply {
        checkpoint: id.to_owned(),
        phase: Phase::Prepared,
        readiness: Readiness::from_blockers(Vec::new()),
    }
}

fn commit_args(scope: &[&str]) -> CommitArgs {
    CommitArgs {
        scope: scope.iter().map(|s| s.parse().expect("key")).collect(),
        stop: false,
    }
}

fn commit_reply(id: &str) -> CommitReply {
    CommitReply {
        checkpoint: id.to_owned(),
        phase: Phase::Committed,
        manifest: Manifest {
            version: 1,
            checkpoint: id.to_owned(),
            kind: crate::Kind::Model,
            instance: "m".to_owned(),
            records_file: format!("records-{}.jsonl", "0".repeat(64)),
            records_sha256: "0".repeat(64),
            record_count: 0,
        },
        park_error: None,
    }
}

fn restore_args() -> RestoreArgs {
    RestoreArgs {
        source: "c0".to_owned(),
        scope: vec!["r1".parse().expect("key")],
        fork: None,
        from_instance: None,
    }
}

fn restore_reply(id: &str) -> RestoreReply {
    RestoreReply {
        checkpoint: id.to_owned(),
        source: "c0".to_owned(),
        phase: Phase::Restored,
        restored: vec!["r1-a1".parse().expect("key")],
        record_count: 1,
    }
}

#[test]
fn a_checkpoint_walks_idle_preparing_prepared_committed_idle() {
    let mut m = Machine::new();
    assert_eq!(m.prepare("c1").expect("prepare"), PrepareStep::Close);
    assert_eq!(m.phase(), Phase::Preparing);
    assert_eq!(m.prepare("c1").expect("again"), PrepareStep::Wait);
    assert!(m.prepared(prepared("c1")));
    assert_eq!(m.phase(), Phase::Prepared);
    assert_eq!(
        m.prepare("c1").expect("replay"),
        PrepareStep::Replay(prepared("c1"))
    );
    let args = commit_args(&["r1"]);
    assert_eq!(m.commit("c1", &args).expect("commit"), CommitStep::Export);
    m.committed(args.clone(), commit_reply("c1"));
    assert_eq!(m.phase(), Phase::Committed);
    assert_eq!(
        m.commit("c1", &args).expect("replay"),
        CommitStep::Replay(commit_reply("c1"))
    );
    let other = m
        .commit("c1", &commit_args(&["r2"]))
        .expect_err("other scope");
    assert_eq!(other.code, Code::CheckpointConflict);
    assert_eq!(m.resume("c1").expect("resume"), ResumeStep::Open);
    m.resumed("c1");
    assert_eq!(m.phase(), Phase::Idle);
    assert_eq!(m.active(), None);
    assert_eq!(m.resume("c1").expect("again"), ResumeStep::AlreadyResumed);
    assert_eq!(
        m.prepare("c1").expect_err("stale").code,
        Code::StaleCheckpoint
    );
}

#[test]
fn a_second_id_while_one_is_active_conflicts() {
    let mut m = Machine::new();
    m.prepare("c1").expect("prepare");
    for err in [
        m.prepare("c2").expect_err("prepare"),
        m.commit("c2", &commit_args(&[])).expect_err("commit"),
        m.restore("c2", &restore_args()).expect_err("restore"),
        m.resume("c2").expect_err("resume"),
    ] {
        assert_eq!(err.code, Code::CheckpointConflict, "{err}");
    }
    assert_eq!(m.active(), Some("c1"));
}

#[test]
fn commit_needs_prepared_and_restore_needs_idle() {
    let mut m = Machine::new();
    let err = m.commit("c1", &commit_args(&[])).expect_err("idle commit");
    assert_eq!(err.code, Code::InvalidPhase);
    m.prepare("c1").expect("prepare");
    let err = m
        .commit("c1", &commit_args(&[]))
        .expect_err("preparing commit");
    assert_eq!(err.code, Code::InvalidPhase);
    let err = m
        .restore("c1", &restore_args())
        .expect_err("restore while preparing");
    assert_eq!(err.code, Code::InvalidPhase);
}

#[test]
fn restore_walks_idle_restored_idle_and_replays() {
    let mut m = Machine::new();
    assert_eq!(
        m.restore("x1", &restore_args()).expect("restore"),
        RestoreStep::Install
    );
    assert!(m.restored(restore_args(), restore_reply("x1")));
    assert_eq!(m.phase(), Phase::Restored);
    assert_eq!(
        m.restore("x1", &restore_args()).expect("replay"),
        RestoreStep::Replay(restore_reply("x1"))
    );
    m.check_retire("retire").expect("retire after restore");
    let err = m.prepare("x1").expect_err("prepare after restore");
    assert_eq!(err.code, Code::InvalidPhase);
    assert_eq!(m.resume("x1").expect("resume"), ResumeStep::Open);
    m.resumed("x1");
    assert_eq!(m.phase(), Phase::Idle);
}

#[test]
fn retire_is_refused_while_a_checkpoint_is_open() {
    let mut m = Machine::new();
    m.check_retire("retire").expect("idle");
    m.prepare("c1").expect("prepare");
    assert_eq!(
        m.check_retire("retire").expect_err("preparing").code,
        Code::InvalidPhase
    );
    assert!(m.prepared(prepared("c1")));
    assert_eq!(
        m.check_retire("retire").expect_err("prepared").code,
        Code::InvalidPhase
    );
}

#[test]
fn resuming_an_id_never_seen_refuses_its_late_prepare() {
    let mut m = Machine::new();
    assert_eq!(m.resume("c9").expect("resume"), ResumeStep::Remembered);
    assert_eq!(
        m.prepare("c9").expect_err("late").code,
        Code::StaleCheckpoint
    );
    assert_eq!(m.resume("c9").expect("again"), ResumeStep::AlreadyResumed);
}

#[test]
fn only_the_last_64_resumed_ids_are_kept() {
    let mut m = Machine::new();
    for i in 0..=RESUMED_KEPT {
        m.resume(&format!("c{i}")).expect("resume");
    }
    assert!(!m.was_resumed("c0"), "the oldest is forgotten");
    assert!(m.was_resumed("c1"));
    assert!(m.was_resumed(&format!("c{RESUMED_KEPT}")));
    assert_eq!(m.prepare("c0").expect("forgotten id"), PrepareStep::Close);
}

#[test]
fn the_lease_of_an_ended_checkpoint_expires_nothing() {
    let mut m = Machine::new();
    m.prepare("c1").expect("prepare");
    let epoch = m.epoch();
    assert_eq!(m.expired(epoch), Some("c1"));
    m.resumed("c1");
    assert_eq!(m.expired(epoch), None);
    m.prepare("c2").expect("prepare");
    assert_eq!(m.expired(epoch), None, "a new checkpoint has a new lease");
}

#[test]
fn a_restore_resumed_before_it_finished_is_not_recorded() {
    let mut m = Machine::new();
    assert_eq!(
        m.restore("x1", &restore_args()).expect("restore"),
        RestoreStep::Install
    );
    assert_eq!(m.resume("x1").expect("resume"), ResumeStep::Remembered);
    assert!(!m.restored(restore_args(), restore_reply("x1")));
    assert_eq!(m.phase(), Phase::Idle);
}

#[test]
fn a_prepare_that_failed_to_close_leaves_idle() {
    let mut m = Machine::new();
    m.prepare("c1").expect("prepare");
    m.prepare_failed("c1");
    assert_eq!(m.phase(), Phase::Idle);
    assert_eq!(m.active(), None);
    assert_eq!(m.prepare("c1").expect("retry"), PrepareStep::Close);
}

#[derive(Debug, Clone)]
enum Op {
    Prepare(u8),
    Ready(u8),
    Commit(u8, u8),
    Restore(u8),
    Resume(u8),
    Retire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4u8).prop_map(Op::Prepare),
        (0..4u8).prop_map(Op::Ready),
        (0..4u8, 0..2u8).prop_map(|(i, s)| Op::Commit(i, s)),
        (0..4u8).prop_map(Op::Restore),
        (0..4u8).prop_map(Op::Resume),
        Just(Op::Retire),
    ]
}

proptest! {
    /// Whatever the calls, the machine stays consistent: an active id iff
    /// not idle; a resumed id is never active and never admitted again; a
    /// commit is only recorded after prepare; a replay equals the original.
    #[test]
    fn random_calls_keep_the_invariants(ops in proptest::collection::vec(op(), 1..80)) {
        let mut m = Machine::new();
        let mut ever_resumed = std::collections::BTreeSet::new();
        let mut recorded_commit: Option<(String, CommitArgs)> = None;
        for op in ops {
            match op {
                Op::Prepare(i) => {
                    let id = format!("c{i}");
                    if let Ok(step) = m.prepare(&id) {
                        prop_assert!(!ever_resumed.contains(&id));
                        if let PrepareStep::Replay(r) = step {
                            prop_assert_eq!(r.checkpoint, id);
                        }
                    }
                }
                Op::Ready(i) => {
                    let id = format!("c{i}");
                    let before = m.phase();
                    let moved = m.prepared(prepared(&id));
                    prop_assert_eq!(moved, before == Phase::Preparing && m.active() == Some(id.as_str()));
                }
                Op::Commit(i, s) => {
                    let id = format!("c{i}");
                    let args = commit_args(if s == 0 { &["r1"] } else { &["r1", "r2"] });
                    match m.commit(&id, &args) {
                        Ok(CommitStep::Export) => {
                            prop_assert_eq!(m.phase(), Phase::Prepared);
                            m.committed(args.clone(), commit_reply(&id));
                            recorded_commit = Some((id, args));
                        }
                        Ok(CommitStep::Replay(r)) => {
                            let (rid, rargs) = recorded_commit.clone().expect("a commit was recorded");
                            prop_assert_eq!(&r.checkpoint, &rid);
                            prop_assert_eq!(&rargs, &args);
                        }
                        Err(_) => {}
                    }
                }
                Op::Restore(i) => {
                    let id = format!("c{i}");
                    if let Ok(RestoreStep::Install) = m.restore(&id, &restore_args()) {
                        prop_assert_eq!(m.phase(), Phase::Idle);
                        prop_assert!(m.restored(restore_args(), restore_reply(&id)));
                        prop_assert_eq!(m.phase(), Phase::Restored);
                    }
                }
                Op::Resume(i) => {
                    let id = format!("c{i}");
                    let was_active = m.active().map(str::to_owned);
                    match m.resume(&id) {
                        Ok(ResumeStep::Open) => {
                            prop_assert_eq!(was_active.as_deref(), Some(id.as_str()));
                            m.resumed(&id);
                            ever_resumed.insert(id);
                        }
                        Ok(_) => { ever_resumed.insert(id); }
                        Err(e) => {
                            prop_assert_eq!(e.code, Code::CheckpointConflict);
                            prop_assert!(was_active.is_some_and(|a| a != id));
                        }
                    }
                }
                Op::Retire => {
                    let allowed = m.check_retire("retire").is_ok();
                    prop_assert_eq!(allowed, matches!(m.phase(), Phase::Idle | Phase::Restored));
                }
            }
            prop_assert_eq!(m.active().is_none(), m.phase() == Phase::Idle);
            if let Some(active) = m.active() {
                prop_assert!(!m.was_resumed(active));
            }
        }
    }
}
