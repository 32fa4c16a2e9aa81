//! Hostile inputs for the parser fuzz tests: random bytes, and random
//! mutations of a valid input (bytes flipped, inserted, removed, the input
//! cut short, a JSON token swapped for another), which reach deeper into a
//! parser than random bytes do.

use proptest::prelude::*;

/// One edit of a byte string.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Cut(usize),
    Token(usize, &'static str),
}

const TOKENS: [&str; 10] = [
    "null",
    "-1",
    "1e400",
    "18446744073709551616",
    "\"\"",
    "[]",
    "{}",
    "true",
    "\"\\u0000\"",
    "\"../x\"",
];

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = bytes.len().max(1);
        match *e {
            Edit::Flip(i, b) => {
                if let Some(x) = bytes.get_mut(i % n) {
                    *x ^= b | 1;
                }
            }
            Edit::Insert(i, b) => bytes.insert((i % n).min(bytes.len()), b),
            Edit::Remove(i) => {
                if !bytes.is_empty() {
                    bytes.remove(i % n);
                }
            }
            Edit::Cut(i) => bytes.truncate(i % n),
            Edit::Token(i, t) => {
                let at = (i % n).min(bytes.len());
                bytes.splice(at..at, t.bytes());
            }
        }
    }
    bytes
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Remove),
        any::<usize>().prop_map(Edit::Cut),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(i, t)| Edit::Token(i, TOKENS[t])),
    ]
}

/// Random bytes, or `valid` with one to eight random edits.
pub fn hostile(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..256),
        4 => proptest::collection::vec(edit(), 1..8).prop_map(move |edits| apply(valid.clone(), &edits)),
    ]
}
