//! The allow list as a binary search over ranges of system-call numbers.
//!
//! Hand-written because `seccompiler` lays an allow list out as one linear
//! chain (about 1,500 instructions for Docker's list) and nothing else in
//! pure Rust does better (libseccomp builds trees but is a C library the
//! static supervisor cannot link). The program's length is paid on every
//! confined process: installing a filter, the kernel checks and compiles
//! it and runs it once per system-call number to learn which calls it may
//! let through unchecked (0.7 ms per `exec` and launch for the chain); a
//! call it must check runs it too. Here the number line is cut into
//! intervals (a run of calls allowed whatever their arguments is one, a
//! gap of refused numbers another, a call with a condition a third), and a
//! balanced search over their starts finds a call's interval in about
//! eight jumps; the whole program is a ninth of the chain (172
//! instructions against 1,517). Its semantics
//! are `seccompiler`'s, checked call by call in the tests of `seccomp.rs`.

use seccompiler::{BpfProgram, sock_filter};

const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LO: u32 = 16;
const ARG0_HI: u32 = 20;

pub(super) const RET_ALLOW: u32 = 0x7fff_0000;
pub(super) const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub(super) const RET_ERRNO: u32 = 0x0005_0000;

/// What a call's first argument must be for it to be allowed.
#[derive(Debug, Clone, Copy)]
pub(super) enum Arg0 {
    /// Any value.
    Any,
    /// None of the bits of the mask (all within the low word) set.
    Clear(u32),
    /// Anything but this value.
    Not(u64),
    /// One of these values.
    OneOf(&'static [u64]),
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn hi(v: u64) -> u32 {
    u32::try_from(v >> 32).unwrap_or(u32::MAX)
}

fn lo(v: u64) -> u32 {
    u32::try_from(v & 0xffff_ffff).unwrap_or(u32::MAX)
}

/// A conditional jump's offset, or `None` past the 255 one can carry.
fn near(offset: usize) -> Option<u8> {
    u8::try_from(offset).ok()
}

/// The check of one allowed call, ending in returns only (so what it
/// leaves in the accumulator does not matter); `None` when a jump in it
/// would be too long.
fn body(arg: Arg0, refuse: u32) -> Option<Vec<sock_filter>> {
    let allow = stmt(RET_K, RET_ALLOW);
    Some(match arg {
        Arg0::Any => vec![allow],
        Arg0::Clear(mask) => vec![
            stmt(LD_W_ABS, ARG0_LO),
            jump(JMP_JSET_K, mask, 0, 1),
            stmt(RET_K, refuse),
            allow,
        ],
        Arg0::Not(v) => vec![
            stmt(LD_W_ABS, ARG0_HI),
            jump(JMP_JEQ_K, hi(v), 0, 3),
            stmt(LD_W_ABS, ARG0_LO),
            jump(JMP_JEQ_K, lo(v), 0, 1),
            stmt(RET_K, refuse),
            allow,
        ],
        Arg0::OneOf(values) => {
            // Four instructions per value, then refuse, then allow.
            let n = values.len();
            let mut out = Vec::with_capacity(4 * n + 2);
            for (i, &v) in values.iter().enumerate() {
                let to_allow = near(4 * (n - i) - 3)?;
                out.extend([
                    stmt(LD_W_ABS, ARG0_HI),
                    jump(JMP_JEQ_K, hi(v), 0, 2),
                    stmt(LD_W_ABS, ARG0_LO),
                    jump(JMP_JEQ_K, lo(v), to_allow, 0),
                ]);
            }
            out.extend([stmt(RET_K, refuse), allow]);
            out
        }
    })
}

/// What the calls of one interval of numbers get.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    /// This return value, whatever the arguments.
    Return(u32),
    /// Allowed when the first argument passes, else refused.
    Check(Arg0),
}

/// The number line from 0 cut into intervals, each given by its first
/// number and verdict, neighbours never both the same plain return.
/// `None` when a number is listed twice.
fn intervals(calls: &[(u32, Verdict)], refuse: u32) -> Option<Vec<(u32, Verdict)>> {
    let mut calls = calls.to_vec();
    calls.sort_by_key(|&(nr, _)| nr);
    let mut out: Vec<(u32, Verdict)> = Vec::new();
    let mut push = |start: u32, verdict: Verdict| match (out.last(), verdict) {
        (Some(&(_, Verdict::Return(last))), Verdict::Return(next)) if last == next => {}
        _ => out.push((start, verdict)),
    };
    let mut next = Some(0u32);
    for (nr, verdict) in calls {
        let from = next?;
        if nr > from {
            push(from, Verdict::Return(refuse));
        } else if nr < from {
            return None;
        }
        push(nr, verdict);
        next = nr.checked_add(1);
    }
    if let Some(from) = next {
        push(from, Verdict::Return(refuse));
    }
    Some(out)
}

/// The search over `intervals`: a node sends numbers from its middle
/// interval's start on to its right half (with a conditional jump where
/// the left half is short enough to jump over, else through `JA`); a leaf
/// is one interval's verdict.
fn tree(intervals: &[(u32, Verdict)], refuse: u32) -> Option<Vec<sock_filter>> {
    let (left, right) = match intervals {
        [] => return None,
        [(_, Verdict::Return(k))] => return Some(vec![stmt(RET_K, *k)]),
        [(_, Verdict::Check(arg))] => return body(*arg, refuse),
        _ => intervals.split_at(intervals.len() / 2),
    };
    let start = right.first()?.0;
    let (left, right) = (tree(left, refuse)?, tree(right, refuse)?);
    let mut out = Vec::with_capacity(left.len() + right.len() + 2);
    match near(left.len()) {
        Some(over) => out.push(jump(JMP_JGE_K, start, over, 0)),
        None => {
            out.push(jump(JMP_JGE_K, start, 0, 1));
            out.push(stmt(JMP_JA, u32::try_from(left.len()).ok()?));
        }
    }
    out.extend(left);
    out.extend(right);
    Some(out)
}

/// The program allowing `calls` (each number once) for `audit_arch`,
/// answering each of `answers` with its own return value (`clone3` with
/// `ENOSYS`), returning `refuse` for every other call and killing the
/// process for another architecture's entry points, as `seccompiler` does.
/// `None` when a check needs a jump longer than a conditional jump carries
/// (a value list of more than 63), or a call is listed twice.
pub(super) fn allow_list(
    audit_arch: u32,
    calls: &[(u32, Arg0)],
    answers: &[(u32, u32)],
    refuse: u32,
) -> Option<BpfProgram> {
    let verdicts: Vec<(u32, Verdict)> = calls
        .iter()
        .map(|&(nr, arg)| match arg {
            Arg0::Any => (nr, Verdict::Return(RET_ALLOW)),
            arg => (nr, Verdict::Check(arg)),
        })
        .chain(answers.iter().map(|&(nr, k)| (nr, Verdict::Return(k))))
        .collect();
    let mut out = vec![
        stmt(LD_W_ABS, ARCH),
        jump(JMP_JEQ_K, audit_arch, 1, 0),
        stmt(RET_K, RET_KILL_PROCESS),
        stmt(LD_W_ABS, NR),
    ];
    out.extend(tree(&intervals(&verdicts, refuse)?, refuse)?);
    Some(out)
}

#[cfg(test)]
pub(super) mod interpret {
    //! A classic BPF interpreter for what filters here use, so two programs
    //! can be compared call by call.
    #![expect(clippy::unwrap_used, reason = "tests")]

    use seccompiler::sock_filter;

    /// The action `prog` returns for a call `nr` of `arch` whose first
    /// argument is `arg0`, and how many instructions it ran.
    pub fn run(prog: &[sock_filter], arch: u32, nr: u32, arg0: u64) -> (u32, usize) {
        let mut data = [0u32; 16];
        data[0] = nr;
        data[1] = arch;
        data[4] = super::lo(arg0);
        data[5] = super::hi(arg0);
        let (mut a, mut pc, mut steps) = (0u32, 0usize, 0usize);
        loop {
            let ins = &prog[pc];
            pc += 1;
            steps += 1;
            let k = ins.k;
            let cond = |taken: bool| usize::from(if taken { ins.jt } else { ins.jf });
            match ins.code {
                0x20 => a = data[usize::try_from(k / 4).unwrap()],
                0x54 => a &= k,
                0x05 => pc += usize::try_from(k).unwrap(),
                0x15 => pc += cond(a == k),
                0x25 => pc += cond(a > k),
                0x35 => pc += cond(a >= k),
                0x45 => pc += cond(a & k != 0),
                0x06 => return (k, steps),
                other => panic!("instruction {other:#x} not interpreted"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static MANY: [u64; 70] = {
        let mut v = [0u64; 70];
        let mut i = 0;
        while i < 70 {
            v[i] = i as u64;
            i += 1;
        }
        v
    };

    /// A layout it cannot make is refused, never a program with a wrong
    /// jump: a call listed twice (allowed twice, or allowed and answered),
    /// a value list too long to jump over.
    #[test]
    fn refuses_what_it_cannot_lay_out() {
        let arch = 0xc000_003e;
        let ok = [(1, Arg0::Any), (2, Arg0::OneOf(&MANY[..5]))];
        assert!(allow_list(arch, &ok, &[(3, 7)], RET_ERRNO).is_some());
        let twice = [(1, Arg0::Any), (1, Arg0::Not(3))];
        assert!(allow_list(arch, &twice, &[], RET_ERRNO).is_none());
        assert!(allow_list(arch, &ok, &[(2, 7)], RET_ERRNO).is_none());
        assert!(allow_list(arch, &[(2, Arg0::OneOf(&MANY))], &[], RET_ERRNO).is_none());
    }
}
