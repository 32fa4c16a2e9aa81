//! `RUN_DIR/events.jsonl`: what happened to the run as a whole, one event a line (start,
//! each resume, each checkpoint and its phase times, a stop, the end), for the run report.
//! Rollouts' own history is in their result rows; this file holds what no row does: when
//! the runner came back after a crash and how long each checkpoint took.
//!
//! Appended and fsync'd line by line. An event is a record of the past, not state a resume
//! needs: a failed append (a full disk) is logged and the run goes on. Reading keeps
//! every whole line; a torn last line (a crash mid-append) is skipped and counted, and a
//! new line never joins it (the writer ends an unterminated tail with a newline first).

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use rollpoint_api::wire::PhaseTimings;
use serde::{Deserialize, Serialize};

use crate::errors::RunError;

/// The file name under the run directory.
pub const EVENTS_FILE: &str = "events.jsonl";

/// Version of an event line.
pub const EVENT_VERSION: u32 = 1;

/// One line of the events file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    pub v: u32,
    /// Unix milliseconds.
    pub at_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// `rollpoint run` started the run.
    Started { tasks: usize },
    /// `rollpoint resume` took the run over (after a crash, unless a stop came first).
    Resumed {
        /// The checkpoint it restored from.
        from: Option<String>,
        restored: usize,
        started_over: usize,
        finished: usize,
    },
    /// A checkpoint was published.
    Checkpoint {
        id: String,
        scope: usize,
        restarts: usize,
        timings: PhaseTimings,
    },
    /// A checkpoint failed; the run went on.
    CheckpointFailed { id: String, error: String },
    /// A checkpointed rollout was forked into new rollouts.
    Forked {
        checkpoint: String,
        from: rollpoint_proto::key::AttemptKey,
        branches: Vec<String>,
    },
    /// The infrastructure ended an attempt and `retry_infra` starts the
    /// rollout again in a fresh sandbox as attempt `attempt + 1`.
    InfraRetry {
        rollout: String,
        attempt: u32,
        class: rollpoint_driver::InfraClass,
        error: String,
    },
    /// The fleet was paused for a weight update: `parked` rollouts held in place, `going_on`
    /// not (their model calls are held all the same).
    FleetPaused {
        calls: rollpoint_api::wire::InFlightCalls,
        parked: usize,
        going_on: usize,
    },
    /// The fleet continued, its model calls from now on under `version`.
    FleetContinued { version: Option<String> },
    /// An operator ran a command in a rollout's sandbox (`rollpoint exec`, `shell`): in the
    /// live sandbox, or with `while_frozen` in a fork of its latest snapshot.
    Exec {
        rollout: String,
        argv: Vec<String>,
        /// `None` when a signal ended it or it could not start.
        exit_code: Option<i32>,
        while_frozen: bool,
        /// A shell with a terminal rather than one command.
        #[serde(default)]
        tty: bool,
    },
    /// The run stopped at a checkpoint (SIGTERM or a stop request).
    Stopped { checkpoint: String },
    /// Every task has its row.
    Finished { rows: usize },
}

/// The events file, open for appending.
#[derive(Debug)]
pub struct EventLog {
    path: PathBuf,
    file: Option<File>,
}

impl EventLog {
    /// Opens (or creates, mode 0600) the events file of `run_dir`. A file that cannot be
    /// opened is said on stderr and events are not written.
    #[must_use]
    pub fn open(run_dir: &Path) -> Self {
        let path = run_dir.join(EVENTS_FILE);
        let file = match open_terminated(&path) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "cannot open the events file; the run's events are not recorded"
                );
                None
            }
        };
        Self { path, file }
    }

    /// Appends `event` now and fsyncs it; a failure is said on stderr.
    pub fn record(&mut self, event: Event) {
        let Some(file) = &mut self.file else { return };
        let line = EventLine {
            v: EVENT_VERSION,
            at_ms: rollpoint_proto::clock::unix_ms(),
            event,
        };
        let mut text = match serde_json::to_string(&line) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "an event was not recorded");
                return;
            }
        };
        text.push('\n');
        if let Err(e) = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_data())
        {
            tracing::warn!(path = %self.path.display(), error = %e, "an event was not recorded");
        }
    }
}

/// Opens `path` for appending, ending an unterminated last line with a newline.
fn open_terminated(path: &Path) -> std::io::Result<File> {
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let len = file.metadata()?.len();
    if len > 0 {
        file.seek(SeekFrom::Start(len - 1))?;
        let mut last = [0u8; 1];
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            file.write_all(b"\n")?;
            file.sync_data()?;
        }
    }
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(file)
}

/// The events of a run, and how many lines could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Events {
    pub lines: Vec<EventLine>,
    /// Lines skipped: torn, or of an unknown version or kind (each named on stderr).
    pub skipped: usize,
}

/// Reads `RUN_DIR/events.jsonl` (none yet: no events).
pub fn read_events(run_dir: &Path) -> Result<Events, RunError> {
    let path = run_dir.join(EVENTS_FILE);
    let text = match std::fs::read(&path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Events::default()),
        Err(e) => return Err(RunError::io(&path, e)),
    };
    let mut out = Events::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<EventLine>(line) {
            Ok(e) if e.v == EVENT_VERSION => out.lines.push(e),
            Ok(e) => {
                tracing::warn!(
                    path = %path.display(),
                    line = i + 1,
                    version = e.v,
                    reads = EVENT_VERSION,
                    "an event of an unknown version; skipped"
                );
                out.skipped += 1;
            }
            Err(e) => {
                tracing::warn!(
                    path = %path.display(),
                    line = i + 1,
                    error = %e,
                    "a line that is not an event; skipped"
                );
                out.skipped += 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_and_a_torn_tail_never_joins_the_next_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = EventLog::open(dir.path());
        log.record(Event::Started { tasks: 3 });
        drop(log);
        // A crash mid-append leaves half a line.
        let path = dir.path().join(EVENTS_FILE);
        let mut f = OpenOptions::new().append(true).open(&path).expect("open");
        f.write_all(br#"{"v":1,"at_ms":5,"kind":"sto"#)
            .expect("write");
        drop(f);
        let mut log = EventLog::open(dir.path());
        log.record(Event::Finished { rows: 3 });
        let events = read_events(dir.path()).expect("read");
        assert_eq!(events.skipped, 1, "the torn line");
        let kinds: Vec<_> = events.lines.iter().map(|l| l.event.clone()).collect();
        assert_eq!(
            kinds,
            vec![Event::Started { tasks: 3 }, Event::Finished { rows: 3 }]
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_unknown_version_is_skipped_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(EVENTS_FILE),
            "{\"v\":2,\"at_ms\":1,\"kind\":\"started\",\"tasks\":1}\n",
        )
        .expect("write");
        let events = read_events(dir.path()).expect("read");
        assert!(events.lines.is_empty());
        assert_eq!(events.skipped, 1);
    }
}
