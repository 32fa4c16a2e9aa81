//! One opened store and the five operations the checkpoint store is built from.

use std::os::unix::fs::DirBuilderExt as _;
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt as _;
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt as _, PutMode, PutOptions,
    PutPayload, RetryConfig,
};

use crate::errors::RemoteError;
use crate::options::Options;
use crate::url::{Scheme, StoreUrl};

/// Bounds on a store that does not answer: a checkpoint fails within about a minute instead
/// of hanging on the client's default three-minute retries.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const RETRIES: usize = 3;
const RETRY_WINDOW: Duration = Duration::from_secs(20);

/// What a put-if-absent found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The object is new: this put made it.
    New,
    /// An object was there already; it is unchanged.
    Existed,
}

/// An opened object store under a prefix. Cheap to clone.
#[derive(Clone)]
pub struct RemoteStore {
    url: StoreUrl,
    store: Arc<dyn ObjectStore>,
    /// Applied to every key (empty for `file:`, whose directory is the store's root).
    prefix: String,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("url", &self.url.as_str())
            .finish_non_exhaustive()
    }
}

impl RemoteStore {
    /// Opens the store `url` names, with credentials and settings from the environment and
    /// `options`. A `file:` directory is created (0700) when missing. Nothing is sent to the
    /// store yet.
    pub fn open(url: &StoreUrl, options: &Options) -> Result<Self, RemoteError> {
        let config = |message: String| RemoteError::Config {
            url: url.to_string(),
            message,
        };
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: RETRIES,
            retry_timeout: RETRY_WINDOW,
        };
        let client = ClientOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT);
        let store: Arc<dyn ObjectStore> = match url.scheme() {
            Scheme::File => {
                let dir = std::path::Path::new(url.prefix());
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| config(format!("{}: {e}", dir.display())))?;
                if let Some((key, _)) = options.pairs().first() {
                    return Err(unknown_key(options, key, "a file store takes no options"));
                }
                let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| config(e.to_string()))?
                    .with_fsync(true);
                Arc::new(fs)
            }
            Scheme::S3 => {
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(url.as_str())
                    .with_retry(retry)
                    .with_client_options(client);
                for (key, value) in options.pairs() {
                    let k = object_store::aws::AmazonS3ConfigKey::from_str(key)
                        .map_err(|_| unknown_key(options, key, "not an S3 setting"))?;
                    b = b.with_config(k, value);
                }
                Arc::new(b.build().map_err(|e| config(e.to_string()))?)
            }
            Scheme::Gcs => {
                let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(url.as_str())
                    .with_retry(retry)
                    .with_client_options(client);
                for (key, value) in options.pairs() {
                    let k = object_store::gcp::GoogleConfigKey::from_str(key)
                        .map_err(|_| unknown_key(options, key, "not a GCS setting"))?;
                    b = b.with_config(k, value);
                }
                Arc::new(b.build().map_err(|e| config(e.to_string()))?)
            }
            Scheme::Azure => {
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url.as_str())
                    .with_retry(retry)
                    .with_client_options(client);
                for (key, value) in options.pairs() {
                    let k = object_store::azure::AzureConfigKey::from_str(key)
                        .map_err(|_| unknown_key(options, key, "not an Azure setting"))?;
                    b = b.with_config(k, value);
                }
                Arc::new(b.build().map_err(|e| config(e.to_string()))?)
            }
        };
        let prefix = match url.scheme() {
            Scheme::File => String::new(),
            _ => url.prefix().to_owned(),
        };
        Ok(Self {
            url: url.clone(),
            store,
            prefix,
        })
    }

    /// The store a setting names (a URL and an optional options file), if it names one.
    pub fn named(
        url: Option<&str>,
        options: Option<&std::path::Path>,
    ) -> Result<Option<Self>, RemoteError> {
        let Some(url) = url else {
            return Ok(None);
        };
        let url = StoreUrl::parse(url)?;
        let options = match options {
            Some(path) => Options::from_file(path)?,
            None => Options::none(),
        };
        Self::open(&url, &options).map(Some)
    }

    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    fn path(&self, key: &str) -> Result<ObjectPath, RemoteError> {
        let bad = |message: &str| RemoteError::Key {
            url: self.url.to_string(),
            key: key.to_owned(),
            message: message.to_owned(),
        };
        if key.is_empty() || key.starts_with('/') || key.ends_with('/') {
            return Err(bad("must be a relative path naming an object"));
        }
        let full = if self.prefix.is_empty() {
            key.to_owned()
        } else {
            format!("{}/{key}", self.prefix)
        };
        ObjectPath::parse(&full).map_err(|e| bad(&e.to_string()))
    }

    fn dir(&self, prefix: &str) -> Result<Option<ObjectPath>, RemoteError> {
        let trimmed = prefix.trim_matches('/');
        match (self.prefix.is_empty(), trimmed.is_empty()) {
            (true, true) => Ok(None),
            (false, true) => ObjectPath::parse(&self.prefix)
                .map(Some)
                .map_err(|e| self.op_error("list", prefix, e)),
            _ => self.path(trimmed).map(Some),
        }
    }

    /// The key of `path` relative to the store's prefix.
    fn relative(&self, path: &ObjectPath) -> String {
        let s = path.as_ref();
        if self.prefix.is_empty() {
            return s.to_owned();
        }
        s.strip_prefix(&self.prefix)
            .map(|rest| rest.trim_start_matches('/'))
            .unwrap_or(s)
            .to_owned()
    }

    fn op_error(
        &self,
        op: &'static str,
        key: &str,
        source: impl Into<rollpoint_proto::Cause>,
    ) -> RemoteError {
        RemoteError::Op {
            url: self.url.to_string(),
            op,
            key: key.to_owned(),
            source: source.into(),
        }
    }

    /// Writes `bytes` as `key`, replacing any object there.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), RemoteError> {
        let path = self.path(key)?;
        self.store
            .put(&path, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.op_error("put", key, e))
    }

    /// Writes `bytes` as `key` unless an object is there: of two racing writers exactly one
    /// gets [`Created::New`].
    pub async fn put_new(&self, key: &str, bytes: Bytes) -> Result<Created, RemoteError> {
        let path = self.path(key)?;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&path, PutPayload::from_bytes(bytes), opts)
            .await
        {
            Ok(_) => Ok(Created::New),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(Created::Existed),
            Err(e) => Err(self.op_error("put-if-absent", key, e)),
        }
    }

    /// The object `key`, or `None` when there is none.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, RemoteError> {
        let path = self.path(key)?;
        match self.store.get(&path).await {
            Ok(r) => r
                .bytes()
                .await
                .map(Some)
                .map_err(|e| self.op_error("get", key, e)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.op_error("get", key, e)),
        }
    }

    /// Every key under `prefix` (a directory-like prefix, `""` for all), sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, RemoteError> {
        let dir = self.dir(prefix)?;
        let mut keys: Vec<String> = self
            .store
            .list(dir.as_ref())
            .map_ok(|meta| self.relative(&meta.location))
            .try_collect()
            .await
            .map_err(|e| self.op_error("list", prefix, e))?;
        keys.sort();
        Ok(keys)
    }

    /// The names one level below `prefix` that hold objects (its "directories"), sorted.
    pub async fn children(&self, prefix: &str) -> Result<Vec<String>, RemoteError> {
        let dir = self.dir(prefix)?;
        let listed = self
            .store
            .list_with_delimiter(dir.as_ref())
            .await
            .map_err(|e| self.op_error("list", prefix, e))?;
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Deletes `key`; a missing object is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), RemoteError> {
        let path = self.path(key)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.op_error("delete", key, e)),
        }
    }

    /// Deletes every object under `prefix`; returns how many.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize, RemoteError> {
        let keys = self.list(prefix).await?;
        for key in &keys {
            self.delete(key).await?;
        }
        Ok(keys.len())
    }
}

fn unknown_key(options: &Options, key: &str, why: &str) -> RemoteError {
    RemoteError::Options {
        path: options.source().map(ToOwned::to_owned).unwrap_or_default(),
        message: format!("key {}: {why}", key.to_ascii_uppercase()),
    }
}

/// One piece of a file kept as several objects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chunk {
    pub sha256: String,
    pub len: u64,
}

/// Chunks uploaded at once per file.
const CHUNKS_IN_FLIGHT: usize = 4;

impl RemoteStore {
    /// Uploads the file at `path` as objects `<prefix>/<n>-<sha256>` of at most `chunk_size`
    /// bytes each (put-if-absent: a retry re-uses what landed); returns them in order.
    pub async fn upload_file(
        &self,
        prefix: &str,
        path: &std::path::Path,
        chunk_size: usize,
    ) -> Result<Vec<Chunk>, RemoteError> {
        use futures_util::StreamExt as _;
        use tokio::io::AsyncReadExt as _;
        let read_error = |e: std::io::Error| RemoteError::Op {
            url: self.url.to_string(),
            op: "read",
            key: path.display().to_string(),
            source: e.into(),
        };
        let mut file = tokio::fs::File::open(path).await.map_err(read_error)?;
        let mut pieces = Vec::new();
        loop {
            let mut buf = vec![0u8; chunk_size.max(1)];
            let mut filled = 0;
            while filled < buf.len() {
                let n = file.read(&mut buf[filled..]).await.map_err(read_error)?;
                if n == 0 {
                    break;
                }
                filled += n;
            }
            if filled == 0 {
                break;
            }
            buf.truncate(filled);
            pieces.push(Bytes::from(buf));
            if filled < chunk_size.max(1) {
                break;
            }
        }
        let uploads: Vec<futures_util::future::BoxFuture<'_, Result<Chunk, RemoteError>>> = pieces
            .into_iter()
            .enumerate()
            .map(|(n, bytes)| {
                Box::pin(async move {
                    let chunk = Chunk {
                        sha256: sha256_hex(&bytes),
                        len: bytes.len() as u64,
                    };
                    self.put_new(&format!("{prefix}/{n:06}-{}", chunk.sha256), bytes)
                        .await
                        .map(|_| chunk)
                }) as futures_util::future::BoxFuture<'_, _>
            })
            .collect();
        futures_util::stream::iter(uploads)
            .buffered(CHUNKS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }

    /// Writes the file [`RemoteStore::upload_file`] uploaded as `chunks` to `path` (created
    /// new, 0600, fsynced), checking every chunk's length and digest; a mismatch is an error
    /// naming the object. Returns the bytes written.
    pub async fn download_file(
        &self,
        prefix: &str,
        chunks: &[Chunk],
        path: &std::path::Path,
    ) -> Result<u64, RemoteError> {
        use futures_util::StreamExt as _;
        use tokio::io::AsyncWriteExt as _;
        let write_error = |e: std::io::Error| RemoteError::Op {
            url: self.url.to_string(),
            op: "write",
            key: path.display().to_string(),
            source: e.into(),
        };
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .await
            .map_err(write_error)?;
        let fetches: Vec<futures_util::future::BoxFuture<'_, Result<Bytes, RemoteError>>> = chunks
            .iter()
            .enumerate()
            .map(|(n, chunk)| {
                Box::pin(async move {
                    let key = format!("{prefix}/{n:06}-{}", chunk.sha256);
                    let bytes = self.get(&key).await?.ok_or_else(|| RemoteError::Op {
                        url: self.url.to_string(),
                        op: "get",
                        key: key.clone(),
                        source: "missing".into(),
                    })?;
                    let found = sha256_hex(&bytes);
                    if found != chunk.sha256 || bytes.len() as u64 != chunk.len {
                        return Err(RemoteError::Op {
                            url: self.url.to_string(),
                            op: "verify",
                            key,
                            source: format!(
                                "{} bytes with sha256 {found}, expected {} bytes with sha256 {}",
                                bytes.len(),
                                chunk.len,
                                chunk.sha256
                            )
                            .into(),
                        });
                    }
                    Ok(bytes)
                }) as futures_util::future::BoxFuture<'_, _>
            })
            .collect();
        let mut stream = futures_util::stream::iter(fetches).buffered(CHUNKS_IN_FLIGHT);
        let mut total = 0u64;
        while let Some(bytes) = stream.next().await {
            let bytes = bytes?;
            file.write_all(&bytes).await.map_err(write_error)?;
            total += bytes.len() as u64;
        }
        file.sync_all().await.map_err(write_error)?;
        Ok(total)
    }
}

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
