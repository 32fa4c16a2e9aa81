//! The image cache: layers unpacked once, keyed by the digest of their
//! uncompressed tar (so one layer pulled gzip'd from a registry and read
//! plain from a Docker archive is one directory), and one record per image.
//!
//! ```text
//! layers/<diff-id hex>/                    an unpacked layer: an overlayfs lower directory
//! layers/.partial-<hex>.<pid>.<n>/         an unpack under way (or a crash's leftover)
//! images/<config hex>.json                 an image: its layers, its config, the sources it came from
//! pins/<hex of the pinning record path>    a sandbox or snapshot record that uses an image
//! locks/<hex>.lock                         held while a layer or an image record is written
//! ```
//!
//! A layer is unpacked into a partial directory, checked against both its
//! digests, synced and only then renamed into place, under a file lock: so
//! concurrent sandboxes (threads or processes) of one image unpack each
//! layer once, and an unpack killed midway never leaves a half layer in
//! use (its partial directory is removed by the next unpack of that layer
//! or by a prune).

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use atomic_write_file::AtomicWriteFile;
use serde::{Deserialize, Serialize};

use crate::archive::{DockerArchive, OciLayout};
use crate::manifest::{Compression, ImageConfig};
use crate::registry::{Registry, RegistryOptions};
use crate::source::{Fetch, LayerBlob, Source};
use crate::unpack::unpack;
use crate::{digest::Digest, errors::Error};

/// Version of [`ImageRecord`] and of pin files.
pub const RECORD_VERSION: u32 = 1;

/// Layers unpacked at once in one pull.
const PARALLEL_LAYERS: usize = 4;

/// An image in the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageRecord {
    pub v: u32,
    /// The digest of the image's config: the image's identity.
    pub id: Digest,
    /// The manifest digest, where the source has a manifest.
    pub manifest: Option<Digest>,
    /// Every source this image was pulled from, e.g. `127.0.0.1:5000/t:1`.
    pub sources: BTreeSet<String>,
    /// The layers' uncompressed digests, bottom first.
    pub layers: Vec<Digest>,
    /// `Env` of the image config, `KEY=VALUE` each.
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    /// Bytes of the layer blobs as stored at the source.
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pin {
    v: u32,
    record: PathBuf,
    image: Digest,
}

/// What a prune removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub images: Vec<Digest>,
    pub layers: Vec<Digest>,
    pub partials: usize,
}

#[derive(Debug)]
pub struct ImageCache {
    dir: PathBuf,
}

static PARTIAL: AtomicU64 = AtomicU64::new(0);

impl ImageCache {
    pub fn open(dir: &Path) -> Result<Self, Error> {
        for sub in ["layers", "images", "pins", "locks"] {
            let path = dir.join(sub);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&path)
                .map_err(Error::io("create", &path))?;
        }
        let dir = std::fs::canonicalize(dir).map_err(Error::io("resolve", dir))?;
        Ok(Self { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of an unpacked layer (there or not).
    pub fn layer_dir(&self, layer: &Digest) -> PathBuf {
        self.dir.join("layers").join(layer.hex())
    }

    fn image_path(&self, id: &Digest) -> PathBuf {
        self.dir.join("images").join(format!("{}.json", id.hex()))
    }

    fn lock(&self, key: &str) -> Result<File, Error> {
        let path = self.dir.join("locks").join(format!("{key}.lock"));
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(Error::io("open lock", &path))?;
        file.lock().map_err(Error::io("lock", &path))?;
        Ok(file)
    }

    /// Reads `source`'s image and unpacks every layer not yet cached.
    pub fn pull(&self, source: &Source, options: &RegistryOptions) -> Result<ImageRecord, Error> {
        let image = source.to_string();
        let fetch: Box<dyn Fetch> = match source {
            Source::Registry(r) => Box::new(Registry::open(r, options)?),
            Source::OciLayout(p) => Box::new(OciLayout::dir(image.clone(), p)?),
            Source::OciArchive(p) => Box::new(OciLayout::archive(image.clone(), p)?),
            Source::DockerArchive(p) => Box::new(DockerArchive::open(image.clone(), p)?),
        };
        let resolved = fetch.resolve()?;
        let config = ImageConfig::parse(&resolved.config).map_err(|message| Error::Format {
            image: image.clone(),
            what: "config".into(),
            source: message.into(),
        })?;
        let diff_ids = config.rootfs.diff_ids.clone();
        if diff_ids.len() != resolved.layers.len() {
            return Err(Error::Format {
                image,
                what: "config".into(),
                source: format!(
                    "rootfs.diff_ids has {} layers, the manifest {}",
                    diff_ids.len(),
                    resolved.layers.len()
                )
                .into(),
            });
        }
        let jobs: Vec<(&LayerBlob, &Digest)> = resolved.layers.iter().zip(&diff_ids).collect();
        let mut bytes = 0;
        for chunk in jobs.chunks(PARALLEL_LAYERS) {
            let done: Vec<Result<u64, Error>> = std::thread::scope(|s| {
                let handles: Vec<_> = chunk
                    .iter()
                    .map(|(blob, diff_id)| {
                        s.spawn(|| self.ensure_layer(&image, fetch.as_ref(), blob, diff_id))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(Error::Invalid {
                                image: image.clone(),
                                message: "a layer's unpacking thread panicked".into(),
                            })
                        })
                    })
                    .collect()
            });
            for r in done {
                bytes += r?;
            }
        }
        let run = config.config.unwrap_or_default();
        let id = Digest::of(&resolved.config);
        let _lock = self.lock(id.hex())?;
        let mut record = ImageRecord {
            v: RECORD_VERSION,
            id: id.clone(),
            manifest: resolved.manifest,
            sources: BTreeSet::new(),
            layers: diff_ids,
            env: run.env.unwrap_or_default(),
            working_dir: run.working_dir.filter(|w| !w.is_empty()),
            user: run.user.filter(|u| !u.is_empty()),
            bytes,
        };
        if let Ok(old) = self.get(&id) {
            record.sources = old.sources;
            record.bytes = record.bytes.max(old.bytes);
        }
        record.sources.insert(image);
        write_atomic(&self.image_path(&id), &record)?;
        tracing::info!(image = %id, layers = record.layers.len(), "image in the cache");
        Ok(record)
    }

    /// Unpacks one layer unless it is cached. Returns the blob bytes read.
    fn ensure_layer(
        &self,
        image: &str,
        fetch: &dyn Fetch,
        blob: &LayerBlob,
        diff_id: &Digest,
    ) -> Result<u64, Error> {
        let dir = self.layer_dir(diff_id);
        if dir.is_dir() {
            return Ok(0);
        }
        let _lock = self.lock(diff_id.hex())?;
        if dir.is_dir() {
            return Ok(0);
        }
        self.remove_partials(Some(diff_id))?;
        let partial = self.dir.join("layers").join(format!(
            ".partial-{}.{}.{}",
            diff_id.hex(),
            std::process::id(),
            PARTIAL.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&partial).map_err(Error::io("create", &partial))?;
        let result = self.unpack_into(image, fetch, blob, diff_id, &partial);
        match result {
            Ok(bytes) => {
                std::fs::rename(&partial, &dir)
                    .map_err(Error::io("rename into place", &partial))?;
                sync_dir(&self.dir.join("layers"))?;
                Ok(bytes)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&partial);
                Err(e)
            }
        }
    }

    fn unpack_into(
        &self,
        image: &str,
        fetch: &dyn Fetch,
        blob: &LayerBlob,
        diff_id: &Digest,
        partial: &Path,
    ) -> Result<u64, Error> {
        let layer_err = |message: String| Error::Layer {
            image: image.to_owned(),
            layer: blob.name.clone(),
            source: message.into(),
        };
        let mut reader = std::io::BufReader::with_capacity(1 << 20, fetch.open_layer(blob)?);
        let compression = match blob.compression {
            Some(c) => c,
            None => {
                let head = std::io::BufRead::fill_buf(&mut reader)
                    .map_err(|e| layer_err(e.to_string()))?;
                Compression::sniff(head)
            }
        };
        let got = unpack(&mut reader, compression, partial).map_err(|source| Error::Unpack {
            image: image.to_owned(),
            layer: blob.name.clone(),
            source,
        })?;
        if let Some(want) = &blob.digest
            && &got.blob != want
        {
            return Err(layer_err(format!(
                "digest mismatch: the blob is {}",
                got.blob
            )));
        }
        if &got.diff_id != diff_id {
            return Err(layer_err(format!(
                "digest mismatch: the config's diff_id is {diff_id}, the layer's tar is {}",
                got.diff_id
            )));
        }
        // The layer's files reach the disk before its name does.
        let fd = File::open(partial).map_err(Error::io("open", partial))?;
        nix::unistd::syncfs(&fd).map_err(|e| Error::io("syncfs", partial)(e.into()))?;
        Ok(got.blob_bytes)
    }

    /// Removes partial layer directories (of one layer, or all) that no
    /// live unpack holds.
    fn remove_partials(&self, only: Option<&Digest>) -> Result<usize, Error> {
        let layers = self.dir.join("layers");
        let mut n = 0;
        for entry in std::fs::read_dir(&layers).map_err(Error::io("list", &layers))? {
            let entry = entry.map_err(Error::io("list", &layers))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(".partial-") else {
                continue;
            };
            let hex = rest.split('.').next().unwrap_or_default();
            if only.is_some_and(|d| d.hex() != hex) {
                continue;
            }
            // Held by an unpack under way (only when all are swept).
            let held = only.is_none() && {
                let path = self.dir.join("locks").join(format!("{hex}.lock"));
                File::options()
                    .write(true)
                    .open(&path)
                    .is_ok_and(|f| f.try_lock().is_err())
            };
            if !held {
                std::fs::remove_dir_all(entry.path()).map_err(Error::io("remove", entry.path()))?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// An image of the cache, with every layer there.
    pub fn get(&self, id: &Digest) -> Result<ImageRecord, Error> {
        let path = self.image_path(id);
        let bytes = std::fs::read(&path).map_err(Error::io("read the image record", &path))?;
        let record: ImageRecord = decode("image record", &path, &bytes)?;
        if let Some(missing) = record.layers.iter().find(|l| !self.layer_dir(l).is_dir()) {
            return Err(Error::Layer {
                image: id.to_string(),
                layer: missing.to_string(),
                source: format!("not in the cache {}", self.dir.display()).into(),
            });
        }
        Ok(record)
    }

    pub fn list(&self) -> Result<Vec<ImageRecord>, Error> {
        let dir = self.dir.join("images");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(Error::io("list", &dir))? {
            let path = entry.map_err(Error::io("list", &dir))?.path();
            if path.extension().is_some_and(|e| e == "json") {
                let bytes = std::fs::read(&path).map_err(Error::io("read", &path))?;
                out.push(decode::<ImageRecord>("image record", &path, &bytes)?);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// The overlay lower directories of an image, top layer first.
    pub fn lowers(&self, record: &ImageRecord) -> Vec<PathBuf> {
        record
            .layers
            .iter()
            .rev()
            .map(|l| self.layer_dir(l))
            .collect()
    }

    /// Records that the sandbox or snapshot record at `record` uses
    /// `image`: a prune keeps it while that record names it.
    pub fn pin(&self, record: &Path, image: &Digest) -> Result<(), Error> {
        let key = Digest::of(record.as_os_str().as_encoded_bytes());
        write_atomic(
            &self.dir.join("pins").join(key.hex()),
            &Pin {
                v: RECORD_VERSION,
                record: record.to_owned(),
                image: image.clone(),
            },
        )
    }

    /// The images some live pin names; pins whose record is gone or no
    /// longer names their image are removed.
    fn pinned(&self) -> Result<HashSet<Digest>, Error> {
        let dir = self.dir.join("pins");
        let mut keep = HashSet::new();
        for entry in std::fs::read_dir(&dir).map_err(Error::io("list", &dir))? {
            let path = entry.map_err(Error::io("list", &dir))?.path();
            let bytes = std::fs::read(&path).map_err(Error::io("read", &path))?;
            let pin: Pin = decode("image pin", &path, &bytes)?;
            let live = std::fs::read(&pin.record)
                .is_ok_and(|r| String::from_utf8_lossy(&r).contains(pin.image.as_str()));
            if live {
                keep.insert(pin.image);
            } else {
                std::fs::remove_file(&path).map_err(Error::io("remove", &path))?;
            }
        }
        Ok(keep)
    }

    /// Removes every image no sandbox or snapshot record uses (and not in
    /// `keep`), every layer no remaining image has, and every abandoned
    /// partial unpack.
    pub fn prune(&self, keep: &HashSet<Digest>) -> Result<Pruned, Error> {
        let _lock = self.lock("prune")?;
        let mut keep_images = self.pinned()?;
        keep_images.extend(keep.iter().cloned());
        let mut pruned = Pruned::default();
        let mut kept_layers = HashSet::new();
        for image in self.list()? {
            if keep_images.contains(&image.id) {
                kept_layers.extend(image.layers.iter().cloned());
            } else {
                let path = self.image_path(&image.id);
                std::fs::remove_file(&path).map_err(Error::io("remove", &path))?;
                pruned.images.push(image.id);
            }
        }
        let layers = self.dir.join("layers");
        for entry in std::fs::read_dir(&layers).map_err(Error::io("list", &layers))? {
            let entry = entry.map_err(Error::io("list", &layers))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(digest) = Digest::parse(&format!("sha256:{name}")) else {
                continue;
            };
            if kept_layers.contains(&digest) {
                continue;
            }
            let _layer = self.lock(digest.hex())?;
            std::fs::remove_dir_all(entry.path()).map_err(Error::io("remove", entry.path()))?;
            pruned.layers.push(digest);
        }
        pruned.partials = self.remove_partials(None)?;
        Ok(pruned)
    }
}

/// An image record or pin, through the project's one versioned reader.
fn decode<T: serde::de::DeserializeOwned>(
    what: &'static str,
    path: &Path,
    bytes: &[u8],
) -> Result<T, Error> {
    rollpoint_proto::decode(what, RECORD_VERSION, bytes).map_err(|e| Error::Format {
        image: "-".into(),
        what: path.display().to_string(),
        source: e.into(),
    })
}

fn write_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|e| Error::io("encode", path)(e.into()))?;
    bytes.push(b'\n');
    let mut file = AtomicWriteFile::open(path).map_err(Error::io("write", path))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io("write", path))?;
    file.write_all(&bytes).map_err(Error::io("write", path))?;
    file.commit().map_err(Error::io("write", path))
}

fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(Error::io("sync", dir))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn an_image_record_of_an_unknown_version_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ImageCache::open(dir.path()).unwrap();
        let path = dir
            .path()
            .join("images")
            .join(format!("{}.json", "a".repeat(64)));
        std::fs::write(&path, br#"{"v":9,"id":"x"}"#).unwrap();
        let err = cache.list().unwrap_err().to_string();
        assert!(err.contains("image record: unknown version 9"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
}
