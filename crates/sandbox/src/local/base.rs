//! The lower layers of a sandbox's overlay. A rootfs tarball is unpacked
//! once per content (keyed by its SHA-256) under the run directory and
//! shared by every sandbox made from it; the unpacked tree is renamed into
//! place only when complete, so a crash mid-unpack never leaves a half base
//! in use. An image's layers come from the image cache (`rollpoint-image`),
//! stacked top first; the first sandbox of a source pulls it and the others
//! of this process wait for that pull instead of starting their own.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};

use rollpoint_image::{ImageCache, ImageRecord, RegistryOptions, Source};
use sha2::{Digest, Sha256};

use crate::{Base, DEFAULT_WORKDIR, SandboxSpec, errors::Error};

/// Where the supervisor mounts the tools (the worker, harnesses) in a
/// sandbox whose base is not the host's root.
pub const TOOLS_DIR: &str = "/.rollpoint";

#[derive(Debug)]
pub(crate) struct Bases {
    /// Tarball path -> unpacked directory, for this process.
    unpacked: Mutex<HashMap<PathBuf, PathBuf>>,
    images: ImageCache,
    registry: RegistryOptions,
    /// One slot per image source: held while it is pulled, then keeping
    /// the image for every later sandbox of this process.
    pulled: Mutex<HashMap<Source, Arc<Mutex<Option<ImageRecord>>>>>,
    /// The supervisor's ELF interpreter when it is dynamically linked: it
    /// then cannot start launches in a sandbox without the host's root.
    dynamic_supervisor: Option<String>,
}

fn image_error(sandbox: &str, e: &rollpoint_image::Error) -> Error {
    Error::Unsupported {
        sandbox: sandbox.to_owned(),
        field: "sandbox.base".to_owned(),
        message: e.to_string(),
    }
}

impl Bases {
    pub fn new(
        images: ImageCache,
        registry: RegistryOptions,
        dynamic_supervisor: Option<String>,
    ) -> Self {
        Self {
            unpacked: Mutex::default(),
            images,
            registry,
            pulled: Mutex::default(),
            dynamic_supervisor,
        }
    }

    pub fn images(&self) -> &ImageCache {
        &self.images
    }

    /// The image of an image base: the pinned one, or the source pulled
    /// (once per process).
    fn image(&self, sandbox: &str, base: &Base) -> Result<Option<ImageRecord>, Error> {
        let Some((source, id)) = base.image() else {
            return Ok(None);
        };
        if let Some(id) = id {
            if let Ok(record) = self.images.get(id) {
                return Ok(Some(record));
            }
            // Gone from the cache: the source again, if it still is that image.
            let record = self
                .images
                .pull(&source, &self.registry)
                .map_err(|e| image_error(sandbox, &e))?;
            if &record.id != id {
                return Err(Error::Invalid {
                    sandbox: sandbox.to_owned(),
                    message: format!(
                        "base: image {source} is now {}, not {id} that the sandbox was made on, \
                         and that image's layers are no longer in the cache {}",
                        record.id,
                        self.images.dir().display()
                    ),
                });
            }
            return Ok(Some(record));
        }
        let slot = Arc::clone(
            self.pulled
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(source.clone())
                .or_default(),
        );
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(record) = slot.as_ref() {
            return Ok(Some(record.clone()));
        }
        let record = self
            .images
            .pull(&source, &self.registry)
            .map_err(|e| image_error(sandbox, &e))?;
        *slot = Some(record.clone());
        Ok(Some(record))
    }

    /// The spec a sandbox is made with: an image base pinned to the image,
    /// the image's `Env` under the spec's own, its `User` and `WorkingDir`
    /// as the defaults, and the tools' `bin` at the end of `PATH` when the
    /// base is not the host's root.
    pub fn resolve(&self, sandbox: &str, spec: &SandboxSpec) -> Result<SandboxSpec, Error> {
        let mut out = spec.clone();
        let image = self.image(sandbox, &spec.base)?;
        if let Some(image) = &image {
            out.base = spec.base.pinned(image.id.clone());
            for pair in &image.env {
                let (k, v) = pair.split_once('=').unwrap_or((pair.as_str(), ""));
                out.env.entry(k.to_owned()).or_insert_with(|| v.to_owned());
            }
        }
        if out.user.is_empty() {
            out.user = image
                .as_ref()
                .and_then(|i| i.user.clone())
                .unwrap_or_default();
        }
        if out.workdir.is_empty() {
            out.workdir = image
                .and_then(|i| i.working_dir)
                .filter(|w| w.starts_with('/'))
                .unwrap_or_else(|| DEFAULT_WORKDIR.to_owned());
        }
        if spec.base != Base::HostRoot {
            let mut env = out.full_env();
            let bin = format!("{TOOLS_DIR}/bin");
            if let Some(path) = env.get_mut("PATH")
                && !path.split(':').any(|p| p == bin)
            {
                path.push(':');
                path.push_str(&bin);
            }
            out.env.insert("PATH".into(), env["PATH"].clone());
        }
        Ok(out)
    }

    /// Records that the record at `record` uses its image, so an image
    /// prune keeps the image's layers while the record is there.
    pub fn pin(&self, record: &Path, base: &Base) -> Result<(), Error> {
        if let Some((_, Some(id))) = base.image() {
            self.images
                .pin(record, id)
                .map_err(|e| image_error("-", &e))?;
        }
        Ok(())
    }

    /// The overlay's lower directories, top first (for a create and a fork
    /// alike, so a dynamically linked supervisor is refused for both).
    pub fn lower(
        &self,
        sandbox: &str,
        base: &Base,
        bases_dir: &Path,
    ) -> Result<Vec<PathBuf>, Error> {
        if let Some(interp) = &self.dynamic_supervisor
            && *base != Base::HostRoot
        {
            return Err(Error::Invalid {
                sandbox: sandbox.to_owned(),
                message: format!(
                    "base: the supervisor is dynamically linked (it needs {interp}), so it cannot \
                     start launches in a sandbox not on the host's root; use the static build \
                     (scripts/build-static, or ROLLPOINT_SUPERVISOR)"
                ),
            });
        }
        match base {
            Base::HostRoot => Ok(vec![PathBuf::from("/")]),
            Base::Rootfs { path: dir } => {
                if !dir.is_dir() {
                    return Err(Error::Unsupported {
                        sandbox: sandbox.to_owned(),
                        field: "sandbox.base.path".to_owned(),
                        message: format!("{}: not a directory", dir.display()),
                    });
                }
                Ok(vec![dir.clone()])
            }
            Base::Tarball { path: file } => {
                let mut cache = self.unpacked.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(dir) = cache.get(file) {
                    return Ok(vec![dir.clone()]);
                }
                let dir = unpack(sandbox, file, bases_dir)?;
                cache.insert(file.clone(), dir.clone());
                Ok(vec![dir])
            }
            Base::Image { .. }
            | Base::OciArchive { .. }
            | Base::DockerArchive { .. }
            | Base::OciLayout { .. } => {
                let image = self.image(sandbox, base)?.ok_or_else(|| Error::Invalid {
                    sandbox: sandbox.to_owned(),
                    message: "base: not an image".into(),
                })?;
                Ok(self.images.lowers(&image))
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
    let mut reader = std::fs::File::open(file).map_err(|e| Error::Unsupported {
        sandbox: sandbox.to_owned(),
        field: "sandbox.base.path".to_owned(),
        message: format!("open base tarball {}: {e}", file.display()),
    })?;
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
        return Err(Error::Unsupported {
            sandbox: sandbox.to_owned(),
            field: "sandbox.base.path".to_owned(),
            message: format!(
                "{}: tar failed: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    std::fs::rename(&partial, &dir).map_err(err(format!("rename {}", partial.display())))?;
    Ok(dir)
}
