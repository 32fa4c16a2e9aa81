//! `rollpoint images pull|list|prune`: the task-image cache a run's
//! sandboxes stack their layers from (docs/design/images.md).

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::Context;
use rollpoint_image::{Digest, ImageCache, RegistryOptions, Source};

#[derive(Debug, clap::Subcommand)]
pub enum Images {
    /// Pull an image into the cache: `REGISTRY/REPO:TAG`, `...@sha256:...`,
    /// `oci-archive:FILE`, `docker-archive:FILE` or `oci-layout:DIR`.
    Pull(PullArgs),
    /// List the cache's images: id, layers, size and where each came from.
    List(CacheArgs),
    /// Remove every image no sandbox or retained snapshot uses, every layer
    /// no remaining image has, and abandoned partial unpacks. Run it while
    /// no run is creating sandboxes on the cache.
    Prune(PruneArgs),
}

#[derive(Debug, clap::Args)]
pub struct CacheArgs {
    /// The cache directory (a run config's `image_cache`).
    #[arg(long, conflicts_with = "run")]
    pub cache: Option<PathBuf>,
    /// A run directory: its own cache, `RUN_DIR/owner/images`.
    #[arg(long)]
    pub run: Option<PathBuf>,
}

impl CacheArgs {
    fn open(&self) -> anyhow::Result<ImageCache> {
        let dir = match (&self.cache, &self.run) {
            (Some(dir), _) => dir.clone(),
            (None, Some(run)) => run.join(super::sweep::OWNER_DIR).join("images"),
            (None, None) => anyhow::bail!("name the cache: --cache DIR or --run RUN_DIR"),
        };
        ImageCache::open(&dir)
            .with_context(|| format!("cannot open the image cache {}", dir.display()))
    }
}

#[derive(Debug, clap::Args)]
pub struct PullArgs {
    pub image: String,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// A registry reached over plain HTTP (loopback ones always are); repeatable.
    #[arg(long)]
    pub insecure: Vec<String>,
    /// Extra CA certificates (PEM) for registries.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// A `docker login`-style auth file.
    #[arg(long)]
    pub auth_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct PruneArgs {
    #[command(flatten)]
    pub cache: CacheArgs,
    /// An image id (`sha256:...`) to keep even if nothing uses it; repeatable.
    #[arg(long)]
    pub keep: Vec<String>,
}

/// `oci-archive:`, `docker-archive:` and `oci-layout:` name files (as
/// skopeo's transports do); anything else is a registry reference.
pub fn source(text: &str) -> Source {
    if let Some(p) = text.strip_prefix("oci-archive:") {
        Source::OciArchive(PathBuf::from(p))
    } else if let Some(p) = text.strip_prefix("docker-archive:") {
        Source::DockerArchive(PathBuf::from(p))
    } else if let Some(p) = text.strip_prefix("oci-layout:") {
        Source::OciLayout(PathBuf::from(p))
    } else {
        Source::Registry(text.strip_prefix("docker://").unwrap_or(text).to_owned())
    }
}

fn mib(bytes: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a size shown in MiB")]
    let m = bytes as f64 / f64::from(1u32 << 20);
    format!("{m:.1} MiB")
}

pub fn run(images: Images) -> anyhow::Result<()> {
    match images {
        Images::Pull(args) => {
            let cache = args.cache.open()?;
            let options = RegistryOptions {
                insecure: args.insecure,
                ca_file: args.ca_file,
                auth_file: args.auth_file,
            };
            let image = cache.pull(&source(&args.image), &options)?;
            println!(
                "{} {} layers ({})",
                image.id,
                image.layers.len(),
                args.image
            );
        }
        Images::List(args) => {
            let cache = args.open()?;
            println!("{:<19} {:>6} {:>12}  SOURCES", "IMAGE", "LAYERS", "SIZE");
            for image in cache.list()? {
                let sources: Vec<&str> = image.sources.iter().map(String::as_str).collect();
                println!(
                    "{:<19} {:>6} {:>12}  {}",
                    format!("sha256:{}", image.id.short()),
                    image.layers.len(),
                    mib(image.bytes),
                    sources.join(", ")
                );
            }
        }
        Images::Prune(args) => {
            let cache = args.cache.open()?;
            let keep = args
                .keep
                .iter()
                .map(|k| Digest::parse(k).map_err(|m| anyhow::anyhow!("--keep: {m}")))
                .collect::<anyhow::Result<HashSet<_>>>()?;
            let pruned = cache.prune(&keep)?;
            for id in &pruned.images {
                println!("removed image {id}");
            }
            println!(
                "removed {} images, {} layers, {} partial unpacks",
                pruned.images.len(),
                pruned.layers.len(),
                pruned.partials
            );
        }
    }
    Ok(())
}
