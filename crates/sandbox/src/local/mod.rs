//! The local backend: sandboxes on this machine with no container engine.
//!
//! Each sandbox is an overlay of its own upper (kept by a snapshot store)
//! over a read-only base, entered by `rollpoint-supervisor anchor` in fresh
//! mount, uts, ipc and pid namespaces and a cgroup of its own. The owner
//! makes the overlay (the new mount API) and leaves it attached nowhere; the anchor
//! attaches it at `sandboxes/<id>/root` in the sandbox's mount namespace
//! alone, so the owner's mount table, which every new sandbox's namespace
//! starts as a copy of, holds none of them: a sandbox starts as fast with
//! four thousand alive as with ten. The owner keeps the overlay's
//! descriptor and moves files through it, on exactly what the sandbox
//! sees; every in-sandbox path is the same in a fork. Layout of the
//! directory:
//!
//! ```text
//! sandboxes/<id>/              made first: the sweep finds a sandbox by it
//! sandboxes/<id>/sandbox.json   record (spec, layers, owner)
//! sandboxes/<id>/root/          where the anchor attaches the overlay (empty on the host)
//! sandboxes/<id>/control/       /run/rollpoint inside: anchor.sock, launches/,
//!                               hosts, network.json (what the relay carried)
//! sandboxes/<id>/anchor.log     the anchor's own output
//! snapshots/<snapshot>.json     what a fork of that snapshot is made from
//! store/                        the snapshot store (uppers and snapshots)
//! bases/<sha256>/               rootfs tarballs, unpacked once
//! images/                       the image cache, unless the options name a shared one
//! index.json                    which checkpoint names which snapshots
//! receipts/                     the receipts of batched pauses, one file a batch
//! ```
//!
//! Every step is ordered so a crash between any two leaves only what a
//! sweep finds (`crash` names the steps; docs/design/local-sandboxes.md).
//!
//! One verb per file: `create` (and the start a fork shares), `fork`,
//! `exec` (and launch), `pause` (and continue: a batch of launches),
//! `transfer` (upload, download), `snapshot` (and delete), `destroy` (and
//! teardown), `list`, `sweep`, `usage`, `shell`, `travel` (a snapshot sent
//! and received, and the stream's format). Each verb file is one `impl LocalBackend` block: its
//! methods are the verb and the helpers that need the backend (helpers that
//! do not stay free functions there). A method serving a [`Backend`] verb
//! bears the trait method's name, and the trait impl here calls it as
//! `LocalBackend::name(self, ..)`, which always names the inherent method.
//! `backend` keeps the backend's state and shared helpers.

mod anchor;
mod backend;
mod base;
mod batch;
mod cgroups;
mod crash;
mod create;
mod destroy;
mod exec;
mod fork;
mod ids;
mod list;
mod mounts;
mod netns;
mod network;
mod pause;
mod record;
mod shell;
mod snapshot;
mod spawn;
mod sweep;
mod transfer;
mod travel;
mod usage;
mod user;

use std::path::Path;

use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};

use crate::{
    Backend, BackendListing, LaunchHandle, LaunchRef, SandboxInfo, SandboxSpec, SnapshotRef,
    errors::Error,
};
pub use backend::{LocalBackend, LocalOptions, OUTPUT_DIR, Tool};
pub use base::TOOLS_DIR;
pub use record::{SandboxRecord, SnapshotRecord};
pub use shell::Terminal;

impl Backend for LocalBackend {
    fn create(&self, id: &str, spec: &SandboxSpec) -> Result<SandboxInfo, Error> {
        LocalBackend::create(self, id, spec)
    }

    fn exec(&self, id: &str, req: &ExecRequest) -> Result<ExecOutput, Error> {
        LocalBackend::exec(self, id, req)
    }

    fn launch(&self, id: &str, req: &LaunchRequest) -> Result<LaunchHandle, Error> {
        LocalBackend::launch(self, id, req)
    }

    fn usage(&self, id: &str) -> Result<crate::ResourceUsage, Error> {
        LocalBackend::usage(self, id)
    }

    fn pause_launches(
        &self,
        launches: &[LaunchRef],
    ) -> Result<Vec<Option<rollpoint_proto::receipt::Receipt>>, Error> {
        LocalBackend::pause_launches(self, launches)
    }

    fn continue_launches(
        &self,
        launches: &[LaunchRef],
    ) -> Result<Vec<rollpoint_proto::receipt::Receipt>, Error> {
        LocalBackend::continue_launches(self, launches)
    }

    fn upload(&self, id: &str, path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
        LocalBackend::upload(self, id, path, bytes, mode)
    }

    fn download(&self, id: &str, path: &Path, limit: u64) -> Result<Vec<u8>, Error> {
        LocalBackend::download(self, id, path, limit)
    }

    fn fresh_dir(&self, id: &str, path: &Path) -> Result<(), Error> {
        LocalBackend::fresh_dir(self, id, path)
    }

    fn snapshot(&self, id: &str, snapshot: &str, checkpoint: &str) -> Result<SnapshotRef, Error> {
        LocalBackend::snapshot(self, id, snapshot, checkpoint)
    }

    fn snapshot_all(
        &self,
        items: &[(String, String)],
        checkpoint: &str,
    ) -> Result<Vec<SnapshotRef>, Error> {
        LocalBackend::snapshot_all(self, items, checkpoint)
    }

    fn fork(&self, snapshot: &str, new_id: &str) -> Result<SandboxInfo, Error> {
        LocalBackend::fork(self, snapshot, new_id)
    }

    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        LocalBackend::delete_snapshot(self, snapshot)
    }

    fn destroy(&self, id: &str) -> Result<(), Error> {
        LocalBackend::destroy(self, id)
    }

    fn list(&self) -> Result<BackendListing, Error> {
        LocalBackend::list(self)
    }

    fn snapshot_format(&self) -> Option<&'static str> {
        LocalBackend::snapshot_format(self)
    }

    fn send_snapshot(
        &self,
        snapshot: &str,
        parent: Option<&str>,
        out: &Path,
    ) -> Result<(String, SandboxSpec), Error> {
        LocalBackend::send_snapshot(self, snapshot, parent, out)
    }

    fn receive_snapshot(
        &self,
        snapshot: &str,
        sandbox: &str,
        spec: &SandboxSpec,
        checkpoint: &str,
        stream: &Path,
    ) -> Result<(), Error> {
        LocalBackend::receive_snapshot(self, snapshot, sandbox, spec, checkpoint, stream)
    }

    fn has_snapshot(&self, snapshot: &str) -> bool {
        LocalBackend::has_snapshot(self, snapshot)
    }
}
