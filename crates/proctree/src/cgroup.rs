//! cgroup discovery, creation and the file seam in front of it.
//!
//! Hand-written rather than taken from `libcgroups` or `cgroups-rs`: the
//! engine needs five files (`cgroup.procs`, `cgroup.freeze`, `cgroup.events`,
//! `cgroup.kill`, `freezer.state`), and those crates bring systemd, D-Bus and
//! BPF along. Every access goes through [`CgroupFs`] so the freeze logic can
//! be tested without root against a recording fake.

use std::path::{Path, PathBuf};

use crate::errors::Error;

/// Reads and writes cgroup control files.
pub trait CgroupFs: std::fmt::Debug + Send {
    fn read(&self, dir: &Path, file: &str) -> Result<String, Error>;
    fn write(&self, dir: &Path, file: &str, value: &str) -> Result<(), Error>;
}

/// The real cgroup filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl CgroupFs for RealFs {
    fn read(&self, dir: &Path, file: &str) -> Result<String, Error> {
        let path = dir.join(file);
        std::fs::read_to_string(&path).map_err(|source| Error::Read { path, source })
    }

    fn write(&self, dir: &Path, file: &str, value: &str) -> Result<(), Error> {
        let path = dir.join(file);
        std::fs::write(&path, value).map_err(|source| Error::Write {
            path,
            value: value.to_owned(),
            source,
        })
    }
}

/// Which cgroup hierarchy a directory belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    V2,
    V1Freezer,
}

impl Kind {
    /// The control file and the value that freezes (`true`) or thaws it.
    pub fn freezer_write(self, frozen: bool) -> (&'static str, &'static str) {
        match (self, frozen) {
            (Self::V2, true) => ("cgroup.freeze", "1"),
            (Self::V2, false) => ("cgroup.freeze", "0"),
            (Self::V1Freezer, true) => ("freezer.state", "FROZEN"),
            (Self::V1Freezer, false) => ("freezer.state", "THAWED"),
        }
    }
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup` on a pure v2
/// host, `/sys/fs/cgroup/unified` on a hybrid one).
pub fn v2_root() -> Option<PathBuf> {
    find_mount(&read_mountinfo()?, is_v2)
}

/// Where the cgroup v1 freezer hierarchy is mounted.
pub fn v1_freezer_root() -> Option<PathBuf> {
    v1_root("freezer")
}

/// Where the cgroup v1 hierarchy of `controller` (`memory`, `pids`, ...) is
/// mounted.
pub fn v1_root(controller: &str) -> Option<PathBuf> {
    find_mount(&read_mountinfo()?, is_v1(controller))
}

/// Where each hierarchy a sandbox uses is mounted, from one read of
/// mountinfo (each read formats every mount of the namespace, and a host
/// with a thousand sandboxes has thousands).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hierarchies {
    pub v2: Option<PathBuf>,
    pub freezer: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub pids: Option<PathBuf>,
    pub cpu: Option<PathBuf>,
    pub blkio: Option<PathBuf>,
}

impl Hierarchies {
    /// Reads this process's mountinfo once.
    pub fn read() -> Self {
        Self::parse(&read_mountinfo().unwrap_or_default())
    }

    fn parse(info: &str) -> Self {
        Self {
            v2: find_mount(info, is_v2),
            freezer: find_mount(info, is_v1("freezer")),
            memory: find_mount(info, is_v1("memory")),
            pids: find_mount(info, is_v1("pids")),
            cpu: find_mount(info, is_v1("cpu")),
            blkio: find_mount(info, is_v1("blkio")),
        }
    }
}

/// A mountinfo line's filesystem type and super options are cgroup2's.
fn is_v2(fstype: &str, _opts: &str) -> bool {
    fstype == "cgroup2"
}

/// A mountinfo line's filesystem type and super options are those of the
/// cgroup v1 hierarchy holding `controller`.
fn is_v1(controller: &str) -> impl Fn(&str, &str) -> bool + '_ {
    move |fstype, opts| fstype == "cgroup" && opts.split(',').any(|o| o == controller)
}

fn read_mountinfo() -> Option<String> {
    std::fs::read_to_string("/proc/self/mountinfo").ok()
}

/// The mount point of the first line of `info` that `pred` accepts.
fn find_mount(info: &str, pred: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    info.lines()
        .find_map(|line| parse_mountinfo_line(line, &pred))
}

/// Parses one mountinfo line: returns the mount point when `pred` accepts
/// its filesystem type and super options.
fn parse_mountinfo_line(line: &str, pred: &impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    let (head, tail) = line.split_once(" - ")?;
    let mount_point = head.split(' ').nth(4)?;
    let mut tail = tail.split(' ');
    let fstype = tail.next()?;
    let _source = tail.next()?;
    let opts = tail.next().unwrap_or("");
    pred(fstype, opts).then(|| PathBuf::from(mount_point))
}

/// Creates `<root>/rollpoint/<name>` (and its parent) for a launch.
pub fn create(root: &Path, name: &str) -> Result<PathBuf, Error> {
    let dir = root.join("rollpoint").join(name);
    std::fs::create_dir_all(&dir).map_err(|source| Error::CreateCgroup {
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

/// Pids listed in `cgroup.procs`.
pub fn procs(fs: &dyn CgroupFs, dir: &Path) -> Result<Vec<u32>, Error> {
    Ok(fs
        .read(dir, "cgroup.procs")?
        .split_ascii_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect())
}

/// Whether a v2 cgroup offers `cgroup.kill`.
pub fn has_kill(dir: &Path) -> bool {
    dir.join("cgroup.kill").exists()
}

/// Removes a launch cgroup once it is empty, retrying briefly while the
/// last exiting tasks leave it.
pub fn remove(dir: &Path) -> Result<(), Error> {
    let mut last = None;
    for _ in 0..100 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(Error::RemoveCgroup {
        path: dir.to_owned(),
        source: last.unwrap_or_else(|| std::io::Error::other("cgroup not removable")),
    })
}

#[cfg(test)]
pub(crate) mod fake {
    //! A recording fake of [`CgroupFs`] whose reads follow a script.

    use super::*;
    use std::collections::{HashMap, VecDeque};
    use std::sync::Mutex;

    #[derive(Debug, Default)]
    pub struct FakeFs {
        pub writes: Mutex<Vec<(String, String)>>,
        /// Per file: answers in order; the last one repeats.
        pub reads: Mutex<HashMap<String, VecDeque<String>>>,
    }

    impl FakeFs {
        pub fn script(&self, file: &str, answers: &[&str]) {
            self.reads.lock().expect("lock").insert(
                file.into(),
                answers.iter().map(|s| (*s).to_owned()).collect(),
            );
        }

        pub fn writes(&self) -> Vec<(String, String)> {
            self.writes.lock().expect("lock").clone()
        }
    }

    impl CgroupFs for FakeFs {
        fn read(&self, _dir: &Path, file: &str) -> Result<String, Error> {
            let mut reads = self.reads.lock().expect("lock");
            let q = reads.get_mut(file).ok_or_else(|| Error::Read {
                path: file.into(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            })?;
            let answer = if q.len() > 1 {
                q.pop_front()
            } else {
                q.front().cloned()
            };
            Ok(answer.unwrap_or_default())
        }

        fn write(&self, _dir: &Path, file: &str, value: &str) -> Result<(), Error> {
            self.writes
                .lock()
                .expect("lock")
                .push((file.to_owned(), value.to_owned()));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hierarchies_are_found_in_one_pass() {
        let info = "\
30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
31 25 0:27 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
";
        let found = Hierarchies::parse(info);
        assert_eq!(found.v2, Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(found.freezer, Some(PathBuf::from("/sys/fs/cgroup/freezer")));
        assert_eq!(found.memory, Some(PathBuf::from("/sys/fs/cgroup/memory")));
        assert_eq!(found.pids, None);
    }

    #[test]
    fn mountinfo_finds_hybrid_and_pure_v2_and_v1_freezer() {
        let v2 = |f: &str, _: &str| f == "cgroup2";
        let line = "35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate";
        assert_eq!(
            parse_mountinfo_line(line, &v2),
            Some("/sys/fs/cgroup/unified".into())
        );
        let line = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
        assert_eq!(
            parse_mountinfo_line(line, &v2),
            Some("/sys/fs/cgroup".into())
        );
        let fr = |f: &str, o: &str| f == "cgroup" && o.split(',').any(|x| x == "freezer");
        let line = "40 25 0:35 / /sys/fs/cgroup/freezer rw shared:15 - cgroup cgroup rw,freezer";
        assert_eq!(
            parse_mountinfo_line(line, &fr),
            Some("/sys/fs/cgroup/freezer".into())
        );
        let line = "41 25 0:36 / /sys/fs/cgroup/pids rw shared:16 - cgroup cgroup rw,pids";
        assert_eq!(parse_mountinfo_line(line, &fr), None);
    }
}
