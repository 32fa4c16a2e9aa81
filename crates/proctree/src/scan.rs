//! A snapshot of `/proc`: every process with its state, parent, threads and
//! start time, and the parent-to-children map built from it.
//!
//! `/proc/<pid>/task/<tid>/children` would give children directly, but it
//! needs CONFIG_PROC_CHILDREN and is only reliable while the tree is frozen;
//! it is used as a fast path when present, never as the only source.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Read;
use std::sync::OnceLock;

use crate::stat::{self, Stat};

/// Every process visible in `/proc` at one moment.
#[derive(Debug, Default, Clone)]
pub struct Table {
    procs: HashMap<u32, Stat>,
    children: HashMap<u32, Vec<u32>>,
}

impl Table {
    /// Scans `/proc`. Processes that vanish mid-scan are skipped.
    pub fn scan() -> Self {
        let mut buf = Vec::with_capacity(512);
        let mut procs = HashMap::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for entry in dir.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
                else {
                    continue;
                };
                if let Some(s) = read_stat_into(pid, &mut buf) {
                    procs.insert(pid, s);
                }
            }
        }
        Self::from_stats(procs.into_values())
    }

    /// Builds a table from parsed stats (used by tests and by [`Self::scan`]).
    pub fn from_stats(stats: impl IntoIterator<Item = Stat>) -> Self {
        let procs: HashMap<u32, Stat> = stats.into_iter().map(|s| (s.pid, s)).collect();
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for s in procs.values() {
            children.entry(s.ppid).or_default().push(s.pid);
        }
        Self { procs, children }
    }

    pub fn get(&self, pid: u32) -> Option<&Stat> {
        self.procs.get(&pid)
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Stat> {
        self.procs.values()
    }

    pub fn children(&self, pid: u32) -> &[u32] {
        self.children.get(&pid).map_or(&[], Vec::as_slice)
    }

    /// Every descendant of `roots` (not the roots themselves), breadth first.
    pub fn descendants(&self, roots: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut queue: VecDeque<u32> = roots.into_iter().collect();
        let mut seen: std::collections::HashSet<u32> = queue.iter().copied().collect();
        while let Some(pid) = queue.pop_front() {
            for &child in self.children(pid) {
                if seen.insert(child) {
                    out.push(child);
                    queue.push_back(child);
                }
            }
        }
        out
    }
}

/// Reads and parses `/proc/<pid>/stat`; `None` when the process is gone.
pub fn read_stat(pid: u32) -> Option<Stat> {
    let mut buf = Vec::with_capacity(512);
    read_stat_into(pid, &mut buf)
}

fn read_stat_into(pid: u32, buf: &mut Vec<u8>) -> Option<Stat> {
    buf.clear();
    File::open(format!("/proc/{pid}/stat"))
        .and_then(|mut f| f.read_to_end(buf))
        .ok()?;
    stat::parse(buf)
}

/// State letters of every thread of `pid`; empty when it is gone.
pub fn thread_states(pid: u32) -> Vec<char> {
    let mut buf = Vec::with_capacity(512);
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut states = Vec::new();
    for entry in dir.flatten() {
        buf.clear();
        let path = entry.path().join("stat");
        if File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut buf))
            .is_ok()
            && let Some(s) = stat::parse(&buf)
        {
            states.push(s.state);
        }
    }
    states
}

/// Kernel function `pid` sleeps in (`/proc/<pid>/wchan`), if readable.
pub fn wchan(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/wchan")).ok()?;
    (!s.is_empty() && s != "0").then_some(s)
}

/// Whether `/proc/<pid>/task/<tid>/children` exists on this kernel.
pub fn children_files_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let me = std::process::id();
        std::path::Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    })
}

/// Children of `pid` through the `children` files of all its threads (the
/// fast path); `None` when the files are unavailable.
pub fn children_fast(pid: u32) -> Option<Vec<u32>> {
    if !children_files_available() {
        return None;
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        if let Ok(s) = std::fs::read_to_string(entry.path().join("children")) {
            out.extend(parse_children(&s));
        }
    }
    Some(out)
}

fn parse_children(s: &str) -> impl Iterator<Item = u32> + '_ {
    s.split_ascii_whitespace().filter_map(|p| p.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(pid: u32, ppid: u32) -> Stat {
        Stat {
            pid,
            state: 'S',
            ppid,
            pgrp: pid,
            session: pid,
            num_threads: 1,
            start_time: 1,
        }
    }

    #[test]
    fn descendants_walks_the_whole_subtree_once() {
        let t = Table::from_stats([st(1, 0), st(10, 1), st(11, 10), st(12, 10), st(13, 12), st(20, 1)]);
        let mut d = t.descendants([10]);
        d.sort_unstable();
        assert_eq!(d, vec![11, 12, 13]);
        assert!(t.descendants([13]).is_empty());
    }

    #[test]
    fn scan_sees_this_process_and_its_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let t = Table::scan();
        let me = std::process::id();
        assert_eq!(t.get(me).map(|s| s.pid), Some(me));
        assert!(t.children(me).contains(&child.id()), "child listed under its parent");
        child.kill().expect("kill");
        child.wait().expect("wait");
    }

    #[test]
    fn children_file_parser() {
        assert_eq!(parse_children("12 13 7 ").collect::<Vec<_>>(), vec![12, 13, 7]);
        assert_eq!(parse_children("").count(), 0);
    }
}
