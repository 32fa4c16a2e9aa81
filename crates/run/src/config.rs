//! The run configuration: a versioned file (TOML or JSON, unknown fields
//! refused by name) whose every field also has a flag. It is stored whole in
//! `run.json`, so a resume runs with the settings the run started with.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::errors::RunError;

/// Version of [`RunConfig`].
pub const CONFIG_VERSION: u32 = 1;

/// Which snapshot store the sandboxes use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    #[default]
    Auto,
    Btrfs,
    Copy,
}

impl StoreKind {
    pub fn choice(self) -> rollpoint_snapshot::StoreChoice {
        match self {
            Self::Auto => rollpoint_snapshot::StoreChoice::Auto,
            Self::Btrfs => rollpoint_snapshot::StoreChoice::Btrfs,
            Self::Copy => rollpoint_snapshot::StoreChoice::Copy,
        }
    }
}

/// Which API family the upstream speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelApi {
    /// Chat completions, Responses and Messages (the scripted model).
    #[default]
    All,
    Openai,
    Anthropic,
}

/// Where model calls go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// No model: the tasks call none (no gateway is started).
    None,
    /// An upstream the gateway records calls to (one URL, or replicas of one model).
    Upstream(Vec<String>),
    /// A scripted model served in process.
    Script(PathBuf),
}

/// Most rollouts a run may hold at once.
pub const MAX_CONCURRENCY: usize = rollpoint_driver::MAX_SLOTS;
/// Largest `model_max_calls`.
pub const MAX_MODEL_CALLS: usize = rollpoint_gateway::config::MAX_UPSTREAM_CALLS;
/// Longest checkpoint interval: one week.
pub const MAX_CHECKPOINT_EVERY_S: u64 = 7 * 24 * 3600;
/// Most published checkpoints kept.
pub const MAX_KEEP: usize = 1_000;
/// Most `samples` of a task.
pub const MAX_SAMPLES: u32 = rollpoint_driver::task::MAX_SAMPLES;
/// Most `retry_infra`.
pub const MAX_RETRY_INFRA: u32 = 100;

fn default_concurrency() -> usize {
    8
}
fn default_every() -> u64 {
    30
}
fn default_logprobs() -> bool {
    true
}
fn default_true() -> bool {
    true
}
fn default_retry_s() -> u64 {
    30
}
fn default_outage_s() -> u64 {
    600
}
fn default_keep() -> usize {
    2
}

/// How a run runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub v: u32,
    /// Rollouts running (seeding, running or parked) at once
    /// (1..=[`MAX_CONCURRENCY`]).
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Seconds between checkpoints; 0 turns the timer off (signals still
    /// checkpoint) (0..=[`MAX_CHECKPOINT_EVERY_S`]).
    #[serde(default = "default_every")]
    pub checkpoint_every_s: u64,
    /// Published checkpoints kept (1..=[`MAX_KEEP`]).
    #[serde(default = "default_keep")]
    pub keep: usize,
    /// Base URL of the model upstream (`http://` or `https://`, `/v1/...` is appended), or a
    /// list of replicas of one model.
    #[serde(default)]
    pub model_upstream: Option<rollpoint_gateway::config::Urls>,
    /// Keep each rollout's calls on the replica of `model_upstream` it used last while that
    /// replica is up (its prefix cache); false: always the least loaded.
    #[serde(default = "default_true")]
    pub model_sticky: bool,
    /// Seconds a model call retries an outage (429, 503, a refused or reset connection, a
    /// reply cut before its first byte, no live replica) while its harness waits; past it
    /// the rollout is paused in place until the call has a reply (0..=86400).
    #[serde(default = "default_retry_s")]
    pub model_retry_s: u64,
    /// Seconds after which such a call ends `upstream_unreachable` and its rollout an
    /// infrastructure failure (`model_unreachable`) (1..=86400).
    #[serde(default = "default_outage_s")]
    pub model_outage_s: u64,
    /// What a fleet pause (`POST /v1/fleet/pause`) does to model calls generating when it
    /// begins: `"finish"` them under the old version (default) or `"abort"` those whose reply
    /// has not started and ask again after, under the new one.
    #[serde(default)]
    pub fleet_calls: rollpoint_api::wire::InFlightCalls,
    /// PEM certificates trusted for an `https://` upstream besides the system's roots.
    #[serde(default)]
    pub model_ca_file: Option<PathBuf>,
    /// Environment variable holding the upstream's API key: read by the gateway process,
    /// sent in the header the API expects, never given to a sandbox.
    #[serde(default)]
    pub model_credential_env: Option<String>,
    /// A file only its owner may read (0600) holding the upstream's API key.
    #[serde(default)]
    pub model_credential_file: Option<PathBuf>,
    /// Model calls upstream at once; more wait their turn; 0: no limit
    /// (0..=[`MAX_MODEL_CALLS`]).
    #[serde(default)]
    pub model_max_calls: usize,
    /// Upstreams by model name (`[[models]]`): a call naming one goes to it, the rest to
    /// `model_upstream` or `model_script`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<rollpoint_gateway::config::ModelSpec>,
    #[serde(default)]
    pub model_api: ModelApi,
    /// Capture each call's token ids and logprobs from a token-returning upstream:
    /// `"vllm"` (docs/design/tokens.md). With `model_script` the scripted model answers
    /// in token mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_tokens: Option<rollpoint_gateway::TokenSource>,
    /// With `model_tokens`: ask for each generated token's logprob too (default true);
    /// false asks only for the ids, and trajectories then carry no logprobs.
    #[serde(default = "default_logprobs")]
    pub model_logprobs: bool,
    /// With `model_tokens = "tito"`: the model's `tokenizer.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_tokenizer: Option<PathBuf>,
    /// With `model_tokens = "tito"`: the model's chat template (a Jinja file, or a
    /// `tokenizer_config.json` holding `chat_template`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_chat_template: Option<PathBuf>,
    /// With `model_tokens = "tito"`: how the model writes tool calls (`"hermes"`).
    #[serde(default)]
    pub model_tool_parser: rollpoint_gateway::tito::chat::ToolParser,
    /// With `model_tokens`: what a token break does to the rollout's merged view,
    /// `"split"` it into segments or `"mask"` the whole rollout as not trainable.
    #[serde(default)]
    pub token_breaks: rollpoint_trajectory::BreakPolicy,
    /// What calls answered by several policy versions do to a rollout's merged view:
    /// `"keep"` them in one segment that lists its versions (default), `"split"` a segment
    /// where the version changes, or `"refuse"` the rollout as not trainable.
    #[serde(default)]
    pub version_breaks: rollpoint_trajectory::VersionPolicy,
    /// A model script to serve in process instead of an upstream.
    #[serde(default)]
    pub model_script: Option<PathBuf>,
    #[serde(default)]
    pub store: StoreKind,
    /// The static `rollpoint-supervisor` binary.
    #[serde(default)]
    pub supervisor: Option<PathBuf>,
    /// Port of the gateway on 127.0.0.1; 0 picks one. Harnesses hold the
    /// gateway's address, so a resume binds the port the run used.
    #[serde(default)]
    pub gateway_port: u16,
    /// Fork every rollout of the tasks file at its own checkpoints (docs/design/fork.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<BranchRule>,
    /// The task-image cache; unset, `owner/images/` in the run directory. A
    /// directory shared by runs unpacks each layer once for all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_cache: Option<PathBuf>,
    /// Registries (`host` or `host:port`) reached over plain HTTP; loopback
    /// registries always are, every other over TLS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_insecure_registries: Vec<String>,
    /// Extra CA certificates (PEM) trusted for registries, next to the system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_ca_file: Option<PathBuf>,
    /// A `docker login`-style auth file for registries; unset,
    /// `REGISTRY_AUTH_FILE`, then `~/.docker/config.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_auth_file: Option<PathBuf>,
    /// An object store checkpoints are published in besides the run directory, so they
    /// outlive this machine: `s3://BUCKET/PREFIX`, `gs://…`, `az://…` or
    /// `file:///SHARED/DIR` (docs/design/cluster.md). Credentials never go here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_store: Option<String>,
    /// A file of `KEY=VALUE` store settings and credentials (`AWS_ENDPOINT`,
    /// `AWS_ACCESS_KEY_ID`, …) that only its owner may read; the environment's are used too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_store_options: Option<PathBuf>,
    /// With `checkpoint_store`: a sandbox snapshot goes whole every this many checkpoints and
    /// as an incremental `btrfs send` against the one before otherwise, so a restore fetches
    /// at most this many streams (1..=1000; 1 sends each whole).
    #[serde(default = "default_full_every")]
    pub snapshot_full_every: u32,
    /// With `checkpoint_store`: the process driving the run writes a heartbeat into the store
    /// every third of this many seconds, and another process takes the run over (`rollpoint
    /// resume --from`) only once that heartbeat has stood still this long or the run was
    /// released (1..=[`MAX_STORE_LEASE_S`]).
    #[serde(default = "default_store_lease_s")]
    pub store_lease_s: u64,
    /// `[sandbox_limits]`: each limit a sandbox gets where its task names none, so a
    /// task that names none still cannot take the node (defaults: 4,096 pids and half the
    /// node's memory; ranges as `sandbox.limits`).
    #[serde(default = "default_sandbox_limits")]
    pub sandbox_limits: rollpoint_sandbox::Limits,
    /// Rollouts of each task (a task's own `samples` wins): K above 1 runs
    /// `<task>.s0` .. `<task>.s<K-1>` as one group (1..=[`MAX_SAMPLES`]).
    #[serde(default = "default_samples")]
    pub samples: u32,
    /// Times a rollout the infrastructure ended (`infra_error`) is started
    /// again in a fresh sandbox as its next attempt (0..=[`MAX_RETRY_INFRA`]).
    #[serde(default)]
    pub retry_infra: u32,
}

fn default_samples() -> u32 {
    1
}

/// Upper bound of `store_lease_s`.
pub const MAX_STORE_LEASE_S: u64 = 3600;

fn default_store_lease_s() -> u64 {
    30
}

fn default_full_every() -> u32 {
    rollpoint_owner::travel::DEFAULT_FULL_EVERY
}

/// Processes and threads a sandbox may have when neither its task nor the run says.
pub const DEFAULT_SANDBOX_PIDS: u64 = 4096;

/// 4,096 pids and half the node's memory (`MemTotal` in `/proc/meminfo`).
pub fn default_sandbox_limits() -> rollpoint_sandbox::Limits {
    let half_memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map(|kib| kib * 1024 / 2);
    rollpoint_sandbox::Limits {
        pids: Some(DEFAULT_SANDBOX_PIDS),
        memory_bytes: half_memory,
        ..rollpoint_sandbox::Limits::default()
    }
}

/// `[branch]`: when the run forks its rollouts by itself, and how many ways.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BranchRule {
    /// `"every checkpoint"`: each rollout of the tasks file is forked at the first
    /// checkpoint that saves it; `"checkpoint N"`: at the N-th checkpoint that saves it
    /// (1..=[`MAX_BRANCH_AT`]). A rollout is forked by the rule once; branches never are.
    pub at: String,
    /// Branches per rollout (1..=256).
    pub n: u32,
}

/// Largest N of `branch.at = "checkpoint N"`.
pub const MAX_BRANCH_AT: u32 = 1_000_000;

impl BranchRule {
    /// The number of checkpoints that must have saved a rollout before the rule forks it.
    pub fn nth(&self) -> Result<u32, String> {
        if self.at == "every checkpoint" {
            return Ok(1);
        }
        self.at
            .strip_prefix("checkpoint ")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| (1..=MAX_BRANCH_AT).contains(n))
            .ok_or_else(|| {
                format!(
                    "{:?} is neither \"every checkpoint\" nor \"checkpoint N\" with N in 1..={MAX_BRANCH_AT}",
                    self.at
                )
            })
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            v: CONFIG_VERSION,
            concurrency: default_concurrency(),
            checkpoint_every_s: default_every(),
            keep: default_keep(),
            model_upstream: None,
            model_sticky: true,
            model_retry_s: default_retry_s(),
            model_outage_s: default_outage_s(),
            fleet_calls: rollpoint_api::wire::InFlightCalls::Finish,
            model_ca_file: None,
            model_credential_env: None,
            model_credential_file: None,
            model_max_calls: 0,
            models: Vec::new(),
            model_api: ModelApi::All,
            model_tokens: None,
            model_tokenizer: None,
            model_chat_template: None,
            model_tool_parser: rollpoint_gateway::tito::chat::ToolParser::Hermes,
            model_logprobs: true,
            token_breaks: rollpoint_trajectory::BreakPolicy::Split,
            version_breaks: rollpoint_trajectory::VersionPolicy::Keep,
            model_script: None,
            store: StoreKind::Auto,
            supervisor: None,
            gateway_port: 0,
            branch: None,
            image_cache: None,
            image_insecure_registries: Vec::new(),
            image_ca_file: None,
            image_auth_file: None,
            checkpoint_store: None,
            checkpoint_store_options: None,
            snapshot_full_every: default_full_every(),
            store_lease_s: default_store_lease_s(),
            sandbox_limits: default_sandbox_limits(),
            samples: default_samples(),
            retry_infra: 0,
        }
    }
}

impl RunConfig {
    /// Reads a config file: TOML when it ends in `.toml`, JSON otherwise.
    pub fn load(path: &Path) -> Result<Self, RunError> {
        let bytes = std::fs::read(path).map_err(|e| RunError::io(path, e))?;
        let mut config = Self::parse(&bytes, path)?;
        // Paths in a config file are relative to the file.
        let base = path.parent().unwrap_or(Path::new("."));
        let model_paths = config
            .models
            .iter_mut()
            .flat_map(|m| [&mut m.ca_file, &mut m.credential_file]);
        for p in [
            &mut config.model_script,
            &mut config.supervisor,
            &mut config.model_ca_file,
            &mut config.model_credential_file,
            &mut config.image_cache,
            &mut config.image_ca_file,
            &mut config.image_auth_file,
            &mut config.checkpoint_store_options,
            &mut config.model_tokenizer,
            &mut config.model_chat_template,
        ]
        .into_iter()
        .chain(model_paths)
        .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(config)
    }

    /// Parses a config file's bytes; `path` names it in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Self, RunError> {
        let bad = |field: &str, message: String| RunError::Config {
            path: path.to_owned(),
            field: field.to_owned(),
            message,
        };
        let json = if path.extension().is_some_and(|e| e == "toml") {
            let text = std::str::from_utf8(bytes).map_err(|e| bad("", e.to_string()))?;
            // The whole error: it names the line, the column and the key.
            let value: serde_json::Value =
                toml::from_str(text).map_err(|e| bad("", e.to_string().trim_end().to_owned()))?;
            serde_json::to_vec(&value).map_err(|e| bad("", e.to_string()))?
        } else {
            bytes.to_vec()
        };
        let config: Self =
            rollpoint_proto::decode("run config", CONFIG_VERSION, &json).map_err(|e| match e {
                // The field is named once, by the config error itself.
                rollpoint_proto::FormatError::Field { path, source, .. } => {
                    bad(&path, source.to_string())
                }
                rollpoint_proto::FormatError::MissingVersion { .. }
                | rollpoint_proto::FormatError::UnknownVersion { .. } => bad("v", e.to_string()),
                rollpoint_proto::FormatError::Json { .. } => bad("", e.to_string()),
            })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Checks values serde cannot, naming the field.
    pub fn validate(&self, path: &Path) -> Result<(), RunError> {
        let bad = |field: &str, message: &str| {
            Err(RunError::Config {
                path: path.to_owned(),
                field: field.to_owned(),
                message: message.to_owned(),
            })
        };
        if self.v != CONFIG_VERSION {
            return bad("v", "unknown version");
        }
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return bad(
                "concurrency",
                &format!("{} is outside 1..={MAX_CONCURRENCY}", self.concurrency),
            );
        }
        if self.checkpoint_every_s > MAX_CHECKPOINT_EVERY_S {
            return bad(
                "checkpoint_every_s",
                &format!(
                    "{} is outside 0..={MAX_CHECKPOINT_EVERY_S} (0 turns the timer off)",
                    self.checkpoint_every_s
                ),
            );
        }
        if !(1..=MAX_KEEP).contains(&self.keep) {
            return bad("keep", &format!("{} is outside 1..={MAX_KEEP}", self.keep));
        }
        if !(1..=MAX_SAMPLES).contains(&self.samples) {
            return bad(
                "samples",
                &format!("{} is outside 1..={MAX_SAMPLES}", self.samples),
            );
        }
        if self.retry_infra > MAX_RETRY_INFRA {
            return bad(
                "retry_infra",
                &format!("{} is outside 0..={MAX_RETRY_INFRA}", self.retry_infra),
            );
        }
        if let Some(rule) = &self.branch {
            if let Err(message) = rule.nth() {
                return bad("branch.at", &message);
            }
            let max = rollpoint_api::wire::MAX_FORK_N;
            if !(1..=max).contains(&rule.n) {
                return bad("branch.n", &format!("{} is outside 1..={max}", rule.n));
            }
        }
        if let Err(e) = self.sandbox_limits.check() {
            return bad(&format!("sandbox_limits.{}", e.field), &e.message);
        }
        let max = rollpoint_owner::travel::MAX_FULL_EVERY;
        if !(1..=max).contains(&self.snapshot_full_every) {
            return bad(
                "snapshot_full_every",
                &format!("{} is outside 1..={max}", self.snapshot_full_every),
            );
        }
        if !(1..=MAX_STORE_LEASE_S).contains(&self.store_lease_s) {
            return bad(
                "store_lease_s",
                &format!("{} is outside 1..={MAX_STORE_LEASE_S}", self.store_lease_s),
            );
        }
        if let Some(url) = &self.checkpoint_store {
            if let Err(e) = rollpoint_remote::StoreUrl::parse(url) {
                return bad("checkpoint_store", &e.to_string());
            }
        } else if self.checkpoint_store_options.is_some() {
            return bad("checkpoint_store_options", "given without checkpoint_store");
        }
        if self.model_upstream.is_some() && self.model_script.is_some() {
            return bad(
                "model_script",
                "give a model upstream or a model script, not both",
            );
        }
        let max_outage = rollpoint_gateway::config::MAX_OUTAGE_S;
        if self.model_retry_s > max_outage {
            return bad(
                "model_retry_s",
                &format!("{} is outside 0..={max_outage}", self.model_retry_s),
            );
        }
        if !(1..=max_outage).contains(&self.model_outage_s) {
            return bad(
                "model_outage_s",
                &format!("{} is outside 1..={max_outage}", self.model_outage_s),
            );
        }
        rollpoint_gateway::config::check_upstream(
            "model_",
            self.model_upstream.as_ref().map(|u| u.0.as_slice()),
            self.model_credential_env.as_deref(),
            self.model_credential_file.is_some(),
            self.model_max_calls,
        )
        .map_err(|(field, message)| RunError::Config {
            path: path.to_owned(),
            field,
            message,
        })?;
        if !self.models.is_empty() && self.model_upstream.is_none() && self.model_script.is_none() {
            return bad(
                "models",
                "give model_upstream or model_script too: it takes the calls no entry names",
            );
        }
        let tito = self.model_tokens == Some(rollpoint_gateway::TokenSource::Tito);
        for (field, given) in [
            ("model_tokenizer", self.model_tokenizer.is_some()),
            ("model_chat_template", self.model_chat_template.is_some()),
        ] {
            if tito && !given {
                return bad(field, "model_tokens = \"tito\" needs it");
            }
            if !tito && given {
                return bad(field, "given without model_tokens = \"tito\"");
            }
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, m) in self.models.iter().enumerate() {
            if let Err((field, message)) = m.check() {
                return bad(&format!("models[{i}].{field}"), &message);
            }
            if !names.insert(m.name.as_str()) {
                return bad(
                    &format!("models[{i}].name"),
                    &format!("{} is named twice", m.name),
                );
            }
        }
        Ok(())
    }

    /// The checkpoint store the config names, opened (nothing is sent to it yet).
    pub fn open_checkpoint_store(&self) -> Result<Option<rollpoint_remote::RemoteStore>, RunError> {
        rollpoint_remote::RemoteStore::named(
            self.checkpoint_store.as_deref(),
            self.checkpoint_store_options.as_deref(),
        )
        .map_err(|e| RunError::setup("checkpoint store", e))
    }

    /// Where model calls go.
    pub fn model(&self) -> ModelSource {
        match (&self.model_upstream, &self.model_script) {
            (Some(urls), _) => ModelSource::Upstream(urls.0.clone()),
            (None, Some(script)) => ModelSource::Script(script.clone()),
            (None, None) => ModelSource::None,
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_read_the_same_and_unknown_fields_are_named() {
        let t = RunConfig::parse(
            b"v = 1\nconcurrency = 4\ncheckpoint_every_s = 2\nstore = \"copy\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let j = RunConfig::parse(
            br#"{"v":1,"concurrency":4,"checkpoint_every_s":2,"store":"copy"}"#,
            Path::new("c.json"),
        )
        .unwrap();
        assert_eq!(t, j);
        assert_eq!(t.keep, 2);
        let e = RunConfig::parse(b"v = 1\nconcurency = 4\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml") && e.contains("concurency"), "{e}");
        let e = RunConfig::parse(br#"{"v":2}"#, Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("field `v`") && e.contains("unknown version 2"),
            "{e}"
        );
        let e = RunConfig::parse(br#"{"v":1,"concurrency":0}"#, Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("field `concurrency`"), "{e}");
        let e = RunConfig::parse(br#"{"v":1,"store":"zfs"}"#, Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("field `store`"), "{e}");
    }

    #[test]
    fn numbers_out_of_range_are_refused_by_name_with_the_range() {
        for (json, field, range) in [
            (
                r#"{"v":1,"concurrency":18446744073709551615}"#,
                "concurrency",
                "1..=65536",
            ),
            (
                r#"{"v":1,"checkpoint_every_s":18446744073709551615}"#,
                "checkpoint_every_s",
                "0..=604800",
            ),
            (r#"{"v":1,"keep":0}"#, "keep", "1..=1000"),
            (r#"{"v":1,"keep":100000}"#, "keep", "1..=1000"),
            (
                r#"{"v":1,"sandbox_limits":{"pids":0}}"#,
                "sandbox_limits.pids",
                "1..=4194304",
            ),
            (
                r#"{"v":1,"sandbox_limits":{"swap_bytes":1048576}}"#,
                "sandbox_limits.swap_bytes",
                "needs memory_bytes",
            ),
        ] {
            let e = RunConfig::parse(json.as_bytes(), Path::new("c.json"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("field `{field}`")) && e.contains(range),
                "{e}"
            );
        }
    }

    #[test]
    fn a_toml_syntax_error_names_the_line_and_column() {
        let e = RunConfig::parse(
            b"v = 1
concurrency = = 4
",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("c.toml") && e.contains("line 2"), "{e}");
    }
}
