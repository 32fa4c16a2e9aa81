//! Bearer tokens, checked the same way on every rollpoint HTTP surface (the
//! checkpoint routes, the owner's): the SHA-256 of the presented token is
//! compared with that of the expected one in constant time, which hides
//! both the token's bytes and its length. An empty expected token matches
//! nothing.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

#[derive(Debug)]
pub struct BearerToken {
    digest: [u8; 32],
    empty: bool,
}

impl BearerToken {
    pub fn new(token: &str) -> Self {
        Self {
            digest: Sha256::digest(token.as_bytes()).into(),
            empty: token.is_empty(),
        }
    }

    /// Whether `headers` carry `Authorization: Bearer <this token>`.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token);
        presented.is_some_and(|p| {
            let digest: [u8; 32] = Sha256::digest(p.as_bytes()).into();
            let equal: bool = self.digest.ct_eq(&digest).into();
            equal && !self.empty
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, value.parse().expect("header value"));
        h
    }

    #[test]
    fn admits_only_the_exact_token() {
        let t = BearerToken::new("s3cret");
        assert!(t.admits(&headers("Bearer s3cret")));
        assert!(t.admits(&headers("bearer s3cret")));
        assert!(!t.admits(&headers("Bearer s3cre")));
        assert!(!t.admits(&headers("Basic s3cret")));
        assert!(!t.admits(&HeaderMap::new()));
        assert!(!BearerToken::new("").admits(&headers("Bearer ")));
    }
}
