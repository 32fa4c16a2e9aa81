//! The sandbox backend contract. The owner lends sandboxes through this
//! trait and nothing else, so a backend on another lender (a container
//! engine, a remote machine) can replace the local one without the owner or
//! the drivers changing. Calls block (mounts, snapshots, commands); async
//! callers run them on a blocking thread.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};
use serde::{Deserialize, Serialize};

use crate::errors::Error;

/// An image's identity: the digest of its config.
pub type ImageId = rollpoint_image::Digest;

/// Version of [`SandboxSpec`] and of the records that embed it.
pub const SPEC_VERSION: u32 = 1;

/// What a sandbox is made from. Part of every sandbox and snapshot record,
/// so a fork after a crash gets the same view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    #[serde(default)]
    pub base: Base,
    /// The sandbox's hostname; kept across forks.
    #[serde(default = "default_hostname")]
    pub hostname: String,
    /// The in-sandbox working directory, created empty when missing. Empty
    /// in a request: the image's `WorkingDir`, else `/workspace`; a created
    /// sandbox's spec always names it.
    #[serde(default)]
    pub workdir: String,
    /// The environment every command and launch starts from (`PATH` gets a
    /// default when missing, `HOME` the user's home).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The user commands and launches run as: `NAME`, `UID`, `NAME:GROUP`
    /// or `UID:GID`, looked up in the sandbox's own `/etc/passwd` and
    /// `/etc/group`. Empty in a request: the image's `User`, else root.
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub network: Network,
    /// How closed the sandbox is to the code it runs (`strict` unless
    /// asked otherwise).
    #[serde(default)]
    pub isolation: Isolation,
    /// Host paths lent read-only at the same place in the sandbox (a
    /// dataset, a tool), besides the system directories a host-root base
    /// shows. Absolute, without `.` or `..`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>)]
    pub host_paths: Vec<PathBuf>,
    /// Capabilities a strict sandbox drops from Docker's default set
    /// (`NET_RAW`, `CAP_MKNOD`, ...); none can be added.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drop_capabilities: Vec<String>,
    /// Sets `no_new_privs` on everything a strict sandbox runs, so a setuid
    /// or file-capability program gains nothing. Off by default, as in
    /// Docker: such a program (`sudo` in an image) then acts as root inside
    /// the sandbox's user namespace, within its capabilities and filter.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_new_privs: bool,
}

fn default_hostname() -> String {
    "sandbox".to_owned()
}

/// The workdir of a sandbox whose request and image name none.
pub const DEFAULT_WORKDIR: &str = "/workspace";

/// The in-sandbox directory for rollpoint's own state (a harness's session
/// files), outside the workdir; made at start and owned by the sandbox's
/// user.
pub const SANDBOX_STATE_DIR: &str = "/var/lib/rollpoint";

impl Default for SandboxSpec {
    fn default() -> Self {
        Self {
            base: Base::default(),
            hostname: default_hostname(),
            workdir: String::new(),
            env: BTreeMap::new(),
            user: String::new(),
            limits: Limits::default(),
            network: Network::default(),
            isolation: Isolation::default(),
            host_paths: Vec::new(),
            drop_capabilities: Vec::new(),
            no_new_privs: false,
        }
    }
}

impl SandboxSpec {
    /// The environment with its `PATH` default filled in (`HOME` is the
    /// anchor's to fill, from the user's entry in `/etc/passwd`).
    pub fn full_env(&self) -> BTreeMap<String, String> {
        let mut env = self.env.clone();
        env.entry("PATH".into()).or_insert_with(|| {
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
        });
        env
    }
}

/// The read-only lower layers under a sandbox's overlay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = SandboxBase)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Base {
    /// The host's root filesystem, read-only (writes land in the upper).
    #[default]
    HostRoot,
    /// A directory holding a root filesystem.
    Rootfs {
        #[schema(value_type = String)]
        path: PathBuf,
    },
    /// A root filesystem tarball, unpacked once and shared.
    Tarball {
        #[schema(value_type = String)]
        path: PathBuf,
    },
    /// An image from a registry: `REGISTRY/REPO:TAG` or `...@sha256:...`.
    Image {
        #[serde(rename = "ref")]
        reference: String,
        /// The image (its config digest) the sandbox was made on: set when
        /// the sandbox is created, so a fork or a resume uses the very
        /// layers even if the tag has moved since.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<String>)]
        id: Option<ImageId>,
    },
    /// An OCI archive (a tar of an OCI layout).
    #[serde(rename = "oci-archive", alias = "oci_archive")]
    OciArchive {
        #[schema(value_type = String)]
        path: PathBuf,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<String>)]
        id: Option<ImageId>,
    },
    /// A Docker archive (`docker save` or `podman save` output).
    #[serde(rename = "docker-archive", alias = "docker_archive")]
    DockerArchive {
        #[schema(value_type = String)]
        path: PathBuf,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<String>)]
        id: Option<ImageId>,
    },
    /// An OCI layout directory.
    #[serde(rename = "oci-layout", alias = "oci_layout")]
    OciLayout {
        #[schema(value_type = String)]
        path: PathBuf,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<String>)]
        id: Option<ImageId>,
    },
}

impl Base {
    /// The image source and its pinned id, for the image kinds.
    pub fn image(&self) -> Option<(rollpoint_image::Source, Option<&ImageId>)> {
        use rollpoint_image::Source;
        match self {
            Self::HostRoot | Self::Rootfs { .. } | Self::Tarball { .. } => None,
            Self::Image { reference, id } => {
                Some((Source::Registry(reference.clone()), id.as_ref()))
            }
            Self::OciArchive { path, id } => Some((Source::OciArchive(path.clone()), id.as_ref())),
            Self::DockerArchive { path, id } => {
                Some((Source::DockerArchive(path.clone()), id.as_ref()))
            }
            Self::OciLayout { path, id } => Some((Source::OciLayout(path.clone()), id.as_ref())),
        }
    }

    /// The same base pinned to `image`.
    pub(crate) fn pinned(&self, image: ImageId) -> Self {
        let mut out = self.clone();
        match &mut out {
            Self::Image { id, .. }
            | Self::OciArchive { id, .. }
            | Self::DockerArchive { id, .. }
            | Self::OciLayout { id, .. } => *id = Some(image),
            Self::HostRoot | Self::Rootfs { .. } | Self::Tarball { .. } => {}
        }
        out
    }
}

/// Resource limits of a sandbox, each applied through its controller's
/// cgroup v1 hierarchy where the host mounts one, else through cgroup v2
/// (docs/design/limits.md). `None`: no limit of that kind (a run fills
/// its node defaults in first).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = SandboxLimits)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Memory the sandbox's processes may use, in bytes
    /// (1 MiB..=16 TiB; `memory.max`, v1 `memory.limit_in_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Swap it may use besides, in bytes (0..=16 TiB; `memory.swap.max`);
    /// none unless given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_bytes: Option<u64>,
    /// Processes and threads at once (1..=4,194,304; `pids.max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// CPU time per wall time, in thousandths of a CPU (10..=1,024,000:
    /// 1500 is one and a half CPUs; `cpu.max`, v1 `cpu.cfs_quota_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u64>,
    /// Share of contended CPU against other sandboxes (1..=10,000, 100 is
    /// the default share; `cpu.weight`, v1 `cpu.shares` scaled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u64>,
    /// Bytes per second read and written each on the device under the
    /// sandbox's files (1 MiB/s..=1 TiB/s; `io.max`, v1 blkio throttle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_bytes_per_s: Option<u64>,
    /// Bytes the sandbox's own files may take in its upper (1 MiB..=16 TiB;
    /// a btrfs qgroup limit, so the btrfs store only; writes past it fail
    /// with `EDQUOT`). A fork gets the limit again for what it writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
}

/// One limit's name, its allowed range and its value.
type Range = (&'static str, u64, u64, Option<u64>);

/// A limit [`Limits::check`] refuses: its field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {message}")]
pub struct LimitError {
    /// The field under `limits` (`pids`, `swap_bytes`, ...).
    pub field: &'static str,
    pub message: String,
}

/// Whether files taking `used` bytes have hit a disk limit of `limit`: within
/// 5 % of it, or within 1 MiB, as a write that would pass the quota fails
/// whole (a filler writing 1 MiB blocks stops up to a block short) and the
/// upper's walk counts file blocks, not the quota's own accounting.
pub(crate) fn disk_limit_hit(used: u64, limit: u64) -> bool {
    let slack = (limit / 20).max(1 << 20);
    used.saturating_add(slack) >= limit
}

impl Limits {
    /// Each limit with its range, for checks and documentation.
    pub fn ranges(&self) -> [Range; 7] {
        [
            ("memory_bytes", 1 << 20, 16 << 40, self.memory_bytes),
            ("swap_bytes", 0, 16 << 40, self.swap_bytes),
            ("pids", 1, 4_194_304, self.pids),
            ("cpu_millis", 10, 1_024_000, self.cpu_millis),
            ("cpu_weight", 1, 10_000, self.cpu_weight),
            ("io_bytes_per_s", 1 << 20, 1 << 40, self.io_bytes_per_s),
            ("disk_bytes", 1 << 20, 16 << 40, self.disk_bytes),
        ]
    }

    /// The first limit outside its range, or a swap limit without a memory
    /// one, naming the field.
    pub fn check(&self) -> Result<(), LimitError> {
        for (field, lo, hi, value) in self.ranges() {
            if let Some(v) = value
                && !(lo..=hi).contains(&v)
            {
                return Err(LimitError {
                    field,
                    message: format!("{v}: outside {lo}..={hi}"),
                });
            }
        }
        if self.swap_bytes.is_some_and(|s| s > 0) && self.memory_bytes.is_none() {
            return Err(LimitError {
                field: "swap_bytes",
                message: "needs memory_bytes (swap is counted beside memory)".into(),
            });
        }
        Ok(())
    }

    /// These limits, each unset one taken from `defaults`.
    #[must_use]
    pub fn or(&self, defaults: &Self) -> Self {
        Self {
            memory_bytes: self.memory_bytes.or(defaults.memory_bytes),
            swap_bytes: self.swap_bytes.or(defaults.swap_bytes),
            pids: self.pids.or(defaults.pids),
            cpu_millis: self.cpu_millis.or(defaults.cpu_millis),
            cpu_weight: self.cpu_weight.or(defaults.cpu_weight),
            io_bytes_per_s: self.io_bytes_per_s.or(defaults.io_bytes_per_s),
            disk_bytes: self.disk_bytes.or(defaults.disk_bytes),
        }
    }
}

/// What a sandbox's processes can reach (docs/design/network.md). In
/// every mode but `host` the sandbox has a network namespace of its own
/// with loopback and no route out, and its `/etc/hosts` names only
/// loopback, its hostname and the allowed hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = SandboxNetwork)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Only the model gateway, at `127.0.0.1:<gateway port>` inside, and
    /// through it only the attempt's own route.
    #[default]
    Gateway,
    /// The gateway and these TCP destinations: `HOST:PORT` (resolved on the
    /// host when the sandbox starts), `IPv4:PORT` or `IPv4/N:PORT`; at most
    /// 64.
    Allow(Vec<String>),
    /// Loopback only.
    #[serde(rename = "none", alias = "isolated")]
    Loopback,
    /// The host's network namespace: everything the host reaches, its
    /// loopback services and every rollout's gateway route. Logged loudly.
    #[serde(alias = "shared")]
    Host,
}

impl Network {
    /// Whether the sandbox shares the host's network.
    pub fn is_host(&self) -> bool {
        *self == Self::Host
    }

    /// Its name in a config (`gateway`, `allow`, `none`, `host`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Allow(_) => "allow",
            Self::Loopback => "none",
            Self::Host => "host",
        }
    }
}

/// How closed a sandbox is to the code it runs (docs/design/isolation.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = SandboxIsolation)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Code inside is hostile: a user namespace (root inside is an
    /// unprivileged host id), Docker's default capabilities, a seccomp
    /// filter, `no_new_privs`, a masked `/proc`, and of the host only its
    /// system directories and the paths lent.
    #[default]
    Strict,
    /// Code inside is the user's own: root inside is the host's root and
    /// the host-root base shows the host's whole root filesystem.
    Trusted,
}

impl Isolation {
    pub fn is_strict(self) -> bool {
        self == Self::Strict
    }
}

/// What a sandbox has used so far, as its cgroups and its relay count it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceUsage {
    /// CPU time of all its processes, user and system, in milliseconds.
    pub cpu_ms: u64,
    /// The most memory it held at once, in bytes (where the kernel keeps
    /// the peak: v1 `memory.max_usage_in_bytes`, v2 `memory.peak`).
    #[serde(default)]
    pub memory_peak_bytes: Option<u64>,
    /// Bytes its own files take in its upper layer now (what it wrote and
    /// kept).
    #[serde(default)]
    pub disk_bytes: u64,
    /// Bytes through its relay, to the sandbox and from it, and the
    /// connections it opened (none in `host` mode, which has no relay).
    #[serde(default)]
    pub net_bytes_in: u64,
    #[serde(default)]
    pub net_bytes_out: u64,
    #[serde(default)]
    pub net_connections: u64,
    /// Each limit that stopped something, named with its value: "pids:
    /// 12 forks refused by its limit of 64 (pids.max)".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits_hit: Vec<String>,
}

/// A live sandbox as its backend describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxInfo {
    pub id: String,
    /// The sandbox's root as its processes see it, as the host reaches it
    /// while the sandbox lives: through its anchor (`/proc/<anchor>/root`),
    /// since the overlay is attached in the sandbox's mount namespace alone.
    pub root: PathBuf,
    /// Host path of the control directory (`/run/rollpoint` inside).
    pub control: PathBuf,
    /// Host pid of the anchor.
    pub anchor_pid: u32,
    pub spec: SandboxSpec,
    /// The snapshot this sandbox was forked from, if any.
    pub forked_from: Option<String>,
}

/// A launch started in a sandbox; its supervisor answers on the control
/// socket in `session`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchHandle {
    pub launch_id: String,
    /// Host path of the launch's session directory.
    pub session: PathBuf,
}

/// A launch of a sandbox, as a batch of pauses names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRef {
    pub sandbox: String,
    pub launch_id: String,
}

/// A snapshot of one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRef {
    pub id: String,
    pub sandbox: String,
    pub spec: SandboxSpec,
    pub duration_ms: f64,
    /// Bytes the snapshot holds, where the store knows them cheaply (the copy store's
    /// archive; a btrfs snapshot shares its blocks and says none).
    #[serde(default)]
    pub bytes: Option<u64>,
}

/// Everything a backend holds, for sweeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendListing {
    pub sandboxes: Vec<String>,
    pub snapshots: Vec<String>,
}

/// A lender of sandboxes.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Creates and starts a sandbox named `id`.
    fn create(&self, id: &str, spec: &SandboxSpec) -> Result<SandboxInfo, Error>;

    /// Runs a command to completion in the sandbox. `req.env` is added to
    /// the spec's environment.
    fn exec(&self, id: &str, req: &ExecRequest) -> Result<ExecOutput, Error>;

    /// What the sandbox has used so far.
    fn usage(&self, id: &str) -> Result<ResourceUsage, Error>;

    /// Starts a harness launch under its own supervisor.
    fn launch(&self, id: &str, req: &LaunchRequest) -> Result<LaunchHandle, Error>;

    /// Pauses launches of many sandboxes as one step and writes their
    /// receipts in one durable batch: per launch its receipt (confirmed, or
    /// failed and undone), or `None` for one the backend leaves to its
    /// supervisor (the pause a launch's supervisor makes is the way for it).
    /// This default takes none.
    fn pause_launches(
        &self,
        launches: &[LaunchRef],
    ) -> Result<Vec<Option<rollpoint_proto::receipt::Receipt>>, Error> {
        Ok(vec![None; launches.len()])
    }

    /// Continues launches [`Backend::pause_launches`] paused, as one step;
    /// a receipt per launch, in order.
    fn continue_launches(
        &self,
        launches: &[LaunchRef],
    ) -> Result<Vec<rollpoint_proto::receipt::Receipt>, Error> {
        use rollpoint_proto::receipt::{Op, Outcome, Receipt};
        Ok(launches
            .iter()
            .map(|l| Receipt::no_action(Op::Continue, &l.launch_id, Outcome::NotRunning, None))
            .collect())
    }

    /// Writes a file at an in-sandbox path, atomically.
    fn upload(&self, id: &str, path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error>;

    /// Makes `path` an empty directory owned by the sandbox's user (mode
    /// 0755, missing parents made): whatever was there is removed first,
    /// a symlink itself rather than what it points to.
    fn fresh_dir(&self, id: &str, path: &Path) -> Result<(), Error>;

    /// Reads a file at an in-sandbox path, at most `limit` bytes.
    fn download(&self, id: &str, path: &Path, limit: u64) -> Result<Vec<u8>, Error>;

    /// Snapshots the sandbox with its processes frozen, after syncfs, and
    /// records that `checkpoint` names the snapshot (sweeps keep it while
    /// that checkpoint is retained).
    fn snapshot(&self, id: &str, snapshot: &str, checkpoint: &str) -> Result<SnapshotRef, Error>;

    /// [`Backend::snapshot`] of every `(sandbox, snapshot)` pair, all or
    /// nothing: on any failure no snapshot of the batch is left. A backend
    /// may batch the steps; this default takes them one by one.
    fn snapshot_all(
        &self,
        items: &[(String, String)],
        checkpoint: &str,
    ) -> Result<Vec<SnapshotRef>, Error> {
        let mut taken = Vec::with_capacity(items.len());
        for (id, snapshot) in items {
            match self.snapshot(id, snapshot, checkpoint) {
                Ok(s) => taken.push(s),
                Err(e) => {
                    for s in &taken {
                        let _ = self.delete_snapshot(&s.id);
                    }
                    return Err(e);
                }
            }
        }
        Ok(taken)
    }

    /// Creates and starts sandbox `new_id` from a snapshot: same files,
    /// same in-sandbox paths, hostname and environment.
    fn fork(&self, snapshot: &str, new_id: &str) -> Result<SandboxInfo, Error>;

    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error>;

    /// Kills everything in the sandbox and removes every trace of it.
    fn destroy(&self, id: &str) -> Result<(), Error>;

    fn list(&self) -> Result<BackendListing, Error>;

    /// The stream format [`Backend::send_snapshot`] writes (`btrfs` or `copy`): a stream is
    /// received only by a backend of the same format. `None`: snapshots do not travel.
    fn snapshot_format(&self) -> Option<&'static str> {
        None
    }

    /// Writes `snapshot` as a stream file at `out` (against `parent`, a snapshot here it
    /// descends from, when given); returns the sandbox it was taken of and its spec.
    fn send_snapshot(
        &self,
        snapshot: &str,
        parent: Option<&str>,
        out: &Path,
    ) -> Result<(String, SandboxSpec), Error> {
        let _ = (parent, out);
        Err(Error::Invalid {
            sandbox: snapshot.to_owned(),
            message: "this backend's snapshots do not travel".to_owned(),
        })
    }

    /// Makes snapshot `snapshot` (of `sandbox`, with `spec`) from a stream another node's
    /// [`Backend::send_snapshot`] wrote, named by `checkpoint` for sweeps. Its parent, if it
    /// was sent against one, must be here.
    fn receive_snapshot(
        &self,
        snapshot: &str,
        sandbox: &str,
        spec: &SandboxSpec,
        checkpoint: &str,
        stream: &Path,
    ) -> Result<(), Error> {
        let _ = (snapshot, spec, checkpoint, stream);
        Err(Error::Invalid {
            sandbox: sandbox.to_owned(),
            message: "this backend's snapshots do not travel".to_owned(),
        })
    }

    /// Whether snapshot `snapshot` is here (its store's snapshot and its record).
    fn has_snapshot(&self, snapshot: &str) -> bool {
        let _ = snapshot;
        false
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn a_disk_limit_is_hit_within_a_write_or_a_twentieth_of_it() {
        let mib = 1_u64 << 20;
        // 16 MiB: one 1 MiB block short counts, two do not.
        assert!(disk_limit_hit(15 * mib, 16 * mib));
        assert!(!disk_limit_hit(14 * mib, 16 * mib));
        // 10 GiB: 5 % is the slack.
        assert!(disk_limit_hit(9_800 * mib, 10_240 * mib));
        assert!(!disk_limit_hit(9_600 * mib, 10_240 * mib));
        assert!(disk_limit_hit(u64::MAX, 1));
    }

    #[test]
    fn bases_keep_their_json_and_refuse_what_they_do_not_know_by_name() {
        let parse = |s: &str| serde_json::from_str::<Base>(s);
        assert_eq!(parse(r#"{"kind":"host_root"}"#).unwrap(), Base::HostRoot);
        assert_eq!(
            parse(r#"{"kind":"rootfs","path":"/r"}"#).unwrap(),
            Base::Rootfs { path: "/r".into() }
        );
        let image = parse(r#"{"kind":"image","ref":"reg:5000/a/b:1"}"#).unwrap();
        assert_eq!(
            image,
            Base::Image {
                reference: "reg:5000/a/b:1".into(),
                id: None
            }
        );
        assert_eq!(
            serde_json::to_string(&image).unwrap(),
            r#"{"kind":"image","ref":"reg:5000/a/b:1"}"#
        );
        assert!(matches!(
            parse(r#"{"kind":"docker-archive","path":"/a.tar"}"#).unwrap(),
            Base::DockerArchive { .. }
        ));
        let err = parse(r#"{"kind":"image","ref":"x","tag":"y"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("tag"), "{err}");
        let err = parse(r#"{"kind":"image"}"#).unwrap_err().to_string();
        assert!(err.contains("ref"), "{err}");
        let err = parse(r#"{"kind":"image","ref":"x","id":"sha256:12"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("sha256"), "{err}");
        let err = parse(r#"{"kind":"squashfs","path":"/x"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("squashfs"), "{err}");
    }

    #[test]
    fn limits_out_of_range_are_refused_naming_the_field_and_the_range() {
        assert_eq!(Limits::default().check(), Ok(()));
        let err = Limits {
            pids: Some(0),
            ..Limits::default()
        }
        .check()
        .unwrap_err();
        assert_eq!(err.field, "pids");
        assert_eq!(err.to_string(), "pids 0: outside 1..=4194304");
        let err = Limits {
            disk_bytes: Some(1),
            ..Limits::default()
        }
        .check()
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "disk_bytes 1: outside 1048576..=17592186044416"
        );
        let err = Limits {
            swap_bytes: Some(1 << 20),
            ..Limits::default()
        }
        .check()
        .unwrap_err();
        assert_eq!(err.field, "swap_bytes");
        let defaults = Limits {
            pids: Some(64),
            memory_bytes: Some(1 << 30),
            ..Limits::default()
        };
        let own = Limits {
            pids: Some(8),
            ..Limits::default()
        };
        assert_eq!(own.or(&defaults).pids, Some(8), "the task's own value wins");
        assert_eq!(own.or(&defaults).memory_bytes, Some(1 << 30));
    }
}
