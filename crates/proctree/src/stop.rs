//! Stopping a launch so that nothing of it is left.
//!
//! Order matters: thaw first (a stopped process keeps SIGINT pending and
//! never acts on it), then SIGINT to every member, a grace period, SIGKILL
//! to every member and `cgroup.kill` where the kernel has it, then drain:
//! rescan and kill again until no member is alive or the budget is spent.
//! Zombies count as dead; their reaper (the supervisor) collects them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rollpoint_proto::receipt::{Member, Op, Outcome, Receipt};

use crate::cgroup::{Kind, has_kill, procs};
use crate::freeze::{Freezer, cap_list};
use crate::ident::ProcId;
use crate::scan::{Table, read_stat};
use crate::stat::Stat;

impl Freezer {
    /// Members by the tree, tag and earlier passes, plus every process in
    /// the launch's cgroups.
    pub fn all_members(&mut self) -> Vec<(ProcId, Stat)> {
        let table = Table::scan();
        let mut found: BTreeMap<u32, (ProcId, Stat)> = self
            .membership
            .find(&table)
            .into_iter()
            .map(|m| (m.0.pid, m))
            .collect();
        for dir in [&self.cgroup_v2, &self.cgroup_v1].into_iter().flatten() {
            for pid in procs(self.fs.as_ref(), dir).unwrap_or_default() {
                if let Some(s) = table.get(pid).copied().or_else(|| read_stat(pid)) {
                    let id = ProcId {
                        pid,
                        start_time: s.start_time,
                    };
                    found.entry(pid).or_insert((id, s));
                }
            }
        }
        let all: Vec<(ProcId, Stat)> = found.into_values().collect();
        self.membership.adopt(all.iter().map(|(i, _)| *i));
        all
    }

    fn alive(&mut self) -> Vec<(ProcId, Stat)> {
        self.all_members()
            .into_iter()
            .filter(|(_, s)| !matches!(s.state, 'Z' | 'X'))
            .collect()
    }

    fn signal_all(members: &[(ProcId, Stat)], sig: i32) {
        for (id, _) in members {
            // A member that vanished meanwhile is what we want anyway.
            let _ = id.signal(sig);
        }
    }

    /// Thaws, interrupts, kills and drains the launch.
    pub fn stop(&mut self) -> Receipt {
        self.stop_with(Op::Stop)
    }

    /// As [`Self::stop`], recorded as `op` (stop or cleanup).
    pub fn stop_with(&mut self, op: Op) -> Receipt {
        let start = Instant::now();
        let mut rounds = 0;
        let mut notes = Vec::new();

        // 1. Thaw everything, whoever froze it.
        self.take_paused();
        for (kind, dir) in self.cgroups() {
            let (file, value) = kind.freezer_write(false);
            if let Err(e) = self.fs.write(&dir, file, value) {
                notes.push(e.to_string());
            }
        }
        let members = self.alive();
        let mut seen: BTreeMap<ProcId, ()> = members.iter().map(|(i, _)| (*i, ())).collect();
        Self::signal_all(&members, libc::SIGCONT);

        // 2. SIGINT, then the grace period.
        Self::signal_all(&members, libc::SIGINT);
        let grace_end = start + self.budgets.stop_grace;
        let mut alive = members;
        while !alive.is_empty() && Instant::now() < grace_end {
            rounds += 1;
            std::thread::sleep(Duration::from_millis(10));
            alive = self.alive();
            seen.extend(alive.iter().map(|(i, _)| (*i, ())));
        }

        // 3. SIGKILL what is left, and drain.
        let drain_end = Instant::now() + self.budgets.confirm;
        while !alive.is_empty() {
            rounds += 1;
            for (kind, dir) in self.cgroups() {
                if kind == Kind::V2
                    && has_kill(&dir)
                    && let Err(e) = self.fs.write(&dir, "cgroup.kill", "1")
                {
                    notes.push(e.to_string());
                }
            }
            Self::signal_all(&alive, libc::SIGKILL);
            if Instant::now() >= drain_end {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
            alive = self.alive();
            seen.extend(alive.iter().map(|(i, _)| (*i, ())));
        }

        let confirmed = alive.is_empty();
        // Every member this stop saw, with its final state (`X`: gone).
        let members = seen
            .into_keys()
            .map(|id| Member {
                pid: id.pid,
                start_time: Some(id.start_time),
                state: read_stat(id.pid)
                    .filter(|s| s.start_time == id.start_time)
                    .map_or('X', |s| s.state),
            })
            .collect();
        let reason = (!confirmed).then(|| {
            let who: Vec<String> = alive
                .iter()
                .map(|(i, s)| format!("pid {} in {}", i.pid, s.state))
                .collect();
            notes.push(format!(
                "still alive {}s after SIGKILL: {}",
                self.budgets.confirm.as_secs_f64(),
                cap_list(&who)
            ));
            notes.join("; ")
        });
        let outcome = if confirmed {
            Outcome::Confirmed
        } else {
            Outcome::Failed
        };
        let mut receipt = self.receipt(op, outcome, members, rounds, start, reason);
        receipt.method = rollpoint_proto::receipt::Method::Signals;
        receipt.cleanup_confirmed = Some(confirmed);
        receipt
    }

    fn cgroups(&self) -> Vec<(Kind, std::path::PathBuf)> {
        let mut out = Vec::new();
        if let Some(d) = &self.cgroup_v2 {
            out.push((Kind::V2, d.clone()));
        }
        if let Some(d) = &self.cgroup_v1 {
            out.push((Kind::V1Freezer, d.clone()));
        }
        out
    }
}
