//! The OCI image formats this crate reads: indexes (and Docker manifest
//! lists), manifests (OCI and Docker v2) and image configs. Parsed with
//! small local types that keep only the fields used, so a config with an
//! architecture or field this crate has never seen still reads.

use serde::Deserialize;

use crate::digest::Digest;
use crate::errors::FormatError;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    /// The compression a layer media type names, or why it is refused.
    pub fn of_media_type(media_type: &str) -> Result<Self, FormatError> {
        match media_type {
            "application/vnd.oci.image.layer.v1.tar"
            | "application/vnd.docker.image.rootfs.diff.tar" => Ok(Self::None),
            "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Ok(Self::Gzip),
            "application/vnd.oci.image.layer.v1.tar+zstd" => Ok(Self::Zstd),
            other => Err(FormatError::LayerMediaType(other.to_owned())),
        }
    }

    /// The compression the first bytes of a blob show (Docker archives name
    /// no media type).
    pub fn sniff(head: &[u8]) -> Self {
        match head {
            [0x1f, 0x8b, ..] => Self::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Self::Zstd,
            _ => Self::None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: Digest,
    #[serde(default)]
    pub size: i64,
    #[serde(default)]
    pub platform: Option<Platform>,
    #[serde(default)]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Platform {
    pub architecture: String,
    pub os: String,
}

/// An index or a manifest: which it is shows in `mediaType` or, when that
/// is absent (allowed for OCI), in which of `manifests`/`layers` it has.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Document {
    #[serde(default)]
    pub schema_version: u32,
    #[serde(default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    pub config: Option<Descriptor>,
    #[serde(default)]
    pub layers: Option<Vec<Descriptor>>,
}

#[derive(Debug)]
pub enum Parsed {
    Index(Vec<Descriptor>),
    Manifest {
        config: Descriptor,
        layers: Vec<Descriptor>,
    },
}

impl Document {
    pub fn parse(bytes: &[u8]) -> Result<Parsed, FormatError> {
        let doc: Document = serde_json::from_slice(bytes).map_err(FormatError::NotDocument)?;
        if doc.schema_version != 2 {
            return Err(FormatError::SchemaVersion(doc.schema_version));
        }
        match (
            doc.media_type.as_deref(),
            doc.manifests,
            doc.config,
            doc.layers,
        ) {
            (Some(OCI_INDEX | DOCKER_LIST) | None, Some(manifests), None, None) => {
                Ok(Parsed::Index(manifests))
            }
            (Some(OCI_MANIFEST | DOCKER_MANIFEST) | None, None, Some(config), Some(layers)) => {
                Ok(Parsed::Manifest { config, layers })
            }
            (Some(other), ..) => Err(FormatError::MediaType(other.to_owned())),
            (None, ..) => Err(FormatError::NeitherIndexNorManifest),
        }
    }
}

/// The entry of an index for linux/amd64, the platform sandboxes run on.
pub fn pick_platform(manifests: &[Descriptor]) -> Result<&Descriptor, FormatError> {
    let on = |d: &&Descriptor| {
        d.platform
            .as_ref()
            .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
    };
    if let Some(d) = manifests.iter().find(on) {
        return Ok(d);
    }
    // An index without platforms (a single-image OCI layout) names its image.
    if let [only] = manifests
        && only.platform.is_none()
    {
        return Ok(only);
    }
    let offered: Vec<String> = manifests
        .iter()
        .filter_map(|d| {
            d.platform
                .as_ref()
                .map(|p| format!("{}/{}", p.os, p.architecture))
        })
        .collect();
    Err(FormatError::NoPlatform(offered))
}

/// An image config, as far as sandboxes use it.
#[derive(Debug, Clone, Deserialize)]
pub struct ImageConfig {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub config: Option<RunConfig>,
    pub rootfs: RootFs,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    #[serde(default)]
    pub env: Option<Vec<String>>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RootFs {
    #[serde(rename = "type")]
    pub kind: String,
    pub diff_ids: Vec<Digest>,
}

impl ImageConfig {
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        let config: ImageConfig = serde_json::from_slice(bytes).map_err(FormatError::NotConfig)?;
        if config.rootfs.kind != "layers" {
            return Err(FormatError::RootfsType(config.rootfs.kind));
        }
        if !config.os.is_empty() && config.os != "linux" {
            return Err(FormatError::Os(config.os));
        }
        if !config.architecture.is_empty() && config.architecture != "amd64" {
            return Err(FormatError::Architecture(config.architecture));
        }
        Ok(config)
    }
}
