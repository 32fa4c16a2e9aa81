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
                .map_err(|e| self.op_error("list", prefix, &e)),
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

    fn op_error(&self, op: &'static str, key: &str, e: &dyn std::fmt::Display) -> RemoteError {
        RemoteError::Op {
            url: self.url.to_string(),
            op,
            key: key.to_owned(),
            message: e.to_string(),
        }
    }

    /// Writes `bytes` as `key`, replacing any object there.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), RemoteError> {
        let path = self.path(key)?;
        self.store
            .put(&path, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.op_error("put", key, &e))
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
            Err(e) => Err(self.op_error("put-if-absent", key, &e)),
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
                .map_err(|e| self.op_error("get", key, &e)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.op_error("get", key, &e)),
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
            .map_err(|e| self.op_error("list", prefix, &e))?;
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
            .map_err(|e| self.op_error("list", prefix, &e))?;
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
            Err(e) => Err(self.op_error("delete", key, &e)),
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
