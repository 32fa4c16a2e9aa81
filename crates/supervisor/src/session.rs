//! The session directory: launch record, receipts, stop and pause files.
//!
//! Every write is atomic and mode 0600; the directory itself is 0700.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use rollpoint_proto::launch::{LAUNCH_RECORD_VERSION, LaunchPhase, LaunchRecord};
use rollpoint_proto::receipt::{Op, Receipt};
use rollpoint_proto::session::{LAUNCH_FILE, PAUSE_FILE, RECEIPTS_DIR, STOP_FILE};

use crate::errors::Error;
use crate::files::write_json;

#[derive(Debug)]
pub struct Session {
    dir: PathBuf,
    record: Mutex<LaunchRecord>,
    seq: AtomicU32,
}

impl Session {
    /// Creates (or reuses) the session directory and writes the first record.
    pub fn create(dir: &Path, launch_id: &str, argv: &[String]) -> Result<Self, Error> {
        let receipts = dir.join(RECEIPTS_DIR);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&receipts)
            .map_err(|source| Error::SessionDir {
                path: receipts.clone(),
                source,
            })?;
        let existing = std::fs::read_dir(&receipts).map_or(0, Iterator::count);
        let record = LaunchRecord {
            v: LAUNCH_RECORD_VERSION,
            launch_id: launch_id.to_owned(),
            argv: argv.to_vec(),
            phase: LaunchPhase::Held,
            supervisor_pid: std::process::id(),
            pid: None,
            start_time: None,
            cgroup_v2: None,
            cgroup_v1_freezer: None,
            started_at_ms: None,
            ended: None,
        };
        write_json(&dir.join(LAUNCH_FILE), &record)?;
        Ok(Self {
            dir: dir.to_owned(),
            record: Mutex::new(record),
            seq: AtomicU32::new(u32::try_from(existing).unwrap_or(0)),
        })
    }

    /// The record as it stands.
    pub fn record(&self) -> LaunchRecord {
        self.record.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Changes the record and writes it durably before returning.
    pub fn update(&self, change: impl FnOnce(&mut LaunchRecord)) -> Result<LaunchRecord, Error> {
        let mut record = self.record.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        change(&mut record);
        write_json(&self.dir.join(LAUNCH_FILE), &*record)?;
        Ok(record.clone())
    }

    /// Writes a receipt as `receipts/<seq>-<op>.json`.
    pub fn write_receipt(&self, receipt: &Receipt) -> Result<PathBuf, Error> {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let op = match receipt.op {
            Op::Pause => "pause",
            Op::Continue => "continue",
            Op::Stop => "stop",
            Op::Cleanup => "cleanup",
        };
        let path = self.dir.join(RECEIPTS_DIR).join(format!("{seq:04}-{op}.json"));
        write_json(&path, receipt)?;
        Ok(path)
    }

    pub fn stop_file(&self) -> bool {
        self.dir.join(STOP_FILE).exists()
    }

    pub fn pause_file(&self) -> bool {
        self.dir.join(PAUSE_FILE).exists()
    }
}

/// Reads the launch record of a session directory.
pub fn read_record(dir: &Path) -> Result<LaunchRecord, Error> {
    let path = dir.join(LAUNCH_FILE);
    let bytes = std::fs::read(&path).map_err(|source| Error::Read {
        path: path.clone(),
        source,
    })?;
    LaunchRecord::decode(&bytes).map_err(|source| Error::Format { path, source })
}
