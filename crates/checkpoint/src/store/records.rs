//! One participant's share of a checkpoint: its records as JSON lines in
//! `records-<sha256>.jsonl`, hashed while written, then `manifest.json`
//! naming the file, its digest and its count, published last and never
//! replaced. Reading verifies all of it over the whole file while keeping
//! only the records a restore asks for.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{BufRead as _, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::fsio;
use super::versioned;
use crate::errors::StoreError;
use crate::participant::{AttemptKey, Kind, record_key};

/// The manifest format this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;
/// The manifest's file name in a participant's directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// What a participant wrote for a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub version: u32,
    pub checkpoint: String,
    pub kind: Kind,
    pub instance: String,
    /// `records-<sha256>.jsonl`, beside the manifest.
    pub records_file: String,
    pub records_sha256: String,
    pub record_count: u64,
}

/// `dir/checkpoints/<checkpoint>/<kind>/<instance>`.
pub fn participant_dir(run_dir: &Path, checkpoint: &str, kind: Kind, instance: &str) -> PathBuf {
    super::checkpoint_dir(run_dir, checkpoint)
        .join(kind.as_str())
        .join(instance)
}

/// Writes `records` as participant `kind`/`instance`'s share of
/// `checkpoint` and publishes its manifest. Every record must be an object
/// naming a key in `scope`. When the manifest is already published (a retry
/// of the same commit) the published one is returned if it names the same
/// records, and a conflict is reported otherwise.
pub fn write(
    run_dir: &Path,
    checkpoint: &str,
    kind: Kind,
    instance: &str,
    scope: &[AttemptKey],
    records: &[Value],
) -> Result<Manifest, StoreError> {
    super::check_component("checkpoint", checkpoint)?;
    super::check_component("instance", instance)?;
    let scope: BTreeSet<&AttemptKey> = scope.iter().collect();
    for (index, record) in records.iter().enumerate() {
        let key = record_key(record).map_err(|message| StoreError::Export { index, message })?;
        if !scope.contains(&key) {
            return Err(StoreError::Export {
                index,
                message: format!("key \"{key}\" is outside the commit scope"),
            });
        }
    }

    let dir = participant_dir(run_dir, checkpoint, kind, instance);
    fsio::create_dirs(&dir)?;
    let temp = fsio::temp_path(&dir, "records");
    let written = write_lines(&temp, records);
    let (digest, count) = match written {
        Ok(done) => done,
        Err(e) => {
            let _ignored = fs::remove_file(&temp);
            return Err(e);
        }
    };
    let records_file = format!("records-{digest}.jsonl");
    let final_path = dir.join(&records_file);
    if let Err(e) = fs::rename(&temp, &final_path) {
        let _ignored = fs::remove_file(&temp);
        return Err(StoreError::io(&final_path)(e));
    }
    fsio::fsync_dir(&dir)?;

    let manifest = Manifest {
        version: MANIFEST_VERSION,
        checkpoint: checkpoint.to_owned(),
        kind,
        instance: instance.to_owned(),
        records_file,
        records_sha256: digest,
        record_count: count,
    };
    let manifest_path = dir.join(MANIFEST_FILE);
    let bytes = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| StoreError::json(manifest_path.clone(), e))?;
    if fsio::publish(&manifest_path, &bytes)? {
        return Ok(manifest);
    }
    let existing = read_manifest(&manifest_path, checkpoint, kind, instance)?;
    if existing.records_sha256 == manifest.records_sha256
        && existing.record_count == manifest.record_count
    {
        Ok(existing)
    } else {
        Err(StoreError::invalid(
            manifest_path,
            format!(
                "already published with other records (sha256 {}), not replaced",
                existing.records_sha256
            ),
        ))
    }
}

/// Writes one JSON line per record to a new file, hashing as it goes, and
/// fsyncs it. Returns the hex digest and the count.
fn write_lines(path: &Path, records: &[Value]) -> Result<(String, u64), StoreError> {
    struct Hashing<W> {
        inner: W,
        hash: Sha256,
    }
    impl<W: Write> Write for Hashing<W> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = self.inner.write(buf)?;
            self.hash.update(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }

    let file = fsio::create_new(path)?;
    let mut out = Hashing {
        inner: BufWriter::new(file),
        hash: Sha256::new(),
    };
    let io = StoreError::io(path);
    for record in records {
        serde_json::to_writer(&mut out, record)
            .map_err(|e| StoreError::json(path.to_owned(), e))?;
        if let Err(e) = out.write_all(b"\n") {
            return Err(io(e));
        }
    }
    let Hashing { inner, hash } = out;
    let file = inner
        .into_inner()
        .map_err(|e| StoreError::io(path)(e.into_error()))?;
    file.sync_all().map_err(StoreError::io(path))?;
    Ok((
        rollpoint_proto::hex::hex(&hash.finalize()),
        records.len() as u64,
    ))
}

/// Reads and checks the manifest at `path`: version, checkpoint, kind,
/// instance and the records file's name.
pub fn read_manifest(
    path: &Path,
    checkpoint: &str,
    kind: Kind,
    instance: &str,
) -> Result<Manifest, StoreError> {
    let m: Manifest = versioned::decode(path, &fsio::read(path)?, MANIFEST_VERSION)?;
    let mismatch = |field, expected: &str, found: &str| StoreError::Mismatch {
        path: path.to_owned(),
        field,
        expected: expected.to_owned(),
        found: found.to_owned(),
    };
    if m.checkpoint != checkpoint {
        return Err(mismatch("checkpoint", checkpoint, &m.checkpoint));
    }
    if m.kind != kind {
        return Err(mismatch("kind", kind.as_str(), m.kind.as_str()));
    }
    if m.instance != instance {
        return Err(mismatch("instance", instance, &m.instance));
    }
    let digest_ok =
        m.records_sha256.len() == 64 && m.records_sha256.bytes().all(|b| b.is_ascii_hexdigit());
    if !digest_ok || m.records_file != format!("records-{}.jsonl", m.records_sha256) {
        return Err(mismatch(
            "records_file",
            "records-<records_sha256>.jsonl",
            &m.records_file,
        ));
    }
    Ok(m)
}

/// Reads participant `kind`/`instance`'s share of `checkpoint`: checks the
/// manifest, then the records file's digest and count over the whole file.
/// Keeps the records whose key is in `keep` (all when `None`).
pub fn read(
    run_dir: &Path,
    checkpoint: &str,
    kind: Kind,
    instance: &str,
    keep: Option<&BTreeSet<AttemptKey>>,
) -> Result<(Manifest, Vec<Value>), StoreError> {
    super::check_component("checkpoint", checkpoint)?;
    super::check_component("instance", instance)?;
    let dir = participant_dir(run_dir, checkpoint, kind, instance);
    let manifest = read_manifest(&dir.join(MANIFEST_FILE), checkpoint, kind, instance)?;
    let path = dir.join(&manifest.records_file);
    let records = read_records(&path, &manifest, keep)?;
    Ok((manifest, records))
}

fn read_records(
    path: &Path,
    manifest: &Manifest,
    keep: Option<&BTreeSet<AttemptKey>>,
) -> Result<Vec<Value>, StoreError> {
    let mut reader = BufReader::new(File::open(path).map_err(StoreError::io(path))?);
    let mut hash = Sha256::new();
    let mut line = Vec::new();
    let mut count: u64 = 0;
    let mut kept = Vec::new();
    // Problems with a line are reported only once the digest matches: a
    // damaged file is named as damaged, not by its first odd line.
    let mut first_problem: Option<StoreError> = None;
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(StoreError::io(path))?;
        if n == 0 {
            break;
        }
        hash.update(&line);
        count += 1;
        if first_problem.is_some() {
            continue;
        }
        let problem = |message: String| StoreError::Record {
            path: path.to_owned(),
            line: count,
            message,
        };
        if line.last() != Some(&b'\n') {
            first_problem = Some(problem("does not end in a newline".to_owned()));
            continue;
        }
        match serde_json::from_slice::<Value>(&line) {
            Ok(record) => match record_key(&record) {
                Ok(key) => {
                    if keep.is_none_or(|k| k.contains(&key)) {
                        kept.push(record);
                    }
                }
                Err(message) => first_problem = Some(problem(message)),
            },
            Err(e) => first_problem = Some(problem(format!("not valid json: {e}"))),
        }
    }
    let digest = rollpoint_proto::hex::hex(&hash.finalize());
    if digest != manifest.records_sha256 {
        return Err(StoreError::Digest {
            path: path.to_owned(),
            expected: manifest.records_sha256.clone(),
            found: digest,
        });
    }
    if count != manifest.record_count {
        return Err(StoreError::Count {
            path: path.to_owned(),
            expected: manifest.record_count,
            found: count,
        });
    }
    match first_problem {
        Some(e) => Err(e),
        None => Ok(kept),
    }
}
