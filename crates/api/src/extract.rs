//! [`Body`]: the one way a route takes its request body. An axum extractor,
//! like axum's own `Json`, but it reads the body to its surface's limit and
//! answers every rejection with the surface's own error reply: over the
//! limit, the surface's 413; a bad field, its 400 naming the field's path; an
//! unknown version, refused by name. A route then holds no reading, sizing
//! or version check of its own.
//!
//! A surface names its limit and error once, by implementing [`Surface`] for
//! its error type; a body's [`Format`] says how its bytes decode ([`Json`],
//! [`VersionFirst`] for a body with `v`, [`Raw`] for bytes as they are, or a
//! surface's own).

use std::marker::PhantomData;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use rollpoint_proto::FormatError;
use serde::de::DeserializeOwned;

use crate::body::{FieldError, TooLarge, decode_json, read_limited};
use crate::error::{ApiError, BODY_LIMIT, HttpError, Reply};

/// The error of one HTTP surface, which names the surface's body limit: a
/// body over it is refused with `Self::from(TooLarge)`.
pub trait Surface: HttpError + From<TooLarge> + Send + 'static {
    /// Largest request body the surface reads, bytes.
    const BODY_LIMIT: usize;
}

/// The rollout, coordinator and run-control routes.
impl Surface for ApiError {
    const BODY_LIMIT: usize = BODY_LIMIT;
}

/// How the bytes of a body become a `T`, or the surface's error `E`.
pub trait Format<T, E> {
    fn decode(bytes: Bytes) -> Result<T, E>;
}

/// A JSON body; a bad field is refused naming its path.
#[derive(Debug)]
pub struct Json;

impl<T: DeserializeOwned, E: From<FieldError>> Format<T, E> for Json {
    fn decode(bytes: Bytes) -> Result<T, E> {
        Ok(decode_json(&bytes)?)
    }
}

/// A body that carries its version: what it is and the version this build
/// reads.
pub trait VersionedBody: DeserializeOwned {
    /// What the body is, in errors (`fork request`).
    const WHAT: &'static str;
    /// The version read, in field `v`.
    const VERSION: u32;
}

/// A JSON body with `v`: the version is checked first (an unknown one
/// refused by name), then every field.
#[derive(Debug)]
pub struct VersionFirst;

impl<T: VersionedBody, E: From<FormatError>> Format<T, E> for VersionFirst {
    fn decode(bytes: Bytes) -> Result<T, E> {
        Ok(rollpoint_proto::decode(T::WHAT, T::VERSION, &bytes)?)
    }
}

/// The body's bytes as they are (a file's content).
#[derive(Debug)]
pub struct Raw;

impl<E> Format<Bytes, E> for Raw {
    fn decode(bytes: Bytes) -> Result<Bytes, E> {
        Ok(bytes)
    }
}

/// A request body read to the limit of surface `E` and decoded as format
/// `F`; a rejection is `E`'s reply. The last argument of a handler:
/// `Body(req, _): Body<ForkRequest, ApiError, VersionFirst>`.
#[derive(Debug)]
pub struct Body<T, E = ApiError, F = Json>(pub T, pub PhantomData<fn() -> (E, F)>);

/// A versioned body of surface `E` ([`VersionFirst`]).
pub type Versioned<T, E = ApiError> = Body<T, E, VersionFirst>;

impl<S, T, E, F> FromRequest<S> for Body<T, E, F>
where
    S: Send + Sync,
    T: Send,
    E: Surface,
    F: Format<T, E>,
{
    type Rejection = Reply<E>;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Reply<E>> {
        // A body that cannot be read in full is either over the limit or
        // from a client that went away (and reads no reply): both are the
        // limit's answer.
        let bytes = read_limited(req.into_body(), E::BODY_LIMIT)
            .await
            .map_err(|e| Reply(E::from(e)))?;
        F::decode(bytes)
            .map(|value| Self(value, PhantomData))
            .map_err(Reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::response::IntoResponse as _;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Probe {
        v: u32,
        keys: Vec<u32>,
    }

    impl VersionedBody for Probe {
        const WHAT: &'static str = "probe";
        const VERSION: u32 = 1;
    }

    async fn take<F: Format<Probe, ApiError>>(
        body: &'static str,
    ) -> Result<Probe, Reply<ApiError>> {
        let req = Request::new(axum::body::Body::from(body));
        Body::<Probe, ApiError, F>::from_request(req, &())
            .await
            .map(|Body(probe, _)| probe)
    }

    async fn reply(rejected: Reply<ApiError>) -> (StatusCode, serde_json::Value) {
        let response = rejected.into_response();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("reply body");
        (status, serde_json::from_slice(&bytes).expect("JSON reply"))
    }

    #[tokio::test]
    async fn rejections_are_the_error_object() {
        let probe = take::<Json>(r#"{"v": 1, "keys": [2]}"#)
            .await
            .expect("good");
        assert_eq!((probe.v, probe.keys), (1, vec![2]));

        let (status, body) = reply(
            take::<Json>(r#"{"v": 1, "keys": ["x"]}"#)
                .await
                .expect_err("bad"),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["code"], "bad_request");
        assert_eq!(body["error"]["field"], "keys[0]");

        let (status, body) = reply(
            take::<VersionFirst>(r#"{"v": 2, "keys": "x"}"#)
                .await
                .expect_err("version"),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["field"], "v");

        let big: &'static str = "x".repeat(BODY_LIMIT + 1).leak();
        let (status, body) = reply(take::<Json>(big).await.expect_err("too large")).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body["error"]["code"], "too_large");
    }
}
