//! `RUN_DIR/results.jsonl`: one `RolloutResult` (versioned) per finished
//! rollout, appended and fsync'd as each finishes, so a crash loses no
//! finished rollout and a resume never runs one again. A line cut short by a
//! crash is dropped when the log is reopened.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rollpoint_driver::{RESULT_VERSION, RolloutResult};

use crate::errors::RunError;

/// The file name under the run directory.
pub const RESULTS_FILE: &str = "results.jsonl";

/// The results file, open for appending.
#[derive(Debug)]
pub struct ResultsLog {
    path: PathBuf,
    file: File,
}

impl ResultsLog {
    /// Opens (or creates, mode 0600) the log of `run_dir`, dropping a torn
    /// last line.
    pub fn open(run_dir: &Path) -> Result<Self, RunError> {
        let path = run_dir.join(RESULTS_FILE);
        let io = |e| RunError::io(&path, e);
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        let bytes = std::fs::read(&path).map_err(io)?;
        let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        if whole < bytes.len() {
            file.set_len(whole as u64).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        Ok(Self { path, file })
    }

    /// Appends one row and makes it durable.
    pub fn append(&mut self, result: &RolloutResult) -> Result<(), RunError> {
        let mut line = serde_json::to_vec(result).map_err(|e| RunError::Results {
            path: self.path.clone(),
            line: 0,
            message: format!("rollout {}: {e}", result.rollout),
        })?;
        line.push(b'\n');
        let io = |e| RunError::io(&self.path, e);
        self.file.write_all(&line).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

/// Every whole row of `run_dir`'s results (none if the file is missing).
pub fn read_results(run_dir: &Path) -> Result<Vec<RolloutResult>, RunError> {
    let path = run_dir.join(RESULTS_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RunError::io(&path, e)),
    };
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    bytes[..whole]
        .split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, l)| {
            rollpoint_proto::decode("rollout result", RESULT_VERSION, l).map_err(|e| {
                RunError::Results {
                    path: path.clone(),
                    line: i + 1,
                    message: e.to_string(),
                }
            })
        })
        .collect()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use rollpoint_driver::{Status, Timings};

    fn result(rollout: &str) -> RolloutResult {
        RolloutResult {
            v: RESULT_VERSION,
            task_id: rollout.to_owned(),
            rollout: rollout.to_owned(),
            attempt: 0,
            status: Status::Unverified,
            verdict: None,
            reward: None,
            error: None,
            restart: false,
            launches: Vec::new(),
            usage: None,
            response: None,
            transcript: Vec::new(),
            timings: Timings::default(),
        }
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_appending_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = ResultsLog::open(dir.path()).unwrap();
        log.append(&result("a")).unwrap();
        drop(log);
        let path = dir.path().join(RESULTS_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"v":1,"task_id":"b""#).unwrap();
        assert_eq!(read_results(dir.path()).unwrap().len(), 1);
        let mut log = ResultsLog::open(dir.path()).unwrap();
        log.append(&result("c")).unwrap();
        let rows: Vec<String> = read_results(dir.path())
            .unwrap()
            .into_iter()
            .map(|r| r.rollout)
            .collect();
        assert_eq!(rows, ["a", "c"]);
        std::fs::write(&path, "{\"v\":3}\n").unwrap();
        let e = read_results(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("line 1") && e.contains("unknown version 3"),
            "{e}"
        );
    }
}
