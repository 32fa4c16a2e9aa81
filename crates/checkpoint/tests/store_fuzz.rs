//! The checkpoint store's readers under hostile bytes: a published
//! checkpoint whose manifest, records, `checkpoint.json` or `LATEST` is
//! replaced by random bytes or a random mutation of itself is read without
//! a panic, and a damaged file is an error naming its path. Control bodies
//! too.

use std::path::Path;

use proptest::prelude::*;
use rollpoint_checkpoint::decode::decode_json;
use rollpoint_checkpoint::store::{self, CheckpointDoc, Member};
use rollpoint_checkpoint::wire::{CommitRequest, KeysRequest, RestoreRequest};
use rollpoint_checkpoint::{AttemptKey, Kind};
use rollpoint_testkit::fuzz::hostile;
use serde_json::json;

/// A run directory with checkpoint `c1` published by one participant.
fn published() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let scope: Vec<AttemptKey> = ["r1", "r2-a1"]
        .iter()
        .map(|k| k.parse().expect("key"))
        .collect();
    let records = vec![
        json!({"key": "r1", "n": 1, "text": "a\nb"}),
        json!({"key": "r2-a1", "n": 2}),
    ];
    let manifest =
        store::write(dir.path(), "c1", Kind::Model, "gw", &scope, &records).expect("write");
    let doc = CheckpointDoc {
        version: store::CHECKPOINT_VERSION,
        id: "c1".into(),
        created_unix_ms: 1,
        continues: None,
        scope,
        restarts: Vec::new(),
        participants: vec![Member {
            kind: Kind::Model,
            instance: "gw".into(),
            manifest,
        }],
    };
    store::publish(dir.path(), &doc).expect("publish");
    dir
}

/// Replaces `file` (relative to the run's checkpoints) with `bytes` and
/// reads everything back.
fn read_all(dir: &Path, file: &Path, bytes: &[u8]) -> Result<(), TestCaseError> {
    std::fs::write(file, bytes).expect("write");
    let show = |e: &dyn std::fmt::Display| e.to_string();
    match store::latest(dir) {
        Ok(Some(id)) => {
            let _ = store::read_checkpoint(dir, &id).map_err(|e| show(&e));
        }
        Ok(None) => {}
        Err(e) => prop_assert!(show(&e).contains("LATEST"), "{e}"),
    }
    if let Err(e) = store::read(dir, "c1", Kind::Model, "gw", None) {
        let text = show(&e);
        prop_assert!(
            text.contains("c1") || text.contains("checkpoints"),
            "{text}"
        );
    }
    Ok(())
}

fn file_of(dir: &Path, name: &str) -> std::path::PathBuf {
    let gw = store::participant_dir(dir, "c1", Kind::Model, "gw");
    match name {
        "manifest" => gw.join("manifest.json"),
        "records" => std::fs::read_dir(&gw)
            .expect("dir")
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("records-"))
            })
            .expect("records"),
        "checkpoint" => store::checkpoint_dir(dir, "c1").join("checkpoint.json"),
        _ => store::checkpoints_dir(dir).join("LATEST"),
    }
}

const FILES: [&str; 4] = ["manifest", "records", "checkpoint", "latest"];

/// Which file to damage, and its hostile bytes (mutations of its own valid
/// bytes, or random ones).
fn damaged_file() -> impl Strategy<Value = (usize, Vec<u8>)> {
    let dir = published();
    let valid: Vec<Vec<u8>> = FILES
        .iter()
        .map(|name| std::fs::read(file_of(dir.path(), name)).expect("read"))
        .collect();
    prop_oneof![
        hostile(valid[0].clone()).prop_map(|b| (0, b)),
        hostile(valid[1].clone()).prop_map(|b| (1, b)),
        hostile(valid[2].clone()).prop_map(|b| (2, b)),
        hostile(valid[3].clone()).prop_map(|b| (3, b)),
    ]
}

proptest! {
    #[test]
    fn damaged_store_files_never_panic((which, bytes) in damaged_file()) {
        let dir = published();
        let file = file_of(dir.path(), FILES[which]);
        read_all(dir.path(), &file, &bytes)?;
    }

    #[test]
    fn control_bodies_never_panic(bytes in hostile(
        br#"{"checkpoint":"c1","timeout_ms":1000,"scope":["r1","r2-a1"],"stop":false}"#.to_vec()
    )) {
        let _ = decode_json::<CommitRequest>(&bytes);
        let _ = decode_json::<RestoreRequest>(&bytes);
        let _ = decode_json::<KeysRequest>(&bytes);
    }
}
