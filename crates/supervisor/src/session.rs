//! The session directory: launch record, receipts, stop and pause files.
//!
//! The launch record is rewritten atomically; receipts are appended to one
//! log, a line each, synced before the answer. A file per receipt cost a
//! new inode, a rename and a directory fsync per pause, which with a
//! thousand launches paused at once was most of a checkpoint's prepare.
//! Files are mode 0600; the directory itself is 0700.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rollpoint_proto::launch::{LAUNCH_RECORD_VERSION, LaunchPhase, LaunchRecord};
use rollpoint_proto::receipt::Receipt;
use rollpoint_proto::session::{LAUNCH_FILE, PAUSE_FILE, RECEIPTS_FILE, STOP_FILE};

use crate::errors::Error;
use crate::files::write_json;

#[derive(Debug)]
pub struct Session {
    dir: PathBuf,
    record: Mutex<LaunchRecord>,
    /// `receipts.jsonl`, opened for appending.
    receipts: Mutex<File>,
}

impl Session {
    /// Creates (or reuses) the session directory and writes the first record.
    pub fn create(dir: &Path, launch_id: &str, argv: &[String]) -> Result<Self, Error> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| Error::SessionDir {
                path: dir.to_owned(),
                source,
            })?;
        // Opened before the record's write, whose directory fsync makes
        // the log's name durable too.
        let log = dir.join(RECEIPTS_FILE);
        let receipts = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&log)
            .map_err(|source| Error::Write { path: log, source })?;
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
            receipts: Mutex::new(receipts),
        })
    }

    /// The record as it stands.
    pub fn record(&self) -> LaunchRecord {
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Changes the record and writes it durably before returning.
    pub fn update(&self, change: impl FnOnce(&mut LaunchRecord)) -> Result<LaunchRecord, Error> {
        let mut record = self
            .record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        change(&mut record);
        write_json(&self.dir.join(LAUNCH_FILE), &*record)?;
        Ok(record.clone())
    }

    /// Appends a receipt to `receipts.jsonl` in one write and syncs it.
    pub fn write_receipt(&self, receipt: &Receipt) -> Result<(), Error> {
        let path = || self.dir.join(RECEIPTS_FILE);
        let line = receipt.encode_line().map_err(|source| Error::Encode {
            path: path(),
            source,
        })?;
        let mut file = self
            .receipts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(&line)
            .and_then(|()| file.sync_data())
            .map_err(|source| Error::Write {
                path: path(),
                source,
            })
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
