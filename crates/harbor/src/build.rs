//! `environment/Dockerfile` built with buildah into an OCI archive in the
//! image cache, named by the digest of its build context, so a dataset's
//! image is built once and every sample, fork and resume of the run (and
//! of later runs sharing the cache) uses the same archive.
//!
//! buildah keeps its own storage under the cache (`vfs`, chroot
//! isolation), so nothing of the host's container storage is touched.
//! Registries on loopback, and those the run names insecure, are reached
//! over plain HTTP, as the run's own image pulls do.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use crate::errors::HarborError;

/// Bumped when what goes into a build's digest changes.
const BUILD_KEY_VERSION: &str = "rollpoint-harbor-build/1";

/// Builds environments.
#[derive(Debug, Clone)]
pub struct Builder {
    /// `<cache>/builds/` holds the archives, their logs and buildah's storage.
    pub cache: PathBuf,
    /// Registries (`host:port`) reached over plain HTTP besides loopback ones.
    pub insecure: Vec<String>,
    /// A `docker login`-style auth file for the base images' registries.
    pub auth_file: Option<PathBuf>,
}

/// A built environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// The OCI archive (mode 0600).
    pub archive: PathBuf,
    /// The digest of the build's inputs, hex.
    pub key: String,
    /// Found in the cache, not built now.
    pub reused: bool,
}

impl Builder {
    fn dir(&self) -> PathBuf {
        self.cache.join("builds")
    }

    /// Builds `context/Dockerfile` (or finds it built); `task` names it in
    /// errors; a build running over `timeout` is killed.
    pub fn build(
        &self,
        task: &str,
        context: &Path,
        timeout: Duration,
    ) -> Result<Built, HarborError> {
        let key = context_key(context)?;
        let dir = self.dir();
        create_private_dir(&dir)?;
        let archive = dir.join(format!("{key}.oci.tar"));
        let lock_path = dir.join(format!("{key}.lock"));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| HarborError::io(&lock_path, e))?;
        // Another run building the same context waits here, then finds it.
        lock.lock().map_err(|e| HarborError::io(&lock_path, e))?;
        if archive.is_file() {
            return Ok(Built {
                archive,
                key,
                reused: true,
            });
        }
        let failed = |message: String| HarborError::Build {
            task: task.to_owned(),
            message,
        };
        let tag = format!("localhost/rollpoint-harbor:{}", &key[..16]);
        let tmp = dir.join(format!("{key}.oci.tar.tmp-{}", std::process::id()));
        let log_path = dir.join(format!("{key}.log"));
        let conf = dir.join(format!("{key}.registries.conf"));
        write_file(
            &conf,
            registries_conf(&context.join("Dockerfile"), &self.insecure)?.as_bytes(),
        )?;
        let deadline = Instant::now() + timeout;
        let mut bud = self.buildah(&conf);
        bud.args(["bud", "--isolation", "chroot", "--layers=false", "-f"])
            .arg(context.join("Dockerfile"))
            .args(["-t", &tag]);
        if let Some(auth) = &self.auth_file {
            bud.arg("--authfile").arg(auth);
        }
        bud.arg(context);
        let step = |cmd: &mut Command, what: &str| -> Result<(), HarborError> {
            match run_logged(cmd, &log_path, deadline)
                .map_err(|e| failed(format!("{what}: {e}")))?
            {
                Some(true) => Ok(()),
                Some(false) => Err(failed(format!(
                    "`buildah {what}` failed; its log {}: {}",
                    log_path.display(),
                    log_tail(&log_path)
                ))),
                None => Err(HarborError::BuildTimeout {
                    task: task.to_owned(),
                    seconds: timeout.as_secs(),
                }),
            }
        };
        step(&mut bud, "bud")?;
        let mut push = self.buildah(&conf);
        push.args(["push", "--quiet", &tag])
            .arg(format!("oci-archive:{}", tmp.display()));
        let pushed = step(&mut push, "push");
        let mut rmi = self.buildah(&conf);
        rmi.args(["rmi", &tag]);
        let _ = run_logged(
            &mut rmi,
            &log_path,
            Instant::now() + Duration::from_secs(60),
        );
        pushed?;
        finish_archive(&tmp, &archive)?;
        tracing::info!(task, key = %key, archive = %archive.display(), "environment built");
        Ok(Built {
            archive,
            key,
            reused: false,
        })
    }

    /// Where the archive of `context`'s build is (or would be).
    pub fn archive_path(&self, context: &Path) -> Result<PathBuf, HarborError> {
        Ok(self
            .dir()
            .join(format!("{}.oci.tar", context_key(context)?)))
    }

    fn buildah(&self, conf: &Path) -> Command {
        let storage = self.dir().join("buildah");
        let mut cmd = Command::new("buildah");
        cmd.arg("--root")
            .arg(storage.join("root"))
            .arg("--runroot")
            .arg(storage.join("run"))
            .args(["--storage-driver", "vfs"])
            .env("CONTAINERS_REGISTRIES_CONF", conf)
            .env("BUILDAH_ISOLATION", "chroot")
            .stdin(Stdio::null());
        cmd
    }
}

/// The digest of a build's inputs: every file of the context (path, mode,
/// bytes), in path order. Symlinks count by their target's text.
pub fn context_key(context: &Path) -> Result<String, HarborError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut files = Vec::new();
    let mut stack = vec![context.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| HarborError::io(&dir, e))? {
            let path = entry.map_err(|e| HarborError::io(&dir, e))?.path();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| HarborError::io(&path, e))?;
            if meta.is_dir() {
                stack.push(path);
            } else {
                files.push((path, meta));
            }
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    h.update(BUILD_KEY_VERSION.as_bytes());
    for (path, meta) in files {
        let rel = path.strip_prefix(context).unwrap_or(&path);
        h.update(b"\0");
        h.update(rel.as_os_str().as_encoded_bytes());
        h.update(b"\0");
        h.update((meta.permissions().mode() & 0o7777).to_le_bytes());
        let bytes = if meta.is_symlink() {
            std::fs::read_link(&path)
                .map_err(|e| HarborError::io(&path, e))?
                .into_os_string()
                .into_encoded_bytes()
        } else {
            std::fs::read(&path).map_err(|e| HarborError::io(&path, e))?
        };
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(rollpoint_proto::hex::hex(&h.finalize()))
}

/// A registries.conf marking plain-HTTP the registries the Dockerfile's
/// `FROM` lines name that are on loopback or in `insecure`.
fn registries_conf(dockerfile: &Path, insecure: &[String]) -> Result<String, HarborError> {
    let text = std::fs::read_to_string(dockerfile).map_err(|e| HarborError::io(dockerfile, e))?;
    let mut out = String::from("# Written by rollpoint for one build.\n");
    let mut seen = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
            continue;
        }
        let Some(image) = words.find(|w| !w.starts_with("--")) else {
            continue;
        };
        let Some((host, _)) = image.split_once('/') else {
            continue;
        };
        let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
        let loopback =
            matches!(name, "localhost" | "127.0.0.1" | "[::1]") || name.starts_with("127.");
        if (loopback || insecure.iter().any(|i| i == host)) && !seen.contains(&host) {
            seen.push(host);
            out.push_str(&format!(
                "[[registry]]\nlocation = \"{host}\"\ninsecure = true\n"
            ));
        }
    }
    Ok(out)
}

/// Runs `cmd` with its output appended to `log`; `None` when `deadline`
/// passed first (it is killed then).
fn run_logged(cmd: &mut Command, log: &Path, deadline: Instant) -> std::io::Result<Option<bool>> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut child = cmd.stdout(out.try_clone()?).stderr(out).spawn()?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status.success()));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn log_tail(log: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let _ = f.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().rev().take(8).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

fn create_private_dir(dir: &Path) -> Result<(), HarborError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| HarborError::io(dir, e))
}

/// `tmp` made the archive: mode 0600, synced, renamed, the directory synced.
fn finish_archive(tmp: &Path, archive: &Path) -> Result<(), HarborError> {
    use std::os::unix::fs::PermissionsExt as _;
    let f = std::fs::File::open(tmp).map_err(|e| HarborError::io(tmp, e))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| HarborError::io(tmp, e))?;
    f.sync_all().map_err(|e| HarborError::io(tmp, e))?;
    std::fs::rename(tmp, archive).map_err(|e| HarborError::io(archive, e))?;
    if let Some(dir) = archive.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| HarborError::io(dir, e))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically, mode 0600.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), HarborError> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut f =
        atomic_write_file::AtomicWriteFile::open(path).map_err(|e| HarborError::io(path, e))?;
    f.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| HarborError::io(path, e))?;
    f.write_all(bytes).map_err(|e| HarborError::io(path, e))?;
    f.commit().map_err(|e| HarborError::io(path, e))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_the_context_and_nothing_else() {
        let a = tempfile::tempdir().unwrap();
        std::fs::write(a.path().join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::create_dir(a.path().join("d")).unwrap();
        std::fs::write(a.path().join("d/f"), "1").unwrap();
        let k1 = context_key(a.path()).unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(b.path().join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::create_dir(b.path().join("d")).unwrap();
        std::fs::write(b.path().join("d/f"), "1").unwrap();
        assert_eq!(k1, context_key(b.path()).unwrap(), "same files, same key");
        std::fs::write(b.path().join("d/f"), "2").unwrap();
        assert_ne!(
            k1,
            context_key(b.path()).unwrap(),
            "a changed file changes it"
        );
    }

    #[test]
    fn loopback_and_named_registries_are_plain_http() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("Dockerfile");
        std::fs::write(
            &f,
            "FROM 127.0.0.1:5000/base:t AS b\nfrom --platform=linux/amd64 reg.lan:80/x\nFROM debian:12\n",
        )
        .unwrap();
        let conf = registries_conf(&f, &["reg.lan:80".to_owned()]).unwrap();
        assert!(conf.contains("location = \"127.0.0.1:5000\""), "{conf}");
        assert!(conf.contains("location = \"reg.lan:80\""), "{conf}");
        assert!(!conf.contains("debian"), "{conf}");
    }
}
