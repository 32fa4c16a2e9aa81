//! Parsing `/proc/<pid>/stat`.
//!
//! Hand-written rather than taken from `procfs`: the SIGSTOP sweep reads this
//! file for every process on every round, we need five fields, and parsing
//! them straight from the buffer keeps a 2,400-process scan allocation-free.
//! The command name may contain spaces and `)`, so fields are split after
//! the *last* `)`.

/// The fields of `/proc/<pid>/stat` the engine uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    /// State letter: R, S, D, T, t, Z, X, I, ...
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    pub session: u32,
    pub num_threads: u32,
    /// Start time in clock ticks since boot (field 22).
    pub start_time: u64,
}

/// Parses the content of a `stat` file; `None` when it is malformed.
pub fn parse(buf: &[u8]) -> Option<Stat> {
    let open = buf.iter().position(|&b| b == b'(')?;
    let close = buf.iter().rposition(|&b| b == b')')?;
    let pid = parse_num(buf.get(..open)?.trim_ascii())?;
    let mut fields = buf.get(close + 1..)?.split(u8::is_ascii_whitespace).filter(|f| !f.is_empty());
    // Field numbers are those of proc(5); the state is field 3.
    let state = char::from(*fields.next()?.first()?);
    let ppid = parse_num(fields.next()?)?;
    let pgrp = parse_num(fields.next()?)?;
    let session = parse_num(fields.next()?)?;
    // Skip fields 7..=19 to reach num_threads (20), then skip 21.
    let mut fields = fields.skip(13);
    let num_threads = parse_num(fields.next()?)?;
    let start_time = parse_num(fields.nth(1)?)?;
    Some(Stat {
        pid: u32::try_from(pid).ok()?,
        state,
        ppid: u32::try_from(ppid).ok()?,
        pgrp: u32::try_from(pgrp).ok()?,
        session: u32::try_from(session).ok()?,
        num_threads: u32::try_from(num_threads).ok()?,
        start_time,
    })
}

fn parse_num(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return None;
    }
    field.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_plain_line() {
        let line = b"1234 (sleep) S 1 1234 1234 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 98765 8192 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";
        let s = parse(line).expect("parses");
        assert_eq!(
            s,
            Stat {
                pid: 1234,
                state: 'S',
                ppid: 1,
                pgrp: 1234,
                session: 1234,
                num_threads: 1,
                start_time: 98765
            }
        );
    }

    #[test]
    fn comm_with_spaces_and_parens() {
        let line = b"77 (a) b (c)) T 5 6 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 4 0 555 0 0\n";
        let s = parse(line).expect("parses");
        assert_eq!((s.pid, s.state, s.ppid, s.num_threads, s.start_time), (77, 'T', 5, 4, 555));
    }

    #[test]
    fn rejects_truncated_and_garbage() {
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"12 (x) S 1 2"), None);
        assert_eq!(parse(b"x (y) S 1 2 3 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0 5"), None);
    }

    #[test]
    fn reads_this_process() {
        let buf = std::fs::read("/proc/self/stat").expect("read own stat");
        let s = parse(&buf).expect("parses own stat");
        assert_eq!(s.pid, std::process::id());
        assert_eq!(s.state, 'R');
        assert!(s.start_time > 0);
    }
}
