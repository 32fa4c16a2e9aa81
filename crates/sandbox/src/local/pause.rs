//! Pausing and continuing the launches of many sandboxes as one step: what a
//! checkpoint's prepare asks of every rollout at once.
//!
//! A launch's supervisor can pause it too, one request each, but a thousand
//! of them mean a thousand round trips, a thousand processes woken and a
//! thousand synced receipts. Here the owner freezes each launch's own cgroup
//! (under its sandbox's, where its supervisor made it) from one thread,
//! every write before any confirmation, confirms each with the kernel, and
//! writes the batch's receipts in one durable file. A receipt proves what a
//! supervisor's does: every process of that launch frozen, confirmed by its
//! cgroup. A launch the batch cannot take (no cgroup, its cgroup gone or
//! empty because its harness ended) gets no receipt here and is left to its
//! supervisor, which answers for an ended launch.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use atomic_write_file::AtomicWriteFile;
use rollpoint_proctree::Budgets;
use rollpoint_proctree::cgroup::{Kind, RealFs};
use rollpoint_proctree::freeze::FROZEN_BY_CGROUP;
use rollpoint_proctree::freeze::batch::{Outcome as Done, freeze_many, thaw_many};
use rollpoint_proto::receipt::{Member, Method, Op, Outcome, RECEIPT_VERSION, Receipt};

use super::backend::LocalBackend;
use super::batch::Phases;
use crate::{LaunchRef, errors::Error};

/// Where the batches' receipts are kept, one file per batch.
pub(crate) const RECEIPTS_DIR: &str = "receipts";
/// Batches kept; older ones are removed as new ones are written.
const KEPT_BATCHES: usize = 64;

impl LocalBackend {
    /// A launch's cgroup as its supervisor made it: `rollpoint/<launch>` under
    /// the sandbox's v2 cgroup, else under its v1 freezer one.
    fn launch_cgroup(&self, launch: &LaunchRef) -> Option<(Kind, PathBuf)> {
        rollpoint_proto::anchor::check_launch_id(&launch.launch_id).ok()?;
        self.live(&launch.sandbox, |l| {
            let at = |d: &Path| d.join("rollpoint").join(&launch.launch_id);
            match (&l.cgroups.v2, &l.cgroups.freezer) {
                (Some(d), _) => Some((Kind::V2, at(d))),
                (None, Some(d)) => Some((Kind::V1Freezer, at(d))),
                (None, None) => None,
            }
        })
        .ok()
        .flatten()
    }

    /// Freezes every launch it can take in one batch; see the module docs.
    pub(super) fn pause_launches(
        &self,
        launches: &[LaunchRef],
    ) -> Result<Vec<Option<Receipt>>, Error> {
        let start = Instant::now();
        let mut phases = Phases::new();
        let found: Vec<Option<(Kind, PathBuf)>> =
            launches.iter().map(|l| self.launch_cgroup(l)).collect();
        phases.mark("found");
        let taken: Vec<(usize, Kind, &Path)> = found
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|(k, d)| (i, *k, d.as_path())))
            .collect();
        let targets: Vec<(Kind, &Path)> = taken.iter().map(|(_, k, d)| (*k, *d)).collect();
        let done = freeze_many(&RealFs, &targets, Budgets::default());
        phases.mark("frozen");
        // A launch whose cgroup is gone or empty has ended: no receipt here.
        let mut out: Vec<Option<Receipt>> = vec![None; launches.len()];
        let mut ended: Vec<(Kind, &Path)> = Vec::new();
        for ((i, kind, dir), d) in taken.iter().zip(&done) {
            match d {
                Ok(c) if c.members.is_empty() => ended.push((*kind, dir)),
                Err(u) if u.gone => {}
                _ => out[*i] = Some(receipt(Op::Pause, &launches[*i], *kind, d, start)),
            }
        }
        thaw_many(&RealFs, &ended, Budgets::default());
        let written: Vec<&Receipt> = out.iter().flatten().collect();
        phases.mark("receipts");
        if let Err(e) = self.write_batch("pause", &written) {
            // Without its receipts the batch proves nothing: undo it.
            let frozen: Vec<(Kind, &Path)> = taken
                .iter()
                .filter(|(i, ..)| out[*i].as_ref().is_some_and(Receipt::confirmed))
                .map(|(_, k, d)| (*k, *d))
                .collect();
            thaw_many(&RealFs, &frozen, Budgets::default());
            return Err(e);
        }
        phases.mark("written");
        tracing::debug!(
            launches = launches.len(),
            confirmed = written.iter().filter(|r| r.confirmed()).count(),
            ms = start.elapsed().as_secs_f64() * 1e3,
            phases = %phases,
            "launches paused in one batch"
        );
        Ok(out)
    }

    /// Thaws launches a batch paused, in one batch; a launch whose cgroup is
    /// gone has ended (`already_ended`).
    pub(super) fn continue_launches(&self, launches: &[LaunchRef]) -> Result<Vec<Receipt>, Error> {
        let start = Instant::now();
        let found: Vec<Option<(Kind, PathBuf)>> =
            launches.iter().map(|l| self.launch_cgroup(l)).collect();
        let targets: Vec<(Kind, &Path)> = found
            .iter()
            .flatten()
            .map(|(k, d)| (*k, d.as_path()))
            .collect();
        let mut done = thaw_many(&RealFs, &targets, Budgets::default()).into_iter();
        let out: Vec<Receipt> = launches
            .iter()
            .zip(&found)
            .map(|(l, f)| match (f, done.next()) {
                (Some((kind, _)), Some(d)) => receipt(Op::Continue, l, *kind, &d, start),
                _ => {
                    // Its sandbox is gone: so is everything it paused.
                    Receipt::no_action(Op::Continue, &l.launch_id, Outcome::AlreadyEnded, None)
                }
            })
            .collect();
        self.write_batch("continue", &out.iter().collect::<Vec<_>>())?;
        Ok(out)
    }

    /// Writes a batch's receipts as one file (`receipts/<op>-<ms>-<n>.jsonl`,
    /// one receipt a line, mode 0600, atomic) and removes the oldest batches
    /// past [`KEPT_BATCHES`].
    fn write_batch(&self, op: &str, receipts: &[&Receipt]) -> Result<(), Error> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        if receipts.is_empty() {
            return Ok(());
        }
        let dir = self.dir.join(RECEIPTS_DIR);
        let io = |path: &Path, source| Error::Io {
            what: "write the receipts of a batch",
            root: self.dir.clone(),
            path: path.to_owned(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let mut bytes = Vec::with_capacity(receipts.len() * 256);
        for r in receipts {
            bytes.extend(r.encode_line().map_err(|e| io(&dir, e.into()))?);
        }
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let path = dir.join(format!(
            "{ms:015}-{:06}-{op}.jsonl",
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = AtomicWriteFile::open(&path).map_err(|e| io(&path, e))?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io(&path, e))?;
        file.write_all(&bytes).map_err(|e| io(&path, e))?;
        file.commit().map_err(|e| io(&path, e))?;
        prune(&dir);
        Ok(())
    }
}

fn method(kind: Kind) -> Method {
    match kind {
        Kind::V2 => Method::CgroupV2,
        Kind::V1Freezer => Method::CgroupV1,
    }
}

fn receipt(op: Op, launch: &LaunchRef, kind: Kind, done: &Done, start: Instant) -> Receipt {
    let (outcome, rounds, members, reason) = match done {
        Ok(c) => (
            Outcome::Confirmed,
            c.rounds,
            c.members
                .iter()
                .map(|&pid| Member {
                    pid,
                    start_time: None,
                    state: FROZEN_BY_CGROUP,
                })
                .collect(),
            None,
        ),
        Err(u) if u.gone && op == Op::Continue => (Outcome::AlreadyEnded, 0, Vec::new(), None),
        Err(u) => (Outcome::Failed, 0, Vec::new(), Some(u.text.clone())),
    };
    Receipt {
        v: RECEIPT_VERSION,
        op,
        launch_id: launch.launch_id.clone(),
        method: method(kind),
        outcome,
        members,
        rounds,
        duration_us: u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
        reason,
        cleanup_confirmed: None,
        exit_code: None,
    }
}

/// Removes the oldest batch files past [`KEPT_BATCHES`] (names sort by time).
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    if names.len() <= KEPT_BATCHES {
        return;
    }
    names.sort();
    for name in &names[..names.len() - KEPT_BATCHES] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}
