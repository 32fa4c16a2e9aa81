//! Images from files: an OCI layout directory, an OCI archive (a tar of a
//! layout) and a Docker archive. Archives are read in place: one pass over
//! the tar notes where each member's bytes are, and blobs are then read by
//! seeking there, so a many-gigabyte archive is never copied out first.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::manifest::{Compression, Document, Parsed, pick_platform};
use crate::source::{Fetch, LayerBlob, Resolved};
use crate::{digest::Digest, errors::Error};

/// Where blobs are read from: a directory or the members of a tar.
enum Files {
    Dir(PathBuf),
    Tar {
        path: PathBuf,
        members: HashMap<String, (u64, u64)>,
    },
}

impl Files {
    fn tar(image: &str, path: &Path) -> Result<Self, Error> {
        let invalid = |message: String| Error::Invalid {
            image: image.to_owned(),
            message,
        };
        let file =
            File::open(path).map_err(|e| invalid(format!("open {}: {e}", path.display())))?;
        let mut archive = tar::Archive::new(file);
        let mut members = HashMap::new();
        let entries = archive
            .entries()
            .map_err(|e| invalid(format!("{} is not a tar archive: {e}", path.display())))?;
        for entry in entries {
            let entry = entry
                .map_err(|e| invalid(format!("{} is not a tar archive: {e}", path.display())))?;
            if entry.header().entry_type() != tar::EntryType::Regular {
                continue;
            }
            let name = entry
                .path()
                .map_err(|e| invalid(format!("{}: a member's path: {e}", path.display())))?
                .to_string_lossy()
                .trim_start_matches("./")
                .to_owned();
            members.insert(name, (entry.raw_file_position(), entry.size()));
        }
        if members.is_empty() {
            return Err(invalid(format!(
                "{} is not a tar archive (no files in it)",
                path.display()
            )));
        }
        Ok(Self::Tar {
            path: path.to_owned(),
            members,
        })
    }

    fn open(&self, image: &str, name: &str) -> Result<Box<dyn Read + Send>, Error> {
        let missing = |message: String| Error::Format {
            image: image.to_owned(),
            what: name.to_owned(),
            source: message.into(),
        };
        match self {
            Self::Dir(dir) => {
                let path = dir.join(name);
                let file =
                    File::open(&path).map_err(|e| missing(format!("{}: {e}", path.display())))?;
                Ok(Box::new(file))
            }
            Self::Tar { path, members } => {
                let &(at, size) = members
                    .get(name)
                    .ok_or_else(|| missing(format!("not in the archive {}", path.display())))?;
                let mut file =
                    File::open(path).map_err(|e| missing(format!("{}: {e}", path.display())))?;
                file.seek(SeekFrom::Start(at))
                    .map_err(|e| missing(format!("{}: {e}", path.display())))?;
                Ok(Box::new(file.take(size)))
            }
        }
    }

    fn read(&self, image: &str, name: &str, limit: u64) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        self.open(image, name)?
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|e| Error::Format {
                image: image.to_owned(),
                what: name.to_owned(),
                source: e.into(),
            })?;
        Ok(out)
    }
}

/// Largest manifest, index or config read.
const DOC_LIMIT: u64 = 16 << 20;

fn blob_name(d: &Digest) -> String {
    format!("blobs/sha256/{}", d.hex())
}

/// An OCI layout, in a directory or a tar.
pub(crate) struct OciLayout {
    image: String,
    files: Files,
}

impl OciLayout {
    pub fn dir(image: String, path: &Path) -> Result<Self, Error> {
        if !path.join("oci-layout").is_file() || !path.join("index.json").is_file() {
            return Err(Error::Invalid {
                image,
                message: format!(
                    "{} is not an OCI layout (no oci-layout and index.json)",
                    path.display()
                ),
            });
        }
        Ok(Self {
            image,
            files: Files::Dir(path.to_owned()),
        })
    }

    pub fn archive(image: String, path: &Path) -> Result<Self, Error> {
        let files = Files::tar(&image, path)?;
        if let Files::Tar { members, .. } = &files
            && !(members.contains_key("oci-layout") && members.contains_key("index.json"))
        {
            return Err(Error::Invalid {
                image,
                message: format!(
                    "{} is not an OCI archive (no oci-layout and index.json in it)",
                    path.display()
                ),
            });
        }
        Ok(Self { image, files })
    }

    fn doc(&self, what: &str, name: &str, digest: Option<&Digest>) -> Result<Parsed, Error> {
        let bytes = self.files.read(&self.image, name, DOC_LIMIT)?;
        if let Some(d) = digest {
            check(&self.image, what, d, &bytes)?;
        }
        Document::parse(&bytes).map_err(|message| Error::Format {
            image: self.image.clone(),
            what: what.to_owned(),
            source: message.into(),
        })
    }
}

fn check(image: &str, what: &str, digest: &Digest, bytes: &[u8]) -> Result<(), Error> {
    let actual = Digest::of(bytes);
    if &actual != digest {
        return Err(Error::Format {
            image: image.to_owned(),
            what: what.to_owned(),
            source: format!("digest mismatch: expected {digest}, content is {actual}").into(),
        });
    }
    Ok(())
}

fn layer_blobs(
    image: &str,
    layers: &[crate::manifest::Descriptor],
) -> Result<Vec<LayerBlob>, Error> {
    layers
        .iter()
        .map(|l| {
            let compression =
                Compression::of_media_type(&l.media_type).map_err(|message| Error::Layer {
                    image: image.to_owned(),
                    layer: l.digest.to_string(),
                    source: message.into(),
                })?;
            Ok(LayerBlob {
                digest: Some(l.digest.clone()),
                compression: Some(compression),
                name: l.digest.to_string(),
            })
        })
        .collect()
}

impl Fetch for OciLayout {
    fn resolve(&self) -> Result<Resolved, Error> {
        let mut parsed = self.doc("index.json", "index.json", None)?;
        let mut manifest = None;
        // An index may name an index (a multi-platform image in a layout).
        for _ in 0..4 {
            match parsed {
                Parsed::Index(entries) => {
                    let entry = pick_platform(&entries).map_err(|message| Error::Format {
                        image: self.image.clone(),
                        what: "index".into(),
                        source: message.into(),
                    })?;
                    let what = format!("manifest {}", entry.digest);
                    manifest = Some(entry.digest.clone());
                    parsed = self.doc(&what, &blob_name(&entry.digest), Some(&entry.digest))?;
                }
                Parsed::Manifest { config, layers } => {
                    let bytes =
                        self.files
                            .read(&self.image, &blob_name(&config.digest), DOC_LIMIT)?;
                    check(&self.image, "config", &config.digest, &bytes)?;
                    return Ok(Resolved {
                        manifest,
                        config: bytes,
                        layers: layer_blobs(&self.image, &layers)?,
                    });
                }
            }
        }
        Err(Error::Format {
            image: self.image.clone(),
            what: "index.json".into(),
            source: "indexes nested more than 4 deep".into(),
        })
    }

    fn open_layer(&self, layer: &LayerBlob) -> Result<Box<dyn Read + Send + '_>, Error> {
        let digest = layer.digest.as_ref().ok_or_else(|| Error::Layer {
            image: self.image.clone(),
            layer: layer.name.clone(),
            source: "no digest".into(),
        })?;
        self.files
            .open(&self.image, &blob_name(digest))
            .map_err(|e| Error::Layer {
                image: self.image.clone(),
                layer: layer.name.clone(),
                source: e.into(),
            })
    }
}

/// `docker save` output: `manifest.json` names the config and layer files.
pub(crate) struct DockerArchive {
    image: String,
    files: Files,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    layers: Vec<String>,
}

impl DockerArchive {
    pub fn open(image: String, path: &Path) -> Result<Self, Error> {
        let files = Files::tar(&image, path)?;
        if let Files::Tar { members, .. } = &files
            && !members.contains_key("manifest.json")
        {
            return Err(Error::Invalid {
                image,
                message: format!(
                    "{} is not a Docker archive (no manifest.json in it)",
                    path.display()
                ),
            });
        }
        Ok(Self { image, files })
    }
}

impl Fetch for DockerArchive {
    fn resolve(&self) -> Result<Resolved, Error> {
        let bytes = self.files.read(&self.image, "manifest.json", DOC_LIMIT)?;
        let format = |message: String| Error::Format {
            image: self.image.clone(),
            what: "manifest.json".into(),
            source: message.into(),
        };
        let entries: Vec<DockerEntry> =
            serde_json::from_slice(&bytes).map_err(|e| format(e.to_string()))?;
        let entry = match entries.as_slice() {
            [one] => one,
            [] => return Err(format("names no image".into())),
            more => {
                return Err(format(format!(
                    "names {} images; an archive of one is needed",
                    more.len()
                )));
            }
        };
        let config = self.files.read(&self.image, &entry.config, DOC_LIMIT)?;
        Ok(Resolved {
            manifest: None,
            config,
            layers: entry
                .layers
                .iter()
                .map(|name| LayerBlob {
                    digest: None,
                    compression: None,
                    name: name.clone(),
                })
                .collect(),
        })
    }

    fn open_layer(&self, layer: &LayerBlob) -> Result<Box<dyn Read + Send + '_>, Error> {
        self.files
            .open(&self.image, &layer.name)
            .map_err(|e| Error::Layer {
                image: self.image.clone(),
                layer: layer.name.clone(),
                source: e.into(),
            })
    }
}
