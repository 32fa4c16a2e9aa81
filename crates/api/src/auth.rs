//! Bearer tokens, checked the same way on every rollpoint HTTP surface: the
//! SHA-256 of the presented token is compared with that of the expected one
//! in constant time, which hides both the token's bytes and its length. An
//! empty expected token matches nothing.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
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

#[derive(Debug)]
struct Gate {
    token: BearerToken,
    refuse: fn() -> Response,
}

/// `router` with every route behind `Authorization: Bearer <token>`; a
/// request without it gets `refuse()` (each surface's own 401 body).
pub fn require_bearer(router: Router, token: &str, refuse: fn() -> Response) -> Router {
    let gate = Arc::new(Gate {
        token: BearerToken::new(token),
        refuse,
    });
    router.layer(axum::middleware::from_fn_with_state(gate, check))
}

async fn check(State(gate): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    if gate.token.admits(req.headers()) {
        next.run(req).await
    } else {
        (gate.refuse)()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, value.parse().expect("header"));
        h
    }

    #[test]
    fn admits_only_the_token() {
        let t = BearerToken::new("s3cret");
        assert!(t.admits(&headers("Bearer s3cret")));
        assert!(t.admits(&headers("bearer s3cret")));
        assert!(!t.admits(&headers("Bearer s3cre")));
        assert!(!t.admits(&headers("Basic s3cret")));
        assert!(!t.admits(&HeaderMap::new()));
        assert!(!BearerToken::new("").admits(&headers("Bearer ")));
    }
}
