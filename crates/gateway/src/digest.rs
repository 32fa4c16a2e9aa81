//! Digests: SHA-256 of raw bytes, and of JSON in a canonical form (keys sorted, no
//! whitespace) so that the same conversation hashes the same however its keys were ordered.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Hex SHA-256 of `bytes`.
#[must_use]
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// `value` serialized with object keys sorted at every level.
#[must_use]
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Appends the canonical form of `value` to `out`, leaving out the top-level keys `skip`.
pub fn write_canonical_skipping(value: &Value, skip: &[&str], out: &mut String) {
    match value {
        Value::Object(map) => write_object(map, skip, out),
        other => write_canonical(other, out),
    }
}

/// An object with sorted keys, leaving out the keys `skip`; values in full.
fn write_object(map: &serde_json::Map<String, Value>, skip: &[&str], out: &mut String) {
    let mut keys: Vec<&String> = map.keys().filter(|k| !skip.contains(&k.as_str())).collect();
    keys.sort();
    out.push('{');
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(k, out);
        out.push(':');
        write_canonical(&map[k], out);
    }
    out.push('}');
}

fn write_string(s: &str, out: &mut String) {
    // Serializing a `&str` cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_object(map, &[], out),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        other => out.push_str(&other.to_string()),
    }
}

/// Hex SHA-256 of the canonical form of `value`.
#[must_use]
pub fn json_digest(value: &Value) -> String {
    sha256_hex(canonical(value).as_bytes())
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_eq!(json_digest(&a), json_digest(&b));
    }
}
