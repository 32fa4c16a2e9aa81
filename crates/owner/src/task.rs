//! The task side of the owner: what a task asks of its sandbox (files and
//! setup at seed, how it is graded, whether it may be captured). Pure data
//! and validation; nothing here touches a sandbox.

use std::collections::BTreeMap;

use rollpoint_proto::key::AttemptKey;
use rollpoint_sandbox::SandboxSpec;
use serde::{Deserialize, Serialize};

use crate::errors::OwnerError;

/// Longest task id accepted; session and sandbox ids are built from it.
pub use rollpoint_proto::limits::MAX_TASK_ID;
use rollpoint_proto::limits::MAX_TIMEOUT_S;

/// Default time a setup command may run.
const DEFAULT_SETUP_TIMEOUT_S: u64 = 600;
/// Default time the verify command may run.
const DEFAULT_VERIFY_TIMEOUT_S: u64 = 300;

/// One task as the owner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OwnerTask {
    pub id: String,
    #[serde(default)]
    pub sandbox: SandboxSpec,
    /// In-sandbox path -> content, uploaded at seed. Relative paths are
    /// relative to the workdir.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// A directory of files put in at seed (after `files`, before `setup`),
    /// any content, with modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<Upload>,
    /// Commands run at seed in the workdir, in order, each an argv.
    #[serde(default)]
    pub setup: Vec<Vec<String>>,
    /// Time each setup command may run.
    #[serde(default = "default_setup_timeout")]
    pub setup_timeout_s: u64,
    pub verify: VerifySpec,
    /// Whether the session may be snapshotted at checkpoints.
    #[serde(default = "default_true")]
    pub capture: bool,
}

fn default_true() -> bool {
    true
}

fn default_setup_timeout() -> u64 {
    DEFAULT_SETUP_TIMEOUT_S
}

fn default_verify_timeout() -> u64 {
    DEFAULT_VERIFY_TIMEOUT_S
}

/// How a task is graded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifySpec {
    /// Run in the workdir.
    pub command: Vec<String>,
    #[serde(default = "default_verify_timeout")]
    pub timeout_s: u64,
    #[serde(default)]
    pub reward: RewardMode,
    /// Files put in just before the command runs, so the code being graded
    /// never sees them and a checkpoint taken before grading holds none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<Upload>,
}

/// A directory of files written afresh: whatever is at `dir` is removed
/// first (before grading, the graded code may have planted files there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Upload {
    /// Absolute in-sandbox directory (`/tests`).
    pub dir: String,
    /// Path relative to `dir` -> file.
    pub files: BTreeMap<String, UploadFile>,
}

/// One file of an [`Upload`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadFile {
    /// The content, base64 (standard alphabet, padded).
    pub base64: String,
    /// Permission bits (`0o755` for a script).
    #[serde(default = "default_file_mode")]
    pub mode: u32,
}

fn default_file_mode() -> u32 {
    0o644
}

/// Most bytes an [`Upload`] may carry (decoded).
pub const MAX_UPLOAD_BYTES: usize = 64 << 20;

impl Upload {
    /// Checks the directory and every file; the error names the field.
    pub fn check(&self, field: &str) -> Result<(), OwnerError> {
        let dir = self.dir.trim_end_matches('/');
        if !dir.starts_with('/') || dir.is_empty() {
            return Err(OwnerError::bad(
                format!("{field}.dir"),
                format!("{:?} is not an absolute directory below /", self.dir),
            ));
        }
        check_sandbox_path(&format!("{field}.dir"), dir)?;
        self.decoded(field).map(drop)
    }

    /// The files decoded, each with its absolute path; the error names the field.
    pub fn decoded(&self, field: &str) -> Result<Vec<(String, Vec<u8>, u32)>, OwnerError> {
        use base64::Engine as _;
        let mut total = 0usize;
        let mut out = Vec::with_capacity(self.files.len());
        for (rel, file) in &self.files {
            let field = format!("{field}.files[{rel:?}]");
            if rel.starts_with('/') {
                return Err(OwnerError::bad(field, "must be relative to `dir`"));
            }
            check_sandbox_path(&field, rel)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(&file.base64)
                .map_err(|e| OwnerError::bad(format!("{field}.base64"), e.to_string()))?;
            if file.mode > 0o7777 {
                return Err(OwnerError::bad(
                    format!("{field}.mode"),
                    format!("{:o} is outside 0..=0o7777", file.mode),
                ));
            }
            total = total.saturating_add(bytes.len());
            if total > MAX_UPLOAD_BYTES {
                return Err(OwnerError::bad(
                    format!("{field}.files"),
                    format!("more than {MAX_UPLOAD_BYTES} bytes in all"),
                ));
            }
            out.push((
                format!("{}/{rel}", self.dir.trim_end_matches('/')),
                bytes,
                file.mode,
            ));
        }
        Ok(out)
    }
}

/// Where the reward comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RewardMode {
    /// Exit code 0 is 1.0, anything else 0.0.
    #[default]
    ExitCode,
    /// The last stdout line that is a JSON object with a numeric `reward`.
    Json,
    /// The files a Harbor verifier writes: `/logs/verifier/reward.json` (an
    /// object of numbers; the reward is its `reward` key, or its one value),
    /// else `/logs/verifier/reward.txt` (one number). The directory is
    /// emptied before the command runs.
    Files,
}

/// Where [`RewardMode::Files`] reads the reward.
pub const VERIFIER_DIR: &str = "/logs/verifier";

/// Longest `sandbox.user`.
pub const MAX_USER: usize = 256;

impl OwnerTask {
    /// The attempt the task's session serves: its id is that attempt's key
    /// (`<rollout>` or `<rollout>-a<N>`).
    pub fn attempt(&self) -> Result<AttemptKey, OwnerError> {
        AttemptKey::parse(&self.id).map_err(|e| OwnerError::bad("task.id", e.to_string()))
    }

    /// Checks what serde cannot: ids, paths and argvs, naming the field.
    pub fn validate(&self) -> Result<(), OwnerError> {
        check_id("task.id", &self.id, MAX_TASK_ID)?;
        self.attempt()?;
        // Empty: the image's WorkingDir, else /workspace.
        if !self.sandbox.workdir.is_empty() && !self.sandbox.workdir.starts_with('/') {
            return Err(OwnerError::bad(
                "task.sandbox.workdir",
                format!("{:?} is not an absolute path", self.sandbox.workdir),
            ));
        }
        // Resolved against the sandbox's /etc/passwd at create; here only
        // its shape.
        let user = &self.sandbox.user;
        let shaped = user.len() <= MAX_USER
            && user.split(':').count() <= 2
            && !user.split(':').any(str::is_empty)
            && user
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
        if !user.is_empty() && !shaped {
            return Err(OwnerError::bad(
                "task.sandbox.user",
                format!(
                    "{user:?}: expected NAME, UID, NAME:GROUP or UID:GID (up to {MAX_USER} \
                     characters of A-Z a-z 0-9 _ - .)"
                ),
            ));
        }
        for path in self.files.keys() {
            check_sandbox_path(&format!("task.files[{path:?}]"), path)?;
        }
        for (i, argv) in self.setup.iter().enumerate() {
            check_argv(&format!("task.setup[{i}]"), argv)?;
        }
        check_argv("task.verify.command", &self.verify.command)?;
        for (field, upload) in [
            ("task.upload", &self.upload),
            ("task.verify.upload", &self.verify.upload),
        ] {
            if let Some(upload) = upload {
                upload.check(field)?;
            }
        }
        for (field, value) in [
            ("task.verify.timeout_s", self.verify.timeout_s),
            ("task.setup_timeout_s", self.setup_timeout_s),
        ] {
            if !(1..=MAX_TIMEOUT_S).contains(&value) {
                return Err(OwnerError::bad(
                    field,
                    format!("{value} is outside 1..={MAX_TIMEOUT_S}; must be above 0"),
                ));
            }
        }
        Ok(())
    }
}

/// `path` under `workdir` unless it is absolute.
pub fn resolve(workdir: &str, path: &str) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{}/{path}", workdir.trim_end_matches('/'))
    }
}

/// Ids become parts of session, sandbox and snapshot names (and so of host
/// directory names): a short, plain alphabet keeps them safe everywhere.
pub fn check_id(field: &str, id: &str, max: usize) -> Result<(), OwnerError> {
    if id.is_empty() {
        return Err(OwnerError::bad(field, "is empty"));
    }
    if id.len() > max {
        return Err(OwnerError::bad(
            field,
            format!("{} bytes is longer than {max}", id.len()),
        ));
    }
    if let Some(c) = rollpoint_proto::limits::outside_id_alphabet(id) {
        return Err(OwnerError::bad(
            field,
            format!("{id:?}: character {c:?} is not allowed (letters, digits, `-`, `_`, `.`, `~`)"),
        ));
    }
    // Ids become file names and command-line arguments.
    if id.starts_with(['.', '-']) {
        return Err(OwnerError::bad(
            field,
            format!("{id:?} starts with `.` or `-`"),
        ));
    }
    Ok(())
}

/// An in-sandbox file path: not empty, no NUL, no `..` component. The
/// backend confines paths beneath the root as well; this names the field.
pub fn check_sandbox_path(field: &str, path: &str) -> Result<(), OwnerError> {
    if path.is_empty() || path.trim_end_matches('/').is_empty() {
        return Err(OwnerError::bad(field, "is not a file path"));
    }
    if path.contains('\0') {
        return Err(OwnerError::bad(field, "contains a NUL byte"));
    }
    if path.split('/').any(|c| c == "..") {
        return Err(OwnerError::bad(
            field,
            format!("{path:?}: `..` is not allowed"),
        ));
    }
    Ok(())
}

fn check_argv(field: &str, argv: &[String]) -> Result<(), OwnerError> {
    match argv.first() {
        None => Err(OwnerError::bad(field, "argv is empty")),
        Some(a) if a.is_empty() => Err(OwnerError::bad(field, "argv[0] is empty")),
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn task(json: &str) -> OwnerTask {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_fill_in() {
        let t = task(r#"{"id":"t1","verify":{"command":["true"]}}"#);
        assert_eq!(t.verify.timeout_s, 300);
        assert_eq!(t.verify.reward, RewardMode::ExitCode);
        assert!(t.capture);
        assert_eq!(t.sandbox, SandboxSpec::default());
        t.validate().unwrap();
        assert_eq!(resolve("/workspace", "a/b"), "/workspace/a/b");
        assert_eq!(resolve("/workspace", "/etc/x"), "/etc/x");
    }

    #[test]
    fn validation_names_the_field() {
        let cases = [
            (r#"{"id":"a b","verify":{"command":["true"]}}"#, "task.id"),
            (r#"{"id":"","verify":{"command":["true"]}}"#, "task.id"),
            // Not an attempt key: the rollout part names an attempt itself.
            (
                r#"{"id":"x-a1-a2","verify":{"command":["true"]}}"#,
                "task.id",
            ),
            (r#"{"id":"~x","verify":{"command":["true"]}}"#, "task.id"),
            (
                r#"{"id":"a","verify":{"command":[]}}"#,
                "task.verify.command",
            ),
            (
                r#"{"id":"a","setup":[["x"],[]],"verify":{"command":["t"]}}"#,
                "task.setup[1]",
            ),
            (
                r#"{"id":"a","files":{"../x":""},"verify":{"command":["t"]}}"#,
                "task.files[\"../x\"]",
            ),
            (
                r#"{"id":"a","sandbox":{"workdir":"rel"},"verify":{"command":["t"]}}"#,
                "task.sandbox.workdir",
            ),
            (
                r#"{"id":"a","sandbox":{"user":"a:b:c"},"verify":{"command":["t"]}}"#,
                "task.sandbox.user",
            ),
            (
                r#"{"id":"a","sandbox":{"user":"app:"},"verify":{"command":["t"]}}"#,
                "task.sandbox.user",
            ),
            (
                r#"{"id":"a","sandbox":{"user":"a/b"},"verify":{"command":["t"]}}"#,
                "task.sandbox.user",
            ),
        ];
        for (json, field) in cases {
            match task(json).validate().unwrap_err() {
                OwnerError::BadRequest { field: f, .. } => assert_eq!(f, field, "{json}"),
                other => panic!("{json}: {other}"),
            }
        }
    }
}
