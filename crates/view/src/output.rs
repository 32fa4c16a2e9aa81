//! A launch's output (its harness's stdout and stderr, as the launch supervisor wrote them):
//! in the live sandbox's control directory while it lives, then where the backend keeps it
//! when the sandbox is destroyed. Opened without following links: the sandbox's code wrote
//! what is in these files, and must not pick which file is read.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rollpoint_proto::anchor::{LAUNCH_OUTPUT, LAUNCHES_DIR};
use serde::Serialize;

use crate::LaunchLine;

/// Bytes of a launch's output the rollout view shows (its tail).
pub const TAIL_BYTES: u64 = 32 * 1024;

/// The tail of one launch's output.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct LaunchOutput {
    pub launch: String,
    pub text: String,
    /// Earlier bytes were left out.
    pub truncated: bool,
    /// The whole output's size.
    pub bytes: u64,
}

/// Where `launch`'s output is now, under the local sandboxes' directory `owner`: the live
/// sandbox's file, else the kept one; `None` when neither exists (the launch has not written
/// yet, or ran before outputs were kept).
#[must_use]
pub fn output_files(owner: &Path, launch: &LaunchLine) -> Option<PathBuf> {
    let plain = |s: &str| rollpoint_proto::anchor::check_launch_id(s).is_ok();
    if !plain(&launch.sandbox) || !plain(&launch.id) {
        return None;
    }
    let live = owner
        .join("sandboxes")
        .join(&launch.sandbox)
        .join("control")
        .join(LAUNCHES_DIR)
        .join(&launch.id)
        .join(LAUNCH_OUTPUT);
    let kept = owner
        .join(rollpoint_sandbox::local::OUTPUT_DIR)
        .join(&launch.sandbox)
        .join(format!("{}.log", launch.id));
    [live, kept]
        .into_iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
}

/// Opens an output file for reading, refusing a link.
pub fn open_output(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// The last [`TAIL_BYTES`] of each launch's output that can be found under `owner`.
#[must_use]
pub fn launch_outputs(owner: &Path, launches: &[LaunchLine]) -> Vec<LaunchOutput> {
    launches
        .iter()
        .filter_map(|l| {
            let path = output_files(owner, l)?;
            let mut f = open_output(&path).ok()?;
            let bytes = f.metadata().ok()?.len();
            let from = bytes.saturating_sub(TAIL_BYTES);
            f.seek(SeekFrom::Start(from)).ok()?;
            let mut buf = Vec::new();
            f.take(TAIL_BYTES).read_to_end(&mut buf).ok()?;
            Some(LaunchOutput {
                launch: l.id.clone(),
                text: String::from_utf8_lossy(&buf).into_owned(),
                truncated: from > 0,
                bytes,
            })
        })
        .collect()
}
