//! A sandbox's cgroups: one in the v2 hierarchy (freeze for snapshots,
//! `cgroup.kill` for destroy), one in the v1 freezer where the host has it,
//! and v1 `memory` and `pids` cgroups carrying the spec's limits (this host
//! keeps those controllers on v1). Launch cgroups nest beneath the v2 and
//! freezer ones, created by the launch's supervisor inside the sandbox.
//! The memory cgroup also says whether the kernel's OOM killer ended a
//! process of the sandbox, so an error can name the limit.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rollpoint_proctree::Budgets;
use rollpoint_proctree::cgroup::{self, Kind};
use rollpoint_proctree::freeze::{freeze_cgroup, thaw_cgroup};

use crate::{Error, Limits};

#[derive(Debug, Clone, Default)]
pub(crate) struct SandboxCgroups {
    pub v2: Option<PathBuf>,
    pub freezer: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub pids: Option<PathBuf>,
}

/// How long destroy waits for a killed sandbox's cgroup to empty.
const DRAIN: Duration = Duration::from_secs(10);

/// Where this host mounts each hierarchy, read once per process: a host's
/// cgroup mounts do not move under a running owner, and each read of
/// mountinfo formats every sandbox's overlay.
fn hierarchies() -> &'static cgroup::Hierarchies {
    static FOUND: std::sync::OnceLock<cgroup::Hierarchies> = std::sync::OnceLock::new();
    FOUND.get_or_init(cgroup::Hierarchies::read)
}

/// The parent of every sandbox cgroup in each hierarchy this host has.
fn parents() -> impl Iterator<Item = PathBuf> {
    let h = hierarchies();
    [&h.v2, &h.freezer, &h.memory, &h.pids]
        .into_iter()
        .flatten()
        .map(|root| root.join("rollpoint"))
}

impl SandboxCgroups {
    /// The cgroup paths `name` would have on this host (nothing created).
    pub fn locate(name: &str) -> Self {
        let at = |root: &Option<PathBuf>| root.as_ref().map(|r| r.join("rollpoint").join(name));
        let h = hierarchies();
        Self {
            v2: at(&h.v2),
            freezer: at(&h.freezer),
            memory: at(&h.memory),
            pids: at(&h.pids),
        }
    }

    /// What follows `prefix` in the name of every sandbox cgroup, in any
    /// hierarchy, whose name starts with it; sorted, each once.
    pub fn names_after(prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = parents()
            .filter_map(|parent| std::fs::read_dir(parent).ok())
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|name| name.strip_prefix(prefix).map(str::to_owned))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Processes of the sandbox the kernel's OOM killer has ended so far, as
    /// its memory cgroup counts them; 0 when it counts none.
    pub fn oom_kills(&self) -> u64 {
        self.memory_kills().map_or(0, |k| k.kills)
    }

    /// When the OOM killer ended a process of the sandbox after it had
    /// counted `since` kills: "killed by its memory limit of 64 MiB
    /// (memory.limit_in_bytes; 1 OOM kill)".
    pub fn oom_note(&self, since: u64) -> Option<String> {
        let kills = self.memory_kills()?;
        (kills.kills > since).then(|| kills.describe(kills.kills - since))
    }

    /// The v1 memory cgroup's count (`oom_kill` in `memory.oom_control`),
    /// else the v2 cgroup's (`oom_kill` in `memory.events`, present when
    /// the memory controller is enabled there), with the limit beside it.
    fn memory_kills(&self) -> Option<MemoryKills> {
        let read = |dir: &Path, file: &str| std::fs::read_to_string(dir.join(file)).ok();
        if let Some(dir) = &self.memory
            && let Some(kills) = read(dir, "memory.oom_control").and_then(|t| field(&t, "oom_kill"))
        {
            return Some(MemoryKills {
                kills,
                limit: read(dir, "memory.limit_in_bytes").and_then(|t| limit(&t)),
                file: "memory.limit_in_bytes",
            });
        }
        let dir = self.v2.as_deref()?;
        let kills = read(dir, "memory.events").and_then(|t| field(&t, "oom_kill"))?;
        Some(MemoryKills {
            kills,
            limit: read(dir, "memory.max").and_then(|t| limit(&t)),
            file: "memory.max",
        })
    }

    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.v2, &self.freezer, &self.memory, &self.pids]
            .into_iter()
            .flatten()
    }

    /// Creates every cgroup and writes the limits. A limit the host cannot
    /// apply (its controller missing) is an error rather than ignored.
    pub fn create(&self, sandbox: &str, limits: &Limits) -> Result<(), Error> {
        let setup = |what: String, source| Error::Setup {
            sandbox: sandbox.to_owned(),
            what,
            source,
        };
        if self.v2.is_none() && self.freezer.is_none() {
            return Err(setup(
                "find a cgroup v2 or v1 freezer hierarchy".into(),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        for dir in self.all() {
            std::fs::create_dir_all(dir)
                .map_err(|e| setup(format!("create cgroup {}", dir.display()), e))?;
        }
        let limit = |dir: &Option<PathBuf>, file: &str, value: Option<u64>| {
            let Some(value) = value else { return Ok(()) };
            let Some(dir) = dir else {
                return Err(setup(
                    format!("apply {file}: the host has no such v1 controller"),
                    std::io::Error::from(std::io::ErrorKind::Unsupported),
                ));
            };
            std::fs::write(dir.join(file), value.to_string())
                .map_err(|e| setup(format!("write {value} to {}", dir.join(file).display()), e))
        };
        limit(&self.memory, "memory.limit_in_bytes", limits.memory_bytes)?;
        limit(&self.pids, "pids.max", limits.pids)
    }
    fn freezer_dir(&self) -> Option<(Kind, &Path)> {
        self.v2
            .as_deref()
            .map(|d| (Kind::V2, d))
            .or_else(|| self.freezer.as_deref().map(|d| (Kind::V1Freezer, d)))
    }

    /// Freezes every process in the sandbox and confirms it.
    pub fn freeze(&self, sandbox: &str) -> Result<(), Error> {
        let (kind, dir) = self.freezer_dir().ok_or_else(|| no_freezer(sandbox))?;
        freeze_cgroup(kind, dir, Budgets::default()).map_err(|e| freezer_error(sandbox, e))
    }

    pub fn thaw(&self, sandbox: &str) -> Result<(), Error> {
        let (kind, dir) = self.freezer_dir().ok_or_else(|| no_freezer(sandbox))?;
        thaw_cgroup(kind, dir, Budgets::default()).map_err(|e| freezer_error(sandbox, e))
    }

    /// Kills every process in the sandbox and waits until none is left. A
    /// frozen sandbox (a crash mid-snapshot, paused launches) is thawed
    /// once the kill is sent, so its processes die (a task frozen by the v1
    /// freezer takes no signal until thawed) and never run again.
    pub fn kill(&self, sandbox: &str) -> Result<(), Error> {
        let deadline = Instant::now() + DRAIN;
        loop {
            let pids = self.pids_left();
            if pids.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Invalid {
                    sandbox: sandbox.to_owned(),
                    message: format!("processes {pids:?} survived SIGKILL for {DRAIN:?}"),
                });
            }
            match self.v2.as_deref().filter(|d| cgroup::has_kill(d)) {
                Some(dir) => {
                    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
                }
                None => {
                    for pid in &pids {
                        if let Ok(pid) = i32::try_from(*pid) {
                            let _ = nix::sys::signal::kill(
                                nix::unistd::Pid::from_raw(pid),
                                nix::sys::signal::Signal::SIGKILL,
                            );
                        }
                    }
                }
            }
            self.thaw_all();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Thaws every cgroup of the sandbox, launch cgroups included, without
    /// waiting; a cgroup without the file is left as it is.
    fn thaw_all(&self) {
        let thaw = |dir: &Option<PathBuf>, file: &str, value: &str| {
            for sub in dir.as_deref().map(subtree).unwrap_or_default() {
                let path = sub.join(file);
                if path.exists() {
                    let _ = std::fs::write(path, value);
                }
            }
        };
        thaw(&self.v2, "cgroup.freeze", "0");
        thaw(&self.freezer, "freezer.state", "THAWED");
    }

    /// Every pid in the sandbox's cgroups and their descendants.
    fn pids_left(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for dir in self.all() {
            for sub in subtree(dir) {
                if let Ok(text) = std::fs::read_to_string(sub.join("cgroup.procs")) {
                    pids.extend(
                        text.split_ascii_whitespace()
                            .filter_map(|p| p.parse::<u32>().ok()),
                    );
                }
            }
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Removes every cgroup, launch cgroups first. Every hierarchy is
    /// tried even when one fails, so a failure leaks as little as possible.
    pub fn remove(&self, sandbox: &str) -> Result<(), Error> {
        let mut failures = Vec::new();
        for dir in self.all() {
            for sub in subtree(dir).into_iter().rev() {
                if let Err(e) = cgroup::remove(&sub) {
                    failures.push(e.to_string());
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid {
                sandbox: sandbox.to_owned(),
                message: failures.join("; "),
            })
        }
    }
}

/// OOM kills counted by a memory cgroup and the limit it enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MemoryKills {
    kills: u64,
    /// `None` when unlimited.
    limit: Option<u64>,
    /// The file holding the limit.
    file: &'static str,
}

impl MemoryKills {
    fn describe(&self, kills: u64) -> String {
        let count = match kills {
            1 => "1 OOM kill".to_owned(),
            n => format!("{n} OOM kills"),
        };
        match self.limit {
            Some(bytes) => format!(
                "killed by its memory limit of {} ({}; {count})",
                size(bytes),
                self.file
            ),
            None => format!("killed by the kernel's OOM killer ({count}; no memory limit set)"),
        }
    }
}

/// The number after `key` on its own line of a `key value` file.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .filter_map(|line| line.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// A limit file's value; `max` (v2) and v1's page-rounded `i64::MAX` are
/// no limit.
fn limit(text: &str) -> Option<u64> {
    text.trim().parse().ok().filter(|&bytes| bytes < 1 << 62)
}

/// Bytes in the largest binary unit that divides them exactly.
fn size(bytes: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// `dir` and every cgroup beneath it, parents before children.
fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        out.push(d);
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    out
}

fn no_freezer(sandbox: &str) -> Error {
    Error::Invalid {
        sandbox: sandbox.to_owned(),
        message: "no cgroup freezer to freeze it with".into(),
    }
}

fn freezer_error(sandbox: &str, e: rollpoint_proctree::Error) -> Error {
    Error::Invalid {
        sandbox: sandbox.to_owned(),
        message: e.to_string(),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_are_read_and_described_with_the_limit() {
        let oom_control = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(field(oom_control, "oom_kill"), Some(2));
        assert_eq!(field(oom_control, "under_oom"), Some(0));
        let events = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(field(events, "oom_kill"), Some(1));
        assert_eq!(field(events, "oom_group"), None);
        assert_eq!(limit("67108864\n"), Some(64 << 20));
        assert_eq!(limit("max\n"), None);
        assert_eq!(limit("9223372036854771712\n"), None);
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(2 << 30), "2 GiB");
        assert_eq!(size(1536), "1536 bytes");
        assert_eq!(size(4096 + 1), "4097 bytes");
        let kills = MemoryKills {
            kills: 3,
            limit: Some(64 << 20),
            file: "memory.max",
        };
        assert_eq!(
            kills.describe(1),
            "killed by its memory limit of 64 MiB (memory.max; 1 OOM kill)"
        );
        let unlimited = MemoryKills {
            limit: None,
            ..kills
        };
        assert_eq!(
            unlimited.describe(2),
            "killed by the kernel's OOM killer (2 OOM kills; no memory limit set)"
        );
    }

    #[test]
    fn oom_notes_come_from_the_memory_cgroup_files() {
        let dir = tempfile::tempdir().unwrap();
        let memory = dir.path().join("memory");
        std::fs::create_dir(&memory).unwrap();
        let cgroups = SandboxCgroups {
            memory: Some(memory.clone()),
            ..SandboxCgroups::default()
        };
        assert_eq!(cgroups.oom_kills(), 0, "no files: nothing counted");
        assert_eq!(cgroups.oom_note(0), None);
        std::fs::write(
            memory.join("memory.oom_control"),
            "oom_kill_disable 0\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(memory.join("memory.limit_in_bytes"), "67108864\n").unwrap();
        assert_eq!(cgroups.oom_kills(), 1);
        assert_eq!(cgroups.oom_note(1), None, "no kill since");
        assert_eq!(
            cgroups.oom_note(0).unwrap(),
            "killed by its memory limit of 64 MiB (memory.limit_in_bytes; 1 OOM kill)"
        );
    }
}
