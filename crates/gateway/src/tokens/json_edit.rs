//! Editing members of a JSON object while every other byte stays as the upstream wrote it:
//! the object is read into its members in order, each value kept as its raw text, and written
//! back compact. Hand-written over `serde_json::RawValue` because a `Value` round trip sorts
//! keys and may rewrite numbers, and the harness must see the reply it would have seen
//! without capture.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// A JSON object's members in order, values as raw text.
pub(crate) struct RawObject<'a> {
    members: Vec<(String, Cow<'a, str>)>,
    /// Whether a member was changed since it was read.
    changed: bool,
}

impl<'a> RawObject<'a> {
    /// Reads `text` as an object; `None` if it is not one.
    pub(crate) fn parse(text: &'a str) -> Option<Self> {
        let mut de = serde_json::Deserializer::from_str(text);
        let members = de.deserialize_map(MembersVisitor).ok()?;
        de.end().ok()?;
        Some(Self {
            members: members
                .into_iter()
                .map(|(k, v)| (k, Cow::Borrowed(v.get())))
                .collect(),
            changed: false,
        })
    }

    /// The raw text of member `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.members
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// Removes member `key`; whether it was there.
    pub(crate) fn remove(&mut self, key: &str) -> bool {
        let before = self.members.len();
        self.members.retain(|(k, _)| k != key);
        let removed = self.members.len() != before;
        self.changed |= removed;
        removed
    }

    /// Sets member `key` to the raw JSON `text`, in its place or appended.
    pub(crate) fn set(&mut self, key: &str, text: String) {
        self.changed = true;
        match self.members.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = Cow::Owned(text),
            None => self.members.push((key.to_owned(), Cow::Owned(text))),
        }
    }

    /// Whether any member changed.
    pub(crate) fn changed(&self) -> bool {
        self.changed
    }

    /// Writes the object back, compact.
    pub(crate) fn write(&self) -> String {
        let mut out = String::from("{");
        for (i, (key, value)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // A key that was read as a string serializes.
            out.push_str(&serde_json::to_string(key).unwrap_or_default());
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        out
    }
}

struct MembersVisitor;

impl<'de> Visitor<'de> for MembersVisitor {
    type Value = Vec<(String, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, &'de RawValue>()? {
            members.push((k, v));
        }
        Ok(members)
    }
}

/// Reads a JSON array's elements as raw text; `None` if `text` is not an array.
pub(crate) fn raw_elements(text: &str) -> Option<Vec<&RawValue>> {
    serde_json::from_str::<Vec<&RawValue>>(text).ok()
}

/// Edits member `key` of `object` (raw text) with `edit`, which gets the member's raw text
/// and returns its new text or `None` to leave it. `None` if nothing changed.
pub(crate) fn edit_member(
    object: &str,
    key: &str,
    edit: impl FnOnce(&str) -> Option<String>,
) -> Option<String> {
    let mut obj = RawObject::parse(object)?;
    let new = edit(obj.get(key)?)?;
    obj.set(key, new);
    Some(obj.write())
}

/// Edits each element of the array `text` with `edit` (raw text in, new text or `None` to
/// keep it out); `None` if nothing changed.
pub(crate) fn edit_elements(
    text: &str,
    mut edit: impl FnMut(&str) -> Option<String>,
) -> Option<String> {
    let elements = raw_elements(text)?;
    let mut any = false;
    let parts: Vec<String> = elements
        .iter()
        .map(|e| match edit(e.get()) {
            Some(new) => {
                any = true;
                new
            }
            None => e.get().to_owned(),
        })
        .collect();
    any.then(|| format!("[{}]", parts.join(",")))
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn removing_a_member_keeps_every_other_byte() {
        let text = r#"{"b":1.50,"a":{"x" : [1, 2]},"ids":[3,4],"z":"é\u00e9"}"#;
        let mut obj = RawObject::parse(text).unwrap();
        assert!(obj.remove("ids"));
        assert!(!obj.remove("nope"));
        assert!(obj.changed());
        assert_eq!(
            obj.write(),
            r#"{"b":1.50,"a":{"x" : [1, 2]},"z":"é\u00e9"}"#
        );
        obj.set("a", "null".into());
        obj.set("new", "true".into());
        assert_eq!(
            obj.write(),
            r#"{"b":1.50,"a":null,"z":"é\u00e9","new":true}"#
        );
    }

    #[test]
    fn nested_edits_touch_only_the_named_members() {
        let text = r#"{"choices":[{"i":0,"t":[1]},{"i":1}],"m":"x"}"#;
        let out = edit_member(text, "choices", |choices| {
            edit_elements(choices, |c| {
                let mut o = RawObject::parse(c)?;
                o.remove("t").then(|| o.write())
            })
        })
        .unwrap();
        assert_eq!(out, r#"{"choices":[{"i":0},{"i":1}],"m":"x"}"#);
        assert!(RawObject::parse("[1]").is_none());
        assert!(RawObject::parse("{\"a\":1} x").is_none());
    }
}
