//! Byte layout of the journal, with no I/O: encode one record, decode a whole file.
//!
//! ```text
//! file   = magic "RPWKJRNL" | format u32 LE | record*
//! record = len u32 LE | crc32c u32 LE | version u8 | payload (len bytes of JSON)
//! ```
//! The checksum covers the length, the version and the payload. Every boundary appends one
//! record, so a write cut short by a crash can only leave the *last* record incomplete: only a
//! tail can be torn. A bad record (fewer bytes left than a record header, a length running
//! past the end of the file, or a checksum mismatch with nothing but zero bytes after its
//! declared end) is a torn tail, and ignored, only when no whole record (a header whose length
//! fits the file and whose checksum matches) starts anywhere after it. Anything else is damage,
//! reported with the offset of the bad record: a length corrupted to a huge value in the middle
//! of the file also runs past the end, but the whole records after it give it away. The journal
//! is never guessed at, and no record is dropped unless it is the torn last one.

use super::record::Record;

pub const MAGIC: &[u8; 8] = b"RPWKJRNL";
/// Journal format this worker writes and reads.
pub const FORMAT: u32 = 1;
/// Record version this worker writes and reads.
pub const RECORD_VERSION: u8 = 1;
pub const FILE_HEADER_LEN: usize = 12;
const RECORD_HEADER_LEN: usize = 9;

/// Why a journal's bytes cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    BadMagic,
    UnknownFormat(u32),
    Corrupt { offset: u64, reason: String },
    UnknownRecordVersion { offset: u64, found: u8 },
}

/// The usable content of a journal.
#[derive(Debug)]
pub struct Decoded {
    /// Records with the offsets they start at.
    pub records: Vec<(u64, Record)>,
    /// Length of the valid prefix.
    pub valid_len: u64,
    /// Offset of an ignored torn tail, if there was one.
    pub torn_at: Option<u64>,
}

/// The bytes a new journal starts with.
pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut out = [0u8; FILE_HEADER_LEN];
    out[..8].copy_from_slice(MAGIC);
    out[8..].copy_from_slice(&FORMAT.to_le_bytes());
    out
}

fn checksum(len: [u8; 4], version: u8, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&len);
    let crc = crc32c::crc32c_append(crc, &[version]);
    crc32c::crc32c_append(crc, payload)
}

/// Appends the framed encoding of `record` (a [`Record`], or a borrowed form that serializes
/// the same way) to `out`.
pub fn encode_into<R: serde::Serialize>(
    record: &R,
    out: &mut Vec<u8>,
) -> Result<(), serde_json::Error> {
    let start = out.len();
    out.extend_from_slice(&[0u8; RECORD_HEADER_LEN]);
    serde_json::to_writer(&mut *out, record)?;
    let payload_len = out.len() - start - RECORD_HEADER_LEN;
    let len = u32::try_from(payload_len)
        .map_err(|_| serde::ser::Error::custom("record larger than 4 GiB"))?
        .to_le_bytes();
    let crc = checksum(len, RECORD_VERSION, &out[start + RECORD_HEADER_LEN..]);
    out[start..start + 4].copy_from_slice(&len);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out[start + 8] = RECORD_VERSION;
    Ok(())
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// What the bytes at one offset frame.
enum Frame<'a> {
    /// Fewer bytes left than a record header.
    Short,
    /// The header's length runs past the end of the file.
    PastEnd { len: usize },
    /// The checksum does not match; the record would end at `end`.
    BadChecksum { end: usize },
    /// A whole record: its length fits the file and its checksum matches.
    Whole {
        version: u8,
        payload: &'a [u8],
        end: usize,
    },
}

fn frame_at(bytes: &[u8], pos: usize) -> Frame<'_> {
    if bytes.len() - pos < RECORD_HEADER_LEN {
        return Frame::Short;
    }
    let len_bytes = [bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]];
    let len = u32::from_le_bytes(len_bytes) as usize;
    let body = pos + RECORD_HEADER_LEN;
    let Some(end) = body.checked_add(len).filter(|end| *end <= bytes.len()) else {
        return Frame::PastEnd { len };
    };
    let crc = read_u32(bytes, pos + 4);
    let version = bytes[pos + 8];
    let payload = &bytes[body..end];
    if checksum(len_bytes, version, payload) != crc {
        return Frame::BadChecksum { end };
    }
    Frame::Whole {
        version,
        payload,
        end,
    }
}

/// The first offset after `pos` at which a whole record starts. Called only at a bad record,
/// and cheap: JSON holds no bytes below 0x20, so at any offset inside a payload the four bytes
/// read as a length of at least 512 MiB, past the end of any real journal, and the checksum is
/// computed only where a length fits.
fn next_whole_record(bytes: &[u8], pos: usize) -> Option<usize> {
    let last_start = bytes.len().checked_sub(RECORD_HEADER_LEN)?;
    (pos + 1..=last_start).find(|at| matches!(frame_at(bytes, *at), Frame::Whole { .. }))
}

/// Decodes a whole journal.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    if bytes.len() < FILE_HEADER_LEN || &bytes[..8] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let format = read_u32(bytes, 8);
    if format != FORMAT {
        return Err(DecodeError::UnknownFormat(format));
    }
    let mut records = Vec::new();
    let mut pos = FILE_HEADER_LEN;
    let mut torn_at = None;
    while pos < bytes.len() {
        let offset = pos as u64;
        let corrupt = |reason: String| DecodeError::Corrupt { offset, reason };
        let (version, payload, end) = match frame_at(bytes, pos) {
            Frame::Whole {
                version,
                payload,
                end,
            } => (version, payload, end),
            // Too short to hold a record, so nothing whole can follow.
            Frame::Short => {
                torn_at = Some(offset);
                break;
            }
            Frame::PastEnd { len } => match next_whole_record(bytes, pos) {
                None => {
                    torn_at = Some(offset);
                    break;
                }
                Some(next) => {
                    return Err(corrupt(format!(
                        "length {len} runs past the end of the file ({} bytes), yet a whole \
                         record follows at offset {next}: damage, not a torn tail",
                        bytes.len()
                    )));
                }
            },
            Frame::BadChecksum { end } => {
                let zeros_after = bytes[end..].iter().all(|b| *b == 0);
                if zeros_after && next_whole_record(bytes, pos).is_none() {
                    torn_at = Some(offset);
                    break;
                }
                return Err(corrupt("checksum mismatch".to_owned()));
            }
        };
        if version != RECORD_VERSION {
            return Err(DecodeError::UnknownRecordVersion {
                offset,
                found: version,
            });
        }
        let record = serde_json::from_slice(payload)
            .map_err(|e| corrupt(format!("undecodable record: {e}")))?;
        records.push((offset, record));
        pos = end;
    }
    let valid_len = torn_at.unwrap_or(pos as u64);
    Ok(Decoded {
        records,
        valid_len,
        torn_at,
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::journal::record::{Launch, ToolStarted};

    fn journal(n: u32) -> (Vec<u8>, Vec<usize>) {
        let mut out = file_header().to_vec();
        let mut starts = Vec::new();
        for i in 0..n {
            starts.push(out.len());
            let record = if i % 2 == 0 {
                Record::Launch(Launch {
                    launch: i + 2,
                    elapsed_ms: u64::from(i),
                })
            } else {
                Record::ToolStarted(ToolStarted {
                    call_id: format!("c{i}"),
                    elapsed_ms: 0,
                })
            };
            encode_into(&record, &mut out).unwrap();
        }
        (out, starts)
    }

    #[test]
    fn round_trip() {
        let (bytes, starts) = journal(5);
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.records.len(), 5);
        assert_eq!(decoded.records[3].0, starts[3] as u64);
        assert_eq!(decoded.valid_len, bytes.len() as u64);
        assert_eq!(decoded.torn_at, None);
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail() {
        let (bytes, starts) = journal(4);
        let last = starts[3];
        for cut in last + 1..bytes.len() {
            let decoded = decode(&bytes[..cut]).unwrap();
            assert_eq!(decoded.records.len(), 3, "cut at {cut}");
            assert_eq!(decoded.torn_at, Some(last as u64));
            assert_eq!(decoded.valid_len, last as u64);
        }
    }

    #[test]
    fn torn_tail_followed_by_zeros_is_ignored() {
        let (mut bytes, starts) = journal(3);
        let last = starts[2];
        bytes[last + 12] ^= 0xff;
        bytes.extend_from_slice(&[0u8; 64]);
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.records.len(), 2);
        assert_eq!(decoded.torn_at, Some(last as u64));
    }

    #[test]
    fn corruption_in_the_middle_names_the_offset() {
        let (mut bytes, starts) = journal(4);
        bytes[starts[1] + 11] ^= 0x01;
        let err = decode(&bytes).unwrap_err();
        assert_eq!(
            err,
            DecodeError::Corrupt {
                offset: starts[1] as u64,
                reason: "checksum mismatch".to_owned()
            }
        );
    }

    #[test]
    fn length_running_past_the_end_in_the_middle_is_corruption_not_a_torn_tail() {
        let (bytes, starts) = journal(4);
        // Lengths that run past the end of the file, as a torn tail's does: the highest byte,
        // a low byte pushed just past the end, and every byte at once.
        let past_end = u32::try_from(bytes.len() - starts[1] - RECORD_HEADER_LEN + 1).unwrap();
        for len in [0x7f00_0000 | past_end, past_end, u32::MAX] {
            let mut damaged = bytes.clone();
            damaged[starts[1]..starts[1] + 4].copy_from_slice(&len.to_le_bytes());
            let err = decode(&damaged).unwrap_err();
            let DecodeError::Corrupt { offset, reason } = &err else {
                panic!("length {len}: {err:?}");
            };
            assert_eq!(*offset, starts[1] as u64, "length {len}");
            assert!(
                reason.contains("runs past the end of the file")
                    && reason.contains(&format!("whole record follows at offset {}", starts[2])),
                "{reason}"
            );
        }
    }

    #[test]
    fn bad_checksum_reaching_exactly_the_end_in_the_middle_is_corruption() {
        // A middle record's length grown to end exactly at the end of the file: nothing
        // (vacuously, only zeros) follows its declared end, but the whole records it swallowed
        // are still there.
        let (mut bytes, starts) = journal(4);
        let len = u32::try_from(bytes.len() - starts[2] - RECORD_HEADER_LEN).unwrap();
        bytes[starts[2]..starts[2] + 4].copy_from_slice(&len.to_le_bytes());
        let err = decode(&bytes).unwrap_err();
        assert!(
            matches!(err, DecodeError::Corrupt { offset, .. } if offset == starts[2] as u64),
            "{err:?}"
        );
    }

    #[test]
    fn a_zeroed_tail_holds_no_record() {
        // A tail of zeros (a file extended but never written) frames as length 0 with
        // checksum 0: that must never pass as a record, or zeros would hide a tear.
        assert_ne!(checksum([0; 4], 0, &[]), 0);
        assert_ne!(checksum([0; 4], RECORD_VERSION, &[]), 0);
        let (mut bytes, starts) = journal(3);
        bytes.truncate(starts[2] + 20);
        bytes.extend_from_slice(&[0u8; 4096]);
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.records.len(), 2);
        assert_eq!(decoded.torn_at, Some(starts[2] as u64));
    }

    #[test]
    fn unknown_versions_are_refused() {
        let (mut bytes, starts) = journal(2);
        bytes[8] = 9;
        assert_eq!(decode(&bytes).unwrap_err(), DecodeError::UnknownFormat(9));
        bytes[8] = 1;
        // Re-frame record 0 as version 2 with a valid checksum.
        let at = starts[0];
        bytes[at + 8] = 2;
        let len = [bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]];
        let body_end = at + 9 + u32::from_le_bytes(len) as usize;
        let crc = checksum(len, 2, &bytes[at + 9..body_end]);
        bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode(&bytes).unwrap_err(),
            DecodeError::UnknownRecordVersion {
                offset: at as u64,
                found: 2
            }
        );
        assert_eq!(decode(b"not a journal").unwrap_err(), DecodeError::BadMagic);
    }

    mod properties {
        use super::super::*;
        use crate::journal::record::{Launch, ToolFinished, ToolStarted};
        use crate::transcript::ToolStatus;
        use proptest::prelude::*;

        fn record() -> impl Strategy<Value = Record> {
            prop_oneof![
                (any::<u32>(), any::<u64>()).prop_map(|(launch, elapsed_ms)| {
                    Record::Launch(Launch { launch, elapsed_ms })
                }),
                (any::<String>(), any::<u64>()).prop_map(|(call_id, elapsed_ms)| {
                    Record::ToolStarted(ToolStarted {
                        call_id,
                        elapsed_ms,
                    })
                }),
                // Tool output of any bytes: NULs, control characters, text that looks like
                // framing, up to a few KiB.
                (
                    "[a-z0-9]{1,8}",
                    proptest::collection::vec(any::<u8>(), 0..3000),
                    any::<Option<i32>>(),
                )
                    .prop_map(|(call_id, content, exit_code)| {
                        Record::ToolFinished(ToolFinished {
                            call_id,
                            content: String::from_utf8_lossy(&content).into_owned(),
                            status: ToolStatus::Ok,
                            exit_code,
                            duration_ms: 1,
                            truncated_bytes: 0,
                            elapsed_ms: 2,
                        })
                    }),
            ]
        }

        /// A journal of `records` and the offset every record starts at.
        fn encode_all(records: &[Record]) -> (Vec<u8>, Vec<usize>) {
            let mut out = file_header().to_vec();
            let mut starts = Vec::new();
            for record in records {
                starts.push(out.len());
                encode_into(record, &mut out).unwrap();
            }
            (out, starts)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// A journal cut anywhere (then maybe padded with zeros, as a file extended but
            /// never written) reads as exactly its whole records; a cut record is a torn tail.
            #[test]
            fn any_truncation_reads_as_exactly_the_complete_prefix(
                records in proptest::collection::vec(record(), 1..8),
                cut in any::<proptest::sample::Index>(),
                zeros in prop_oneof![Just(0usize), 1usize..64],
            ) {
                let (bytes, starts) = encode_all(&records);
                let cut = FILE_HEADER_LEN + cut.index(bytes.len() - FILE_HEADER_LEN + 1);
                let mut cut_bytes = bytes[..cut].to_vec();
                cut_bytes.resize(cut + zeros, 0);
                let decoded = decode(&cut_bytes).unwrap();
                let whole = starts
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| starts.get(i + 1).copied().unwrap_or(bytes.len()) <= cut)
                    .count();
                let got: Vec<&Record> = decoded.records.iter().map(|(_, r)| r).collect();
                let want: Vec<&Record> = records[..whole].iter().collect();
                prop_assert_eq!(got, want);
                let prefix_end = starts.get(whole).copied().unwrap_or(bytes.len());
                prop_assert_eq!(decoded.valid_len, prefix_end as u64);
                let torn = cut + zeros > prefix_end;
                prop_assert_eq!(decoded.torn_at, torn.then_some(prefix_end as u64));
            }

            /// Any one damaged byte before the last record is an error: never records dropped
            /// as if the tail were torn, never different records read back.
            #[test]
            fn any_damage_before_the_last_record_is_an_error(
                records in proptest::collection::vec(record(), 2..8),
                at in any::<proptest::sample::Index>(),
                flip in 1u8..=255,
            ) {
                let (mut bytes, starts) = encode_all(&records);
                let last = *starts.last().unwrap();
                let at = at.index(last);
                bytes[at] ^= flip;
                let outcome = decode(&bytes);
                prop_assert!(outcome.is_err(), "byte {} ^ {:#04x}: {:?}", at, flip, outcome);
                if at >= FILE_HEADER_LEN {
                    let damaged = starts.iter().rev().find(|s| **s <= at).copied().unwrap();
                    let offset = match outcome.unwrap_err() {
                        DecodeError::Corrupt { offset, .. }
                        | DecodeError::UnknownRecordVersion { offset, .. } => offset,
                        other => return Err(TestCaseError::fail(format!("{other:?}"))),
                    };
                    prop_assert_eq!(offset, damaged as u64);
                }
            }

            /// Damage inside the last record may read as a torn tail (a torn write and a
            /// damaged last record look alike), but never costs more than that record.
            #[test]
            fn damage_to_the_last_record_costs_at_most_that_record(
                records in proptest::collection::vec(record(), 1..8),
                at in any::<proptest::sample::Index>(),
                flip in 1u8..=255,
            ) {
                let (mut bytes, starts) = encode_all(&records);
                let last = *starts.last().unwrap();
                let at = last + at.index(bytes.len() - last);
                bytes[at] ^= flip;
                if let Ok(decoded) = decode(&bytes) {
                    prop_assert_eq!(decoded.records.len(), records.len() - 1);
                    prop_assert_eq!(decoded.torn_at, Some(last as u64));
                }
            }
        }
    }
}
