//! A sandbox's cgroups: one in the v2 hierarchy (freeze for snapshots,
//! `cgroup.kill` for destroy), one in the v1 freezer where the host has it,
//! and the limits (docs/design/limits.md): each through its controller's v1
//! hierarchy where the host mounts one (`memory`, `pids`, and `cpu`,
//! `blkio` when a limit needs them), else through the v2 cgroup, whose
//! parent `rollpoint/` enables every controller the host's v2 root offers.
//! A host with v2 alone therefore gets every limit through v2. Launch
//! cgroups nest beneath the v2 and freezer ones, created by the launch's
//! supervisor inside the sandbox. The memory and pids counters also say
//! when a limit was hit, so an error can name it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rollpoint_proctree::Budgets;
use rollpoint_proctree::cgroup::RealFs;
use rollpoint_proctree::cgroup::{self, Kind};
use rollpoint_proctree::freeze::batch::{freeze_many, thaw_many};

use crate::{Limits, errors::Error};

#[derive(Debug, Clone, Default)]
pub(crate) struct SandboxCgroups {
    pub v2: Option<PathBuf>,
    pub freezer: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub pids: Option<PathBuf>,
    pub cpu: Option<PathBuf>,
    pub blkio: Option<PathBuf>,
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
    [&h.v2, &h.freezer, &h.memory, &h.pids, &h.cpu, &h.blkio]
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
            cpu: at(&h.cpu),
            blkio: at(&h.blkio),
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

    /// CPU time, peak memory and the limits that stopped something.
    pub fn usage(&self) -> crate::ResourceUsage {
        let read = |dir: &Option<PathBuf>, file: &str| {
            dir.as_ref()
                .and_then(|d| std::fs::read_to_string(d.join(file)).ok())
        };
        let v2_stat = read(&self.v2, "cpu.stat");
        let cpu_ms = v2_stat
            .as_deref()
            .and_then(|t| field(t, "usage_usec"))
            .map_or(0, |us| us / 1000);
        let memory_peak_bytes = read(&self.memory, "memory.max_usage_in_bytes")
            .or_else(|| read(&self.v2, "memory.peak"))
            .and_then(|t| t.trim().parse().ok());
        let mut limits_hit = Vec::new();
        if let Some(kills) = self.memory_kills().filter(|k| k.kills > 0) {
            limits_hit.push(format!("memory: {}", kills.describe(kills.kills)));
        }
        let pids_dir = if self.pids.is_some() {
            &self.pids
        } else {
            &self.v2
        };
        if let Some(refused) = read(pids_dir, "pids.events")
            .and_then(|t| field(&t, "max"))
            .filter(|n| *n > 0)
        {
            let max = read(pids_dir, "pids.max").unwrap_or_default();
            limits_hit.push(format!(
                "pids: {refused} forks refused by its limit of {} processes (pids.max)",
                max.trim()
            ));
        }
        // The CPU limit where it was applied: v2's `cpu.max` when it holds a
        // quota ("max" parses as none), else v1's.
        let v2_quota = read(&self.v2, "cpu.max")
            .and_then(|m| m.split_whitespace().next()?.parse::<u64>().ok());
        let (stat, quota, file) = match v2_quota {
            Some(quota) => (v2_stat, Some(quota), "cpu.max"),
            None => (
                read(&self.cpu, "cpu.stat"),
                read(&self.cpu, "cpu.cfs_quota_us")
                    .and_then(|q| q.trim().parse::<i64>().ok())
                    .and_then(|q| u64::try_from(q).ok()),
                "cpu.cfs_quota_us",
            ),
        };
        let throttled = stat.as_deref().and_then(|t| field(t, "nr_throttled"));
        let periods = stat.as_deref().and_then(|t| field(t, "nr_periods"));
        let limit = quota.map(|q| (q * 1000 / CPU_PERIOD_US, file));
        if let (Some(throttled), Some(periods), Some((millis, file))) = (throttled, periods, limit)
            && throttled > 0
        {
            limits_hit.push(format!(
                "cpu: throttled in {throttled} of {periods} periods by its limit of {millis} \
                 thousandths of a CPU ({file})"
            ));
        }
        crate::ResourceUsage {
            cpu_ms,
            memory_peak_bytes,
            limits_hit,
            ..crate::ResourceUsage::default()
        }
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

    /// Every cgroup of the sandbox that exists (the v1 `cpu` and `blkio`
    /// ones only when a limit made them).
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        let optional = [&self.cpu, &self.blkio];
        [&self.v2, &self.freezer, &self.memory, &self.pids]
            .into_iter()
            .flatten()
            .chain(optional.into_iter().flatten().filter(|d| d.exists()))
    }

    /// Creates every cgroup and writes the limits, `upper` being where the
    /// sandbox's files are written (for the I/O limit's device). A limit
    /// the host cannot apply (its controller missing in v1 and v2) is an
    /// error naming it rather than ignored.
    pub fn create(&self, sandbox: &str, limits: &Limits, upper: &Path) -> Result<(), Error> {
        self.create_with(sandbox, limits, upper, v2_controllers())
    }

    /// [`Self::create`] with `v2` the controllers the v2 parent enables.
    fn create_with(
        &self,
        sandbox: &str,
        limits: &Limits,
        upper: &Path,
        v2: &std::collections::BTreeSet<String>,
    ) -> Result<(), Error> {
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
        for dir in [&self.v2, &self.freezer, &self.memory, &self.pids]
            .into_iter()
            .flatten()
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| setup(format!("create cgroup {}", dir.display()), e))?;
        }
        // The v1 directory of `controller` when the host has it, else the v2
        // cgroup when its parent enables the controller there.
        let home = |v1: &Option<PathBuf>, controller: &str, limit: &str| {
            if let Some(dir) = v1 {
                std::fs::create_dir_all(dir)
                    .map_err(|e| setup(format!("create cgroup {}", dir.display()), e))?;
                return Ok((dir.clone(), false));
            }
            match &self.v2 {
                Some(dir) if v2.contains(controller) => Ok((dir.clone(), true)),
                _ => Err(setup(
                    format!(
                        "apply sandbox.limits.{limit}: the host has no {controller} controller \
                         (neither a v1 hierarchy nor enabled in cgroup v2)"
                    ),
                    std::io::Error::from(std::io::ErrorKind::Unsupported),
                )),
            }
        };
        let write = |dir: &Path, file: &str, value: String| {
            std::fs::write(dir.join(file), &value)
                .map_err(|e| setup(format!("write {value} to {}", dir.join(file).display()), e))
        };
        if let Some(bytes) = limits.memory_bytes {
            let swap = limits.swap_bytes.unwrap_or(0);
            match home(&self.memory, "memory", "memory_bytes")? {
                (dir, false) => {
                    write(&dir, "memory.limit_in_bytes", bytes.to_string())?;
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        write(
                            &dir,
                            "memory.memsw.limit_in_bytes",
                            bytes.saturating_add(swap).to_string(),
                        )?;
                    } else {
                        // Without swap accounting, no swap at all is the
                        // nearest v1 has.
                        write(&dir, "memory.swappiness", "0".into())?;
                    }
                }
                (dir, true) => {
                    write(&dir, "memory.max", bytes.to_string())?;
                    if dir.join("memory.swap.max").exists() {
                        write(&dir, "memory.swap.max", swap.to_string())?;
                    }
                }
            }
        }
        if let Some(pids) = limits.pids {
            let (dir, _) = home(&self.pids, "pids", "pids")?;
            write(&dir, "pids.max", pids.to_string())?;
        }
        if limits.cpu_millis.is_some() || limits.cpu_weight.is_some() {
            let limit = if limits.cpu_millis.is_some() {
                "cpu_millis"
            } else {
                "cpu_weight"
            };
            match home(&self.cpu, "cpu", limit)? {
                (dir, false) => {
                    if let Some(millis) = limits.cpu_millis {
                        write(&dir, "cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
                        write(
                            &dir,
                            "cpu.cfs_quota_us",
                            (millis * CPU_PERIOD_US / 1000).to_string(),
                        )?;
                    }
                    if let Some(weight) = limits.cpu_weight {
                        write(&dir, "cpu.shares", (weight * 1024 / 100).max(2).to_string())?;
                    }
                }
                (dir, true) => {
                    if let Some(millis) = limits.cpu_millis {
                        let quota = millis * CPU_PERIOD_US / 1000;
                        write(&dir, "cpu.max", format!("{quota} {CPU_PERIOD_US}"))?;
                    }
                    if let Some(weight) = limits.cpu_weight {
                        write(&dir, "cpu.weight", weight.to_string())?;
                    }
                }
            }
        }
        if let Some(bps) = limits.io_bytes_per_s {
            let (major, minor) = block_device(upper).ok_or_else(|| {
                setup(
                    format!(
                        "apply sandbox.limits.io_bytes_per_s: {} is not on a block device",
                        upper.display()
                    ),
                    std::io::Error::from(std::io::ErrorKind::Unsupported),
                )
            })?;
            match home(&self.blkio, "io", "io_bytes_per_s")? {
                (dir, false) => {
                    for file in [
                        "blkio.throttle.read_bps_device",
                        "blkio.throttle.write_bps_device",
                    ] {
                        write(&dir, file, format!("{major}:{minor} {bps}"))?;
                    }
                }
                (dir, true) => {
                    write(
                        &dir,
                        "io.max",
                        format!("{major}:{minor} rbps={bps} wbps={bps}"),
                    )?;
                }
            }
        }
        Ok(())
    }
    fn freezer_dir(&self) -> Option<(Kind, &Path)> {
        self.v2
            .as_deref()
            .map(|d| (Kind::V2, d))
            .or_else(|| self.freezer.as_deref().map(|d| (Kind::V1Freezer, d)))
    }

    /// Freezes every process of every sandbox of `all` and confirms each,
    /// as one batch (every freeze written before any is confirmed); per
    /// sandbox, in order, whether it was.
    pub fn freeze_all(all: &[(&str, &Self)]) -> Vec<Result<(), Error>> {
        Self::batch(all, true)
    }

    /// Thaws every sandbox of `all` as one batch and confirms each.
    pub fn thaw_all_of(all: &[(&str, &Self)]) -> Vec<Result<(), Error>> {
        Self::batch(all, false)
    }

    fn batch(all: &[(&str, &Self)], freeze: bool) -> Vec<Result<(), Error>> {
        let dirs: Vec<Option<(Kind, &Path)>> = all.iter().map(|(_, c)| c.freezer_dir()).collect();
        let targets: Vec<(Kind, &Path)> = dirs.iter().flatten().copied().collect();
        let budgets = Budgets::default();
        let mut done = if freeze {
            freeze_many(&RealFs, &targets, budgets)
        } else {
            thaw_many(&RealFs, &targets, budgets)
        }
        .into_iter();
        all.iter()
            .zip(&dirs)
            .map(|((sandbox, _), dir)| match (dir, done.next()) {
                (Some(_), Some(Ok(_))) => Ok(()),
                (Some(_), Some(Err(u))) => Err(Error::Invalid {
                    sandbox: (*sandbox).to_owned(),
                    message: u.text,
                }),
                _ => Err(no_freezer(sandbox)),
            })
            .collect()
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
            self.send_kill(Some(&pids));
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends the kill once without waiting for it: many sandboxes torn
    /// down together are all signalled first, so the kernel ends their
    /// processes at once while each [`Self::kill`] then mostly confirms.
    pub fn start_kill(&self) {
        self.send_kill(None);
    }

    /// One round of the kill: `cgroup.kill`, else SIGKILL to each member
    /// (`pids` when the caller has just listed them); then every cgroup
    /// thawed so frozen tasks take it.
    fn send_kill(&self, pids: Option<&[u32]>) {
        match self.v2.as_deref().filter(|d| cgroup::has_kill(d)) {
            Some(dir) => {
                let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            }
            None => {
                let listed;
                let pids = match pids {
                    Some(p) => p,
                    None => {
                        listed = self.pids_left();
                        &listed
                    }
                };
                for pid in pids {
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

/// The CPU limit's period: 100 ms, the kernel's default.
const CPU_PERIOD_US: u64 = 100_000;

/// The controllers the v2 parent `rollpoint/` enables for its children:
/// each of memory, pids, cpu and io that the v2 root offers, enabled in
/// the root and in `rollpoint/` once per process. One the kernel refuses
/// to enable (a realtime process in the root for cpu) is left out, and a
/// limit needing it is refused by name.
fn v2_controllers() -> &'static std::collections::BTreeSet<String> {
    static ENABLED: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    ENABLED.get_or_init(|| {
        let mut enabled = std::collections::BTreeSet::new();
        let Some(root) = hierarchies().v2.as_deref() else {
            return enabled;
        };
        let parent = root.join("rollpoint");
        let _ = std::fs::create_dir_all(&parent);
        let offered = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        for controller in ["memory", "pids", "cpu", "io"] {
            if !offered.split_whitespace().any(|c| c == controller) {
                continue;
            }
            let on = [root, parent.as_path()].iter().all(|dir| {
                let file = dir.join("cgroup.subtree_control");
                std::fs::read_to_string(&file)
                    .is_ok_and(|t| t.split_whitespace().any(|c| c == controller))
                    || std::fs::write(&file, format!("+{controller}")).is_ok()
            });
            if on {
                enabled.insert(controller.to_owned());
            }
        }
        enabled
    })
}

/// The block device (major, minor) of the filesystem holding `path`, from
/// the mount's source in mountinfo (a btrfs image's loop device, say).
fn block_device(path: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::FileTypeExt as _;
    use std::os::unix::fs::MetadataExt as _;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let path = path.canonicalize().ok()?;
    let source = info
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = Path::new(*fields.get(4)?);
            let dash = fields.iter().position(|f| *f == "-")?;
            let source = *fields.get(dash + 2)?;
            path.starts_with(point)
                .then_some((point.as_os_str().len(), source))
        })
        .max_by_key(|(len, _)| *len)?
        .1;
    let meta = std::fs::metadata(source).ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let rdev = meta.rdev();
    let (major, minor) = (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev));
    Some((u32::try_from(major).ok()?, u32::try_from(minor).ok()?))
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

    /// The files each limit is written to, in v2 and in v1, on a directory
    /// standing in for the cgroup filesystem (this machine's kernel keeps
    /// memory, pids, cpu and blkio bound to v1 hierarchies it cannot
    /// release, so its v2 has none of them to test against).
    #[test]
    fn each_limit_goes_to_its_controller_in_v2_or_v1() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            memory_bytes: Some(64 << 20),
            swap_bytes: Some(1 << 20),
            pids: Some(64),
            cpu_millis: Some(1500),
            cpu_weight: Some(50),
            io_bytes_per_s: None,
            disk_bytes: None,
        };
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap();
        let v2 = dir.path().join("v2");
        std::fs::create_dir(&v2).unwrap();
        std::fs::write(v2.join("memory.swap.max"), "max").unwrap();
        let all: std::collections::BTreeSet<String> =
            ["memory", "pids", "cpu", "io"].map(str::to_owned).into();
        let only_v2 = SandboxCgroups {
            v2: Some(v2.clone()),
            ..SandboxCgroups::default()
        };
        only_v2.create_with("s", &limits, dir.path(), &all).unwrap();
        assert_eq!(read(v2.join("memory.max")), (64 << 20).to_string());
        assert_eq!(read(v2.join("memory.swap.max")), (1 << 20).to_string());
        assert_eq!(read(v2.join("pids.max")), "64");
        assert_eq!(read(v2.join("cpu.max")), "150000 100000");
        assert_eq!(read(v2.join("cpu.weight")), "50");

        let v1 = |name: &str| dir.path().join(name);
        let hybrid = SandboxCgroups {
            v2: Some(dir.path().join("v2b")),
            memory: Some(v1("memory")),
            pids: Some(v1("pids")),
            cpu: Some(v1("cpu")),
            ..SandboxCgroups::default()
        };
        hybrid
            .create_with("s", &limits, dir.path(), &Default::default())
            .unwrap();
        assert_eq!(
            read(v1("memory").join("memory.limit_in_bytes")),
            (64 << 20).to_string()
        );
        assert_eq!(read(v1("memory").join("memory.swappiness")), "0");
        assert_eq!(read(v1("pids").join("pids.max")), "64");
        assert_eq!(read(v1("cpu").join("cpu.cfs_quota_us")), "150000");
        assert_eq!(read(v1("cpu").join("cpu.shares")), "512");
        assert!(!dir.path().join("v2b/pids.max").exists(), "v1 first");

        let none = SandboxCgroups {
            v2: Some(dir.path().join("v2c")),
            ..SandboxCgroups::default()
        };
        let err = none
            .create_with("s", &limits, dir.path(), &Default::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sandbox.limits.memory_bytes") && err.contains("no memory controller"),
            "{err}"
        );
        let err = none
            .create_with(
                "s",
                &Limits {
                    io_bytes_per_s: Some(1 << 20),
                    ..Limits::default()
                },
                Path::new("/proc/self"),
                &all,
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("io_bytes_per_s") && err.contains("not on a block device"),
            "{err}"
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
