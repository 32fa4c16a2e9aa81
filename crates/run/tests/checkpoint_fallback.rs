//! Which checkpoint a resume restores from, on disk alone (no sandboxes):
//! the newest intact one, a damaged one named, marked and kept; one asked
//! for by id must be published and intact, else an error naming it with
//! nothing changed. And the plan over an older checkpoint: attempts
//! dispatched after it start over as their next attempt.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rollpoint_checkpoint::store::{self, CheckpointDoc, Member};
use rollpoint_checkpoint::{AttemptKey, Kind};
use rollpoint_proto::key::RolloutId;
use rollpoint_run::resume::choose_source;
use rollpoint_run::resume::plan::plan_resume;

fn key(text: &str) -> AttemptKey {
    AttemptKey::parse(text).unwrap()
}

/// Publishes checkpoint `id` with a model share over `scope`.
fn publish(run: &Path, id: &str, created: u64, scope: &[&str]) {
    let scope: Vec<AttemptKey> = scope.iter().map(|k| key(k)).collect();
    let records: Vec<serde_json::Value> = scope
        .iter()
        .map(|k| serde_json::json!({"key": k, "calls": [id]}))
        .collect();
    let manifest = store::write(run, id, Kind::Model, "gw", &scope, &records).unwrap();
    let doc = CheckpointDoc {
        version: store::CHECKPOINT_VERSION,
        id: id.to_owned(),
        created_unix_ms: created,
        continues: None,
        scope,
        restarts: Vec::new(),
        participants: vec![Member {
            kind: Kind::Model,
            instance: "gw".to_owned(),
            manifest,
        }],
    };
    store::publish(run, &doc).unwrap();
}

fn share(run: &Path, id: &str) -> PathBuf {
    store::participant_dir(run, id, Kind::Model, "gw")
}

fn records_file(run: &Path, id: &str) -> PathBuf {
    let m = store::read_manifest(
        &share(run, id).join(store::MANIFEST_FILE),
        id,
        Kind::Model,
        "gw",
    )
    .unwrap();
    share(run, id).join(m.records_file)
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

/// Every file under the checkpoints and its bytes.
fn tree(run: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&store::checkpoints_dir(run), &mut out);
    out
}

#[test]
fn a_damaged_latest_falls_back_to_the_newest_intact_one_and_stays() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path();
    assert!(
        choose_source(run, None).unwrap().is_none(),
        "nothing published"
    );
    publish(run, "ck-1", 1, &["a", "b"]);
    publish(run, "ck-2", 2, &["a", "b"]);
    publish(run, "ck-3", 3, &["a", "b-a1"]);
    assert_eq!(choose_source(run, None).unwrap().unwrap().id, "ck-3");

    // One byte of the latest's records.
    let records = records_file(run, "ck-3");
    flip(&records, 5);
    let damaged = std::fs::read(&records).unwrap();
    let before = tree(run);

    // Asked for by id: unknown, or damaged, is an error naming it and
    // nothing changes.
    let e = choose_source(run, Some("ck-9")).unwrap_err().to_string();
    assert!(
        e.contains("ck-9")
            && e.contains("no such published checkpoint")
            && e.contains("ck-3, ck-2, ck-1"),
        "{e}"
    );
    let e = choose_source(run, Some("ck-3")).unwrap_err().to_string();
    assert!(
        e.contains("ck-3") && e.contains("damaged") && e.contains("sha256"),
        "{e}"
    );
    assert_eq!(tree(run), before, "nothing changed");
    assert_eq!(
        choose_source(run, Some("ck-1")).unwrap().unwrap().id,
        "ck-1"
    );

    // Left to choose: ck-2, with ck-3 marked and every byte of it kept.
    let chosen = choose_source(run, None).unwrap().unwrap();
    assert_eq!(chosen.id, "ck-2");
    assert_eq!(chosen.doc.scope, vec![key("a"), key("b")]);
    let reason = store::damaged(run, "ck-3").unwrap().unwrap();
    assert!(reason.contains("sha256"), "{reason}");
    let mut after = tree(run);
    let marker = after
        .remove(&store::checkpoint_dir(run, "ck-3").join(store::DAMAGED_FILE))
        .unwrap();
    assert!(String::from_utf8(marker).unwrap().contains("sha256"));
    assert_eq!(after, before, "only the marker was added");
    assert_eq!(std::fs::read(&records).unwrap(), damaged);
    let e = choose_source(run, Some("ck-3")).unwrap_err().to_string();
    assert!(e.contains("ck-3") && e.contains("marked damaged"), "{e}");

    // A damaged manifest of ck-2 too: ck-1.
    flip(&share(run, "ck-2").join(store::MANIFEST_FILE), 30);
    assert_eq!(choose_source(run, None).unwrap().unwrap().id, "ck-1");
    assert!(store::damaged(run, "ck-2").unwrap().is_some());
    // Retention later keeps ck-1 beside a new latest, and both damaged ones.
    publish(run, "ck-4", 4, &["a"]);
    assert!(store::prune(run, 2).unwrap().is_empty());
    publish(run, "ck-5", 5, &["a"]);
    assert_eq!(store::prune(run, 2).unwrap(), ["ck-1"]);
    for id in ["ck-2", "ck-3"] {
        assert!(
            store::checkpoint_dir(run, id)
                .join(store::CHECKPOINT_FILE)
                .exists()
        );
    }

    // Nothing intact at all: every rollout starts over.
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path();
    publish(run, "ck-1", 1, &["a"]);
    std::fs::write(
        store::checkpoints_dir(run).join(store::LATEST_FILE),
        "ck-7\n",
    )
    .unwrap();
    flip(&records_file(run, "ck-1"), 3);
    assert!(choose_source(run, None).unwrap().is_none());
    assert!(store::damaged(run, "ck-1").unwrap().is_some());
}

#[test]
fn status_says_the_latest_checkpoint_is_damaged_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path();
    rollpoint_run::RunState {
        v: rollpoint_run::RUN_STATE_VERSION,
        tasks_path: "/t.jsonl".into(),
        tasks_sha256: "00".into(),
        config: rollpoint_run::RunConfig::default(),
        gateway_port: 0,
        attempts: [("a".to_owned(), 0)].into(),
        forks: Default::default(),
        saved_by: Default::default(),
        branched: Default::default(),
        trusted: std::collections::BTreeSet::new(),
        infra_retries: std::collections::BTreeMap::new(),
    }
    .save(run)
    .unwrap();
    publish(run, "ck-1", 1, &["a"]);
    let text = rollpoint_run::status::read_status(run).unwrap().to_string();
    assert!(
        text.contains("latest checkpoint: ck-1 (1 rollouts"),
        "{text}"
    );
    flip(&records_file(run, "ck-1"), 4);
    let text = rollpoint_run::status::read_status(run).unwrap().to_string();
    assert!(
        text.contains("latest checkpoint: ck-1 DAMAGED") && text.contains("sha256"),
        "{text}"
    );
    std::fs::write(
        store::checkpoints_dir(run).join(store::LATEST_FILE),
        "ck-9\n",
    )
    .unwrap();
    let text = rollpoint_run::status::read_status(run).unwrap().to_string();
    assert!(
        text.contains("latest checkpoint: ck-9 DAMAGED") && text.contains("checkpoint.json"),
        "{text}"
    );
}

#[test]
fn attempts_dispatched_after_an_older_checkpoint_start_over_as_their_next() {
    let ids: Vec<RolloutId> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|x| RolloutId::new(x).unwrap())
        .collect();
    // The older checkpoint saved a, b, c at attempt 0 and d at attempt 1.
    let older = vec![key("a"), key("b"), key("c"), key("d-a1")];
    // Since then: b started over (attempt 1), c finished, e was dispatched
    // (it was queued when the checkpoint was cut in another run), f never.
    let attempts = BTreeMap::from([
        ("a".to_owned(), 0),
        ("b".to_owned(), 1),
        ("c".to_owned(), 0),
        ("d".to_owned(), 1),
        ("e".to_owned(), 0),
    ]);
    let finished = BTreeSet::from(["c".to_owned()]);
    let plan = plan_resume(&ids, &finished, &attempts, Some(&older));
    assert_eq!(
        plan.restore,
        vec![key("a"), key("d-a1")],
        "saved as last run"
    );
    assert_eq!(
        plan.retire,
        vec![key("b-a1"), key("e")],
        "dispatched after the checkpoint: retired, so they start over as b-a2 and e-a1"
    );
    assert_eq!(plan.fresh, vec![RolloutId::new("f").unwrap()]);
    assert!(plan.finished.contains("c"));
    let every: BTreeSet<String> = plan
        .restore
        .iter()
        .chain(&plan.retire)
        .map(|k| k.rollout().as_str().to_owned())
        .chain(plan.fresh.iter().map(|r| r.as_str().to_owned()))
        .chain(plan.finished.iter().cloned())
        .collect();
    assert_eq!(every.len(), ids.len(), "every task exactly once");
}

#[test]
fn a_share_whose_records_file_is_missing_is_damage_reported_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path();
    publish(run, "ck-1", 1, &["a"]);
    publish(run, "ck-2", 2, &["a"]);
    std::fs::remove_file(records_file(run, "ck-2")).unwrap();
    let e = choose_source(run, Some("ck-2")).unwrap_err().to_string();
    assert!(e.contains("ck-2") && e.contains("damaged"), "{e}");
    assert_eq!(choose_source(run, None).unwrap().unwrap().id, "ck-1");
    let reason = store::damaged(run, "ck-2").unwrap().unwrap();
    assert!(reason.contains("records-"), "{reason}");

    // Retention after the resume's next checkpoint keeps the damaged one.
    publish(run, "ck-3", 3, &["a-a1"]);
    assert_eq!(store::prune(run, 1).unwrap(), ["ck-1"]);
    assert!(share(run, "ck-2").join(store::MANIFEST_FILE).exists());

    // One retention finds first (no resume read it) is marked and kept too.
    publish(run, "ck-4", 4, &["a-a1"]);
    std::fs::remove_file(records_file(run, "ck-3")).unwrap();
    assert!(store::prune(run, 2).unwrap().is_empty());
    let reason = store::damaged(run, "ck-3").unwrap().unwrap();
    assert!(
        reason.contains("records-") && reason.contains("missing"),
        "{reason}"
    );
    assert!(share(run, "ck-3").join(store::MANIFEST_FILE).exists());
}
