//! Images from a registry, over the OCI distribution API with `oci-client`
//! (manifest lists and indexes resolved to linux/amd64, Docker v2 and OCI
//! manifests, token and basic auth). TLS is rustls with the system's roots
//! plus a configured CA file; plain HTTP only for registries on loopback or
//! named as insecure. Blobs are streamed: a layer is unpacked while it
//! downloads.

use std::io::Read;
use std::path::PathBuf;

use bytes::Bytes;
use futures_util::StreamExt as _;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::manifest::{Compression, ImageConfig};
use crate::source::{Fetch, LayerBlob, Resolved};
use crate::{auth, digest::Digest, errors::Error, errors::FormatError};

/// How registries are reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryOptions {
    /// Registries (`host` or `host:port`) spoken to over plain HTTP. Loopback
    /// registries always are.
    pub insecure: Vec<String>,
    /// A PEM file of extra CA certificates, trusted next to the system's.
    pub ca_file: Option<PathBuf>,
    /// A `docker login`-style auth file; unset, `REGISTRY_AUTH_FILE`, then
    /// `$HOME/.docker/config.json` when there.
    pub auth_file: Option<PathBuf>,
}

fn is_loopback(registry: &str) -> bool {
    let host = registry.rsplit_once(':').map_or(registry, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            registry
        }
    });
    matches!(host, "localhost" | "[::1]") || host.starts_with("127.")
}

pub(crate) struct Registry {
    image: String,
    reference: Reference,
    client: Client,
    auth: RegistryAuth,
    runtime: tokio::runtime::Runtime,
}

impl Registry {
    pub fn open(reference: &str, options: &RegistryOptions) -> Result<Self, Error> {
        let image = reference.to_owned();
        let invalid = |message: String| Error::Invalid {
            image: image.clone(),
            message,
        };
        let parsed: Reference = reference
            .parse()
            .map_err(|e| invalid(format!("not an image reference: {e}")))?;
        let registry = parsed.resolve_registry().to_owned();
        let mut plain: Vec<String> = options.insecure.clone();
        if is_loopback(&registry) {
            plain.push(registry.clone());
        }
        let mut config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(plain),
            platform_resolver: Some(Box::new(oci_client::client::linux_amd64_resolver)),
            ..ClientConfig::default()
        };
        if let Some(ca) = &options.ca_file {
            let data = std::fs::read(ca)
                .map_err(|e| invalid(format!("registry CA file {}: {e}", ca.display())))?;
            config.extra_root_certificates.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data,
            });
        }
        let auth = match auth::lookup(options.auth_file.as_deref(), &registry).map_err(invalid)? {
            Some((user, password)) => RegistryAuth::Basic(user, password),
            None => RegistryAuth::Anonymous,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rollpoint-image-pull")
            .enable_all()
            .build()
            .map_err(|e| invalid(format!("start the pull runtime: {e}")))?;
        Ok(Self {
            image,
            reference: parsed,
            client: Client::new(config),
            auth,
            runtime,
        })
    }

    fn registry_error(&self, e: &oci_client::errors::OciDistributionError) -> Error {
        use oci_client::errors::OciDistributionError as E;
        let message = match e {
            E::ImageManifestNotFoundError(_) => format!("no such image or tag ({e})"),
            E::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|x| {
                    matches!(
                        x.code,
                        oci_client::errors::OciErrorCode::ManifestUnknown
                            | oci_client::errors::OciErrorCode::NameUnknown
                    )
                }) =>
            {
                format!("no such image or tag ({e})")
            }
            E::AuthenticationFailure(_) | E::UnauthorizedError { .. } => {
                format!("not authorized (check the registry auth file): {e}")
            }
            _ => e.to_string(),
        };
        Error::Registry {
            image: self.image.clone(),
            message,
        }
    }
}

fn descriptor(layer: &LayerBlob, size: i64) -> OciDescriptor {
    OciDescriptor {
        digest: layer
            .digest
            .as_ref()
            .map(Digest::to_string)
            .unwrap_or_default(),
        size,
        ..OciDescriptor::default()
    }
}

impl Fetch for Registry {
    fn resolve(&self) -> Result<Resolved, Error> {
        let (manifest, digest) = self
            .runtime
            .block_on(self.client.pull_image_manifest(&self.reference, &self.auth))
            .map_err(|e| self.registry_error(&e))?;
        let mut config = Vec::new();
        self.runtime
            .block_on(
                self.client
                    .pull_blob(&self.reference, &manifest.config, &mut config),
            )
            .map_err(|e| self.registry_error(&e))?;
        // Parsed here only to fail early with the image's name.
        ImageConfig::parse(&config).map_err(|message| Error::Format {
            image: self.image.clone(),
            what: "config".into(),
            source: message.into(),
        })?;
        let layers = manifest
            .layers
            .iter()
            .map(|l| {
                let layer = |source: FormatError| Error::Layer {
                    image: self.image.clone(),
                    layer: l.digest.clone(),
                    source: source.into(),
                };
                Ok(LayerBlob {
                    digest: Some(Digest::parse(&l.digest).map_err(layer)?),
                    compression: Some(Compression::of_media_type(&l.media_type).map_err(layer)?),
                    name: l.digest.clone(),
                })
            })
            .collect::<Result<_, Error>>()?;
        Ok(Resolved {
            manifest: Some(Digest::parse(&digest).map_err(|message| Error::Format {
                image: self.image.clone(),
                what: "manifest digest".into(),
                source: message.into(),
            })?),
            config,
            layers,
        })
    }

    fn open_layer(&self, layer: &LayerBlob) -> Result<Box<dyn Read + Send + '_>, Error> {
        let stream = self
            .runtime
            .block_on(
                self.client
                    .pull_blob_stream(&self.reference, &descriptor(layer, 0)),
            )
            .map_err(|e| Error::Layer {
                image: self.image.clone(),
                layer: layer.name.clone(),
                source: format!("download: {e}").into(),
            })?;
        Ok(Box::new(StreamRead {
            runtime: &self.runtime,
            stream: Box::pin(stream.stream),
            pending: Bytes::new(),
            done: false,
        }))
    }
}

type BlobStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// A blob download read as a `Read`, one chunk at a time, by the
/// unpacking thread.
struct StreamRead<'a> {
    runtime: &'a tokio::runtime::Runtime,
    stream: BlobStream,
    pending: Bytes,
    /// The stream has ended: it is not polled again (oci-client's
    /// verifying stream checks its digest at every end it is asked for).
    done: bool,
}

impl Read for StreamRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pending.is_empty() {
            if self.done {
                return Ok(0);
            }
            match self.runtime.block_on(self.stream.next()) {
                Some(chunk) => self.pending = chunk?,
                None => self.done = true,
            }
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending.split_to(n));
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_are_plain_http() {
        assert!(is_loopback("127.0.0.1:5000"));
        assert!(is_loopback("localhost:5000"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("registry.example:5000"));
        assert!(!is_loopback("docker.io"));
    }
}
