//! Bookmark decoding under hostile input: random bytes and random mutations
//! of valid bookmarks never panic, and every error names a field under
//! `bookmark`; a wrong type at a leaf names exactly that leaf.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rollpoint_driver::{
    Bookmark, LaunchEnd, LaunchEntry, Progress, RecoveryTier, RolloutResult, SessionHint, Stage,
    Status, Timings, VerifyMode,
};
use serde_json::Value;

fn launch(i: u32, ended: bool) -> LaunchEntry {
    LaunchEntry {
        launch_id: format!("r-a{i}-l{i}"),
        attempt: i,
        sandbox: format!("sb{i}"),
        resumed: i > 0,
        reason: "saved".into(),
        tier: i.is_multiple_of(2).then_some(RecoveryTier::Exact),
        started_at_ms: 1000 + u64::from(i) * 100,
        ended_at_ms: ended.then_some(1050 + u64::from(i) * 100),
        end: ended.then_some(LaunchEnd::Interrupted),
        exit_code: None,
        pauses: 1,
        paused_ms: 10,
        note: None,
    }
}

fn harness() -> Bookmark {
    Bookmark {
        rollout: "r".into(),
        attempt: 2,
        started_at_ms: 1000,
        stage: Stage::Harness(Progress {
            session: SessionHint {
                session: "s".into(),
                sandbox: "sb".into(),
                workdir: "/w".into(),
            },
            cookies: BTreeMap::from([("route".to_owned(), "n1".to_owned())]),
            verify_mode: VerifyMode::Owner,
            state: serde_json::json!({"dir": "/w/.h", "n": 3}),
            resume: true,
            launches: vec![launch(0, true), launch(1, true), launch(2, false)],
        }),
    }
}

fn returned() -> Bookmark {
    Bookmark {
        rollout: "r".into(),
        attempt: 1,
        started_at_ms: 1000,
        stage: Stage::Return(Box::new(RolloutResult {
            v: rollpoint_driver::RESULT_VERSION,
            task_id: "t".into(),
            rollout: "r".into(),
            attempt: 1,
            status: Status::Verified,
            verdict: Some(rollpoint_owner::Verdict {
                reward: 1.0,
                exit_code: Some(0),
                passed: true,
                timed_out: false,
                reward_error: None,
                rewards: Default::default(),
                cleanup_error: None,
                stdout_tail: "ok".into(),
                stderr_tail: String::new(),
            }),
            reward: Some(1.0),
            error: None,
            infra_class: None,
            infra_retries: Vec::new(),
            group: None,
            restart: false,
            launches: vec![launch(0, true), launch(1, true)],
            usage: None,
            resources: None,
            response: Some("done".into()),
            transcript: vec![rollpoint_driver::result::TranscriptEntry {
                role: "user".into(),
                text: "count".into(),
                tool_calls: vec!["echo 1".into()],
            }],
            timings: Timings {
                started_at_ms: 1000,
                ended_at_ms: 2000,
                harness_ms: 100,
                paused_ms: 20,
            },
            forked_from: None,
        })),
    }
}

/// Every leaf of `v` with its path as serde_path_to_error spells it.
fn leaves(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(x, p, out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, format!("{path}[{i}]"), out);
            }
        }
        other => out.push((path, other.clone())),
    }
}

fn set(v: &mut Value, path: &str, new: Value) {
    let mut cur = v;
    for part in path.split('.') {
        let (key, idx) = match part.find('[') {
            Some(i) => (&part[..i], Some(&part[i..])),
            None => (part, None),
        };
        cur = &mut cur[key];
        if let Some(idx) = idx {
            for n in idx.trim_matches(|c| c == '[' || c == ']').split("][") {
                cur = &mut cur[n.parse::<usize>().expect("index")];
            }
        }
    }
    *cur = new;
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn check_error(bytes: &[u8]) {
    if let Err(e) = Bookmark::decode(bytes) {
        assert!(
            e.field == "bookmark" || e.field.starts_with("bookmark."),
            "error names no bookmark field: {e:?}"
        );
        assert!(!e.message.is_empty(), "{e:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_error(&bytes);
    }

    #[test]
    fn random_mutations_name_the_field(
        which in any::<bool>(),
        pick in any::<prop::sample::Index>(),
        new in json_value(),
        drop_key in any::<bool>(),
        extra in proptest::option::of("[a-z_]{1,10}"),
    ) {
        let mark = if which { harness() } else { returned() };
        let mut v: Value = serde_json::from_slice(&mark.encode()).expect("json");
        let mut all = Vec::new();
        leaves(&v, String::new(), &mut all);
        let (path, _) = pick.get(&all).clone();
        if drop_key && !path.contains('[') {
            let (parent, key) = path.rsplit_once('.').map_or(("", path.as_str()), |(p, k)| (p, k));
            let obj = if parent.is_empty() { &mut v } else {
                let mut cur = &mut v;
                for part in parent.split('.') { cur = &mut cur[part]; }
                cur
            };
            if let Some(m) = obj.as_object_mut() { m.remove(key); }
        } else {
            set(&mut v, &path, new);
        }
        if let Some(k) = extra {
            v[k.as_str()] = Value::from(1);
        }
        check_error(v.to_string().as_bytes());
    }

    #[test]
    fn a_wrong_type_at_a_leaf_names_that_leaf(
        which in any::<bool>(),
        pick in any::<prop::sample::Index>(),
    ) {
        let mark = if which { harness() } else { returned() };
        let mut v: Value = serde_json::from_slice(&mark.encode()).expect("json");
        let mut all = Vec::new();
        leaves(&v, String::new(), &mut all);
        // `state` is the adapter's own JSON: any leaf type goes there.
        // Unset options (`null`) take either type.
        all.retain(|(p, x)| !p.starts_with("state") && !x.is_null());
        let (path, old) = pick.get(&all).clone();
        let wrong = if old.is_string() { Value::from(7) } else { Value::from("seven") };
        set(&mut v, &path, wrong);
        let err = Bookmark::decode(v.to_string().as_bytes()).expect_err("a wrong type");
        let expected = format!("bookmark.{path}");
        prop_assert!(
            err.field == expected || (path == "next" && err.field == "bookmark.next"),
            "{} named {:?}: {}", expected, err.field, err.message
        );
    }
}

#[test]
fn valid_bookmarks_round_trip() {
    for mark in [harness(), returned(), Bookmark::seed("r", 0, 5)] {
        assert_eq!(Bookmark::decode(&mark.encode()).expect("valid"), mark);
    }
}

#[test]
fn semantic_errors_name_the_field() {
    type Mutation = fn(&mut Value);
    let cases: Vec<(Mutation, &str)> = vec![
        (
            |v| v["launches"][2]["end"] = Value::from("finished"),
            "bookmark.launches[2].ended_at_ms",
        ),
        (
            |v| v["launches"][2]["ended_at_ms"] = Value::from(2000),
            "bookmark.launches[2].end",
        ),
        (
            |v| {
                v["launches"][0]["ended_at_ms"] = Value::Null;
                v["launches"][0]["end"] = Value::Null;
            },
            "bookmark.launches[0].ended_at_ms",
        ),
        (
            |v| v["launches"][1]["ended_at_ms"] = Value::from(900),
            "bookmark.launches[1].ended_at_ms",
        ),
        (
            |v| v["launches"][1]["launch_id"] = Value::from("r-a0-l0"),
            "bookmark.launches[1].launch_id",
        ),
        (
            |v| v["launches"][0]["launch_id"] = Value::from("a/b"),
            "bookmark.launches[0].launch_id",
        ),
        (
            |v| v["session"]["workdir"] = Value::from("rel"),
            "bookmark.session.workdir",
        ),
        (|v| v["state"] = Value::from(3), "bookmark.state"),
        (|v| v["rollout"] = Value::from("a b"), "bookmark.rollout"),
        (|v| v["v"] = Value::from(2), "bookmark.v"),
        (
            |v| {
                v.as_object_mut().expect("object").remove("resume");
            },
            "bookmark.resume",
        ),
        (|v| v["result"] = Value::from(1), "bookmark.result"),
        (|v| v["next"] = Value::from("seed"), "bookmark.session"),
        (|v| v["surprise"] = Value::from(1), "bookmark.surprise"),
    ];
    for (mutate, field) in cases {
        let mut v: Value = serde_json::from_slice(&harness().encode()).expect("json");
        mutate(&mut v);
        let err = Bookmark::decode(v.to_string().as_bytes()).expect_err(field);
        assert_eq!(err.field, field, "{err}");
    }
    let err =
        Bookmark::decode(br#"{"v":1,"next":"return","rollout":"r","attempt":0,"started_at_ms":0}"#)
            .expect_err("no result");
    assert_eq!(err.field, "bookmark.result");
    let err = Bookmark::decode(b"\xff").expect_err("not json");
    assert_eq!(err.field, "bookmark");
}
