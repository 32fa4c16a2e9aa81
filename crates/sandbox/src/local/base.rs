//! The lower layer of a sandbox's overlay. A rootfs tarball is unpacked once
//! per content (keyed by its SHA-256) under the run directory and shared by
//! every sandbox made from it; the unpacked tree is renamed into place only
//! when complete, so a crash mid-unpack never leaves a half base in use.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::{Base, Error};

#[derive(Debug, Default)]
pub(crate) struct Bases {
    /// Tarball path -> unpacked directory, for this process.
    unpacked: Mutex<HashMap<PathBuf, PathBuf>>,
}

impl Bases {
    pub fn lower(&self, sandbox: &str, base: &Base, bases_dir: &Path) -> Result<PathBuf, Error> {
        match base {
            Base::HostRoot => Ok(PathBuf::from("/")),
            Base::Rootfs(dir) => {
                if !dir.is_dir() {
                    return Err(Error::Invalid {
                        sandbox: sandbox.to_owned(),
                        message: format!("base.path {}: not a directory", dir.display()),
                    });
                }
                Ok(dir.clone())
            }
            Base::Tarball(file) => {
                let mut cache = self
                    .unpacked
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(dir) = cache.get(file) {
                    return Ok(dir.clone());
                }
                let dir = unpack(sandbox, file, bases_dir)?;
                cache.insert(file.clone(), dir.clone());
                Ok(dir)
            }
        }
    }
}

fn unpack(sandbox: &str, file: &Path, bases_dir: &Path) -> Result<PathBuf, Error> {
    let err = |what: String| {
        let sandbox = sandbox.to_owned();
        move |source| Error::Setup {
            sandbox,
            what,
            source,
        }
    };
    let mut hasher = Sha256::new();
    let mut reader =
        std::fs::File::open(file).map_err(err(format!("open base tarball {}", file.display())))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(err(format!("read base tarball {}", file.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let key = format!("{:x}", hasher.finalize());
    let dir = bases_dir.join(&key);
    if dir.is_dir() {
        return Ok(dir);
    }
    let partial = bases_dir.join(format!(".partial-{key}"));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(err(format!("create {}", partial.display())))?;
    let out = Command::new("tar")
        .args([
            "--extract",
            "--numeric-owner",
            "--same-permissions",
            "--xattrs",
            "--xattrs-include=*",
            "--file",
        ])
        .arg(file)
        .arg("--directory")
        .arg(&partial)
        .output()
        .map_err(err("run tar".into()))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(Error::Invalid {
            sandbox: sandbox.to_owned(),
            message: format!(
                "base.path {}: tar failed: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    std::fs::rename(&partial, &dir).map_err(err(format!("rename {}", partial.display())))?;
    Ok(dir)
}
