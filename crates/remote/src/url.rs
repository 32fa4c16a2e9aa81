//! The store's URL, checked once: a known scheme, a bucket (or an absolute directory), no
//! credentials, no query. Kept as text so it can be written into `run.json` and logs.

use crate::errors::RemoteError;

/// Which kind of store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    S3,
    Gcs,
    Azure,
    File,
}

/// A checked store URL. Its text holds no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    text: String,
    scheme: Scheme,
    /// The key prefix inside the bucket (empty for the bucket's root), without slashes at
    /// either end; for `file:` the absolute directory.
    prefix: String,
    /// The bucket or container; empty for `file:`.
    bucket: String,
}

impl StoreUrl {
    /// Checks `text`: `s3://BUCKET[/PREFIX]`, `gs://BUCKET[/PREFIX]`,
    /// `az://CONTAINER[/PREFIX]` (or `azure://`), `file:///ABSOLUTE/DIR`.
    pub fn parse(text: &str) -> Result<Self, RemoteError> {
        let bad = |message: &str| RemoteError::Url {
            url: redact(text),
            message: message.to_owned(),
        };
        let url = ::url::Url::parse(text).map_err(|e| bad(&format!("not a url: {e}")))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad(
                "holds credentials; put them in the environment or the options file instead",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(bad("a query or fragment is not allowed"));
        }
        let scheme = match url.scheme() {
            "s3" | "s3a" => Scheme::S3,
            "gs" => Scheme::Gcs,
            "az" | "azure" => Scheme::Azure,
            "file" => Scheme::File,
            other => {
                return Err(bad(&format!(
                    "unknown scheme {other:?} (allowed: s3, gs, az, file)"
                )));
            }
        };
        let path = url.path().trim_matches('/').to_owned();
        if path.split('/').any(|s| s == "." || s == "..") {
            return Err(bad("the path may not hold . or .. segments"));
        }
        let (bucket, prefix) = if scheme == Scheme::File {
            if url
                .host_str()
                .is_some_and(|h| !h.is_empty() && h != "localhost")
            {
                return Err(bad("a file url names no host: file:///absolute/dir"));
            }
            if path.is_empty() {
                return Err(bad("a file url needs a directory other than /"));
            }
            (String::new(), format!("/{path}"))
        } else {
            let bucket = url.host_str().unwrap_or_default().to_owned();
            if bucket.is_empty() {
                return Err(bad("names no bucket"));
            }
            (bucket, path)
        };
        Ok(Self {
            text: text.trim_end_matches('/').to_owned(),
            scheme,
            prefix,
            bucket,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The key prefix inside the bucket; for `file:`, the directory.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The bucket or container; empty for `file:`.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// `text` with anything between `://` and `@` removed, for an error about a URL that held
/// credentials.
fn redact(text: &str) -> String {
    match (text.find("://"), text.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            format!("{}://<redacted>@{}", &text[..start], &text[at + 1..])
        }
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_four_kinds() {
        let s3 = StoreUrl::parse("s3://bucket/run/a/").expect("s3");
        assert_eq!(
            (s3.scheme(), s3.bucket(), s3.prefix()),
            (Scheme::S3, "bucket", "run/a")
        );
        assert_eq!(s3.as_str(), "s3://bucket/run/a");
        let gs = StoreUrl::parse("gs://b").expect("gs");
        assert_eq!((gs.scheme(), gs.prefix()), (Scheme::Gcs, ""));
        assert_eq!(
            StoreUrl::parse("az://c/p").expect("az").scheme(),
            Scheme::Azure
        );
        let file = StoreUrl::parse("file:///shared/run").expect("file");
        assert_eq!(
            (file.scheme(), file.prefix()),
            (Scheme::File, "/shared/run")
        );
    }

    #[test]
    fn refuses_by_name_and_never_echoes_a_secret() {
        for (url, says) in [
            ("s3://AKIA:SECRETKEY@bucket/p", "holds credentials"),
            ("http://host/p", "unknown scheme"),
            ("s3:///p", "names no bucket"),
            ("file:///", "other than /"),
            ("file://host/dir", "names no host"),
            ("s3://b/p?x=1", "query"),
            ("not a url", "not a url"),
        ] {
            let e = StoreUrl::parse(url).expect_err(url).to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("SECRETKEY"), "{url}: {e}");
        }
    }
}
