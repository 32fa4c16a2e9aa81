//! Content digests (`sha256:<64 hex>`), the keys of the layer cache and the
//! names of images. Only SHA-256 is accepted: it is what every registry and
//! every archive format this crate reads uses.

use std::fmt;
use std::io::{self, Read};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::errors::FormatError;

/// A validated `sha256:` digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    pub fn parse(s: &str) -> Result<Self, FormatError> {
        let hex = s
            .strip_prefix("sha256:")
            .ok_or_else(|| FormatError::NotSha256(s.to_owned()))?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(FormatError::DigestHex(s.to_owned()));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn of(bytes: &[u8]) -> Self {
        Self(format!("sha256:{:x}", Sha256::digest(bytes)))
    }

    /// The 64 hex digits: a file name.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Twelve hex digits, for messages and listings.
    pub fn short(&self) -> &str {
        &self.hex()[..12]
    }
}

impl TryFrom<String> for Digest {
    type Error = FormatError;
    fn try_from(s: String) -> Result<Self, FormatError> {
        Self::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> Self {
        d.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Hashes what passes through it; [`Hashing::finish`] reads the rest to the
/// end first, so trailing bytes a consumer left unread still count.
pub(crate) struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
}

impl<R: Read> Hashing<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    pub fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((
            Digest(format!("sha256:{:x}", self.hasher.finalize())),
            self.bytes,
        ))
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn digests_are_checked_and_hash_what_passes() {
        assert!(
            Digest::parse("sha256:abc")
                .unwrap_err()
                .to_string()
                .contains("64")
        );
        assert!(
            Digest::parse("md5:00")
                .unwrap_err()
                .to_string()
                .contains("not a sha256")
        );
        let d = Digest::of(b"hello");
        assert_eq!(Digest::parse(d.as_str()).unwrap(), d);
        let mut h = Hashing::new(&b"hello"[..]);
        let mut first = [0u8; 2];
        h.read_exact(&mut first).unwrap();
        assert_eq!(h.finish().unwrap(), (d, 5));
    }
}
