//! The stored form of a [`CallTokens`] document, the one body the ledger writes per captured
//! call and a trajectory export reads per call.
//!
//! Version 2 is binary: the magic `RPTK`, a version byte, then the document in `postcard`
//! form (each id an unsigned LEB128 varint, each logprob its 8 bytes little-endian, each
//! string its length then its UTF-8). Ids are most of a document: as varints they take one to
//! three bytes where JSON took up to seven, and they are written and read without formatting
//! or parsing text. Version 1, a JSON object with a `v` member, is still read.

use serde::Deserialize;

use super::CallTokens;

/// The version byte of a stored [`CallTokens`] document.
const VERSION: u8 = 2;

/// Version of a stored [`CallTokens`] document.
pub const TOKENS_VERSION: u32 = VERSION as u32;

/// What every version 2 document starts with, before its version byte.
const MAGIC: &[u8; 4] = b"RPTK";

/// Why a stored tokens document does not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DocError {
    #[error("tokens document version {found} is not known (known: 1, {TOKENS_VERSION})")]
    UnknownVersion { found: u64 },
    #[error("tokens document (version {version}) is malformed: {detail}")]
    Malformed { version: u32, detail: String },
}

/// Version 1: JSON, its version in `v`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct V1 {
    v: u64,
    prompt_ids: Vec<u32>,
    completion_ids: Vec<u32>,
    logprobs: Option<Vec<f64>>,
    finish_reason: Option<String>,
    model: Option<String>,
    weights_version: Option<String>,
}

impl CallTokens {
    /// The document in the current version's stored form.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let lp = self.logprobs.as_ref().map_or(0, Vec::len);
        // Up to 5 bytes an id (3 for ids below 2^21), 8 a logprob.
        let ids = self.prompt_ids.len() + self.completion_ids.len();
        let mut out = Vec::with_capacity(64 + 3 * ids + 8 * lp);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        // Writing to a Vec fails only where allocation would.
        postcard::to_io(self, &mut out).expect("encoding to a Vec");
        out
    }

    /// Reads a stored document of any known version.
    ///
    /// # Errors
    /// An unknown version, named, or a document that does not read, with what is wrong.
    pub fn decode(bytes: &[u8]) -> Result<Self, DocError> {
        if let Some(rest) = bytes.strip_prefix(MAGIC) {
            let (&version, body) = rest.split_first().ok_or(DocError::Malformed {
                version: TOKENS_VERSION,
                detail: "it ends before its version byte".into(),
            })?;
            if version != VERSION {
                return Err(DocError::UnknownVersion {
                    found: u64::from(version),
                });
            }
            let malformed = |detail: String| DocError::Malformed {
                version: TOKENS_VERSION,
                detail,
            };
            let (doc, trailing) =
                postcard::take_from_bytes::<Self>(body).map_err(|e| malformed(e.to_string()))?;
            if !trailing.is_empty() {
                return Err(malformed(format!(
                    "{} bytes follow the document",
                    trailing.len()
                )));
            }
            return doc.checked().map_err(malformed);
        }
        let v1: V1 = serde_json::from_slice(bytes).map_err(|e| {
            // A JSON document of another version says which.
            match serde_json::from_slice::<serde_json::Value>(bytes)
                .ok()
                .and_then(|v| v.get("v")?.as_u64())
            {
                Some(found) if found != 1 => DocError::UnknownVersion { found },
                _ => DocError::Malformed {
                    version: 1,
                    detail: e.to_string(),
                },
            }
        })?;
        if v1.v != 1 {
            return Err(DocError::UnknownVersion { found: v1.v });
        }
        Self {
            prompt_ids: v1.prompt_ids,
            completion_ids: v1.completion_ids,
            logprobs: v1.logprobs,
            finish_reason: v1.finish_reason,
            model: v1.model,
            weights_version: v1.weights_version,
        }
        .checked()
        .map_err(|detail| DocError::Malformed { version: 1, detail })
    }

    /// What a document must hold beyond its shape: one finite logprob per completion id.
    fn checked(self) -> Result<Self, String> {
        if let Some(lp) = &self.logprobs {
            if lp.len() != self.completion_ids.len() {
                return Err(format!(
                    "`logprobs` has {} entries for {} completion ids",
                    lp.len(),
                    self.completion_ids.len()
                ));
            }
            if let Some(i) = lp.iter().position(|x| !x.is_finite()) {
                return Err(format!("`logprobs[{i}]` is not a finite number"));
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn doc() -> CallTokens {
        CallTokens {
            prompt_ids: vec![0, 1, 127, 128, 16_383, 16_384, 151_643, u32::MAX],
            completion_ids: vec![72, 105, 151_645],
            logprobs: Some(vec![-0.0, -1.25e-7, -17.5]),
            finish_reason: Some("stop".into()),
            model: Some("Qwen/Qwen3-8B".into()),
            weights_version: None,
        }
    }

    #[test]
    fn a_document_reads_back_as_written_and_is_smaller_than_its_json() {
        let d = doc();
        let bytes = d.encode();
        assert_eq!(&bytes[..5], b"RPTK\x02");
        assert_eq!(CallTokens::decode(&bytes).unwrap(), d);
        let json = serde_json::to_vec(&d).unwrap();
        assert!(
            bytes.len() < json.len(),
            "{} vs {}",
            bytes.len(),
            json.len()
        );
        let none = CallTokens {
            logprobs: None,
            finish_reason: None,
            model: None,
            ..d
        };
        assert_eq!(CallTokens::decode(&none.encode()).unwrap(), none);
    }

    #[test]
    fn a_version_1_json_document_still_reads() {
        let v1 = br#"{"v":1,"prompt_ids":[1,2],"completion_ids":[3],"logprobs":[-0.5],
            "finish_reason":"stop","model":"m","weights_version":"fp"}"#;
        let d = CallTokens::decode(v1).unwrap();
        assert_eq!((d.prompt_ids, d.completion_ids), (vec![1, 2], vec![3]));
        assert_eq!(d.logprobs, Some(vec![-0.5]));
        assert_eq!(d.weights_version.as_deref(), Some("fp"));
    }

    #[test]
    fn unknown_versions_are_refused_by_name() {
        let mut bytes = doc().encode();
        bytes[4] = 9;
        let e = CallTokens::decode(&bytes).unwrap_err();
        assert_eq!(e, DocError::UnknownVersion { found: 9 });
        assert!(e.to_string().contains("version 9 is not known"), "{e}");
        let json = br#"{"v":7,"prompt_ids":[],"completion_ids":[],"later":true}"#;
        assert_eq!(
            CallTokens::decode(json).unwrap_err(),
            DocError::UnknownVersion { found: 7 }
        );
    }

    #[test]
    fn damaged_documents_say_what_is_wrong() {
        let bytes = doc().encode();
        let e = CallTokens::decode(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(matches!(e, DocError::Malformed { version: 2, .. }), "{e}");
        let mut long = bytes.clone();
        long.push(0);
        let e = CallTokens::decode(&long).unwrap_err().to_string();
        assert!(e.contains("1 bytes follow the document"), "{e}");
        assert!(CallTokens::decode(b"RPTK").is_err());
        let mut short = doc();
        short.logprobs = Some(vec![-1.0]);
        let e = CallTokens::decode(&short.encode()).unwrap_err().to_string();
        assert!(
            e.contains("`logprobs` has 1 entries for 3 completion ids"),
            "{e}"
        );
        let mut inf = doc();
        inf.logprobs = Some(vec![-1.0, f64::NEG_INFINITY, -2.0]);
        let e = CallTokens::decode(&inf.encode()).unwrap_err().to_string();
        assert!(e.contains("`logprobs[1]` is not a finite number"), "{e}");
        // A length far beyond the bytes there: an error, not an allocation of that size.
        let mut huge = b"RPTK\x02".to_vec();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(CallTokens::decode(&huge).is_err());
        let e = CallTokens::decode(b"{\"v\":1,\"prompt_ids\":[-1]}").unwrap_err();
        assert!(matches!(e, DocError::Malformed { version: 1, .. }), "{e}");
    }
}
