//! A byte buffer that keeps the head and the tail of a stream and counts what it dropped, so a
//! noisy tool costs bounded memory and the model still sees how the output began and ended.

use std::collections::VecDeque;

#[derive(Debug)]
pub struct Capped {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    closed: bool,
}

impl Capped {
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(2);
        Self {
            head_cap: cap - cap / 2,
            tail_cap: cap / 2,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            closed: false,
        }
    }

    /// Marks the end of the stream.
    pub fn close(&mut self) {
        self.closed = true;
    }

    /// Whether the stream has ended.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_cap - self.head.len();
        let take = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Bytes dropped from the middle.
    pub fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The kept text, with a marker where bytes were dropped.
    pub fn render(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        match self.dropped() {
            0 => format!("{head}{tail}"),
            n => format!("{head}\n[... {n} bytes of output omitted ...]\n{tail}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let mut c = Capped::new(10);
        c.push(b"abc");
        c.push(b"de");
        assert_eq!(c.render(), "abcde");
        assert_eq!(c.dropped(), 0);
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let mut c = Capped::new(6);
        for chunk in [&b"0123"[..], b"4567", b"89"] {
            c.push(chunk);
        }
        assert_eq!(c.dropped(), 4);
        assert_eq!(c.render(), "012\n[... 4 bytes of output omitted ...]\n789");
        let mut big = Capped::new(4);
        big.push(&[b'x'; 1000]);
        assert_eq!(big.dropped(), 996);
    }
}
