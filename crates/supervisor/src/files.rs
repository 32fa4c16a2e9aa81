//! Durable, private files: every write is temp file, fsync, rename, fsync of
//! the directory, with mode 0600.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use atomic_write_file::AtomicWriteFile;

use crate::errors::Error;

/// Writes `bytes` to `path` atomically and durably, mode 0600.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let io = |source| Error::Write {
        path: path.to_owned(),
        source,
    };
    let mut file = AtomicWriteFile::open(path).map_err(io)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.commit().map_err(io)
}

/// Serialises `value` as one JSON document and writes it atomically.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| Error::Encode {
        path: path.to_owned(),
        source: e,
    })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}
