//! The run's route key on disk (`rollpoint_proto::route`): made once per
//! run, 32 bytes from the kernel's random source, kept across resumes so a
//! gateway restarted on the same run checks the same secrets. Mode 0600,
//! written atomically; never printed.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use rollpoint_proto::route::RouteKey;

use crate::errors::GatewayError;

fn error(path: &Path, source: impl Into<rollpoint_proto::Cause>) -> GatewayError {
    GatewayError::RouteKey {
        path: path.to_owned(),
        source: source.into(),
    }
}

/// Reads the route key at `path`.
pub fn load(path: &Path) -> Result<RouteKey, GatewayError> {
    let text = std::fs::read_to_string(path).map_err(|e| error(path, e))?;
    RouteKey::decode(&text).map_err(|e| error(path, e))
}

/// Reads the route key at `path`, or makes one there when there is none.
pub fn load_or_create(path: &Path) -> Result<RouteKey, GatewayError> {
    match std::fs::metadata(path) {
        Ok(_) => return load(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(error(path, e)),
    }
    let mut bytes = [0_u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| error(path, format!("read /dev/urandom: {e}")))?;
    let key = RouteKey::from_bytes(bytes);
    let write = || -> std::io::Result<()> {
        let mut file = atomic_write_file::AtomicWriteFile::open(path)?;
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(key.encode().as_bytes())?;
        file.commit()
    };
    write().map_err(|e| error(path, e))?;
    Ok(key)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("route.key");
        let made = load_or_create(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_or_create(&path).unwrap(), made);
        assert_eq!(load(&path).unwrap(), made);
        std::fs::write(&path, "{\"v\":9,\"key\":\"\"}").unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("route.key") && err.contains('9'), "{err}");
    }
}
