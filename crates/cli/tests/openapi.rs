//! docs/openapi.json is what `rollpoint openapi` prints, byte for byte, and
//! it describes every route the routers mount.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use assert_cmd::cargo::cargo_bin;
use serde_json::Value;

const REGENERATE: &str = "run `cargo run -p rollpoint -- openapi --out docs/openapi.json`";

/// Every route the routers mount: method and path.
const ROUTES: &[(&str, &str)] = &[
    // Checkpoint participant control (owner, agent, gateway).
    ("get", "/v1/checkpoint/status"),
    ("post", "/v1/checkpoint/prepare"),
    ("post", "/v1/checkpoint/commit"),
    ("post", "/v1/checkpoint/restore"),
    ("post", "/v1/checkpoint/resume"),
    ("post", "/v1/checkpoint/retire"),
    ("post", "/v1/checkpoint/forget"),
    ("post", "/v1/checkpoint/fleet"),
    // Owner.
    ("post", "/v1/owner/sessions"),
    ("get", "/v1/owner/sessions/{id}"),
    ("delete", "/v1/owner/sessions/{id}"),
    ("post", "/v1/owner/sessions/{id}/exec"),
    ("get", "/v1/owner/sessions/{id}/files"),
    ("put", "/v1/owner/sessions/{id}/files"),
    ("post", "/v1/owner/sessions/{id}/launch"),
    ("get", "/v1/owner/sessions/{id}/usage"),
    ("post", "/v1/owner/sessions/{id}/verify"),
    ("post", "/v1/owner/sessions/{id}/snapshot"),
    ("post", "/v1/owner/restore"),
    ("delete", "/v1/owner/snapshots/{id}"),
    ("post", "/v1/owner/launches/pause"),
    ("post", "/v1/owner/launches/continue"),
    // Agent.
    ("get", "/v1/rollouts"),
    ("post", "/v1/rollouts"),
    ("get", "/v1/rollouts/{id}"),
    ("delete", "/v1/rollouts/{id}"),
    ("get", "/v1/rollouts/{id}/result"),
    ("get", "/v1/rollouts/{id}/trajectory"),
    // Coordinator (and the run's checkpoint route).
    ("post", "/v1/coordinator/checkpoint"),
    ("post", "/v1/coordinator/restore"),
    ("get", "/v1/coordinator/status"),
    ("post", "/v1/fleet/pause"),
    ("post", "/v1/fleet/continue"),
    // Gateway control and model routes.
    ("post", "/v1/gateway/keys"),
    ("get", "/v1/gateway/status"),
    ("get", "/v1/gateway/rollouts/{id}/records"),
    ("get", "/v1/gateway/stalls"),
    ("post", "/v1/gateway/fleet/pause"),
    ("post", "/v1/gateway/fleet/continue"),
    ("post", "/r/{key}/v1/chat/completions"),
    ("post", "/r/{key}/v1/responses"),
    ("post", "/r/{key}/v1/messages"),
    ("get", "/r/{key}/v1/models"),
    // Run control.
    ("get", "/v1/run/status"),
    ("post", "/v1/coordinator/fork"),
    ("get", "/v1/run/view"),
    ("get", "/v1/rollouts/{id}/view"),
    ("get", "/v1/run/live"),
    ("post", "/v1/rollouts/{id}/exec"),
    ("get", "/v1/rollouts/{id}/shell"),
    // Every service.
    ("get", "/metrics"),
];

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

fn generated() -> String {
    let out = Command::new(cargo_bin("rollpoint"))
        .arg("openapi")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rollpoint openapi failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_checked_in_document_is_the_generated_one() {
    let generated = generated();
    let path = checked_in();
    let file = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; {REGENERATE}", path.display()));
    if generated != file {
        let line = generated
            .lines()
            .zip(file.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| generated.lines().count().min(file.lines().count()));
        panic!(
            "docs/openapi.json differs from `rollpoint openapi` (first at line {}): {REGENERATE}",
            line + 1
        );
    }
}

#[test]
fn out_writes_the_same_document() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("openapi.json");
    let status = Command::new(cargo_bin("rollpoint"))
        .arg("openapi")
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), generated());
}

#[test]
fn every_route_is_described() {
    let doc: Value = serde_json::from_str(&generated()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(doc.get("servers").is_none(), "servers are omitted");
    let paths = doc["paths"].as_object().unwrap();
    for (method, path) in ROUTES {
        let operation = &paths
            .get(*path)
            .unwrap_or_else(|| panic!("{path} is not described; {REGENERATE}"))[method];
        let responses = operation["responses"].as_object();
        assert!(
            responses.is_some_and(|r| !r.is_empty()),
            "{method} {path} has no response described"
        );
    }
    // Nothing is described that the routers do not mount.
    let listed: BTreeSet<(&str, &str)> = ROUTES.iter().copied().collect();
    for (path, item) in paths {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            assert!(
                listed.contains(&(*method, path.as_str())),
                "{method} {path} is described but not listed here"
            );
        }
    }
}

#[test]
fn references_tags_and_schemes_resolve() {
    let doc: Value = serde_json::from_str(&generated()).unwrap();
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    let tags: BTreeSet<&str> = doc["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tags,
        [
            "agent",
            "checkpoint",
            "coordinator",
            "gateway",
            "owner",
            "run"
        ]
        .into()
    );
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    for r in refs {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected reference {r}"));
        assert!(schemas.contains_key(name), "{r} names no schema");
    }
    let mut operation_ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in METHODS {
            let Some(operation) = item.get(method) else {
                continue;
            };
            let id = operation["operationId"].as_str().unwrap();
            assert!(operation_ids.insert(id), "operation id {id} is used twice");
            for tag in operation["tags"].as_array().unwrap() {
                assert!(
                    tags.contains(tag.as_str().unwrap()),
                    "{method} {path}: tag {tag} is not declared"
                );
            }
            for requirement in operation["security"].as_array().into_iter().flatten() {
                for scheme in requirement.as_object().unwrap().keys() {
                    assert!(schemes.contains_key(scheme), "{method} {path}: {scheme}");
                }
            }
        }
    }
}

fn collect_refs<'a>(value: &'a Value, refs: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => refs.push(r),
                    _ => collect_refs(v, refs),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, refs)),
        _ => {}
    }
}
