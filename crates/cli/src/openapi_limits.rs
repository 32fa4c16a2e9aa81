//! The limits the servers enforce on what they are sent, added to the
//! generated OpenAPI document, so a request the document calls valid is one
//! a server takes and one it calls invalid is refused (schemathesis checks
//! the servers against it: docs/design/openapi.md).
//!
//! They are applied to the document after utoipa has generated it rather
//! than as `#[schema(...)]` attributes on the body types, for two reasons.
//! Several cannot be said in an attribute: an exact `enum: [1]` for a
//! version, a `prefixItems` for an argv's non-empty first element, the
//! `RolloutId` schema a field refers to, a `oneOf` by `kind` for an adapter
//! whose reader is hand-written, the unknown fields a tagged variant
//! refuses, a query parameter's pattern. And one table keeps every limit
//! beside the others, each taken from the constant the server's check uses
//! (a literal only where the check has none, with the check named).
//!
//! Each row names a schema and a property (or a JSON pointer into the
//! schema) and the keywords to set there (`null` removes one). A schema,
//! property or parameter the document lacks is an error naming it, so a
//! renamed field fails generation rather than losing its limit.

use anyhow::{Context as _, bail};
use rollpoint_api::wire::{MAX_FORK_N, MAX_HOLD_MS, WIRE_VERSION};
use rollpoint_checkpoint::store::MANIFEST_VERSION;
use rollpoint_checkpoint::wire::{MAX_BRANCHES, MAX_TIMEOUT_MS};
use rollpoint_driver::TASK_VERSION;
use rollpoint_driver::result::RESULT_VERSION;
use rollpoint_driver::task::MAX_SAMPLES;
use rollpoint_gateway::admin::{ADMIN_VERSION as GATEWAY_VERSION, MAX_STALLS_WAIT_MS};
use rollpoint_owner::RECORD_VERSION;
use rollpoint_owner::task::MAX_USER;
use rollpoint_proto::anchor::LAUNCH_ID_MAX;
use rollpoint_proto::limits::{
    MAX_COMMAND_TIMEOUT_MS, MAX_HOSTNAME, MAX_NAME, MAX_OUTPUT_LIMIT, MAX_ROLLOUT_ID,
    MAX_SESSION_ID, MAX_STORE_ID, MAX_TASK_ID, MAX_TIMEOUT_S,
};
use rollpoint_run::endpoint::ENDPOINT_VERSION as RUN_VERSION;
use rollpoint_trajectory::TRAJECTORY_VERSION;
use serde_json::{Map, Value, json};

/// A checkpoint id or participant instance name
/// (`rollpoint_proto::limits::name_problem`).
const NAME: &str = "^[A-Za-z0-9][A-Za-z0-9._~-]*$";
/// An owner id: the id alphabet, not starting with `.` or `-`
/// (`rollpoint_owner::task::check_id`).
const OWNER_ID: &str = "^[A-Za-z0-9_~][A-Za-z0-9._~-]*$";
/// A checkpoint id an owner takes: a name without `--` (`SNAPSHOT_SEPARATOR`),
/// which splits a snapshot id (`rollpoint_owner::task::check_checkpoint`).
const NO_DASHDASH: &str = "^[A-Za-z0-9](?:-?[A-Za-z0-9._~])*-?$";
/// A rollout id without its length (`maxLength`): the id alphabet, not
/// starting with `.`, `~` or `-`, not ending in `-a<digits>`
/// (`rollpoint_proto::key`'s `rollout_problem`).
const ROLLOUT: &str = "(?:[A-Za-z0-9_](?:[A-Za-z0-9_.~-]*[A-Za-z_.~-])?\
    |(?:[A-Zb-z_]|[A-Za-z0-9_][A-Za-z0-9_.~-]*[A-Zb-z_.~-]\
    |(?:[A-Za-z0-9_][A-Za-z0-9_.~-]*[A-Za-z0-9_.~]|[A-Za-z0-9_])?a)?[0-9]+)";
/// An attempt number: 1 to `u32::MAX` without leading zeros
/// (`AttemptKey::parse`).
const ATTEMPT: &str = "(?:[1-9][0-9]{0,8}|[1-3][0-9]{9}|4[01][0-9]{8}|42[0-8][0-9]{7}\
    |429[0-3][0-9]{6}|4294[0-8][0-9]{5}|42949[0-5][0-9]{4}|429496[0-6][0-9]{3}\
    |4294967[01][0-9]{2}|42949672[0-8][0-9]|429496729[0-5])";
/// An in-sandbox file path: not empty, no NUL, no `..` component
/// (`rollpoint_owner::task::check_sandbox_path`).
const SANDBOX_PATH: &str = r"^/*(?:\.|\.?[^/\u0000.][^/\u0000]*|\.\.[^/\u0000]+)(?:/+(?:\.|\.?[^/\u0000.][^/\u0000]*|\.\.[^/\u0000]+))*/*$";
/// An absolute in-sandbox directory below `/`, no `..` component
/// (`Upload::check`).
const ABS_DIR: &str = r"^/+(?:\.|\.?[^/\u0000.][^/\u0000]*|\.\.[^/\u0000]+)(?:/+(?:\.|\.?[^/\u0000.][^/\u0000]*|\.\.[^/\u0000]+))*/*$";
/// A relative in-sandbox path, no `..` component (`Upload::decoded`).
const REL_PATH: &str = r"^(?:\.|\.?[^/\u0000.][^/\u0000]*|\.\.[^/\u0000]+)(?:/+(?:\.|\.?[^/\u0000.][^/\u0000]*|\.\.[^/\u0000]+))*/*$";
/// Standard padded base64 whose last symbol carries no stray bits, as the
/// `base64` crate's STANDARD engine decodes it.
const BASE64: &str =
    r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";
/// A lent host path: absolute, without `..`, `,` or NUL (`check_isolation`
/// in crates/sandbox/src/local/create.rs; `Path::components` drops `.`).
const HOST_PATH: &str = r"^/+(?:(?:\.|\.?[^/,\u0000.][^/,\u0000]*|\.\.[^/,\u0000]+)(?:/+(?:\.|\.?[^/,\u0000.][^/,\u0000]*|\.\.[^/,\u0000]+))*/*)?$";
/// A launch id: the id alphabet, but not `.` or `..`
/// (`rollpoint_proto::anchor::check_launch_id`).
const LAUNCH_ID: &str =
    r"^(?:[A-Za-z0-9_~-][A-Za-z0-9._~-]*|\.[A-Za-z0-9_~-][A-Za-z0-9._~-]*|\.\.[A-Za-z0-9._~-]+)$";
/// `NAME`, `UID`, `NAME:GROUP` or `UID:GID` (`OwnerTask::validate`).
const USER: &str = "^(?:[A-Za-z0-9_.-]+(?::[A-Za-z0-9_.-]+)?)?$";
/// `HOST:PORT`, `IPv4:PORT` or `IPv4/N:PORT`, the port 1..=65535 as `u16`
/// parses it (`parse` in crates/sandbox/src/local/network.rs).
const ALLOW: &str = r"^(?:[A-Za-z0-9.-]{1,253}|(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}/\+?0*(?:3[0-2]|[12]?[0-9])):\+?0*(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})$";
/// Most `network.allow` destinations: the sandbox's `MAX_ALLOWED`, private
/// to its `local::network` (checked in `local::network::check`).
const MAX_ALLOWED: usize = 64;
/// An image id (`rollpoint_image::Digest::parse`).
const IMAGE_ID: &str = "^sha256:[0-9a-f]{64}$";
/// An octal mode up to 0o7777 as `u32::from_str_radix(_, 8)` reads it (the
/// owner's upload handler and `LocalOwner::upload`).
const MODE: &str = r"^\+?0*[0-7]{1,4}$";
/// Not only white space, as `str::trim` sees it (`HarnessSettings::validate`).
const NOT_BLANK: &str = r"[^\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";
/// Longest step of the fake adapter (`FakeSettings::validate`).
const MAX_TICK_MS: u64 = 60_000;

/// Every versioned body: its schema, its version field and the version its
/// reader takes. A schema with a `v` that is not listed is an error.
#[rustfmt::skip]
const VERSIONS: [(&str, &str, u32); 26] = [
    ("CheckpointReply", "v", WIRE_VERSION),
    ("CheckpointRequest", "v", WIRE_VERSION),
    ("CoordinatorRestoreReply", "v", WIRE_VERSION),
    ("CoordinatorRestoreRequest", "v", WIRE_VERSION),
    ("CoordinatorStatus", "v", WIRE_VERSION),
    ("ForkReply", "v", WIRE_VERSION),
    ("ForkRequest", "v", WIRE_VERSION),
    ("FleetPauseRequest", "v", WIRE_VERSION),
    ("FleetContinueRequest", "v", WIRE_VERSION),
    ("FleetReport", "v", WIRE_VERSION),
    ("FleetReply", "v", GATEWAY_VERSION),
    ("StallsReply", "v", GATEWAY_VERSION),
    ("RolloutList", "v", WIRE_VERSION),
    ("RolloutStatus", "v", WIRE_VERSION),
    ("GatewayKeysReply", "v", GATEWAY_VERSION),
    ("GatewayKeysRequest", "v", GATEWAY_VERSION),
    ("GatewayStatus", "v", GATEWAY_VERSION),
    ("RunStatusReport", "v", RUN_VERSION),
    ("RolloutExecRequest", "v", rollpoint_run::endpoint::exec::EXEC_VERSION),
    ("RolloutExecReply", "v", rollpoint_run::endpoint::exec::EXEC_VERSION),
    ("RolloutTask", "v", TASK_VERSION),
    ("RolloutResult", "v", RESULT_VERSION),
    ("SessionRecord", "v", RECORD_VERSION),
    ("Trajectory", "v", TRAJECTORY_VERSION),
    ("Manifest", "version", MANIFEST_VERSION),
    ("Receipt", "v", rollpoint_proto::receipt::RECEIPT_VERSION),
];

/// Rules across fields, which a schema does not say: added to the field's
/// description.
#[rustfmt::skip]
const NOTES: [(&str, &str, &str); 4] = [
    ("CheckpointRequest", "hold_ms", "A checkpoint that stops holds nothing: with `stop`, 0."),
    ("SandboxLimits", "swap_bytes", "Above 0 it needs `memory_bytes`."),
    ("SandboxSpec", "drop_capabilities", "Refused unless `isolation` is `strict`."),
    ("SandboxSpec", "no_new_privs", "`true` is refused unless `isolation` is `strict`."),
];

/// Adds every limit to `doc`, the generated document as JSON.
pub fn apply(doc: &mut Value) -> anyhow::Result<()> {
    let schemas = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
        .context("the OpenAPI document has no components.schemas")?;
    schemas.insert("RolloutId".to_owned(), rollout_id());
    for (schema, field, patch) in rows()? {
        merge(at(schemas, schema, field)?, &patch);
    }
    for (schema, field, version) in VERSIONS {
        merge(
            at(schemas, schema, field)?,
            &json!({"minimum": null, "enum": [version]}),
        );
    }
    for (name, schema) in schemas.iter() {
        let versioned = schema.pointer("/properties/v").is_some();
        if versioned && !VERSIONS.iter().any(|(s, _, _)| s == name) {
            bail!("schema {name} has a `v` that openapi_limits::VERSIONS does not list");
        }
    }
    for (schema, field, note) in NOTES {
        let target = at(schemas, schema, field)?;
        let text = match target.get("description").and_then(Value::as_str) {
            Some(have) => format!("{have}\n{note}"),
            None => note.to_owned(),
        };
        target.insert("description".to_owned(), text.into());
    }
    // Each variant of a sandbox's base refuses unknown fields
    // (`deny_unknown_fields` on `Base`), and an image id is a digest.
    let variants = at(schemas, "SandboxBase", "")?
        .get_mut("oneOf")
        .and_then(Value::as_array_mut)
        .context("schema SandboxBase has no oneOf")?;
    let mut ids = 0;
    for variant in variants.iter_mut().filter_map(Value::as_object_mut) {
        merge(variant, &json!({"additionalProperties": false}));
        if let Some(id) = variant
            .get_mut("properties")
            .and_then(|p| p.get_mut("id"))
            .and_then(Value::as_object_mut)
        {
            ids += 1;
            merge(id, &json!({"pattern": IMAGE_ID}));
        }
    }
    if ids == 0 {
        bail!("schema SandboxBase has no variant with an image `id`");
    }
    for (path, method, name, patch) in parameters() {
        merge(parameter(doc, path, method, name)?, &patch);
    }
    Ok(())
}

/// The limits of properties: (schema, property or pointer, keywords).
#[rustfmt::skip]
fn rows() -> anyhow::Result<Vec<(&'static str, &'static str, Value)>> {
    let name = json!({"minLength": 1, "maxLength": MAX_NAME, "pattern": NAME});
    let owner_id = |max: usize| json!({"minLength": 1, "maxLength": max, "pattern": OWNER_ID});
    let timeout_ms = json!({"minimum": 1, "maximum": MAX_TIMEOUT_MS});
    let timeout_s = json!({"minimum": 1, "maximum": MAX_TIMEOUT_S});
    let argv_rule = json!({"prefixItems": [{"type": "string", "minLength": 1}], "minItems": 1});
    let attempt = format!("^{ROLLOUT}(?:-a{ATTEMPT})?$");
    let mut rows = vec![
        ("AttemptKey", "", json!({
            "description": format!(
                "An attempt key: `<rollout id>` for attempt 0, `<rollout id>-a<N>` for attempt \
                 N (1 to {}, no leading zeros). The rollout id is at most {MAX_ROLLOUT_ID} \
                 bytes (see `RolloutId`).",
                u32::MAX
            ),
            "pattern": attempt,
        })),
        // Participant control (rollpoint_checkpoint::wire: check_name,
        // check_timeout, check_keys, ForkSpec::check).
        ("PrepareRequest", "checkpoint", name.clone()),
        ("PrepareRequest", "timeout_ms", timeout_ms.clone()),
        ("CommitRequest", "checkpoint", name.clone()),
        ("CommitRequest", "timeout_ms", timeout_ms.clone()),
        ("ParticipantRestoreRequest", "checkpoint", name.clone()),
        ("ParticipantRestoreRequest", "source", name.clone()),
        ("ParticipantRestoreRequest", "from_instance", name.clone()),
        ("ParticipantRestoreRequest", "timeout_ms", timeout_ms.clone()),
        ("ResumeRequest", "checkpoint", name.clone()),
        ("ResumeRequest", "timeout_ms", timeout_ms.clone()),
        ("ParticipantKeysRequest", "keys", json!({"minItems": 1})),
        ("ParticipantKeysRequest", "timeout_ms", timeout_ms.clone()),
        ("ParticipantFleetRequest", "timeout_ms", timeout_ms),
        ("ParticipantFleetRequest", "version", name.clone()),
        ("ForkSpec", "to", json!({"minItems": 1, "maxItems": MAX_BRANCHES})),
        // Coordinator and run (rollpoint_api::wire: CheckpointRequest::check,
        // ForkRequest::check).
        ("CheckpointRequest", "id", name.clone()),
        ("CheckpointRequest", "hold_ms", json!({"maximum": MAX_HOLD_MS})),
        ("CoordinatorRestoreRequest", "id", name.clone()),
        // FleetContinueRequest::check.
        ("FleetContinueRequest", "version", name.clone()),
        ("ForkRequest", "checkpoint", name),
        ("ForkRequest", "rollout", json!({"type": null, "$ref": "#/components/schemas/RolloutId"})),
        ("ForkRequest", "n", json!({"minimum": 1, "maximum": MAX_FORK_N})),
        // Owner tasks (OwnerTask::validate) and sandbox specs (`check_isolation`
        // in crates/sandbox/src/local/create.rs).
        ("OwnerTask", "id", json!({
            "description": format!(
                "The attempt key of the attempt the session serves (`<rollout>` or \
                 `<rollout>-a<N>`, see `AttemptKey`), at most {MAX_TASK_ID} bytes."
            ),
            "minLength": 1,
            "maxLength": MAX_TASK_ID,
            "pattern": attempt,
        })),
        ("OwnerTask", "files/propertyNames", json!({"pattern": SANDBOX_PATH})),
        ("OwnerTask", "setup", json!({"items": argv()})),
        ("OwnerTask", "setup_timeout_s", timeout_s.clone()),
        ("VerifySpec", "command", argv_rule.clone()),
        ("VerifySpec", "timeout_s", timeout_s.clone()),
        // `Upload::check`: an absolute directory below `/`, relative file
        // paths, canonical padded base64 (`base64`'s STANDARD engine), a mode.
        ("Upload", "dir", json!({"pattern": ABS_DIR})),
        ("Upload", "files/propertyNames", json!({"pattern": REL_PATH})),
        ("UploadFile", "base64", json!({"pattern": BASE64})),
        ("UploadFile", "mode", json!({"maximum": 0o7777})),
        ("SandboxSpec", "workdir", json!({"pattern": "^(?:/|$)"})),
        // `check_isolation` in the sandbox's `create`.
        ("SandboxSpec", "hostname", json!({"minLength": 1, "maxLength": MAX_HOSTNAME, "pattern": "^[A-Za-z0-9][A-Za-z0-9.-]*$"})),
        ("SandboxSpec", "user", json!({"maxLength": MAX_USER, "pattern": USER})),
        ("SandboxSpec", "host_paths/items", json!({"pattern": HOST_PATH})),
        ("SandboxSpec", "drop_capabilities/items", json!({"pattern": capabilities()})),
        ("SandboxNetwork", "/oneOf/1", json!({"additionalProperties": false})),
        ("SandboxNetwork", "/oneOf/1/properties/allow", json!({
            "items": {"type": "string", "pattern": ALLOW},
            "minItems": 1,
            "maxItems": MAX_ALLOWED,
        })),
        // Owner routes (LocalOwner: snapshot_sessions, check_restorable,
        // exec_impl, launch_impl; the supervisor's freeze `Strategy::from_str`).
        ("OwnerSnapshotBody", "checkpoint", json!({"minLength": 1, "maxLength": MAX_NAME, "pattern": NO_DASHDASH})),
        ("SessionRecord", "session", owner_id(MAX_SESSION_ID)),
        ("SessionRecord", "snapshot", owner_id(MAX_STORE_ID)),
        ("SessionRecord", "checkpoint", json!({"minLength": 1, "maxLength": MAX_NAME, "pattern": NO_DASHDASH})),
        ("SessionRecord", "workdir", json!({"pattern": "^/"})),
        ("ExecRequest", "argv", argv_rule.clone()),
        ("ExecRequest", "timeout_ms", json!({"maximum": MAX_COMMAND_TIMEOUT_MS})),
        ("ExecRequest", "output_limit", json!({"maximum": MAX_OUTPUT_LIMIT})),
        ("LaunchRequest", "argv", argv_rule),
        ("LaunchRequest", "launch_id", owner_id(LAUNCH_ID_MAX)),
        // A batch of launches (`LaunchesBody::checked`).
        ("OwnerLaunchesBody", "launches", json!({"minItems": 1, "maxItems": rollpoint_owner::LAUNCHES_MAX})),
        ("SessionLaunch", "session", json!({"minLength": 1})),
        ("SessionLaunch", "launch_id", json!({"minLength": 1, "maxLength": LAUNCH_ID_MAX, "pattern": LAUNCH_ID})),
        ("LaunchRequest", "freeze", json!({"enum": ["auto", "cgroup-v2", "v2", "cgroup-v1", "v1", "sigstop", null]})),
        // Rollout tasks (RolloutTask::validate, each adapter's `validate`).
        ("RolloutTask", "id", json!({
            "type": null,
            "description": null,
            "oneOf": [{"type": "null"}, {
                "$ref": "#/components/schemas/RolloutId",
                "description": "The rollout id; the owner task's id when absent (which must \
                                then be a rollout id).",
            }],
        })),
        ("RolloutTask", "harness_timeout_s", timeout_s),
        ("RolloutTask", "samples", json!({"minimum": 1, "maximum": MAX_SAMPLES})),
        ("RolloutTask", "group", json!({
            "type": null,
            "oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/RolloutId"}],
        })),
        ("RolloutTask", "adapter", json!({"type": null, "oneOf": adapters()?})),
    ];
    // Each sandbox limit's range (Limits::check).
    for (field, lo, hi, _) in rollpoint_sandbox::Limits::default().ranges() {
        rows.push(("SandboxLimits", field, json!({"minimum": lo, "maximum": hi})));
    }
    Ok(rows)
}

/// The query and path parameters' limits: (path, method, parameter, keywords).
#[rustfmt::skip]
fn parameters() -> [(&'static str, &'static str, &'static str, Value); 9] {
    let files = "/v1/owner/sessions/{id}/files";
    let snapshot = json!({"minLength": 1, "maxLength": MAX_STORE_ID, "pattern": OWNER_ID});
    // The routes that check the id they are given (a coordinator passes it on to its agents).
    let rollout = json!({"minLength": 1, "maxLength": MAX_ROLLOUT_ID, "pattern": format!("^{ROLLOUT}$")});
    [
        (files, "get", "path", json!({"pattern": SANDBOX_PATH})),
        (files, "put", "path", json!({"pattern": SANDBOX_PATH})),
        (files, "put", "mode", json!({"pattern": MODE})),
        ("/v1/owner/snapshots/{id}", "delete", "id", snapshot),
        // The gateway's stalls query (`admin::stalls`).
        ("/v1/gateway/stalls", "get", "wait_ms", json!({"minimum": 0, "maximum": MAX_STALLS_WAIT_MS})),
        ("/v1/gateway/stalls", "get", "after", json!({"minimum": 0})),
        ("/v1/rollouts/{id}/view", "get", "id", rollout.clone()),
        ("/v1/rollouts/{id}/exec", "post", "id", rollout.clone()),
        ("/v1/rollouts/{id}/shell", "get", "id", rollout),
    ]
}

/// A rollout id, the schema fields refer to.
fn rollout_id() -> Value {
    json!({
        "type": "string",
        "description": format!(
            "A rollout id: 1 to {MAX_ROLLOUT_ID} ASCII letters, digits, `_`, `.`, `-` and `~`, \
             not starting with `.` or `~` and not ending in `-a<digits>` (which names an \
             attempt); `<rollout>~<n>` is branch n of a forked rollout."
        ),
        "examples": ["task-1.x"],
        "minLength": 1,
        "maxLength": MAX_ROLLOUT_ID,
        "pattern": format!("^{ROLLOUT}$"),
    })
}

/// An argv: at least one element, the first not empty.
fn argv() -> Value {
    json!({
        "type": "array",
        "items": {"type": "string"},
        "prefixItems": [{"type": "string", "minLength": 1}],
        "minItems": 1,
    })
}

/// A capability a sandbox keeps (`rollpoint_proctree::isolate::KEPT`), with
/// or without `CAP_`, in any case (`drop_mask`).
fn capabilities() -> String {
    let nocase = |word: &str| -> String {
        word.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    let kept: Vec<String> = rollpoint_proctree::isolate::KEPT
        .iter()
        .map(|cap| {
            let name = cap.to_string();
            nocase(name.strip_prefix("CAP_").unwrap_or(&name))
        })
        .collect();
    format!("^(?:{})?(?:{})$", nocase("CAP_"), kept.join("|"))
}

/// A rollout task's `adapter`: one object per `kind` (`AdapterSpec::from_value`
/// reads `kind`, then that adapter's settings, unknown ones refused). A kind
/// described nowhere here is an error.
fn adapters() -> anyhow::Result<Vec<Value>> {
    let env = |description: Option<&str>| {
        described(
            json!({
                "type": "object",
                "additionalProperties": {"type": "string"},
                "propertyNames": {"type": "string"},
            }),
            description,
        )
    };
    let pauses = |description| described(json!({"type": "boolean"}), description);
    let harness = |kind: &str, description: &str| {
        variant(
            kind,
            description,
            &["prompt"],
            json!({
                "prompt": {
                    "type": "string",
                    "description": "The task: the harness's one user message (not only white \
                                    space).",
                    "pattern": NOT_BLANK,
                },
                "bin": {
                    "type": ["string", "null"],
                    "description": "The harness binary in the sandbox (an absolute path); by \
                                    default the pinned install's.",
                    "pattern": "^/",
                },
                "model": {
                    "type": "string",
                    "description": "The model name the harness asks the gateway for.",
                    "minLength": 1,
                },
                "env": env(Some("Added to the harness's environment.")),
                "pauses": pauses(Some(
                    "Paused in place at checkpoints (else stopped and relaunched).",
                )),
            }),
        )
    };
    let mut resume_argv = described(
        argv(),
        Some("Continues a saved session; without it a relaunch starts over."),
    );
    resume_argv["type"] = json!(["array", "null"]);
    rollpoint_driver::adapter::spec::KINDS
        .iter()
        .map(|&kind| {
            Ok(match kind {
                "command" => variant(
                    kind,
                    "Any argv.",
                    &["argv"],
                    json!({
                        "argv": argv(),
                        "resume_argv": resume_argv,
                        "env": env(Some("Added to the sandbox's environment.")),
                        "pauses": pauses(None),
                    }),
                ),
                "native" => variant(
                    kind,
                    "The native agent worker.",
                    &["input"],
                    json!({
                        "input": {
                            "type": "string",
                            "description": "The worker's input file in the sandbox (a task \
                                            file, usually).",
                            "minLength": 1,
                        },
                        "worker": {
                            "type": "string",
                            "description": "The worker binary in the sandbox.",
                            "minLength": 1,
                        },
                        "env": env(None),
                        "pauses": pauses(None),
                    }),
                ),
                "fake" => variant(
                    kind,
                    "A scripted stand-in harness for tests.",
                    &["steps", "tick_ms"],
                    json!({
                        "steps": {
                            "type": "integer",
                            "format": "int32",
                            "description": "Steps until the harness is done.",
                            "minimum": 1,
                        },
                        "tick_ms": {
                            "type": "integer",
                            "format": "int64",
                            "description": "Time per step.",
                            "minimum": 1,
                            "maximum": MAX_TICK_MS,
                        },
                        "exit_code": {
                            "type": "integer",
                            "format": "int32",
                            "description": "Exit code once done.",
                        },
                        "pauses": pauses(None),
                    }),
                ),
                "codex" => harness(kind, "Codex CLI (`codex exec`)."),
                "claude-code" => harness(kind, "Claude Code (`claude -p`)."),
                "opencode" => harness(kind, "OpenCode."),
                "pi" => harness(kind, "Pi."),
                other => bail!("adapter kind {other} has no schema in openapi_limits::adapters"),
            })
        })
        .collect()
}

/// One adapter kind's object: its settings and `kind`, nothing else.
fn variant(kind: &str, description: &str, required: &[&str], mut properties: Value) -> Value {
    properties["kind"] = json!({"type": "string", "enum": [kind]});
    let mut required = required.to_vec();
    required.push("kind");
    json!({
        "type": "object",
        "description": description,
        "required": required,
        "properties": properties,
        "additionalProperties": false,
    })
}

/// `schema` with `description`, if there is one.
fn described(mut schema: Value, description: Option<&str>) -> Value {
    if let Some(description) = description {
        schema["description"] = description.into();
    }
    schema
}

/// The object at `field` of schema `schema`: a property (`name`), below one
/// (`name/items`), or a JSON pointer into the schema (`/oneOf/1`; empty for
/// the schema itself).
fn at<'a>(
    schemas: &'a mut Map<String, Value>,
    schema: &str,
    field: &str,
) -> anyhow::Result<&'a mut Map<String, Value>> {
    let body = schemas
        .get_mut(schema)
        .with_context(|| format!("the OpenAPI document has no schema {schema}"))?;
    let pointer = if field.is_empty() || field.starts_with('/') {
        field.to_owned()
    } else {
        format!("/properties/{field}")
    };
    body.pointer_mut(&pointer)
        .and_then(Value::as_object_mut)
        .with_context(|| format!("schema {schema} has no {field}"))
}

/// The schema of parameter `name` of `method path`.
fn parameter<'a>(
    doc: &'a mut Value,
    path: &str,
    method: &str,
    name: &str,
) -> anyhow::Result<&'a mut Map<String, Value>> {
    doc.get_mut("paths")
        .and_then(|p| p.get_mut(path))
        .and_then(|p| p.get_mut(method))
        .and_then(|o| o.get_mut("parameters"))
        .and_then(Value::as_array_mut)
        .and_then(|ps| ps.iter_mut().find(|p| p["name"] == name))
        .and_then(|p| p.get_mut("schema"))
        .and_then(Value::as_object_mut)
        .with_context(|| format!("{method} {path} has no parameter {name}"))
}

/// Sets each keyword of `patch` in `target`, removing those set to `null`.
fn merge(target: &mut Map<String, Value>, patch: &Value) {
    for (key, value) in patch.as_object().into_iter().flatten() {
        if value.is_null() {
            target.remove(key);
        } else {
            target.insert(key.clone(), value.clone());
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use rollpoint_proto::limits::MAX_ATTEMPT_KEY;

    use super::*;

    fn document() -> Value {
        serde_json::to_value(crate::openapi::document().unwrap()).unwrap()
    }

    fn limited() -> Value {
        let mut doc = document();
        apply(&mut doc).unwrap();
        doc
    }

    #[test]
    fn limits_are_the_constants_the_servers_check() {
        let doc = limited();
        let s = |pointer: &str| {
            doc.pointer(&format!("/components/schemas/{pointer}"))
                .unwrap_or_else(|| panic!("{pointer}"))
                .clone()
        };
        for schema in ["PrepareRequest", "CommitRequest", "ResumeRequest"] {
            assert_eq!(
                s(&format!("{schema}/properties/timeout_ms/maximum")),
                MAX_TIMEOUT_MS
            );
            assert_eq!(s(&format!("{schema}/properties/timeout_ms/minimum")), 1);
        }
        assert_eq!(
            s("CheckpointRequest/properties/hold_ms/maximum"),
            MAX_HOLD_MS
        );
        assert_eq!(s("ForkRequest/properties/n/maximum"), MAX_FORK_N);
        assert_eq!(s("OwnerTask/properties/id/maxLength"), MAX_TASK_ID);
        assert_eq!(
            s("PrepareRequest/properties/checkpoint/maxLength"),
            MAX_NAME
        );
        assert_eq!(s("RolloutId/maxLength"), MAX_ROLLOUT_ID);
        assert_eq!(s("AttemptKey/maxLength"), MAX_ATTEMPT_KEY);
        assert_eq!(s("VerifySpec/properties/timeout_s/maximum"), MAX_TIMEOUT_S);
        for (field, lo, hi, _) in rollpoint_sandbox::Limits::default().ranges() {
            assert_eq!(s(&format!("SandboxLimits/properties/{field}/minimum")), lo);
            assert_eq!(s(&format!("SandboxLimits/properties/{field}/maximum")), hi);
        }
        assert_eq!(s("RolloutTask/properties/v/enum"), json!([1]));
        assert!(s("RolloutTask/properties/v").get("minimum").is_none());
        // The snapshot checkpoint's pattern spells the separator out.
        assert_eq!(rollpoint_owner::record::SNAPSHOT_SEPARATOR, "--");
        // Every capability a sandbox keeps, with or without `CAP_`.
        let caps = capabilities();
        assert!(caps.contains("[Nn][Ee][Tt]_[Rr][Aa][Ww]"), "{caps}");
        assert_eq!(
            caps.matches('|').count() + 1,
            rollpoint_proctree::isolate::KEPT.len()
        );
    }

    #[test]
    fn a_missing_schema_or_field_is_an_error_naming_it() {
        let mut doc = document();
        let schemas = doc["components"]["schemas"].as_object_mut().unwrap();
        schemas.remove("PrepareRequest");
        let err = apply(&mut doc).unwrap_err().to_string();
        assert!(err.contains("PrepareRequest"), "{err}");

        let mut doc = document();
        doc["components"]["schemas"]["ForkRequest"]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("n");
        let err = apply(&mut doc).unwrap_err().to_string();
        assert!(err.contains("ForkRequest has no n"), "{err}");

        let mut doc = document();
        doc["paths"]["/v1/owner/sessions/{id}/files"]["put"]["parameters"]
            .as_array_mut()
            .unwrap()
            .retain(|p| p["name"] != "mode");
        let err = apply(&mut doc).unwrap_err().to_string();
        assert!(err.contains("mode"), "{err}");
    }
}
