//! The coordinator over several fake participants, in process and over
//! real HTTP on 127.0.0.1:0: ordering, publication, deadline misses,
//! restore all or nothing, and resume past a failing participant.
#![expect(clippy::unwrap_used, reason = "tests")]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Fake, Rig, all_idle, key, keys};
use rollpoint_checkpoint::coordinator::Plan;
use rollpoint_checkpoint::{
    Code, Coordinator, CoordinatorConfig, CoordinatorError, HostConfig, Kind, ParticipantApi,
    ParticipantHost, Phase, store,
};

const KEYS: usize = 4;

fn fakes(records: usize) -> Vec<Arc<Fake>> {
    let k = keys(KEYS);
    vec![
        Fake::with_records(Kind::Resources, "owner", &k, records),
        Fake::with_records(Kind::Agent, "d2", &k, records),
        Fake::with_records(Kind::Model, "gw", &k, records),
        Fake::with_records(Kind::Agent, "d1", &k, records),
    ]
}

async fn rig(run: &Path, fakes: Vec<Arc<Fake>>, http: bool, timeout: Duration) -> Rig {
    common::rig(run, fakes, http, timeout, None).await
}

fn fake<'a>(rig: &'a Rig, instance: &str) -> &'a Arc<Fake> {
    rig.fakes.iter().find(|f| f.instance == instance).unwrap()
}

fn plan(id: &str) -> Plan {
    common::plan(id, keys(KEYS))
}

async fn checkpoint_publishes_and_resumes(http: bool) {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig(dir.path(), fakes(3), http, Duration::from_secs(30)).await;
    let order: Vec<(Kind, &str)> = rig
        .coordinator
        .peers()
        .iter()
        .map(|p| (p.kind, p.instance.as_str()))
        .collect();
    assert_eq!(
        order,
        vec![
            (Kind::Model, "gw"),
            (Kind::Agent, "d1"),
            (Kind::Agent, "d2"),
            (Kind::Resources, "owner")
        ]
    );
    let done = rig
        .coordinator
        .checkpoint(&plan("c1"))
        .await
        .expect("checkpoint");
    assert_eq!(done.doc.participants.len(), 4);
    assert_eq!(store::latest(dir.path()).unwrap().as_deref(), Some("c1"));
    let doc = store::verify(dir.path(), "c1").expect("verify");
    for m in &doc.participants {
        assert_eq!(m.manifest.record_count, 12, "{}/{}", m.kind, m.instance);
    }
    let (_, recs) = store::read(dir.path(), "c1", Kind::Agent, "d2", None).unwrap();
    assert_eq!(recs[0]["instance"], "d2");
    all_idle(&rig).await;

    // Prepare closed the model first, then agents, then resources; resume
    // reopened them in reverse.
    let close = |i: &str| fake(&rig, i).tick_of("close").unwrap();
    let open = |i: &str| fake(&rig, i).tick_of("open").unwrap();
    assert!(close("gw") < close("d1") && close("d1") < close("owner"));
    assert!(close("d2") < close("owner"));
    assert!(open("owner") < open("d1") && open("d1") < open("gw"));

    // The next checkpoint continues the run; retention keeps two.
    for id in ["c2", "c3"] {
        rig.coordinator
            .checkpoint(&plan(id))
            .await
            .expect("checkpoint");
    }
    assert_eq!(store::latest(dir.path()).unwrap().as_deref(), Some("c3"));
    assert!(
        !store::checkpoint_dir(dir.path(), "c1").exists(),
        "c1 pruned"
    );
    store::verify(dir.path(), "c2").expect("c2 kept");
}

#[tokio::test]
async fn checkpoint_in_process() {
    checkpoint_publishes_and_resumes(false).await;
}

#[tokio::test]
async fn checkpoint_over_http() {
    checkpoint_publishes_and_resumes(true).await;
}

#[tokio::test]
async fn a_stage_not_ready_stops_prepare_and_everyone_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig(dir.path(), fakes(1), false, Duration::from_secs(1)).await;
    fake(&rig, "d2").set(|s| s.blockers = vec!["run r2 mid tool call".to_owned()]);
    let err = rig
        .coordinator
        .checkpoint(&plan("c1"))
        .await
        .expect_err("not ready");
    assert!(matches!(err, CoordinatorError::NotPrepared { .. }), "{err}");
    assert!(err.to_string().contains("run r2 mid tool call"), "{err}");
    assert_eq!(
        fake(&rig, "owner").tick_of("close"),
        None,
        "resources never prepared"
    );
    assert!(fake(&rig, "d1").tick_of("close").is_some());
    assert_eq!(store::latest(dir.path()).unwrap(), None);
    all_idle(&rig).await;
}

#[tokio::test]
async fn a_participant_missing_its_deadline_leaves_nothing_published() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig(dir.path(), fakes(1), true, Duration::from_secs(60)).await;
    rig.coordinator
        .checkpoint(&plan("c1"))
        .await
        .expect("first checkpoint");
    // The same participants under a short deadline, which the stalled
    // export misses by far.
    let mut config = CoordinatorConfig::new(dir.path());
    config.timeout = Duration::from_secs(2);
    let hasty = Coordinator::new(rig.controls.clone(), config)
        .await
        .expect("coordinator");
    fake(&rig, "owner").set(|s| s.export_delay = Some(Duration::from_secs(3600)));
    let err = hasty.checkpoint(&plan("c2")).await.expect_err("deadline");
    let text = err.to_string();
    assert!(
        text.contains("resources/owner") && text.contains("deadline_exceeded"),
        "{text}"
    );
    assert_eq!(store::latest(dir.path()).unwrap().as_deref(), Some("c1"));
    let c2 = store::checkpoint_dir(dir.path(), "c2");
    assert!(!c2.join(store::CHECKPOINT_FILE).exists(), "c2 unpublished");
    assert!(
        !store::participant_dir(dir.path(), "c2", Kind::Resources, "owner")
            .join(store::MANIFEST_FILE)
            .exists(),
        "the aborted export published nothing"
    );
    all_idle(&rig).await;
    // The next checkpoint prunes the unpublished one.
    fake(&rig, "owner").set(|s| s.export_delay = None);
    rig.coordinator.checkpoint(&plan("c3")).await.expect("c3");
    assert!(!c2.exists(), "unpublished c2 pruned");
}

#[tokio::test]
async fn restarts_are_left_out_of_the_scope() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig(dir.path(), fakes(1), false, Duration::from_secs(30)).await;
    fake(&rig, "d1").set(|s| s.restarts = vec!["r3".to_owned()]);
    let done = rig
        .coordinator
        .checkpoint(&plan("c1"))
        .await
        .expect("checkpoint");
    assert_eq!(done.doc.restarts, vec!["r3"]);
    assert_eq!(done.doc.scope, keys(3));
    let (_, recs) = store::read(dir.path(), "c1", Kind::Model, "gw", None).unwrap();
    assert!(recs.iter().all(|r| r["key"] != "r3"));
    assert_eq!(recs.len(), 3);
}

#[tokio::test]
async fn a_stopping_checkpoint_parks_and_stays_closed() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig(dir.path(), fakes(1), false, Duration::from_secs(30)).await;
    let mut p = plan("c1");
    p.stop = true;
    rig.coordinator.checkpoint(&p).await.expect("checkpoint");
    assert_eq!(store::latest(dir.path()).unwrap().as_deref(), Some("c1"));
    for f in &rig.fakes {
        assert!(f.get(|s| s.parked), "{} parked", f.instance);
        assert!(!f.is_open(), "{} stays closed", f.instance);
    }
}

async fn restore_round_trip(http: bool) {
    let dir = tempfile::tempdir().unwrap();
    let first = rig(dir.path(), fakes(2), http, Duration::from_secs(30)).await;
    first
        .coordinator
        .checkpoint(&plan("c1"))
        .await
        .expect("checkpoint");
    drop(first);

    // A new run: fresh participants restore two of the four rollouts.
    let second = rig(dir.path(), fakes(0), http, Duration::from_secs(30)).await;
    let scope = vec![key("r1"), key("r2")];
    let restored = second
        .coordinator
        .restore("x1", "c1", &scope)
        .await
        .expect("restore");
    assert_eq!(restored.restored.len(), 4);
    for (_, _, next) in &restored.restored {
        assert_eq!(next, &vec![key("r1-a1"), key("r2-a1")]);
    }
    for f in &second.fakes {
        let keys: BTreeSet<String> = f.get(|s| {
            s.installed
                .iter()
                .map(|r| r["key"].as_str().unwrap().to_owned())
                .collect()
        });
        assert_eq!(
            keys,
            scope.iter().map(ToString::to_string).collect(),
            "{}",
            f.instance
        );
        assert_eq!(f.get(|s| s.installed.len()), 4, "{}", f.instance);
        assert_eq!(
            f.get(|s| s.installed[0]["instance"].clone()),
            f.instance.as_str()
        );
        assert!(!f.is_open(), "closed until resume");
    }
    for c in &second.controls {
        assert_eq!(c.status().await.unwrap().phase, Phase::Restored);
    }
    second.coordinator.resume("x1").await.expect("resume");
    all_idle(&second).await;
}

#[tokio::test]
async fn restore_in_process() {
    restore_round_trip(false).await;
}

#[tokio::test]
async fn restore_over_http() {
    restore_round_trip(true).await;
}

async fn restore_is_all_or_nothing(http: bool) {
    let dir = tempfile::tempdir().unwrap();
    let first = rig(dir.path(), fakes(1), http, Duration::from_secs(30)).await;
    first
        .coordinator
        .checkpoint(&plan("c1"))
        .await
        .expect("checkpoint");
    let second = rig(dir.path(), fakes(0), http, Duration::from_secs(30)).await;
    fake(&second, "d2").set(|s| s.fail_install = true);
    let err = second
        .coordinator
        .restore("x1", "c1", &keys(KEYS))
        .await
        .expect_err("install fails");
    assert!(err.to_string().contains("d2: install refused"), "{err}");
    let next: BTreeSet<String> = keys(KEYS).iter().map(|k| format!("{k}-a1")).collect();
    for f in &second.fakes {
        assert_eq!(
            f.get(|s| s.retired.clone()),
            next,
            "{} retired the next attempts",
            f.instance
        );
    }
    all_idle(&second).await;
    // Retire went to the agents before the model and resources.
    let retire = |i: &str| fake(&second, i).tick_of("retire").unwrap();
    assert!(retire("d1") < retire("gw") && retire("d1") < retire("owner"));
}

#[tokio::test]
async fn restore_all_or_nothing_in_process() {
    restore_is_all_or_nothing(false).await;
}

#[tokio::test]
async fn restore_all_or_nothing_over_http() {
    restore_is_all_or_nothing(true).await;
}

#[tokio::test]
async fn a_missing_checkpoint_fails_restore_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig(dir.path(), fakes(0), true, Duration::from_secs(30)).await;
    let err = rig
        .coordinator
        .restore("x1", "nope", &keys(1))
        .await
        .expect_err("missing");
    let text = err.to_string();
    assert!(
        text.contains("checkpoint.json") && text.contains("nope"),
        "{text}"
    );
    all_idle(&rig).await;
    assert!(
        rig.fakes.iter().all(|f| f.calls().is_empty()),
        "nobody disturbed"
    );
}

#[tokio::test]
async fn a_restore_by_other_participants_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let first = rig(dir.path(), fakes(1), false, Duration::from_secs(30)).await;
    first
        .coordinator
        .checkpoint(&plan("c1"))
        .await
        .expect("checkpoint");
    let mut others = fakes(0);
    others.retain(|f| f.instance != "d2");
    others.push(Fake::new(Kind::Agent, "d3"));
    let second = rig(dir.path(), others, false, Duration::from_secs(30)).await;
    let err = second
        .coordinator
        .restore("x1", "c1", &keys(KEYS))
        .await
        .expect_err("other participants");
    assert!(matches!(err, CoordinatorError::Members { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("agent/d2") && text.contains("agent/d3"),
        "{text}"
    );
    assert!(
        second.fakes.iter().all(|f| f.calls().is_empty()),
        "nobody disturbed"
    );
}

async fn resume_carries_on_past_a_failure(http: bool) {
    let dir = tempfile::tempdir().unwrap();
    let rig = rig(dir.path(), fakes(1), http, Duration::from_secs(30)).await;
    // Resources are resumed first; their failure must not keep the others
    // closed.
    fake(&rig, "owner").set(|s| s.fail_open = true);
    let err = rig
        .coordinator
        .checkpoint(&plan("c1"))
        .await
        .expect_err("resume fails");
    let CoordinatorError::PublishedNotResumed { source, .. } = &err else {
        panic!("unexpected error: {err}");
    };
    match source.as_ref() {
        CoordinatorError::Call {
            action: "resume",
            kind: Kind::Resources,
            source,
            ..
        } => assert_eq!(source.code, Code::HookFailed),
        other => panic!("unexpected error: {other}"),
    }
    assert_eq!(
        store::latest(dir.path()).unwrap().as_deref(),
        Some("c1"),
        "published before resume"
    );
    for i in ["gw", "d1", "d2"] {
        assert!(fake(&rig, i).is_open(), "{i} resumed");
    }
    assert!(!fake(&rig, "owner").is_open());
    fake(&rig, "owner").set(|s| s.fail_open = false);
    rig.coordinator.resume("c1").await.expect("resume again");
    all_idle(&rig).await;
}

#[tokio::test]
async fn resume_past_a_failure_in_process() {
    resume_carries_on_past_a_failure(false).await;
}

#[tokio::test]
async fn resume_past_a_failure_over_http() {
    resume_carries_on_past_a_failure(true).await;
}

#[tokio::test]
async fn a_duplicate_participant_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = Fake::new(Kind::Model, "gw");
    let b = Fake::new(Kind::Model, "gw");
    let controls: Vec<Arc<dyn ParticipantApi>> = vec![
        Arc::new(ParticipantHost::new(a, HostConfig::new(dir.path())).unwrap()),
        Arc::new(ParticipantHost::new(b, HostConfig::new(dir.path())).unwrap()),
    ];
    let err = Coordinator::new(controls, CoordinatorConfig::new(dir.path()))
        .await
        .expect_err("duplicate");
    assert!(matches!(err, CoordinatorError::Duplicate { .. }), "{err}");
}
