//! Checkpoint files on a real disk: round trip, every corruption named,
//! publication rules, modes and retention.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use rollpoint_checkpoint::store::{self, CheckpointDoc, Member};
use rollpoint_checkpoint::{AttemptKey, Kind, StoreError};
use serde_json::{Value, json};

fn records(keys: &[&str], per: usize) -> Vec<Value> {
    keys.iter()
        .flat_map(|k| (0..per).map(move |i| json!({"key": k, "seq": i, "text": "a\nb \u{e9}"})))
        .collect()
}

fn scope(keys: &[&str]) -> Vec<AttemptKey> {
    keys.iter().map(|k| key(k)).collect()
}

fn key(text: &str) -> AttemptKey {
    AttemptKey::parse(text).unwrap()
}

fn write_one(run: &Path, id: &str) -> store::Manifest {
    store::write(
        run,
        id,
        Kind::Model,
        "gw",
        &scope(&["r1", "r2"]),
        &records(&["r1", "r2"], 3),
    )
    .expect("write")
}

fn publish(run: &Path, id: &str, created: u64) {
    let manifest = write_one(run, id);
    let doc = CheckpointDoc {
        version: store::CHECKPOINT_VERSION,
        id: id.to_owned(),
        created_unix_ms: created,
        continues: None,
        scope: scope(&["r1", "r2"]),
        restarts: Vec::new(),
        participants: vec![Member {
            kind: Kind::Model,
            instance: "gw".to_owned(),
            manifest,
        }],
    };
    store::publish(run, &doc).expect("publish");
}

fn edit_manifest(run: &Path, id: &str, f: impl FnOnce(&mut Value)) {
    let path = store::participant_dir(run, id, Kind::Model, "gw").join(store::MANIFEST_FILE);
    let mut v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    f(&mut v);
    fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn records_round_trip_and_filter_by_scope() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_one(dir.path(), "c1");
    assert_eq!(m.record_count, 6);
    assert_eq!(
        m.records_file,
        format!("records-{}.jsonl", m.records_sha256)
    );
    let (read_m, all) = store::read(dir.path(), "c1", Kind::Model, "gw", None).expect("read");
    assert_eq!(read_m, m);
    assert_eq!(all, records(&["r1", "r2"], 3));
    let only: BTreeSet<AttemptKey> = [key("r2")].into();
    let (_, some) = store::read(dir.path(), "c1", Kind::Model, "gw", Some(&only)).expect("read");
    assert_eq!(some, records(&["r2"], 3));
    let pdir = store::participant_dir(dir.path(), "c1", Kind::Model, "gw");
    for name in [store::MANIFEST_FILE.to_owned(), m.records_file.clone()] {
        let mode = fs::metadata(pdir.join(&name)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{name}");
    }
    let leftovers: Vec<_> = fs::read_dir(&pdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
}

#[test]
fn a_changed_byte_is_named_as_a_digest_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let m = write_one(dir.path(), "c1");
    let path = store::participant_dir(dir.path(), "c1", Kind::Model, "gw").join(&m.records_file);
    let mut bytes = fs::read(&path).unwrap();
    let at = bytes.iter().position(|b| *b == b'1').unwrap();
    bytes[at] = b'7';
    fs::write(&path, bytes).unwrap();
    let err = store::read(dir.path(), "c1", Kind::Model, "gw", None).expect_err("corrupt");
    assert!(matches!(err, StoreError::Digest { .. }), "{err}");
    assert!(err.to_string().contains(&m.records_file), "{err}");
}

#[test]
fn a_wrong_count_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_one(dir.path(), "c1");
    edit_manifest(dir.path(), "c1", |v| v["record_count"] = json!(5));
    let err = store::read(dir.path(), "c1", Kind::Model, "gw", None).expect_err("count");
    assert!(
        matches!(
            err,
            StoreError::Count {
                expected: 5,
                found: 6,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn an_unknown_version_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_one(dir.path(), "c1");
    edit_manifest(dir.path(), "c1", |v| v["version"] = json!(2));
    let err = store::read(dir.path(), "c1", Kind::Model, "gw", None).expect_err("version");
    assert!(
        matches!(
            err,
            StoreError::Version {
                found: 2,
                expected: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("unknown version 2"), "{err}");
}

#[test]
fn another_kind_or_instance_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_one(dir.path(), "c1");
    edit_manifest(dir.path(), "c1", |v| v["kind"] = json!("agent"));
    let err = store::read(dir.path(), "c1", Kind::Model, "gw", None).expect_err("kind");
    assert!(
        matches!(err, StoreError::Mismatch { field: "kind", .. }),
        "{err}"
    );
    edit_manifest(dir.path(), "c1", |v| {
        v["kind"] = json!("model");
        v["instance"] = json!("other");
    });
    let err = store::read(dir.path(), "c1", Kind::Model, "gw", None).expect_err("instance");
    assert!(
        matches!(
            err,
            StoreError::Mismatch {
                field: "instance",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn an_unknown_manifest_field_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_one(dir.path(), "c1");
    edit_manifest(dir.path(), "c1", |v| v["extra"] = json!(1));
    let err = store::read(dir.path(), "c1", Kind::Model, "gw", None).expect_err("field");
    assert!(err.to_string().contains("extra"), "{err}");
}

#[test]
fn a_record_outside_the_scope_or_without_a_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = store::write(
        dir.path(),
        "c1",
        Kind::Agent,
        "d",
        &scope(&["r1"]),
        &records(&["r1", "r2"], 1),
    )
    .expect_err("outside scope");
    assert!(matches!(err, StoreError::Export { index: 1, .. }), "{err}");
    let err = store::write(
        dir.path(),
        "c1",
        Kind::Agent,
        "d",
        &scope(&["r1"]),
        &[json!({"seq": 1})],
    )
    .expect_err("no key");
    assert!(err.to_string().contains("`key`"), "{err}");
}

#[test]
fn a_published_manifest_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let first = write_one(dir.path(), "c1");
    assert_eq!(
        write_one(dir.path(), "c1"),
        first,
        "a retry returns the same manifest"
    );
    let err = store::write(
        dir.path(),
        "c1",
        Kind::Model,
        "gw",
        &scope(&["r1"]),
        &records(&["r1"], 1),
    )
    .expect_err("other records");
    assert!(err.to_string().contains("not replaced"), "{err}");
    let (m, _) = store::read(dir.path(), "c1", Kind::Model, "gw", None).expect("still readable");
    assert_eq!(m, first);
}

#[test]
fn a_path_component_that_escapes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = store::write(dir.path(), "../x", Kind::Model, "gw", &[], &[]).expect_err("escape");
    assert!(
        matches!(
            err,
            StoreError::Name {
                what: "checkpoint",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn publish_then_latest_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(store::latest(dir.path()).unwrap(), None);
    publish(dir.path(), "c1", 1);
    assert_eq!(store::latest(dir.path()).unwrap().as_deref(), Some("c1"));
    let doc = store::verify(dir.path(), "c1").expect("verify");
    assert_eq!(doc.participants.len(), 1);
    let mode = fs::metadata(store::checkpoint_dir(dir.path(), "c1").join(store::CHECKPOINT_FILE))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // A manifest that differs from the one the document recorded is named.
    edit_manifest(dir.path(), "c1", |v| v["record_count"] = json!(9));
    let err = store::read_checkpoint(dir.path(), "c1").expect_err("differs");
    assert!(err.to_string().contains("manifest.json"), "{err}");
}

#[test]
fn an_unknown_checkpoint_version_is_named() {
    let dir = tempfile::tempdir().unwrap();
    publish(dir.path(), "c1", 1);
    let path = store::checkpoint_dir(dir.path(), "c1").join(store::CHECKPOINT_FILE);
    let mut v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    v["version"] = json!(7);
    fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = store::read_checkpoint(dir.path(), "c1").expect_err("version");
    assert!(matches!(err, StoreError::Version { found: 7, .. }), "{err}");
}

#[test]
fn prune_keeps_the_latest_k_and_deletes_unpublished() {
    let dir = tempfile::tempdir().unwrap();
    for (i, id) in ["c1", "c2", "c3", "c4"].iter().enumerate() {
        publish(dir.path(), id, i as u64 + 1);
    }
    // A commit that never reached LATEST, and a stray temp file.
    write_one(dir.path(), "c5");
    fs::write(
        store::checkpoints_dir(dir.path()).join(".LATEST.1.tmp"),
        b"x",
    )
    .unwrap();
    let deleted = store::prune(dir.path(), 2).expect("prune");
    assert_eq!(deleted, vec!["c1", "c2", "c5"]);
    let mut left: Vec<String> = fs::read_dir(store::checkpoints_dir(dir.path()))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["LATEST", "c3", "c4"]);
    store::verify(dir.path(), "c3").expect("kept checkpoint verifies");
    store::verify(dir.path(), "c4").expect("latest verifies");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any records, any text in them, any scope subset: what is read back is
    /// exactly what was written for the keys asked for, in order.
    #[test]
    fn any_records_round_trip(
        rows in proptest::collection::vec((0..5usize, ".*", proptest::num::i64::ANY), 0..40),
        keep in proptest::collection::btree_set(0..5usize, 0..5),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let all_keys: Vec<AttemptKey> = (0..5).map(|k| key(&format!("r{k}"))).collect();
        let written: Vec<Value> = rows
            .iter()
            .map(|(k, text, n)| json!({"key": all_keys[*k], "text": text, "n": n}))
            .collect();
        let m = store::write(dir.path(), "c1", Kind::Resources, "own", &all_keys, &written).unwrap();
        proptest::prop_assert_eq!(m.record_count, written.len() as u64);
        let keep: BTreeSet<AttemptKey> = keep.iter().map(|k| all_keys[*k].clone()).collect();
        let (_, read) = store::read(dir.path(), "c1", Kind::Resources, "own", Some(&keep)).unwrap();
        let expected: Vec<Value> = written
            .into_iter()
            .filter(|r| keep.contains(&key(r["key"].as_str().unwrap())))
            .collect();
        proptest::prop_assert_eq!(read, expected);
    }
}
