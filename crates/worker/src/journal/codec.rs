//! Byte layout of the journal, with no I/O: encode one record, decode a whole file.
//!
//! ```text
//! file   = magic "RPWKJRNL" | format u32 LE | record*
//! record = len u32 LE | crc32c u32 LE | version u8 | payload (len bytes of JSON)
//! ```
//! The checksum covers the length, the version and the payload. A record that runs past the
//! end of the file, or fails its checksum with nothing but zero bytes after it, is a torn tail
//! (a write cut short by a crash) and is ignored. A bad record followed by anything else is
//! corruption, reported with its offset: the journal is never guessed at.

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
        if bytes.len() - pos < RECORD_HEADER_LEN {
            torn_at = Some(offset);
            break;
        }
        let len_bytes = [bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]];
        let len = u32::from_le_bytes(len_bytes) as usize;
        let crc = read_u32(bytes, pos + 4);
        let version = bytes[pos + 8];
        let body = pos + RECORD_HEADER_LEN;
        let Some(end) = body.checked_add(len).filter(|end| *end <= bytes.len()) else {
            torn_at = Some(offset);
            break;
        };
        let payload = &bytes[body..end];
        if checksum(len_bytes, version, payload) != crc {
            if bytes[end..].iter().all(|b| *b == 0) {
                torn_at = Some(offset);
                break;
            }
            return Err(DecodeError::Corrupt {
                offset,
                reason: "checksum mismatch".to_owned(),
            });
        }
        if version != RECORD_VERSION {
            return Err(DecodeError::UnknownRecordVersion {
                offset,
                found: version,
            });
        }
        let record = serde_json::from_slice(payload).map_err(|e| DecodeError::Corrupt {
            offset,
            reason: format!("undecodable record: {e}"),
        })?;
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
}
