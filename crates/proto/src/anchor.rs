//! The sandbox anchor's socket protocol. The anchor is the supervisor running
//! as the sandbox's first process; the owner asks it to run short commands
//! (`exec`), to start harness launches (`launch`), each launch then served
//! by its own supervisor on the launch's control socket ([`crate::supervisor`]),
//! and to start a command on a terminal (`shell`).
//!
//! One JSON request line, one JSON reply line, per connection; a `shell` has
//! two reply lines (the first carrying the terminal's descriptor, the second
//! the command's end).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::version::FormatError;

/// Version of [`AnchorRequest`] and [`AnchorReply`].
pub const ANCHOR_VERSION: u32 = 1;

/// Where the owner's control directory appears inside every sandbox.
pub const SANDBOX_CONTROL_DIR: &str = "/run/rollpoint";

/// The anchor's socket, in the control directory.
pub const ANCHOR_SOCKET: &str = "anchor.sock";

/// Launch session directories, under the control directory.
pub const LAUNCHES_DIR: &str = "launches";

/// The launch supervisor's stdout and stderr, in its session directory.
pub const LAUNCH_OUTPUT: &str = "output.log";

/// Longest launch id the anchor accepts.
pub const LAUNCH_ID_MAX: usize = 128;

/// Checks a launch id: 1 to [`LAUNCH_ID_MAX`] of `A-Z a-z 0-9 . _ - ~`, and
/// not `.` or `..`, so it is always one plain path component.
pub fn check_launch_id(id: &str) -> Result<(), String> {
    let charset = id.bytes().all(crate::limits::is_id_byte);
    if id.is_empty() || id.len() > LAUNCH_ID_MAX || !charset || id == "." || id == ".." {
        return Err(format!(
            "launch_id {id:?}: must be 1 to {LAUNCH_ID_MAX} characters of A-Z a-z 0-9 . _ - \
             (and not . or ..)"
        ));
    }
    Ok(())
}

/// What the owner asks the anchor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnchorVerb {
    /// Liveness and the anchor's pid.
    Status,
    /// Run a command to completion and return its output (`exec` set).
    Exec,
    /// Start a harness launch under its own supervisor and return at once
    /// (`launch` set).
    Launch,
    /// Start a command (`exec` set; its output limit unused) on a new
    /// pseudo-terminal of `rows` x `cols` and hand back the terminal's leader
    /// end with the first reply line (`launched`: its pid); the second line,
    /// when it ends, has its exit (`exec`, no output).
    Shell,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnchorRequest {
    pub v: u32,
    pub verb: AnchorVerb,
    #[serde(default)]
    pub exec: Option<ExecRequest>,
    #[serde(default)]
    pub launch: Option<LaunchRequest>,
    /// The terminal's size for `shell`: rows and columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<(u16, u16)>,
}

impl AnchorRequest {
    pub fn status() -> Self {
        Self {
            v: ANCHOR_VERSION,
            verb: AnchorVerb::Status,
            exec: None,
            launch: None,
            size: None,
        }
    }

    /// A command on a terminal of `size` (rows, columns).
    pub fn shell(exec: ExecRequest, size: (u16, u16)) -> Self {
        Self {
            verb: AnchorVerb::Shell,
            exec: Some(exec),
            size: Some(size),
            ..Self::status()
        }
    }

    pub fn exec(exec: ExecRequest) -> Self {
        Self {
            verb: AnchorVerb::Exec,
            exec: Some(exec),
            ..Self::status()
        }
    }

    pub fn launch(launch: LaunchRequest) -> Self {
        Self {
            verb: AnchorVerb::Launch,
            launch: Some(launch),
            ..Self::status()
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("anchor request", ANCHOR_VERSION, bytes)
    }
}

/// A command run inside the sandbox. `env` is the whole environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// Killed (its whole process group) after this long.
    pub timeout_ms: u64,
    /// Bytes kept of stdout and of stderr each; the rest is read and dropped.
    pub output_limit: u64,
    /// Bytes written to the command's stdin, which is then closed.
    #[serde(default)]
    pub stdin: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecOutput {
    /// The exit code, or `None` when a signal ended it.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Lossy UTF-8 of the first `output_limit` bytes.
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
}

/// A harness launch. Its session directory is
/// `<control dir>/launches/<launch_id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LaunchRequest {
    pub launch_id: String,
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// Supervisor freeze strategy (`auto`, `cgroup-v2`, `cgroup-v1`, `sigstop`).
    #[serde(default)]
    pub freeze: Option<String>,
    /// Extra `rollpoint-supervisor run` options (budgets).
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnchorReply {
    pub v: u32,
    /// The anchor's pid inside the sandbox (1).
    pub pid: u32,
    pub exec: Option<ExecOutput>,
    /// For launch: the in-sandbox pid of the launch's supervisor.
    pub launched: Option<u32>,
    /// Set when the request could not be served.
    pub error: Option<String>,
    /// With `error`: the request was refused as it stands (a bad launch id,
    /// option or working directory, a launch id in use), which its sender can
    /// fix; without, the anchor failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
}

impl AnchorReply {
    /// A reply carrying only an error.
    pub fn error(pid: u32, message: impl Into<String>) -> Self {
        Self {
            v: ANCHOR_VERSION,
            pid,
            exec: None,
            launched: None,
            error: Some(message.into()),
            refused: false,
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("anchor reply", ANCHOR_VERSION, bytes)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_name_bad_fields() {
        let req = AnchorRequest::exec(ExecRequest {
            argv: vec!["true".into()],
            env: BTreeMap::new(),
            cwd: "/".into(),
            timeout_ms: 1000,
            output_limit: 10,
            stdin: None,
        });
        let text = serde_json::to_vec(&req).unwrap();
        assert_eq!(AnchorRequest::decode(&text).unwrap(), req);

        let bad = br#"{"verb":"exec","v":1,"exec":{"argv":["x"],"cwd":"/","timeout_ms":"soon","output_limit":1}}"#;
        let err = AnchorRequest::decode(bad).unwrap_err().to_string();
        assert!(err.contains("timeout_ms"), "{err}");

        let newer = br#"{"verb":"status","v":2}"#;
        let err = AnchorRequest::decode(newer).unwrap_err().to_string();
        assert!(err.contains("version 2"), "{err}");
    }

    #[test]
    fn launch_ids_are_one_plain_path_component() {
        for good in ["a", "run-1.2_x", &"x".repeat(LAUNCH_ID_MAX)] {
            assert!(check_launch_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "é",
            &"x".repeat(LAUNCH_ID_MAX + 1),
        ] {
            let err = check_launch_id(bad).expect_err(bad);
            assert!(err.contains("launch_id"), "{err}");
        }
    }
}
