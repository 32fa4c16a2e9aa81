//! The checkpoint: an append-only journal of boundary records, fsync'd at every boundary, and
//! rewritten whole (atomically) only now and then. Appending costs the size of one record, not
//! of the transcript; see docs/design/native-worker.md for the format and its guarantees.

mod apply;
pub mod codec;
pub mod record;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::atomic;
use crate::errors::JournalError;
use crate::transcript::State;
use codec::DecodeError;
use record::{Header, Record, SnapshotRef};

/// Dead bytes (start records of finished tools, torn tails) worth a rewrite.
const COMPACT_MIN_DEAD_BYTES: u64 = 256 * 1024;

/// When to rewrite the journal whole: after a torn tail, or once dead records make up a
/// quarter of a journal with at least [`COMPACT_MIN_DEAD_BYTES`] of them.
pub fn should_compact(total_len: u64, dead_bytes: u64, torn: bool) -> bool {
    torn || (dead_bytes >= COMPACT_MIN_DEAD_BYTES && dead_bytes.saturating_mul(4) > total_len)
}

/// A journal read back from disk.
#[derive(Debug)]
pub struct Replayed {
    pub header: Header,
    pub state: State,
    pub records: usize,
    pub len: u64,
    pub dead_bytes: u64,
    pub torn_at: Option<u64>,
}

/// Reads and replays the journal at `path` without changing it.
pub fn replay(path: &Path) -> Result<Replayed, JournalError> {
    let bytes = std::fs::read(path).map_err(|source| JournalError::Io {
        path: path.to_owned(),
        source,
    })?;
    replay_bytes(path, &bytes)
}

fn replay_bytes(path: &Path, bytes: &[u8]) -> Result<Replayed, JournalError> {
    let p = || path.to_owned();
    let decoded = codec::decode(bytes).map_err(|e| match e {
        DecodeError::BadMagic => JournalError::BadMagic { path: p() },
        DecodeError::UnknownFormat(found) => JournalError::UnknownFormat {
            path: p(),
            found,
            known: codec::FORMAT,
        },
        DecodeError::Corrupt { offset, reason } => JournalError::Corrupt {
            path: p(),
            offset,
            reason,
        },
        DecodeError::UnknownRecordVersion { offset, found } => JournalError::UnknownRecordVersion {
            path: p(),
            offset,
            found,
            known: codec::RECORD_VERSION,
        },
    })?;
    let count = decoded.records.len();
    let offsets: Vec<u64> = decoded.records.iter().map(|(offset, _)| *offset).collect();
    let end_of = |i: usize| offsets.get(i + 1).copied().unwrap_or(decoded.valid_len);
    let mut records = decoded.records.into_iter().enumerate();
    let header = match records.next() {
        Some((_, (_, Record::Header(h)))) => h,
        _ => return Err(JournalError::NoHeader { path: p() }),
    };
    if !header.partial {
        return Err(JournalError::Replay {
            path: p(),
            offset: codec::FILE_HEADER_LEN as u64,
            reason: "header is not marked partial".to_owned(),
        });
    }
    let mut state: Option<State> = None;
    let mut dead_bytes = 0;
    let mut started_len = 0;
    for (i, (offset, record)) in records {
        let replay_err = |reason: String| JournalError::Replay {
            path: p(),
            offset,
            reason,
        };
        match record {
            Record::ToolStarted(_) => started_len = end_of(i) - offset,
            // A tool's start record is dead once the tool has finished.
            Record::ToolFinished(_) => dead_bytes += std::mem::take(&mut started_len),
            _ => {}
        }
        match (&mut state, record) {
            (None, Record::Snapshot(snapshot)) => {
                if snapshot.state.rollout_id != header.rollout_id {
                    return Err(replay_err(format!(
                        "snapshot of rollout `{}` under a header of `{}`",
                        snapshot.state.rollout_id, header.rollout_id
                    )));
                }
                state = Some(snapshot.state);
            }
            (None, _) => return Err(replay_err("record before the first snapshot".to_owned())),
            (Some(s), r) => s.apply(&r).map_err(|e| replay_err(e.0))?,
        }
    }
    let Some(state) = state else {
        return Err(JournalError::Replay {
            path: p(),
            offset: codec::FILE_HEADER_LEN as u64,
            reason: "no snapshot record".to_owned(),
        });
    };
    if let Some(torn) = decoded.torn_at {
        dead_bytes += bytes.len() as u64 - torn;
    }
    Ok(Replayed {
        header,
        state,
        records: count,
        len: bytes.len() as u64,
        dead_bytes,
        torn_at: decoded.torn_at,
    })
}

/// The open checkpoint journal of a running rollout.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    header: Header,
    /// Open for appending; `None` after a failed write until a rewrite succeeds.
    file: Option<File>,
    len: u64,
    dead_bytes: u64,
    /// Length of the last tool-start record, dead once its tool finishes.
    started_len: u64,
}

impl Journal {
    /// A journal for `path` that has not been written yet: the first [`Journal::append`]
    /// writes it whole. Used when writing it failed and the run goes on regardless.
    pub fn unwritten(path: &Path, header: Header) -> Self {
        Self {
            path: path.to_owned(),
            header,
            file: None,
            len: 0,
            dead_bytes: 0,
            started_len: 0,
        }
    }

    /// Starts a new journal holding `state`, atomically.
    pub fn create(path: &Path, header: Header, state: &State) -> Result<Self, JournalError> {
        let mut journal = Self::unwritten(path, header);
        journal.rewrite(state)?;
        Ok(journal)
    }

    /// Opens an existing journal for appending, after [`replay`] read it.
    pub fn open(path: &Path, replayed: &Replayed) -> Result<Self, JournalError> {
        let mut journal = Self::unwritten(path, replayed.header.clone());
        if should_compact(
            replayed.len,
            replayed.dead_bytes,
            replayed.torn_at.is_some(),
        ) {
            journal.rewrite(&replayed.state)?;
        } else {
            journal.file = Some(open_append(path)?);
            journal.len = replayed.len;
            journal.dead_bytes = replayed.dead_bytes;
        }
        Ok(journal)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes on disk (0 while unwritten).
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes one boundary durable: appends `records` and fsyncs, or rewrites the journal from
    /// `state` (the state after `records`) when an earlier write failed or compaction is due.
    /// On failure the journal on disk still holds its last good boundary, and the next call
    /// rewrites it whole.
    pub fn append(&mut self, records: &[Record], state: &State) -> Result<(), JournalError> {
        let Some(file) = self.file.as_mut() else {
            return self.rewrite(state);
        };
        let mut buf = Vec::with_capacity(256);
        let mut dead = 0;
        for record in records {
            let start = buf.len() as u64;
            codec::encode_into(record, &mut buf).map_err(|source| JournalError::Encode {
                path: self.path.clone(),
                source,
            })?;
            let size = buf.len() as u64 - start;
            match record {
                Record::ToolStarted(_) => self.started_len = size,
                Record::ToolFinished(_) => dead += std::mem::take(&mut self.started_len),
                _ => {}
            }
        }
        if let Err(source) = file.write_all(&buf).and_then(|()| file.sync_data()) {
            // What reached the file is unknown: never append after it, rewrite next time.
            self.file = None;
            return Err(JournalError::Io {
                path: self.path.clone(),
                source,
            });
        }
        self.len += buf.len() as u64;
        self.dead_bytes += dead;
        if should_compact(self.len, self.dead_bytes, false) {
            self.rewrite(state)?;
        }
        Ok(())
    }

    /// Replaces the journal with a header and a snapshot of `state`, atomically.
    pub fn rewrite(&mut self, state: &State) -> Result<(), JournalError> {
        self.file = None;
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        let encode = |source: serde_json::Error| JournalError::Encode {
            path: self.path.clone(),
            source,
        };
        let mut bytes = codec::file_header().to_vec();
        codec::encode_into(&Record::Header(self.header.clone()), &mut bytes).map_err(encode)?;
        codec::encode_into(&SnapshotRef { state }, &mut bytes).map_err(encode)?;
        atomic::write_atomic(&self.path, &bytes).map_err(io)?;
        self.file = Some(open_append(&self.path)?);
        self.len = bytes.len() as u64;
        self.dead_bytes = 0;
        Ok(())
    }
}

fn open_append(path: &Path) -> Result<File, JournalError> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|source| JournalError::Io {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::journal::record::{Launch, ToolFinished, ToolStarted};
    use crate::transcript::{AssistantMessage, CallUsage, ToolCall, ToolStatus};
    use std::os::unix::fs::PermissionsExt;

    fn header() -> Header {
        Header {
            rollout_id: "r".to_owned(),
            partial: true,
            created_unix_ms: 1,
            worker: "test".to_owned(),
        }
    }

    fn step(state: &mut State, journal: &mut Journal, call: u32) {
        let id = format!("c{call}");
        let records = [
            Record::ModelResponse(record::ModelResponse {
                call,
                message: AssistantMessage {
                    content: Some("x".to_owned()),
                    tool_calls: vec![ToolCall {
                        id: id.clone(),
                        name: "bash".to_owned(),
                        arguments: "{}".to_owned(),
                    }],
                },
                usage: CallUsage::default(),
                elapsed_ms: 0,
            }),
            Record::ToolStarted(ToolStarted {
                call_id: id.clone(),
                elapsed_ms: 0,
            }),
        ];
        for r in &records {
            state.apply(r).unwrap();
        }
        journal.append(&records, state).unwrap();
        let done = Record::ToolFinished(ToolFinished {
            call_id: id,
            content: "out".to_owned(),
            status: ToolStatus::Ok,
            exit_code: Some(0),
            duration_ms: 0,
            truncated_bytes: 0,
            elapsed_ms: 0,
        });
        state.apply(&done).unwrap();
        journal.append(&[done], state).unwrap();
    }

    #[test]
    fn appends_replay_to_the_same_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let mut state = State::new("r", None, "p");
        let mut journal = Journal::create(&path, header(), &state).unwrap();
        for call in 0..5 {
            step(&mut state, &mut journal, call);
        }
        let replayed = replay(&path).unwrap();
        assert_eq!(replayed.state, state);
        assert_eq!(replayed.records, 2 + 5 * 3);
        assert!(replayed.dead_bytes > 0);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn torn_tail_is_dropped_and_compacted_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let mut state = State::new("r", None, "p");
        let mut journal = Journal::create(&path, header(), &state).unwrap();
        step(&mut state, &mut journal, 0);
        let good = state.clone();
        let mut bytes = std::fs::read(&path).unwrap();
        let mut extra = Vec::new();
        codec::encode_into(
            &Record::Launch(Launch {
                launch: 2,
                elapsed_ms: 0,
            }),
            &mut extra,
        )
        .unwrap();
        bytes.extend_from_slice(&extra[..extra.len() - 3]);
        std::fs::write(&path, &bytes).unwrap();
        let replayed = replay(&path).unwrap();
        assert_eq!(replayed.state, good);
        assert!(replayed.torn_at.is_some());
        let mut journal = Journal::open(&path, &replayed).unwrap();
        let again = replay(&path).unwrap();
        assert_eq!(again.torn_at, None);
        assert_eq!(again.records, 2, "rewritten as header and snapshot");
        step(&mut state, &mut journal, 1);
        assert_eq!(replay(&path).unwrap().state, state);
    }

    #[test]
    fn corrupted_middle_record_is_an_error_naming_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let mut state = State::new("r", None, "p");
        let mut journal = Journal::create(&path, header(), &state).unwrap();
        let snapshot_end = journal.len();
        step(&mut state, &mut journal, 0);
        let mut bytes = std::fs::read(&path).unwrap();
        let at = usize::try_from(snapshot_end).unwrap() + 20;
        bytes[at] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let err = replay(&path).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("offset {snapshot_end} is corrupted")),
            "{err}"
        );
    }

    #[test]
    fn corrupted_middle_length_is_refused_not_read_as_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let mut state = State::new("r", None, "p");
        let mut journal = Journal::create(&path, header(), &state).unwrap();
        step(&mut state, &mut journal, 0);
        let middle = journal.len();
        step(&mut state, &mut journal, 1);
        step(&mut state, &mut journal, 2);
        let mut bytes = std::fs::read(&path).unwrap();
        // The reply to call 1 now claims a length far past the end of the file.
        bytes[usize::try_from(middle).unwrap() + 3] = 0xee;
        std::fs::write(&path, &bytes).unwrap();
        let err = replay(&path).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("offset {middle} is corrupted: length")),
            "{err}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "replay changes nothing"
        );
    }

    #[test]
    fn borrowed_snapshot_encodes_like_the_owned_one() {
        let state = State::new("r", Some("s"), "p");
        let mut borrowed = Vec::new();
        codec::encode_into(&SnapshotRef { state: &state }, &mut borrowed).unwrap();
        let mut owned = Vec::new();
        let record = Record::Snapshot(record::Snapshot {
            state: state.clone(),
        });
        codec::encode_into(&record, &mut owned).unwrap();
        assert_eq!(borrowed, owned);
    }

    #[test]
    fn compaction_policy() {
        assert!(should_compact(100, 0, true));
        assert!(!should_compact(10 << 20, 100 << 10, false));
        assert!(should_compact(1 << 20, 300 << 10, false));
    }
}
