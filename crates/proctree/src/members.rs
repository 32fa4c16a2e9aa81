//! Which processes belong to a launch.
//!
//! A launch is its process tree, plus any process whose environment carries
//! `ROLLPOINT_LAUNCH=<id>` (a double-forked daemon reparented away), plus
//! every member found by an earlier pass that still exists (a child that
//! cleared its environment and was then reparented). Descendants of all of
//! these belong too. Membership only grows, and a member is identified by
//! pid and start time, so a reused pid never joins.

use std::collections::{BTreeMap, HashSet};

use rollpoint_proto::launch::LAUNCH_TAG_VAR;

use crate::ident::ProcId;
use crate::scan::Table;
use crate::stat::Stat;

/// How to recognise the members of one launch.
#[derive(Debug, Clone, Default)]
pub struct MemberSpec {
    /// Processes whose descendants belong to the launch.
    pub roots: Vec<u32>,
    /// Whether the roots themselves are members (false for a supervisor
    /// that is the root of its own launch).
    pub include_roots: bool,
    /// The launch id carried in `ROLLPOINT_LAUNCH`.
    pub tag: Option<String>,
    /// Pids that are never members (the supervisor, the caller).
    pub exclude: Vec<u32>,
}

/// Membership of a launch across passes.
#[derive(Debug)]
pub struct Membership {
    spec: MemberSpec,
    needle: Option<Vec<u8>>,
    known: HashSet<ProcId>,
    untagged: HashSet<ProcId>,
}

impl Membership {
    pub fn new(spec: MemberSpec) -> Self {
        let needle = spec
            .tag
            .as_ref()
            .map(|t| format!("{LAUNCH_TAG_VAR}={t}").into_bytes());
        Self {
            spec,
            needle,
            known: HashSet::new(),
            untagged: HashSet::new(),
        }
    }

    /// Adds processes found by other means (a cgroup) as known members.
    pub fn adopt(&mut self, ids: impl IntoIterator<Item = ProcId>) {
        self.known.extend(ids);
    }

    /// The members present in `table`, sorted by pid.
    pub fn find(&mut self, table: &Table) -> Vec<(ProcId, Stat)> {
        let me = std::process::id();
        let excluded = |pid: u32| pid <= 1 || pid == me || self.spec.exclude.contains(&pid);
        let id = |s: &Stat| ProcId {
            pid: s.pid,
            start_time: s.start_time,
        };

        let mut seeds: Vec<u32> = self.spec.roots.clone();
        self.known.retain(|k| {
            table
                .get(k.pid)
                .is_some_and(|s| s.start_time == k.start_time)
        });
        seeds.extend(self.known.iter().map(|k| k.pid));
        if let Some(needle) = &self.needle {
            for s in table.iter() {
                let pid_id = id(s);
                if excluded(s.pid)
                    || is_kernel_thread(s)
                    || self.known.contains(&pid_id)
                    || self.untagged.contains(&pid_id)
                {
                    continue;
                }
                if environ_has(s.pid, needle) {
                    seeds.push(s.pid);
                } else {
                    self.untagged.insert(pid_id);
                }
            }
        }

        let mut found: BTreeMap<u32, Stat> = BTreeMap::new();
        for pid in table.descendants(seeds.iter().copied()) {
            if let Some(s) = table.get(pid) {
                found.insert(pid, *s);
            }
        }
        for &pid in &seeds {
            let is_root = self.spec.roots.contains(&pid);
            if (!is_root || self.spec.include_roots)
                && let Some(s) = table.get(pid)
            {
                found.insert(pid, *s);
            }
        }
        found.retain(|&pid, _| !excluded(pid));
        let members: Vec<(ProcId, Stat)> = found.into_values().map(|s| (id(&s), s)).collect();
        self.known.extend(members.iter().map(|(i, _)| *i));
        members
    }
}

fn is_kernel_thread(s: &Stat) -> bool {
    s.pid == 2 || s.ppid == 2
}

fn environ_has(pid: u32, needle: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn finds_tree_and_tagged_processes_but_not_strangers() {
        // A tagged process outside our tree is simulated by a sibling that
        // carries the tag; an untagged sibling must not join.
        let mut tagged = Command::new("sleep")
            .arg("30")
            .env(LAUNCH_TAG_VAR, "members-test")
            .spawn()
            .expect("spawn tagged");
        let mut stranger = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn stranger");
        let mut m = Membership::new(MemberSpec {
            roots: vec![],
            include_roots: false,
            tag: Some("members-test".into()),
            exclude: vec![],
        });
        let pids: Vec<u32> = m.find(&Table::scan()).iter().map(|(i, _)| i.pid).collect();
        assert_eq!(pids, vec![tagged.id()]);
        // Found members stay members on later passes.
        let again: Vec<u32> = m.find(&Table::scan()).iter().map(|(i, _)| i.pid).collect();
        assert_eq!(again, vec![tagged.id()]);
        for c in [&mut tagged, &mut stranger] {
            c.kill().expect("kill");
            c.wait().expect("wait");
        }
        assert!(m.find(&Table::scan()).is_empty(), "dead members drop out");
    }
}
