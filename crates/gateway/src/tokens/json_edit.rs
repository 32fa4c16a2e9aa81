//! Reading and editing members of JSON text in place: an object is read as the byte spans of
//! its members, edits are cuts and replacements of spans, and every byte no edit touches stays
//! as the upstream wrote it (its whitespace included).
//!
//! Hand-written because no JSON crate edits text in place: a `serde_json::Value` round trip
//! sorts keys and may rewrite numbers, and the harness must see the reply it would have seen
//! without capture. It also runs on every streamed event of every captured call, so it reads
//! in one pass and builds little: a member list only for an object it may edit, and values
//! it is not asked about are skipped by their quotes and brackets, not decoded. It checks structure (strings,
//! nesting, separators), not every scalar's grammar; a text it cannot read is passed on as it
//! came.

use std::borrow::Cow;
use std::ops::Range;

/// One member: the span of its key (quotes included), and of its value.
#[derive(Debug, Clone)]
struct Member {
    key: Range<usize>,
    value: Range<usize>,
}

/// A JSON object read as spans of `text`.
#[derive(Debug)]
pub(crate) struct Object<'a> {
    text: &'a str,
    members: Vec<Member>,
    /// Where its closing brace is.
    close: usize,
}

impl<'a> Object<'a> {
    /// Reads `text` as one object (whitespace around it allowed); `None` if it is not one.
    pub(crate) fn parse(text: &'a str) -> Option<Self> {
        Self::parse_with(text, |_, _| None)
    }

    /// [`Object::parse`], handing each member's raw key (quotes included) and the start of
    /// its value to `read`, which returns the value's end if it read the value itself, or
    /// `None` to have it skipped. One pass: what `read` reads is not scanned again.
    pub(crate) fn parse_with(
        text: &'a str,
        read: impl FnMut(&str, usize) -> Option<usize>,
    ) -> Option<Self> {
        let b = text.as_bytes();
        let obj = Self::read(text, skip_ws(b, 0), read)?;
        (skip_ws(b, obj.close + 1) == b.len()).then_some(obj)
    }

    /// Reads the object whose value spans `span` of `text`.
    pub(crate) fn at(text: &'a str, span: Range<usize>) -> Option<Self> {
        let obj = Self::read(text, span.start, |_, _| None)?;
        (obj.close + 1 == span.end).then_some(obj)
    }

    /// Reads the object that opens at `start` of `text`, as [`Object::parse_with`] does;
    /// it ends at [`Object::end`].
    pub(crate) fn read(
        text: &'a str,
        start: usize,
        read: impl FnMut(&str, usize) -> Option<usize>,
    ) -> Option<Self> {
        let mut members = Vec::with_capacity(8);
        let close = walk(text, start, read, |m| members.push(m))?;
        Some(Self {
            text,
            members,
            close,
        })
    }

    /// Where the object ends (after its closing brace).
    pub(crate) fn end(&self) -> usize {
        self.close + 1
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| key_is(&self.text[m.key.clone()], key))
    }

    /// The span of member `key`'s value (the first, if named twice).
    pub(crate) fn span(&self, key: &str) -> Option<Range<usize>> {
        self.position(key).map(|i| self.members[i].value.clone())
    }

    /// The raw text of member `key`'s value.
    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        let text = self.text;
        self.span(key).map(|s| &text[s])
    }

    /// Cuts every member named one of `keys` (and the comma that joined it) out of the text;
    /// whether any was there.
    pub(crate) fn remove(&self, keys: &[&str], edits: &mut Edits<'a>) -> bool {
        let m = &self.members;
        let gone = |i: usize| keys.iter().any(|k| key_is(&self.text[m[i].key.clone()], k));
        let n = m.len();
        // The members from `tail` on are all cut: they go with the comma before them.
        let tail = (0..n).rposition(|i| !gone(i)).map_or(0, |kept| kept + 1);
        let mut any = false;
        for i in (0..tail).filter(|&i| gone(i)) {
            edits.cut(m[i].key.start..m[i + 1].key.start);
            any = true;
        }
        if tail < n {
            let from = match tail {
                0 => m[0].key.start,
                _ => m[tail - 1].value.end,
            };
            edits.cut(from..m[n - 1].value.end);
            any = true;
        }
        any
    }

    /// Sets member `key` to the raw JSON `value`: in its place, or added at the end.
    pub(crate) fn set(&self, key: &str, value: &'a str, edits: &mut Edits<'a>) {
        if let Some(span) = self.span(key) {
            edits.replace(span, Cow::Borrowed(value));
            return;
        }
        let comma = if self.members.is_empty() { "" } else { "," };
        let at = self.members.last().map_or(self.close, |m| m.value.end);
        edits.replace(at..at, Cow::Owned(format!("{comma}\"{key}\":{value}")));
    }
}

/// Walks the object that opens at `start` of `text` as [`Object::read`] does, without
/// keeping its members: returns its end (after its closing brace).
pub(crate) fn each_member(
    text: &str,
    start: usize,
    read: impl FnMut(&str, usize) -> Option<usize>,
) -> Option<usize> {
    walk(text, start, read, |_| {}).map(|close| close + 1)
}

/// The object walk: each member to `read` (see [`Object::parse_with`]), then to `keep`;
/// returns where its closing brace is.
fn walk(
    text: &str,
    start: usize,
    mut read: impl FnMut(&str, usize) -> Option<usize>,
    mut keep: impl FnMut(Member),
) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(start) != Some(&b'{') {
        return None;
    }
    let mut i = skip_ws(b, start + 1);
    if b.get(i) == Some(&b'}') {
        return Some(i);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_start = i;
        let key_end = string_end(b, i)?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let value_end = match read(&text[key_start..key_end], value_start) {
            Some(end) => end,
            None => value_end(b, value_start)?,
        };
        keep(Member {
            key: key_start..key_end,
            value: value_start..value_end,
        });
        i = skip_ws(b, value_end);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b'}' => return Some(i),
            _ => return None,
        }
    }
}

/// Walks the array that opens at `start` of `text`, handing each element's start to `read`,
/// which returns the element's end if it read the element, or `None` to have it skipped.
/// Returns the array's end (after its closing bracket); `None` if it is not an array.
pub(crate) fn each_element(
    text: &str,
    start: usize,
    mut read: impl FnMut(usize) -> Option<usize>,
) -> Option<usize> {
    let b = text.as_bytes();
    if b.get(start) != Some(&b'[') {
        return None;
    }
    let mut i = skip_ws(b, start + 1);
    if b.get(i) == Some(&b']') {
        return Some(i + 1);
    }
    loop {
        let end = match read(i) {
            Some(end) => end,
            None => value_end(b, i)?,
        };
        i = skip_ws(b, end);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b']' => return Some(i + 1),
            _ => return None,
        }
    }
}

/// The list of token ids (or `null`) at `start` of `text`, and where it ends; `None` if
/// the value there is not one.
pub(crate) fn ids_at(text: &str, start: usize) -> Option<(Option<Vec<u32>>, usize)> {
    let mut out = Vec::new();
    let (list, end) = ids_into(text, start, &mut out)?;
    Some((list.then_some(out), end))
}

/// [`ids_at`], appending the ids to `out`: whether it was a list (not `null`), and its end.
/// Nothing is appended when it is not a list of ids.
pub(crate) fn ids_into(text: &str, start: usize, out: &mut Vec<u32>) -> Option<(bool, usize)> {
    let b = text.as_bytes();
    if b[start..].starts_with(b"null") {
        return Some((false, start + 4));
    }
    if b.get(start) != Some(&b'[') {
        return None;
    }
    let had = out.len();
    // About one id per four bytes up to the list's end.
    if let Some(close) = memchr::memchr(b']', &b[start..]) {
        out.reserve(close / 4);
    }
    let read = read_ids(b, start + 1, out);
    if read.is_none() {
        out.truncate(had);
    }
    read.map(|end| (true, end))
}

fn read_ids(b: &[u8], start: usize, out: &mut Vec<u32>) -> Option<usize> {
    let mut i = skip_ws(b, start);
    if b.get(i) == Some(&b']') {
        return Some(i + 1);
    }
    loop {
        let first = i;
        let mut n: u64 = 0;
        // At most 11 digits, one more than u32::MAX has: a longer number is refused
        // (the next byte is a digit, not a separator), and 11 cannot overflow a u64.
        while i - first < 11
            && let Some(&d) = b.get(i)
            && d.is_ascii_digit()
        {
            n = n * 10 + u64::from(d - b'0');
            i += 1;
        }
        // No digits, a leading zero JSON does not allow, or too large.
        if i == first || (b[first] == b'0' && i - first > 1) {
            return None;
        }
        out.push(u32::try_from(n).ok()?);
        i = skip_ws(b, i);
        match b.get(i)? {
            b',' => i = skip_ws(b, i + 1),
            b']' => return Some(i + 1),
            _ => return None,
        }
    }
}

/// The scalar (number or literal) or string at `start` of `text`: its raw text.
pub(crate) fn token_at(text: &str, start: usize) -> Option<&str> {
    value_end(text.as_bytes(), start)
        .filter(|_| !matches!(text.as_bytes()[start], b'{' | b'['))
        .map(|end| &text[start..end])
}

/// A JSON number's value; `None` for anything else.
pub(crate) fn number(raw: &str) -> Option<f64> {
    let first = *raw.as_bytes().first()?;
    // `f64::from_str` also reads `inf` and `NaN`, which JSON has not.
    (first == b'-' || first.is_ascii_digit())
        .then(|| raw.parse().ok())
        .flatten()
}

/// A JSON string's value; `None` for anything else.
pub(crate) fn string(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
}

/// Cuts and replacements of spans of one text, applied together.
#[derive(Debug)]
pub(crate) struct Edits<'a> {
    text: &'a str,
    spans: Vec<(Range<usize>, Cow<'a, str>)>,
}

impl<'a> Edits<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            spans: Vec::with_capacity(4),
        }
    }

    fn cut(&mut self, span: Range<usize>) {
        self.replace(span, Cow::Borrowed(""));
    }

    /// Replaces `span` (empty: inserts there). Spans must not overlap.
    pub(crate) fn replace(&mut self, span: Range<usize>, with: Cow<'a, str>) {
        self.spans.push((span, with));
    }

    /// Takes in the edits of `other`, made on the same text.
    pub(crate) fn extend(&mut self, other: Self) {
        self.spans.extend(other.spans);
    }

    /// Whether any edit was made.
    pub(crate) fn any(&self) -> bool {
        !self.spans.is_empty()
    }

    /// Writes the edited text to `out`.
    pub(crate) fn write_to(mut self, out: &mut Vec<u8>) {
        // Stable: inserts at one place keep their order.
        self.spans.sort_by_key(|(span, _)| span.start);
        let mut at = 0;
        for (span, with) in &self.spans {
            out.extend_from_slice(&self.text.as_bytes()[at..span.start]);
            out.extend_from_slice(with.as_bytes());
            at = span.end;
        }
        out.extend_from_slice(&self.text.as_bytes()[at..]);
    }

    /// The edited text, or `None` if nothing was edited.
    pub(crate) fn finish(self) -> Option<String> {
        if !self.any() {
            return None;
        }
        let mut out = Vec::with_capacity(self.text.len());
        self.write_to(&mut out);
        // Edits replace whole JSON tokens with UTF-8 text: the result is UTF-8.
        String::from_utf8(out).ok()
    }
}

/// Whether raw key text (quotes included) names `key`.
fn key_is(raw: &str, key: &str) -> bool {
    match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => inner == key,
        _ => string(raw).is_some_and(|k| k == key),
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end (exclusive) of the string whose opening quote is at `i`.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    // Most strings read here are keys and short values: eight bytes at a time for their
    // first 32 is quicker than setting up a vector search.
    let short = (i + 32).min(b.len());
    while let Some(word) = b
        .get(i..(i + 8).min(short))
        .and_then(|w| w.first_chunk::<8>())
    {
        let v = u64::from_le_bytes(*word);
        let hit = zero_bytes(v ^ QUOTES) | zero_bytes(v ^ BACKSLASHES);
        if hit == 0 {
            i += 8;
            continue;
        }
        let at = i + (hit.trailing_zeros() / 8) as usize;
        if b[at] == b'"' {
            return Some(at + 1);
        }
        i = at + 2;
    }
    loop {
        i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[i] == b'"' {
            return Some(i + 1);
        }
        i += 2;
    }
}

/// Eight quotes, and eight backslashes, as one word each.
const QUOTES: u64 = u64::from_ne_bytes([b'"'; 8]);
const BACKSLASHES: u64 = u64::from_ne_bytes([b'\\'; 8]);

/// The high bit of each zero byte of `x` set, up to its lowest zero byte (bits above it may
/// be set wrongly by the borrow; only the lowest is read).
const fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080
}

/// The end (exclusive) of the value that starts at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => nested_end(b, i),
        c if *c == b'-' || c.is_ascii_alphanumeric() => Some(
            b[i..]
                .iter()
                .position(|c| SCALAR_END[usize::from(*c)])
                .map_or(b.len(), |n| i + n),
        ),
        _ => None,
    }
}

/// The end (exclusive) of the object or array that opens at `i`, its brackets matched.
fn nested_end(b: &[u8], i: usize) -> Option<usize> {
    // A flat array (of numbers: a logprob entry's `bytes`) ends at its first `]` when no
    // string or bracket comes before it.
    if b[i] == b'[' {
        let rest = b.get(i + 1..)?;
        let close = memchr::memchr(b']', rest)?;
        if memchr::memchr3(b'"', b'[', b'{', &rest[..close]).is_none() {
            return Some(i + close + 2);
        }
    }
    // The open brackets as bits (1 for `{`), 128 deep; deeper text is not read.
    let mut open: u128 = u128::from(b[i] == b'{');
    let mut depth = 1u32;
    let mut j = i + 1;
    loop {
        // Everything but quotes and brackets is passed over in one step.
        j += b
            .get(j..)?
            .iter()
            .position(|c| STRUCTURAL[usize::from(*c)])?;
        match b[j] {
            b'"' => {
                j = string_end(b, j)?;
                continue;
            }
            c @ (b'{' | b'[') => {
                if depth == 128 {
                    return None;
                }
                open = (open << 1) | u128::from(c == b'{');
                depth += 1;
            }
            c => {
                if (open & 1 == 1) != (c == b'}') {
                    return None;
                }
                open >>= 1;
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
        }
        j += 1;
    }
}

/// The bytes a scalar ends at.
const SCALAR_END: [bool; 256] = {
    let ends = b",}] \t\n\r";
    let mut t = [false; 256];
    let mut k = 0;
    while k < ends.len() {
        t[ends[k] as usize] = true;
        k += 1;
    }
    t
};

/// The bytes `nested_end` stops at.
const STRUCTURAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'}' as usize] = true;
    t[b'[' as usize] = true;
    t[b']' as usize] = true;
    t
};

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn removed(text: &str, keys: &[&str]) -> String {
        let obj = Object::parse(text).unwrap();
        let mut edits = Edits::new(text);
        obj.remove(keys, &mut edits);
        edits.finish().unwrap_or_else(|| text.to_owned())
    }

    #[test]
    fn removing_members_keeps_every_other_byte() {
        let text = r#"{"b":1.50,"a":{"x" : [1, 2]},"ids":[3,4],"z":"é\u00e9"}"#;
        assert_eq!(
            removed(text, &["ids"]),
            r#"{"b":1.50,"a":{"x" : [1, 2]},"z":"é\u00e9"}"#
        );
        assert_eq!(removed(text, &["nope"]), text);
        // First, last, a run at the end, all of them; whitespace stays where nothing is cut.
        assert_eq!(
            removed(text, &["b"]),
            r#"{"a":{"x" : [1, 2]},"ids":[3,4],"z":"é\u00e9"}"#
        );
        assert_eq!(
            removed(text, &["z"]),
            r#"{"b":1.50,"a":{"x" : [1, 2]},"ids":[3,4]}"#
        );
        assert_eq!(
            removed(text, &["ids", "z"]),
            r#"{"b":1.50,"a":{"x" : [1, 2]}}"#
        );
        assert_eq!(
            removed(text, &["b", "ids"]),
            r#"{"a":{"x" : [1, 2]},"z":"é\u00e9"}"#
        );
        assert_eq!(removed(text, &["b", "a", "ids", "z"]), "{}");
        assert_eq!(
            removed("{ \"a\" : 1 ,\n \"b\" : 2 }", &["b"]),
            "{ \"a\" : 1 }"
        );
        // A key written with an escape is still the key.
        assert_eq!(removed(r#"{"\u0069ds":[1],"k":2}"#, &["ids"]), r#"{"k":2}"#);
    }

    #[test]
    fn strings_end_at_their_closing_quote_short_or_long_escaped_or_not() {
        for (text, end) in [
            (r#""""#, 2),
            (r#""a\"b" x"#, 6),
            (r#""a\\" x"#, 5),
            (r#""0123456789abcdef" x"#, 18),
            (r#""0123456789abcdefgh\"ij" x"#, 24),
            (r#""0123456789abcd\"efgh" x"#, 22),
        ] {
            assert_eq!(string_end(text.as_bytes(), 0), Some(end), "{text}");
        }
        assert_eq!(string_end(br#""0123456789abcdefgh"#, 0), None);
        assert_eq!(string_end(br#""ab\""#, 0), None);
        assert_eq!(value_end(b"-1.5e3}", 0), Some(6));
        assert_eq!(value_end(b"true", 0), Some(4));
    }

    proptest::proptest! {
        /// Any string serde writes ends where serde says, whatever its quotes and escapes.
        #[test]
        fn any_serialized_string_ends_at_its_closing_quote(s in "(?s)([\"\\\\]|.){0,80}", tail in "[,:}\\]\"]{0,3}") {
            let raw = serde_json::to_string(&s).unwrap();
            let text = format!("{raw}{tail}");
            proptest::prop_assert_eq!(string_end(text.as_bytes(), 0), Some(raw.len()));
            let read = string(&raw);
            proptest::prop_assert_eq!(read.as_deref(), Some(s.as_str()));
        }

        /// Any value serde writes is skipped to its end, and any list of ids reads back.
        #[test]
        fn any_serialized_value_is_skipped_whole(ids in proptest::collection::vec(proptest::num::u32::ANY, 0..40), words in proptest::collection::vec("(?s)([\"\\\\\\[{]|.){0,12}", 0..6)) {
            let value = serde_json::json!({"ids": ids, "w": words, "n": [[ids.len()], {"x": words}]});
            let raw = value.to_string();
            let text = format!("{raw},1");
            proptest::prop_assert_eq!(value_end(text.as_bytes(), 0), Some(raw.len()));
            let list = serde_json::to_string(&ids).unwrap();
            let mut out = Vec::new();
            proptest::prop_assert_eq!(ids_into(&list, 0, &mut out), Some((true, list.len())));
            proptest::prop_assert_eq!(out, ids);
        }
    }

    #[test]
    fn setting_replaces_in_place_or_appends() {
        let text = r#"{"a":{"x":1},"b":true}"#;
        let obj = Object::parse(text).unwrap();
        let mut edits = Edits::new(text);
        obj.set("a", "null", &mut edits);
        obj.set("new", "true", &mut edits);
        obj.set("more", "1", &mut edits);
        assert_eq!(
            edits.finish().unwrap(),
            r#"{"a":null,"b":true,"new":true,"more":1}"#
        );
        let obj = Object::parse("{ }").unwrap();
        let mut edits = Edits::new("{ }");
        obj.set("k", "1", &mut edits);
        assert_eq!(edits.finish().unwrap(), r#"{ "k":1}"#);
    }

    #[test]
    fn nested_edits_touch_only_the_named_members() {
        let text = r#"{"choices":[{"i":0,"t":[1]},{"i":1}],"m":"x","p":[2]}"#;
        let obj = Object::parse(text).unwrap();
        let mut edits = Edits::new(text);
        obj.remove(&["p"], &mut edits);
        each_element(text, obj.span("choices").unwrap().start, |at| {
            let choice = Object::read(text, at, |_, _| None)?;
            choice.remove(&["t"], &mut edits);
            Some(choice.end())
        })
        .unwrap();
        assert_eq!(
            edits.finish().unwrap(),
            r#"{"choices":[{"i":0},{"i":1}],"m":"x"}"#
        );
    }

    #[test]
    fn text_that_is_not_one_object_is_not_read() {
        for bad in [
            "[1]",
            "{\"a\":1} x",
            "{\"a\":1",
            "{\"a\" 1}",
            "{\"a\":[1}",
            "{\"a\":\"x}",
            "{a:1}",
            "",
        ] {
            assert!(Object::parse(bad).is_none(), "{bad}");
        }
        assert!(Object::parse(" {\"a\":\"}\\\"{\"}\n").is_some());
    }

    fn ids(raw: &str) -> Result<Option<Vec<u32>>, ()> {
        match ids_at(raw, 0) {
            Some((ids, end)) if end == raw.len() => Ok(ids),
            _ => Err(()),
        }
    }

    #[test]
    fn ids_are_lists_of_u32() {
        assert_eq!(ids("[1, 2,3]"), Ok(Some(vec![1, 2, 3])));
        assert_eq!(ids("[]"), Ok(Some(vec![])));
        assert_eq!(ids("null"), Ok(None));
        assert_eq!(ids("[4294967295]"), Ok(Some(vec![u32::MAX])));
        for bad in [
            "[4294967296]",
            "[1,\"two\"]",
            "[-1]",
            "[1.0]",
            "[1e3]",
            "[01]",
            "[1,]",
            "[1",
            "7",
        ] {
            assert_eq!(ids(bad), Err(()), "{bad}");
        }
    }

    #[test]
    fn scalars_read_as_json_has_them() {
        assert_eq!(number("-0.25"), Some(-0.25));
        assert_eq!(number("1e-3"), Some(0.001));
        assert_eq!(number("NaN"), None);
        assert_eq!(number("\"1\""), None);
        assert_eq!(string(r#""a\"b""#).as_deref(), Some("a\"b"));
        assert_eq!(string("\"plain\"").as_deref(), Some("plain"));
        assert_eq!(string("null"), None);
    }
}
