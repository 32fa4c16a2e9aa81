//! The archive format, pure: POSIX pax (ustar headers with extended-header
//! records), the dialect GNU tar reads, so an archive can still be listed
//! or unpacked by hand (`tar -xpf`, where names fit in PATH_MAX). What it
//! carries beyond ustar goes in records: names and link targets of any
//! length as raw bytes (`hdrcharset=BINARY`), nanosecond `atime`/`mtime`,
//! every xattr as `SCHILY.xattr.<name>`, holes as GNU sparse format 1.0
//! (a map of data runs before the data), a socket as a FIFO marked
//! `ROLLPOINT.type=socket` (tar has no socket type). A global header opens
//! the archive with its version (`ROLLPOINT.archive=2`) and another closes
//! it with the CRC-32C of every byte before it, so a truncated or damaged
//! archive is refused rather than half restored.
//!
//! Only encoding and decoding live here; the walk and the restore that
//! move the bytes are `walk` and `restore`.

use crate::errors::ArchiveFault;

use super::entry::{Entry, Kind, Time};

pub(super) const BLOCK: usize = 512;

/// Extended-header records, (key, value), in archive order.
pub(super) type Records = Vec<(Vec<u8>, Vec<u8>)>;
/// Data runs of a sparse file: (offset, length).
pub(super) type Runs = Vec<(u64, u64)>;

/// The archive version this build writes and reads.
pub(super) const ARCHIVE_VERSION: &str = "2";
const ARCHIVE_KEY: &[u8] = b"ROLLPOINT.archive";
const CRC_KEY: &[u8] = b"ROLLPOINT.crc32c";
const TYPE_KEY: &[u8] = b"ROLLPOINT.type";
const XATTR_PREFIX: &[u8] = b"SCHILY.xattr.";

const TYPE_FILE: u8 = b'0';
const TYPE_LINK: u8 = b'1';
const TYPE_SYMLINK: u8 = b'2';
const TYPE_CHAR: u8 = b'3';
const TYPE_BLOCK: u8 = b'4';
const TYPE_DIR: u8 = b'5';
const TYPE_FIFO: u8 = b'6';
pub(super) const TYPE_PAX: u8 = b'x';
pub(super) const TYPE_GLOBAL: u8 = b'g';

/// Zero bytes that pad `len` bytes of data to a whole block.
pub(super) fn padding(len: u64) -> usize {
    let block = BLOCK as u64;
    usize::try_from((block - len % block) % block).unwrap_or(0)
}

fn digits(n: usize) -> usize {
    n.to_string().len()
}

/// Appends one `"<len> <key>=<value>\n"` record; `len` counts itself.
fn record(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    let base = key.len() + value.len() + 3;
    let mut len = base + digits(base);
    if digits(len) != digits(base) {
        len = base + digits(len);
    }
    out.extend_from_slice(len.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key);
    out.push(b'=');
    out.extend_from_slice(value);
    out.push(b'\n');
}

/// True when `value` fits a ustar numeric field of `width` bytes (octal
/// digits and a NUL).
fn fits(value: u64, width: usize) -> bool {
    let bits = 3 * u32::try_from(width - 1).unwrap_or(0);
    bits >= 64 || value < 1 << bits
}

fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    if text.len() == width {
        field[..width].copy_from_slice(text.as_bytes());
    } else {
        field[..width].fill(b'0');
    }
    field[width] = 0;
}

/// True when `name` can stand in a ustar name field of `width` as is.
fn plain(name: &[u8], width: usize) -> bool {
    name.len() < width && name.iter().all(|b| (0x20..0x7f).contains(b))
}

/// The ustar field for `name`: itself when plain, else a printable stand-in
/// (the real name is in a `path`/`linkpath` record).
fn field_text(name: &[u8], width: usize) -> Vec<u8> {
    name.iter()
        .take(width - 1)
        .map(|&b| if (0x20..0x7f).contains(&b) { b } else { b'_' })
        .collect()
}

/// Fields of one ustar header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) name: Vec<u8>,
    pub(super) mode: u32,
    pub(super) uid: u64,
    pub(super) gid: u64,
    pub(super) size: u64,
    pub(super) mtime: u64,
    pub(super) typeflag: u8,
    pub(super) linkname: Vec<u8>,
    pub(super) devmajor: u64,
    pub(super) devminor: u64,
}

fn encode_header(h: &Header) -> [u8; BLOCK] {
    let mut b = [0_u8; BLOCK];
    let name = field_text(&h.name, 100);
    b[..name.len()].copy_from_slice(&name);
    octal(&mut b[100..108], u64::from(h.mode));
    octal(&mut b[108..116], h.uid);
    octal(&mut b[116..124], h.gid);
    octal(&mut b[124..136], h.size);
    octal(&mut b[136..148], h.mtime);
    b[156] = h.typeflag;
    let link = field_text(&h.linkname, 100);
    b[157..157 + link.len()].copy_from_slice(&link);
    b[257..263].copy_from_slice(b"ustar\0");
    b[263..265].copy_from_slice(b"00");
    octal(&mut b[329..337], h.devmajor);
    octal(&mut b[337..345], h.devminor);
    b[148..156].fill(b' ');
    let sum: u64 = b.iter().map(|&x| u64::from(x)).sum();
    octal(&mut b[148..155], sum);
    b
}

/// An extended header (`x` for the next entry, `g` for the archive) with
/// its records, padded.
fn extended(out: &mut Vec<u8>, typeflag: u8, records: &[u8]) {
    let header = Header {
        name: if typeflag == TYPE_GLOBAL {
            b"pax_global_header".to_vec()
        } else {
            b"././@PaxHeader".to_vec()
        },
        mode: 0o644,
        size: records.len() as u64,
        typeflag,
        ..Header::default()
    };
    out.extend_from_slice(&encode_header(&header));
    out.extend_from_slice(records);
    out.resize(out.len() + padding(records.len() as u64), 0);
}

/// The header that opens an archive: its version, and that names are raw
/// bytes.
pub(super) fn encode_opening(out: &mut Vec<u8>) {
    let mut records = Vec::new();
    record(&mut records, ARCHIVE_KEY, ARCHIVE_VERSION.as_bytes());
    record(&mut records, b"hdrcharset", b"BINARY");
    extended(out, TYPE_GLOBAL, &records);
}

/// The header that closes an archive: the CRC-32C of every byte before it,
/// then the two zero blocks of a tar end.
pub(super) fn encode_closing(out: &mut Vec<u8>, crc: u32) {
    let mut records = Vec::new();
    record(&mut records, CRC_KEY, format!("{crc:08x}").as_bytes());
    extended(out, TYPE_GLOBAL, &records);
    out.resize(out.len() + 2 * BLOCK, 0);
}

fn time_text(t: Time) -> String {
    if t.sec < 0 && t.nsec > 0 {
        format!("-{}.{:09}", -(t.sec + 1), 1_000_000_000 - t.nsec)
    } else {
        format!("{}.{:09}", t.sec, t.nsec)
    }
}

/// GNU sparse 1.0 map: the run count, then offset and length of each run,
/// one number a line, padded to a block. A file ending in a hole ends with
/// a run of length 0 at its size, as GNU tar writes it.
fn sparse_map(extents: &[(u64, u64)], size: u64) -> Vec<u8> {
    let mut runs = extents.to_vec();
    if runs.last().is_none_or(|(off, len)| off + len < size) {
        runs.push((size, 0));
    }
    let mut text = format!("{}\n", runs.len());
    for (off, len) in runs {
        text.push_str(&format!("{off}\n{len}\n"));
    }
    let mut out = text.into_bytes();
    out.resize(out.len() + padding(out.len() as u64), 0);
    out
}

/// Appends `entry`'s headers (and a sparse file's map); its data follows,
/// then [`padding`] of [`Entry::data_len`].
pub(super) fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    let mut records = Vec::new();
    let mut header = Header {
        name: entry.path.clone(),
        mode: entry.mode & 0o7777,
        uid: u64::from(entry.uid),
        gid: u64::from(entry.gid),
        mtime: u64::try_from(entry.mtime.sec).unwrap_or(0),
        ..Header::default()
    };
    let mut map = Vec::new();
    match &entry.kind {
        Kind::Dir => header.typeflag = TYPE_DIR,
        Kind::File { size, extents } => {
            header.typeflag = TYPE_FILE;
            if let Some(extents) = extents {
                map = sparse_map(extents, *size);
                record(&mut records, b"GNU.sparse.major", b"1");
                record(&mut records, b"GNU.sparse.minor", b"0");
                record(&mut records, b"GNU.sparse.name", &entry.path);
                record(
                    &mut records,
                    b"GNU.sparse.realsize",
                    size.to_string().as_bytes(),
                );
                let base = entry.path.rsplit(|&b| b == b'/').next().unwrap_or(b"f");
                header.name = [b"GNUSparseFile.0/".as_slice(), base].concat();
            }
        }
        Kind::Symlink(target) => {
            header.typeflag = TYPE_SYMLINK;
            header.linkname.clone_from(target);
        }
        Kind::HardLink(target) => {
            header.typeflag = TYPE_LINK;
            header.linkname.clone_from(target);
        }
        Kind::Char(major, minor) | Kind::Block(major, minor) => {
            header.typeflag = if matches!(entry.kind, Kind::Char(..)) {
                TYPE_CHAR
            } else {
                TYPE_BLOCK
            };
            header.devmajor = *major;
            header.devminor = *minor;
        }
        Kind::Fifo => header.typeflag = TYPE_FIFO,
        Kind::Socket => {
            header.typeflag = TYPE_FIFO;
            record(&mut records, TYPE_KEY, b"socket");
        }
    }
    header.size = map.len() as u64 + entry.data_len();
    if !plain(&entry.path, 100) || !map.is_empty() {
        record(&mut records, b"path", &entry.path);
    }
    if !plain(&header.linkname, 100) {
        record(&mut records, b"linkpath", &header.linkname);
    }
    for (key, value, width) in [
        (&b"size"[..], header.size, 12),
        (b"uid", header.uid, 8),
        (b"gid", header.gid, 8),
    ] {
        if !fits(value, width) {
            record(&mut records, key, value.to_string().as_bytes());
        }
    }
    record(&mut records, b"mtime", time_text(entry.mtime).as_bytes());
    record(&mut records, b"atime", time_text(entry.atime).as_bytes());
    for (name, value) in &entry.xattrs {
        record(&mut records, &[XATTR_PREFIX, name].concat(), value);
    }
    extended(out, TYPE_PAX, &records);
    out.extend_from_slice(&encode_header(&header));
    out.extend_from_slice(&map);
}

pub(super) fn is_zero(block: &[u8]) -> bool {
    block.iter().all(|&b| b == 0)
}

fn parse_octal(field: &[u8], name: &'static str) -> Result<u64, ArchiveFault> {
    let text: Vec<u8> = field
        .iter()
        .copied()
        .take_while(|&b| b != 0)
        .filter(|&b| b != b' ')
        .collect();
    if text.is_empty() {
        return Ok(0);
    }
    std::str::from_utf8(&text)
        .ok()
        .and_then(|t| u64::from_str_radix(t, 8).ok())
        .ok_or(ArchiveFault::Field { field: name })
}

fn cstr(field: &[u8]) -> Vec<u8> {
    field.iter().copied().take_while(|&b| b != 0).collect()
}

/// Parses a ustar header, checking its checksum.
pub(super) fn decode_header(b: &[u8; BLOCK]) -> Result<Header, ArchiveFault> {
    let recorded = parse_octal(&b[148..156], "chksum")?;
    let sum: u64 = b
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(x)
            }
        })
        .sum();
    if sum != recorded {
        return Err(ArchiveFault::HeaderChecksum);
    }
    Ok(Header {
        name: cstr(&b[..100]),
        mode: u32::try_from(parse_octal(&b[100..108], "mode")? & 0o7777).unwrap_or(0),
        uid: parse_octal(&b[108..116], "uid")?,
        gid: parse_octal(&b[116..124], "gid")?,
        size: parse_octal(&b[124..136], "size")?,
        mtime: parse_octal(&b[136..148], "mtime")?,
        typeflag: b[156],
        linkname: cstr(&b[157..257]),
        devmajor: parse_octal(&b[329..337], "devmajor")?,
        devminor: parse_octal(&b[337..345], "devminor")?,
    })
}

/// Splits extended-header data into (key, value) records.
pub(super) fn decode_records(mut data: &[u8]) -> Result<Records, ArchiveFault> {
    let mut out = Vec::new();
    while !data.is_empty() && data[0] != 0 {
        let space = data
            .iter()
            .position(|&b| b == b' ')
            .ok_or(ArchiveFault::Record)?;
        let len: usize = std::str::from_utf8(&data[..space])
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or(ArchiveFault::Record)?;
        if len <= space + 1 || len > data.len() || data[len - 1] != b'\n' {
            return Err(ArchiveFault::Record);
        }
        let body = &data[space + 1..len - 1];
        let eq = body
            .iter()
            .position(|&b| b == b'=')
            .ok_or(ArchiveFault::Record)?;
        out.push((body[..eq].to_vec(), body[eq + 1..].to_vec()));
        data = &data[len..];
    }
    Ok(out)
}

fn number(value: &[u8], field: &'static str) -> Result<u64, ArchiveFault> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or(ArchiveFault::Field { field })
}

fn parse_time(value: &[u8], field: &'static str) -> Result<Time, ArchiveFault> {
    let bad = || ArchiveFault::Field { field };
    let text = std::str::from_utf8(value).map_err(|_| bad())?;
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let int: i64 = int.parse().map_err(|_| bad())?;
    let frac_digits: String = frac.chars().take(9).collect();
    if !frac_digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let nsec: u32 = format!("{frac_digits:0<9}").parse().map_err(|_| bad())?;
    Ok(match (negative, nsec) {
        (false, _) => Time { sec: int, nsec },
        (true, 0) => Time { sec: -int, nsec: 0 },
        (true, _) => Time {
            sec: -int - 1,
            nsec: 1_000_000_000 - nsec,
        },
    })
}

/// Global records: the archive's version (opening header) or its closing
/// checksum, whichever the header holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Global {
    pub(super) version: Option<Vec<u8>>,
    pub(super) crc: Option<u32>,
}

pub(super) fn decode_global(records: &[(Vec<u8>, Vec<u8>)]) -> Result<Global, ArchiveFault> {
    let mut global = Global::default();
    for (key, value) in records {
        if key == ARCHIVE_KEY {
            global.version = Some(value.clone());
        } else if key == CRC_KEY {
            let text = std::str::from_utf8(value).map_err(|_| ArchiveFault::Record)?;
            global.crc = Some(u32::from_str_radix(text, 16).map_err(|_| ArchiveFault::Record)?);
        }
    }
    Ok(global)
}

/// An entry read back: its metadata, and how many bytes of the archive
/// follow its header (a sparse file's map included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decoded {
    pub(super) entry: Entry,
    pub(super) stored: u64,
    /// True when a sparse map comes before the data.
    pub(super) sparse: bool,
}

/// Builds the entry a header and its extended records describe.
pub(super) fn decode_entry(
    h: Header,
    records: &[(Vec<u8>, Vec<u8>)],
) -> Result<Decoded, ArchiveFault> {
    let mut path = h.name;
    let mut link = h.linkname;
    let mut stored = h.size;
    let (mut uid, mut gid) = (h.uid, h.gid);
    let mut mtime = Time {
        sec: i64::try_from(h.mtime).unwrap_or(0),
        nsec: 0,
    };
    let mut atime = mtime;
    let mut sparse_name = None;
    let mut realsize = None;
    let mut socket = false;
    let mut xattrs = Vec::new();
    for (key, value) in records {
        match key.as_slice() {
            b"path" => path.clone_from(value),
            b"linkpath" => link.clone_from(value),
            b"size" => stored = number(value, "size")?,
            b"uid" => uid = number(value, "uid")?,
            b"gid" => gid = number(value, "gid")?,
            b"mtime" => mtime = parse_time(value, "mtime")?,
            b"atime" => atime = parse_time(value, "atime")?,
            b"GNU.sparse.name" => sparse_name = Some(value.clone()),
            b"GNU.sparse.realsize" => realsize = Some(number(value, "GNU.sparse.realsize")?),
            k if k == TYPE_KEY => socket = value == b"socket",
            k if k.starts_with(XATTR_PREFIX) => {
                xattrs.push((k[XATTR_PREFIX.len()..].to_vec(), value.clone()));
            }
            _ => {}
        }
    }
    if let Some(name) = sparse_name {
        path = name;
    }
    let kind = match h.typeflag {
        TYPE_FILE | 0 => Kind::File {
            size: realsize.unwrap_or(stored),
            extents: realsize.map(|_| Vec::new()),
        },
        TYPE_LINK => Kind::HardLink(link),
        TYPE_SYMLINK => Kind::Symlink(link),
        TYPE_CHAR => Kind::Char(h.devmajor, h.devminor),
        TYPE_BLOCK => Kind::Block(h.devmajor, h.devminor),
        TYPE_DIR => Kind::Dir,
        TYPE_FIFO if socket => Kind::Socket,
        TYPE_FIFO => Kind::Fifo,
        other => return Err(ArchiveFault::UnknownType(other)),
    };
    let id = |v: u64, field| u32::try_from(v).map_err(|_| ArchiveFault::Field { field });
    Ok(Decoded {
        sparse: realsize.is_some(),
        entry: Entry {
            path,
            kind,
            mode: h.mode,
            uid: id(uid, "uid")?,
            gid: id(gid, "gid")?,
            atime,
            mtime,
            xattrs,
        },
        stored,
    })
}

/// Parses a sparse map from the blocks read so far: `None` while it needs
/// another block, else the runs and the bytes the map takes (padded).
pub(super) fn decode_sparse_map(text: &[u8]) -> Option<Result<(Runs, usize), ArchiveFault>> {
    let mut numbers = Vec::new();
    let mut rest = text;
    let mut used = 0;
    loop {
        if let Some(&count) = numbers.first()
            && numbers.len() as u64 == 1 + 2 * count
        {
            let runs = numbers[1..].chunks(2).map(|p| (p[0], p[1])).collect();
            return Some(Ok((runs, used + padding(used as u64))));
        }
        let newline = rest.iter().position(|&b| b == b'\n')?;
        match number(&rest[..newline], "GNU sparse map") {
            Ok(n) => numbers.push(n),
            Err(e) => return Some(Err(e)),
        }
        used += newline + 1;
        rest = &rest[newline + 1..];
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn records_count_their_own_length() {
        let mut out = Vec::new();
        record(&mut out, b"path", &[b'a'; 90]);
        assert_eq!(&out[..3], b"99 ");
        assert_eq!(out.len(), 99);
        // One byte more and the length needs a third digit.
        let mut out = Vec::new();
        record(&mut out, b"path", &[b'a'; 91]);
        assert_eq!(&out[..4], b"101 ");
        assert_eq!(out.len(), 101);
        let mut out = Vec::new();
        record(&mut out, b"k", b"v\nw");
        assert_eq!(
            decode_records(&out).unwrap(),
            [(b"k".to_vec(), b"v\nw".to_vec())]
        );
    }

    #[test]
    fn times_keep_nanoseconds_both_sides_of_the_epoch() {
        for t in [
            Time {
                sec: 1_600_000_000,
                nsec: 123_456_789,
            },
            Time {
                sec: -2,
                nsec: 250_000_000,
            },
            Time { sec: -3, nsec: 0 },
            Time { sec: 0, nsec: 1 },
        ] {
            assert_eq!(
                parse_time(time_text(t).as_bytes(), "t").unwrap(),
                t,
                "{t:?}"
            );
        }
    }

    fn roundtrip(entry: &Entry) -> Decoded {
        let mut out = Vec::new();
        encode_entry(entry, &mut out);
        let pax: [u8; BLOCK] = out[..BLOCK].try_into().unwrap();
        let pax = decode_header(&pax).unwrap();
        assert_eq!(pax.typeflag, TYPE_PAX);
        let len = usize::try_from(pax.size).unwrap();
        let records = decode_records(&out[BLOCK..BLOCK + len]).unwrap();
        let at = BLOCK + len + padding(pax.size);
        let header: [u8; BLOCK] = out[at..at + BLOCK].try_into().unwrap();
        let decoded = decode_entry(decode_header(&header).unwrap(), &records).unwrap();
        if decoded.sparse {
            let (runs, used) = decode_sparse_map(&out[at + BLOCK..]).unwrap().unwrap();
            assert_eq!(used, out.len() - at - BLOCK);
            assert_eq!(decoded.stored, used as u64 + entry.data_len());
            let Kind::File {
                extents: Some(extents),
                ..
            } = &entry.kind
            else {
                panic!("sparse")
            };
            assert_eq!(&runs[..extents.len()], extents.as_slice());
        }
        decoded
    }

    #[test]
    fn entries_round_trip_with_raw_names_xattrs_and_holes() {
        let long: Vec<u8> = (0..600)
            .flat_map(|_| *b"abcdefghi/")
            .chain(*b"x\n\xff")
            .collect();
        let mut entry = Entry {
            path: long.clone(),
            kind: Kind::File {
                size: 1 << 30,
                extents: Some(vec![(0, 4096), (1 << 20, 8192)]),
            },
            mode: 0o4755,
            uid: 3_000_000,
            gid: 5,
            atime: Time {
                sec: 1_700_000_000,
                nsec: 7,
            },
            mtime: Time {
                sec: 1_600_000_000,
                nsec: 999_999_999,
            },
            xattrs: vec![
                (b"trusted.overlay.opaque".to_vec(), b"y".to_vec()),
                (
                    b"security.capability".to_vec(),
                    vec![1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0],
                ),
            ],
        };
        let decoded = roundtrip(&entry);
        let Kind::File { size, .. } = decoded.entry.kind else {
            panic!()
        };
        assert_eq!(size, 1 << 30);
        entry.kind = decoded.entry.kind.clone();
        assert_eq!(decoded.entry, entry);

        for kind in [
            Kind::Dir,
            Kind::File {
                size: 10,
                extents: None,
            },
            Kind::Symlink(long.clone()),
            Kind::HardLink(b"a/b".to_vec()),
            Kind::Char(0, 0),
            Kind::Block(8, 1_000_000),
            Kind::Fifo,
            Kind::Socket,
        ] {
            let entry = Entry {
                kind,
                path: b"plain/name".to_vec(),
                ..entry.clone()
            };
            assert_eq!(roundtrip(&entry).entry, entry);
        }
    }

    #[test]
    fn a_damaged_header_is_refused() {
        let entry = Entry {
            path: b"f".to_vec(),
            kind: Kind::Fifo,
            mode: 0o644,
            uid: 0,
            gid: 0,
            atime: Time::default(),
            mtime: Time::default(),
            xattrs: Vec::new(),
        };
        let mut out = Vec::new();
        encode_entry(&entry, &mut out);
        out[3] ^= 1;
        let block: [u8; BLOCK] = out[..BLOCK].try_into().unwrap();
        assert!(matches!(
            decode_header(&block),
            Err(ArchiveFault::HeaderChecksum)
        ));
    }
}
