//! The SIGSTOP sweep: scan, stop every new member, repeat until the set is
//! stable and every member is confirmed stopped.
//!
//! Stopped means state `T` or `t` in every thread, a zombie, or gone. One
//! exception keeps a churning shell tree from hanging the pause: a parent in
//! `D` inside vfork, whose child is already stopped, cannot take its own stop
//! until the child execs or exits; it counts as stopped, since it cannot run.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use rollpoint_proto::receipt::Member;

use crate::budget::Budgets;
use crate::ident::{ProcId, Sent};
use crate::members::Membership;
use crate::scan::{Table, read_stat, thread_states, wchan};
use crate::stat::Stat;
use crate::time::Backoff;

use super::{cap_list, overdue, to_members};

pub(crate) struct Sweep {
    pub signalled: Vec<ProcId>,
    pub pre_stopped: HashSet<ProcId>,
    pub members: Vec<Member>,
    pub rounds: u32,
    pub failure: Option<String>,
}

/// Whether a state letter means stopped or dead.
pub(crate) fn is_stopped_state(state: char) -> bool {
    matches!(state, 'T' | 't')
}

fn is_dead(state: char) -> bool {
    matches!(state, 'Z' | 'X')
}

/// Stops every member and confirms it.
pub(crate) fn stop_sweep(membership: &mut Membership, budgets: Budgets, start: Instant) -> Sweep {
    let mut signalled: HashSet<ProcId> = HashSet::new();
    let mut pre_stopped: HashSet<ProcId> = HashSet::new();
    let mut rounds = 0;
    let mut backoff = Backoff::new();
    let finish = |signalled: HashSet<ProcId>, pre_stopped, members, rounds, failure| Sweep {
        signalled: signalled.into_iter().collect(),
        pre_stopped,
        members,
        rounds,
        failure,
    };
    loop {
        rounds += 1;
        let table = Table::scan();
        let members = membership.find(&table);
        let mut new = false;
        let mut errors = Vec::new();
        for (id, s) in &members {
            if signalled.contains(id) || pre_stopped.contains(id) || is_dead(s.state) {
                continue;
            }
            if is_stopped_state(s.state) {
                // Stopped before this pause (job control): leave it stopped
                // on continue, too.
                pre_stopped.insert(*id);
                continue;
            }
            match id.signal(libc::SIGSTOP) {
                Ok(Sent::Delivered) => {
                    signalled.insert(*id);
                    new = true;
                }
                Ok(Sent::Gone) => {}
                Err(e) => errors.push(format!("pid {}: {e}", id.pid)),
            }
        }
        if !errors.is_empty() {
            let failure = format!("SIGSTOP failed: {}", cap_list(&errors));
            return finish(
                signalled,
                pre_stopped,
                to_members(&members),
                rounds,
                Some(failure),
            );
        }
        if new {
            // Members may have forked before their stop landed: rescan.
            continue;
        }
        let by_pid: HashMap<u32, char> = members.iter().map(|(i, s)| (i.pid, s.state)).collect();
        let pending: Vec<&(ProcId, Stat)> = members
            .iter()
            .filter(|(id, s)| !confirmed_stopped(id, s, &table, &by_pid))
            .collect();
        if pending.is_empty() {
            return finish(signalled, pre_stopped, to_members(&members), rounds, None);
        }
        let elapsed = start.elapsed();
        if elapsed >= budgets.confirm {
            let described: Vec<(String, bool)> = pending
                .iter()
                .map(|(i, s)| (describe(i.pid, s.state), s.state == 'D'))
                .collect();
            if let Some((budget, who)) = overdue(elapsed, budgets, &described) {
                let failure = format!(
                    "{} of {} members not stopped within {}s: {who}",
                    pending.len(),
                    members.len(),
                    budget.as_secs_f64()
                );
                return finish(
                    signalled,
                    pre_stopped,
                    to_members(&members),
                    rounds,
                    Some(failure),
                );
            }
        }
        backoff.sleep();
    }
}

fn describe(pid: u32, state: char) -> String {
    match wchan(pid) {
        Some(w) => format!("pid {pid} in {state} ({w})"),
        None => format!("pid {pid} in {state}"),
    }
}

fn confirmed_stopped(id: &ProcId, s: &Stat, table: &Table, by_pid: &HashMap<u32, char>) -> bool {
    if is_dead(s.state) {
        return true;
    }
    if is_stopped_state(s.state) {
        // The stat file shows the main thread; every thread must be stopped.
        return s.num_threads <= 1
            || thread_states(id.pid)
                .iter()
                .all(|&t| is_stopped_state(t) || is_dead(t));
    }
    if s.state == 'D' {
        let child_stopped = table
            .children(id.pid)
            .iter()
            .any(|c| by_pid.get(c).is_some_and(|&st| is_stopped_state(st)));
        let in_clone = wchan(id.pid).is_none_or(|w| w.contains("clone") || w.contains("vfork"));
        return child_stopped && in_clone;
    }
    false
}

/// Sends SIGCONT to `ids` and confirms none is left stopped; returns the
/// rounds and the members as last seen (`X`: gone).
pub(crate) fn continue_ids(
    ids: &[ProcId],
    budgets: Budgets,
    start: Instant,
) -> Result<(u32, Vec<Member>), String> {
    let mut errors = Vec::new();
    for id in ids {
        if let Err(e) = id.signal(libc::SIGCONT) {
            errors.push(format!("pid {}: {e}", id.pid));
        }
    }
    if !errors.is_empty() {
        return Err(format!("SIGCONT failed: {}", cap_list(&errors)));
    }
    let mut backoff = Backoff::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        let mut stuck = Vec::new();
        let mut members = Vec::with_capacity(ids.len());
        for id in ids {
            let s = read_stat(id.pid).filter(|s| s.start_time == id.start_time);
            let state = s.map_or('X', |s| s.state);
            let stopped = s.is_some_and(|s| {
                is_stopped_state(s.state)
                    || (s.num_threads > 1
                        && thread_states(id.pid).iter().any(|&t| is_stopped_state(t)))
            });
            if stopped {
                stuck.push(format!("pid {} in {state}", id.pid));
            }
            members.push(Member {
                pid: id.pid,
                start_time: Some(id.start_time),
                state,
            });
        }
        if stuck.is_empty() {
            members.sort_by_key(|m| m.pid);
            return Ok((rounds, members));
        }
        if start.elapsed() >= budgets.confirm {
            return Err(format!(
                "not continued within {}s: {}",
                budgets.confirm.as_secs_f64(),
                cap_list(&stuck)
            ));
        }
        backoff.sleep();
    }
}
