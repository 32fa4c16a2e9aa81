//! Registry credentials from a `docker login`-style auth file
//! (`{"auths": {"host:port": {"auth": base64("user:password")}}}`, as
//! Docker, Podman and skopeo write it). Read by hand: the format is one map,
//! and the credential-helper programs a full Docker client runs are out of
//! scope. Credentials are returned to the caller only, never logged; an
//! error names the file and the registry, never a secret.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

#[derive(Deserialize)]
struct AuthFile {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

fn default_file() -> Option<PathBuf> {
    if let Some(f) = std::env::var_os("REGISTRY_AUTH_FILE") {
        return Some(PathBuf::from(f));
    }
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let docker = home.join(".docker/config.json");
    docker.is_file().then_some(docker)
}

/// The key's registry: `https://host:port/v1/` and `host:port` both name
/// `host:port`; Docker Hub's keys name `docker.io`.
fn registry_of(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key);
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        other => other,
    }
}

/// The user and password for `registry`, if the auth file has them.
pub fn lookup(file: Option<&Path>, registry: &str) -> Result<Option<(String, String)>, String> {
    let Some(path) = file.map(Path::to_owned).or_else(default_file) else {
        return Ok(None);
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        // The default file need not exist; a named one must.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && file.is_none() => return Ok(None),
        Err(e) => return Err(format!("registry auth file {}: {e}", path.display())),
    };
    let parsed: AuthFile = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "registry auth file {}: not an auth file: {e}",
            path.display()
        )
    })?;
    let want = registry_of(registry);
    let Some(entry) = parsed
        .auths
        .iter()
        .find(|(k, _)| registry_of(k) == want)
        .map(|(_, e)| e)
    else {
        return Ok(None);
    };
    let bad = || {
        format!(
            "registry auth file {}: auths.{want}.auth is not base64 of user:password",
            path.display()
        )
    };
    if let Some(encoded) = &entry.auth {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|_| bad())?;
        let text = String::from_utf8(decoded).map_err(|_| bad())?;
        let (user, password) = text.split_once(':').ok_or_else(bad)?;
        return Ok(Some((user.to_owned(), password.to_owned())));
    }
    match (&entry.username, &entry.password) {
        (Some(u), Some(p)) => Ok(Some((u.clone(), p.clone()))),
        _ => Ok(None),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_found_by_registry_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("auth.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
        std::fs::write(
            &f,
            format!(r#"{{"auths":{{"https://reg.example:5000/v1/":{{"auth":"{auth}"}}}}}}"#),
        )
        .unwrap();
        assert_eq!(
            lookup(Some(&f), "reg.example:5000").unwrap(),
            Some(("alice".into(), "s3cret".into()))
        );
        assert_eq!(lookup(Some(&f), "other.example").unwrap(), None);
        std::fs::write(&f, r#"{"auths":{"reg.example":{"auth":"!!"}}}"#).unwrap();
        let err = lookup(Some(&f), "reg.example").unwrap_err();
        assert!(
            err.contains("auths.reg.example.auth") && !err.contains("!!"),
            "{err}"
        );
        let err = lookup(Some(&dir.path().join("none.json")), "reg.example").unwrap_err();
        assert!(err.contains("none.json"), "{err}");
    }
}
