//! Destroy: kill everything in the sandbox's cgroups, wait for its anchor,
//! unmount the overlay, remove the cgroups, the upper and, last, the
//! sandbox's directory, so a crash half-way leaves the directory a sweep
//! finds. The same teardown undoes a start that failed half-way and
//! removes what a crashed owner left; it needs only the sandbox's id, so
//! it also removes an upper or cgroups left without a directory.

use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use rollpoint_snapshot::OverlayMounts;

use super::backend::LocalBackend;
use super::batch::{Phases, parallel};
use super::cgroups::SandboxCgroups;
use super::crash;
use super::mounts;
use crate::errors::Error;

impl LocalBackend {
    pub(super) fn destroy(&self, id: &str) -> Result<(), Error> {
        let _working = self.working();
        let live = self.lock().remove(id);
        match live {
            Some(l) => {
                // The owner's handle on the overlay goes first: with the
                // anchor's namespace gone, nothing holds it.
                drop(l.root);
                let root = self.sandbox_dir(id).join("root");
                self.teardown_checked(id, Some(l.anchor), &l.cgroups, &root)
            }
            None if self.sandbox_dir(id).exists() => self.teardown_stale(id),
            None => Err(Error::UnknownSandbox {
                sandbox: id.to_owned(),
            }),
        }
    }

    /// Destroys every sandbox this backend started. For shutdown.
    pub fn destroy_all(&self) -> Result<(), Error> {
        let ids: Vec<String> = self.lock().keys().cloned().collect();
        for id in ids {
            self.destroy(&id)?;
        }
        Ok(())
    }

    /// Best-effort removal of everything `start` may have made, used when
    /// start fails half-way.
    pub(super) fn teardown(
        &self,
        id: &str,
        anchor: Option<Child>,
        cgroups: &SandboxCgroups,
        root: &Path,
    ) {
        let _ = self.teardown_checked(id, anchor, cgroups, root);
    }

    fn teardown_checked(
        &self,
        id: &str,
        anchor: Option<Child>,
        cgroups: &SandboxCgroups,
        root: &Path,
    ) -> Result<(), Error> {
        let mut phases = Phases::new();
        stop(id, anchor, cgroups, root, &mut phases)?;
        self.remove_sandbox(id, None, phases)
    }

    /// The second half: the upper deleted (checked against `seen`, the overlay
    /// mounts a batch read once, or read now), then the sandbox's directory.
    fn remove_sandbox(
        &self,
        id: &str,
        seen: Option<&OverlayMounts>,
        mut phases: Phases,
    ) -> Result<(), Error> {
        let destroyed = match seen {
            Some(mounts) => self.store.destroy_upper_seen(id, mounts),
            None => self.store.destroy_upper(id),
        };
        match destroyed {
            Ok(()) => {}
            Err(rollpoint_snapshot::Error::NoUpper { .. }) => {}
            Err(source) => {
                return Err(Error::Store {
                    sandbox: id.to_owned(),
                    source,
                });
            }
        }
        phases.mark("upper");
        crash::point("teardown: upper destroyed");
        let sbdir = self.sandbox_dir(id);
        self.keep_output(id, &sbdir);
        match std::fs::remove_dir_all(&sbdir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Setup {
                    sandbox: id.to_owned(),
                    what: format!("remove {}", sbdir.display()),
                    source,
                });
            }
        }
        phases.mark("directory");
        tracing::debug!(sandbox = id, phases = %phases, "sandbox torn down");
        Ok(())
    }

    /// Tears down a sandbox this process did not start (from its record).
    pub(super) fn teardown_stale(&self, id: &str) -> Result<(), Error> {
        let cgroups = SandboxCgroups::locate(&self.cgroup_name(id));
        let root = self.sandbox_dir(id).join("root");
        self.teardown_checked(id, None, &cgroups, &root)
    }

    /// Tears down many sandboxes this process did not start, as a sweep does
    /// (nothing starts meanwhile): all stopped and unmounted first, then the
    /// overlay mounts read once and every upper checked against that read, so
    /// the cost per sandbox does not grow with the number of sandboxes
    /// mounted. Each on a bounded pool (its steps mostly wait on the kernel);
    /// the first error is returned after every sandbox was tried.
    pub(super) fn teardown_stale_all(&self, ids: &[String]) -> Result<(), Error> {
        let all: Vec<(&String, SandboxCgroups)> = ids
            .iter()
            .map(|id| (id, SandboxCgroups::locate(&self.cgroup_name(id))))
            .collect();
        // Every sandbox is signalled before any is waited on: the kernel ends
        // them all at once rather than one pool's worth at a time.
        for (_, cgroups) in &all {
            cgroups.start_kill();
        }
        let stopped = parallel(&all, |(id, cgroups): &(&String, SandboxCgroups)| {
            let root = self.sandbox_dir(id).join("root");
            let mut phases = Phases::new();
            stop(id, None, cgroups, &root, &mut phases).map(|()| ((*id).clone(), phases))
        });
        let mut first_error = None;
        let mut removable = Vec::new();
        for result in stopped {
            match result {
                Ok(stopped) => removable.push(stopped),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let seen = OverlayMounts::read().map_err(|source| Error::Store {
            sandbox: "-".into(),
            source,
        })?;
        let removed = parallel(&removable, |(id, phases): &(String, Phases)| {
            let mut phases = phases.clone();
            phases.mark("batch");
            self.remove_sandbox(id, Some(&seen), phases)
        });
        for result in removed {
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Moves each launch's output log out of the sandbox's directory before it is removed, to
    /// `<backend>/output/<sandbox>/<launch>.log`, so `rollpoint logs` and the report still have
    /// it. A rename moves a link the sandbox may have planted, never what it points at; a log
    /// that cannot be kept is said and left to go with the sandbox.
    fn keep_output(&self, id: &str, sbdir: &Path) {
        let launches = sbdir
            .join("control")
            .join(rollpoint_proto::anchor::LAUNCHES_DIR);
        let Ok(entries) = std::fs::read_dir(&launches) else {
            return;
        };
        let kept = self.output_dir(id);
        for entry in entries.flatten() {
            let log = entry.path().join(rollpoint_proto::anchor::LAUNCH_OUTPUT);
            if !std::fs::symlink_metadata(&log).is_ok_and(|m| m.is_file()) {
                continue;
            }
            let Some(launch) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let to = kept.join(format!("{launch}.log"));
            let moved = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&kept)
                .and_then(|()| std::fs::rename(&log, &to));
            if let Err(e) = moved {
                tracing::warn!(sandbox = %id, from = %log.display(), to = %to.display(), error = %e,
                "a launch's output was not kept");
            }
        }
    }
}

/// The first half of a teardown: the sandbox's processes ended, its
/// overlay unmounted and its cgroups removed.
fn stop(
    id: &str,
    anchor: Option<Child>,
    cgroups: &SandboxCgroups,
    root: &Path,
    phases: &mut Phases,
) -> Result<(), Error> {
    // The anchor is asked to end first: it forwards the stop to the
    // sandbox's PID 1, whose exit takes the whole namespace with it, and
    // reaps PID 1 before it exits itself. Killing the cgroups first could
    // end the anchor before PID 1 and hand PID 1 to the host's init as a
    // zombie; whoever starts a sandbox reaps it.
    let anchor = anchor.and_then(|mut a| (!ended_on_request(&mut a)).then_some(a));
    phases.mark("anchor");
    let killed = cgroups.kill(id);
    if let Some(mut anchor) = anchor {
        if killed.is_err() {
            let _ = anchor.kill();
        }
        let _ = anchor.wait();
    }
    killed?;
    phases.mark("kill");
    crash::point("teardown: killed");
    mounts::unmount(id, root)?;
    phases.mark("unmount");
    crash::point("teardown: unmounted");
    cgroups.remove(id)?;
    phases.mark("cgroups");
    crash::point("teardown: cgroups removed");
    Ok(())
}

/// How long an anchor may take to end its sandbox when asked.
const ANCHOR_STOP: Duration = Duration::from_secs(2);

/// Asks `anchor` to end its sandbox (SIGTERM) and waits up to
/// [`ANCHOR_STOP`]; true when it exited (and was reaped). A frozen sandbox
/// cannot answer: the caller then kills its cgroups.
fn ended_on_request(anchor: &mut Child) -> bool {
    let Ok(pid) = i32::try_from(anchor.id()) else {
        return false;
    };
    if nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGTERM).is_err() {
        return anchor.try_wait().is_ok_and(|s| s.is_some());
    }
    let deadline = Instant::now() + ANCHOR_STOP;
    let mut pause = Duration::from_millis(1);
    while Instant::now() < deadline {
        match anchor.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) => {}
            Err(_) => return false,
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    false
}
