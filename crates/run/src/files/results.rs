//! `RUN_DIR/results.jsonl`: one `RolloutResult` (versioned) per finished
//! rollout, appended and fsync'd as each finishes, so a crash loses no
//! finished rollout and a resume never runs one again.
//!
//! A row is committed once it is whole, newline or not. Reading:
//!
//! - Every line before the last newline must be rows; one that is not is an
//!   error naming the file and the line (damage inside the file is never
//!   dropped).
//! - A row is a complete result object. Rows are self-delimiting, so a byte
//!   right after a row that is not its newline is taken for its damaged
//!   newline: the row is kept (and so is a row after it on the same line).
//! - The tail (the bytes after the last newline) is kept as far as it is
//!   rows; only what cannot be a complete row is torn. [`ResultsLog::open`]
//!   copies a torn tail to `results.jsonl.torn-<offset>` (0600, fsynced)
//!   before cutting it off, says so on stderr (file, byte offset, length),
//!   and ends a kept tail with a newline by appending one, never by
//!   rewriting a byte.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rollpoint_driver::RolloutResult;

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
    /// Opens (or creates, mode 0600) the log of `run_dir`: a torn tail is
    /// moved aside and a kept tail gets its newline, each said on stderr.
    /// Damage before the last newline is an error and changes nothing.
    pub fn open(run_dir: &Path) -> Result<Self, RunError> {
        Self::open_reporting(run_dir, &mut |line| tracing::warn!("{line}"))
    }

    /// [`ResultsLog::open`], handing each line it would print to `report`.
    pub fn open_reporting(run_dir: &Path, report: &mut dyn FnMut(&str)) -> Result<Self, RunError> {
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
        let scan = scan(&path, &bytes)?;
        let tail_start = bytes.len() - scan.tail.len;
        let kept_end = scan.tail.torn.as_ref().map_or(bytes.len(), |t| t.offset);
        // The byte standing for the kept tail's newline, if it is damaged.
        let last = scan
            .strays
            .last()
            .filter(|s| s.offset + 1 == kept_end && s.offset >= tail_start);
        // Report a damaged newline that joins two rows; one at the end of
        // its line was reported when its newline was appended.
        let joins = |s: &Stray| bytes.get(s.offset + 1).is_some_and(|b| *b != b'\n');
        for s in scan.strays.iter().filter(|s| joins(s)) {
            if last.is_some_and(|l| l.offset == s.offset) {
                continue;
            }
            report(&format!(
                "{}: line {}: byte offset {} ({:#04x}) stands where a newline belongs between two rows: a damaged newline, both rows kept",
                path.display(),
                s.line,
                s.offset,
                s.byte
            ));
        }
        let mut log = Self { path, file };
        if let Some(torn) = &scan.tail.torn {
            let aside = log.move_aside(torn.offset, &bytes[torn.offset..])?;
            report(&format!(
                "{}: line {}: a torn tail, not a complete result row ({}): moved {} bytes at byte offset {} aside to {} and cut them off",
                log.path.display(),
                scan.tail_line,
                torn.reason,
                bytes.len() - torn.offset,
                torn.offset,
                aside.display()
            ));
        }
        if kept_end > tail_start {
            let how = match last {
                Some(s) => format!(
                    "its newline at byte offset {} is damaged ({:#04x})",
                    s.offset, s.byte
                ),
                None => "it has no newline".to_owned(),
            };
            let io = |e| RunError::io(&log.path, e);
            log.file.write_all(b"\n").map_err(io)?;
            log.file.sync_data().map_err(io)?;
            report(&format!(
                "{}: line {} is a complete row but {how}: kept, and a newline appended",
                log.path.display(),
                scan.tail_line
            ));
        }
        Ok(log)
    }

    /// Copies `bytes` (from byte `offset` on) to a new file beside the log,
    /// fsyncs it, then cuts the log at `offset`. Returns the copy's path.
    fn move_aside(&mut self, offset: usize, bytes: &[u8]) -> Result<PathBuf, RunError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let base = format!("{RESULTS_FILE}.torn-{offset}");
        let mut n = 0u32;
        let aside = loop {
            let name = if n == 0 {
                base.clone()
            } else {
                format!("{base}.{n}")
            };
            let candidate = dir.join(name);
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&candidate)
            {
                Ok(mut f) => {
                    let io = |e| RunError::io(&candidate, e);
                    f.write_all(bytes).map_err(io)?;
                    f.sync_all().map_err(io)?;
                    break candidate;
                }
                // The same tail moved aside by an open that crashed before
                // cutting it off.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if std::fs::read(&candidate).is_ok_and(|old| old == bytes) {
                        break candidate;
                    }
                    n += 1;
                }
                Err(e) => return Err(RunError::io(&candidate, e)),
            }
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| RunError::io(dir, e))?;
        let io = |e| RunError::io(&self.path, e);
        self.file.set_len(offset as u64).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        Ok(aside)
    }

    /// Appends one row and makes it durable.
    pub fn append(&mut self, result: &RolloutResult) -> Result<(), RunError> {
        let mut line = serde_json::to_vec(result).map_err(|e| RunError::Results {
            path: self.path.clone(),
            line: 0,
            source: format!("rollout {}: {e}", result.rollout).into(),
        })?;
        line.push(b'\n');
        let io = |e| RunError::io(&self.path, e);
        self.file.write_all(&line).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

/// Every committed row of `run_dir`'s results (none if the file is
/// missing), a whole row in the tail included; a torn tail is left out.
/// Damage before the last newline is an error naming the file and line.
pub fn read_results(run_dir: &Path) -> Result<Vec<RolloutResult>, RunError> {
    let path = run_dir.join(RESULTS_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RunError::io(&path, e)),
    };
    Ok(scan(&path, &bytes)?.rows)
}

/// A byte standing where a row's newline belongs.
#[derive(Debug)]
struct Stray {
    line: usize,
    offset: usize,
    byte: u8,
}

/// What is not a row, from `offset` to the end of the file.
#[derive(Debug)]
struct Torn {
    offset: usize,
    reason: String,
}

/// The bytes after the last newline.
#[derive(Debug)]
struct Tail {
    len: usize,
    torn: Option<Torn>,
}

#[derive(Debug)]
struct Scan {
    rows: Vec<RolloutResult>,
    strays: Vec<Stray>,
    /// The line number of the tail.
    tail_line: usize,
    tail: Tail,
}

fn scan(path: &Path, bytes: &[u8]) -> Result<Scan, RunError> {
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut rows = Vec::new();
    let mut strays = Vec::new();
    let mut start = 0;
    let mut line = 0;
    for text in bytes[..whole].split_inclusive(|b| *b == b'\n') {
        line += 1;
        let body = &text[..text.len() - 1];
        if !body.is_empty() {
            let (end, problem) = rows_in(body, start, line, &mut rows, &mut strays);
            if let Some(message) = problem {
                return Err(RunError::Results {
                    path: path.to_owned(),
                    line,
                    source: format!(
                        "not a result row from byte offset {} on ({message}); the file is damaged before its last line, so nothing was changed",
                        start + end
                    )
                    .into(),
                });
            }
        }
        start += text.len();
    }
    let tail_line = line + 1;
    let tail = &bytes[whole..];
    let (end, problem) = rows_in(tail, whole, tail_line, &mut rows, &mut strays);
    Ok(Scan {
        rows,
        strays,
        tail_line,
        tail: Tail {
            len: tail.len(),
            torn: problem.map(|reason| Torn {
                offset: whole + end,
                reason,
            }),
        },
    })
}

/// Reads the rows of `text` (at byte `offset` of the file, on line `line`):
/// complete rows one after another, each but the last followed by one byte
/// that stands for its damaged newline. Returns how far rows go and, when
/// they stop short of the end, why.
fn rows_in(
    text: &[u8],
    offset: usize,
    line: usize,
    rows: &mut Vec<RolloutResult>,
    strays: &mut Vec<Stray>,
) -> (usize, Option<String>) {
    let mut pos = 0;
    while pos < text.len() {
        match row_at(&text[pos..]) {
            Ok((row, len)) => {
                rows.push(row);
                pos += len;
                if let Some(byte) = text.get(pos) {
                    strays.push(Stray {
                        line,
                        offset: offset + pos,
                        byte: *byte,
                    });
                    pos += 1;
                }
            }
            Err(reason) => return (pos, Some(reason)),
        }
    }
    (pos, None)
}

/// The complete row `text` starts with, and its length.
fn row_at(text: &[u8]) -> Result<(RolloutResult, usize), String> {
    if text.first() != Some(&b'{') {
        return Err("a row starts with `{`".to_owned());
    }
    let mut values =
        serde_json::Deserializer::from_slice(text).into_iter::<serde::de::IgnoredAny>();
    match values.next() {
        Some(Ok(_)) => {}
        Some(Err(e)) if e.is_eof() => return Err("cut short".to_owned()),
        Some(Err(e)) => return Err(format!("not valid json: {e}")),
        None => return Err("cut short".to_owned()),
    }
    let len = values.byte_offset();
    let row = RolloutResult::decode(&text[..len]).map_err(|e| e.to_string())?;
    Ok((row, len))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use rollpoint_driver::{Status, Timings};
    use std::os::unix::fs::PermissionsExt as _;

    fn result(rollout: &str) -> RolloutResult {
        RolloutResult {
            v: rollpoint_driver::RESULT_VERSION,
            task_id: rollout.to_owned(),
            rollout: rollout.to_owned(),
            attempt: 0,
            status: Status::Unverified,
            verdict: None,
            reward: None,
            error: None,
            infra_class: None,
            infra_retries: Vec::new(),
            group: None,
            restart: false,
            launches: Vec::new(),
            usage: None,
            resources: None,
            response: None,
            transcript: Vec::new(),
            timings: Timings::default(),
            forked_from: None,
        }
    }

    /// A log holding `rows`; returns the directory and the file's path.
    fn log_of(rows: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = ResultsLog::open(dir.path()).unwrap();
        for r in rows {
            log.append(&result(r)).unwrap();
        }
        let path = dir.path().join(RESULTS_FILE);
        (dir, path)
    }

    fn rollouts(dir: &Path) -> Vec<String> {
        read_results(dir)
            .unwrap()
            .into_iter()
            .map(|r| r.rollout)
            .collect()
    }

    fn open(dir: &Path) -> (ResultsLog, Vec<String>) {
        let mut said = Vec::new();
        let log = ResultsLog::open_reporting(dir, &mut |l| said.push(l.to_owned())).unwrap();
        (log, said)
    }

    #[test]
    fn a_complete_last_row_whose_newline_is_damaged_or_missing_is_kept() {
        for damage in [Some(0x0b_u8), Some(b'x'), Some(b' '), None] {
            let (dir, path) = log_of(&["a", "b"]);
            let mut bytes = std::fs::read(&path).unwrap();
            let nl = bytes.len() - 1;
            match damage {
                Some(b) => bytes[nl] = b,
                None => {
                    bytes.pop();
                }
            }
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(
                rollouts(dir.path()),
                ["a", "b"],
                "{damage:?}: read as it is"
            );

            let (mut log, said) = open(dir.path());
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(
                said[0].contains(&path.display().to_string())
                    && said[0].contains("line 2")
                    && said[0].contains("kept"),
                "{said:?}"
            );
            if damage.is_some() {
                assert!(
                    said[0].contains(&format!("byte offset {nl} is damaged")),
                    "{said:?}"
                );
            }
            // Repaired by appending: every byte before is as it was.
            let repaired = std::fs::read(&path).unwrap();
            assert_eq!(&repaired[..bytes.len()], &bytes[..]);
            assert_eq!(&repaired[bytes.len()..], b"\n");
            log.append(&result("c")).unwrap();
            drop(log);
            assert_eq!(rollouts(dir.path()), ["a", "b", "c"]);
            let (_log, said) = open(dir.path());
            assert!(said.is_empty(), "{damage:?}: reported once: {said:?}");
            assert!(
                !dir.path()
                    .join(format!("{RESULTS_FILE}.torn-{nl}"))
                    .exists()
            );
        }
    }

    #[test]
    fn a_row_cut_in_half_is_moved_aside_reported_and_cut_off() {
        let (dir, path) = log_of(&["a"]);
        let whole = std::fs::read(&path).unwrap();
        let row = serde_json::to_vec(&result("b")).unwrap();
        let half = &row[..row.len() / 2];
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(half).unwrap();
        drop(f);
        assert_eq!(rollouts(dir.path()), ["a"]);

        let (mut log, said) = open(dir.path());
        let aside = dir
            .path()
            .join(format!("{RESULTS_FILE}.torn-{}", whole.len()));
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains(&path.display().to_string())
                && said[0].contains(&format!(
                    "{} bytes at byte offset {}",
                    half.len(),
                    whole.len()
                ))
                && said[0].contains(&aside.display().to_string()),
            "{said:?}"
        );
        assert_eq!(std::fs::read(&aside).unwrap(), half, "kept aside");
        let mode = std::fs::metadata(&aside).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            whole,
            "only the torn bytes cut"
        );
        log.append(&result("c")).unwrap();
        drop(log);
        assert_eq!(rollouts(dir.path()), ["a", "c"]);
        let (_log, said) = open(dir.path());
        assert!(said.is_empty(), "{said:?}");

        // A row whose newline is damaged, then a torn one: the first stays.
        let (dir, path) = log_of(&["a", "b"]);
        let mut bytes = std::fs::read(&path).unwrap();
        let nl = bytes.len() - 1;
        bytes[nl] = b'}';
        bytes.extend_from_slice(half);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(rollouts(dir.path()), ["a", "b"]);
        let (_log, said) = open(dir.path());
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains(&format!("byte offset {}", nl + 1)),
            "{said:?}"
        );
        assert!(said[1].contains("damaged (0x7d)"), "{said:?}");
        let aside = dir.path().join(format!("{RESULTS_FILE}.torn-{}", nl + 1));
        assert_eq!(std::fs::read(&aside).unwrap(), half);
        let mut want = bytes[..=nl].to_vec();
        want.push(b'\n');
        assert_eq!(std::fs::read(&path).unwrap(), want);
        assert_eq!(rollouts(dir.path()), ["a", "b"]);
    }

    #[test]
    fn damage_before_the_last_line_is_an_error_naming_the_line() {
        let (dir, path) = log_of(&["a", "b", "c"]);
        let bytes = std::fs::read(&path).unwrap();
        let second = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        let mut damaged = bytes.clone();
        damaged[second + 2] ^= 0x40; // inside the first field name of line 2
        std::fs::write(&path, &damaged).unwrap();
        let e = read_results(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("line 2"),
            "{e}"
        );
        let e = ResultsLog::open(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("line 2") && e.contains("nothing was changed"),
            "{e}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), damaged, "nothing changed");

        // A damaged newline between two whole rows keeps both.
        let mut joined = bytes.clone();
        joined[second - 1] = 0x0e;
        std::fs::write(&path, &joined).unwrap();
        assert_eq!(rollouts(dir.path()), ["a", "b", "c"]);
        let (_log, said) = open(dir.path());
        assert!(
            said.len() == 1
                && said[0].contains("line 1")
                && said[0].contains(&format!("byte offset {}", second - 1)),
            "{said:?}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), joined, "nothing changed");

        std::fs::write(&path, "{\"v\":3}\n").unwrap();
        let e = read_results(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("line 1") && e.contains("unknown version 3"),
            "{e}"
        );
    }
}
