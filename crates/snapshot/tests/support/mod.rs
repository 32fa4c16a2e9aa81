//! Shared fixtures for the root tests: a store of either kind in a fresh
//! temporary directory, real overlay mounts over a small base, and guards
//! that unmount and close everything even when an assertion fails.

#![allow(dead_code, reason = "each test binary uses a subset")]
#![expect(clippy::unwrap_used, reason = "test fixtures")]

pub mod hostile;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rollpoint_snapshot::{BtrfsStore, CopyStore, ImageOptions, SnapshotStore, UpperDirs};

#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Btrfs,
    Copy,
}

/// Overlay mounts made by a test; unmounted in reverse order on drop.
#[derive(Debug, Default)]
pub struct Mounts(Vec<PathBuf>);

impl Mounts {
    /// Mounts an overlay of `lower` with `dirs` at `merged` (created).
    pub fn overlay(&mut self, lower: &Path, dirs: &UpperDirs, merged: &Path) {
        std::fs::create_dir_all(merged).unwrap();
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            dirs.upper.display(),
            dirs.work.display()
        );
        let out = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &options])
            .arg(merged)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "overlay mount at {} failed: {}",
            merged.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        self.0.push(merged.to_owned());
    }

    pub fn unmount(&mut self, merged: &Path) {
        let status = Command::new("umount")
            .arg(merged)
            .status()
            .expect("run umount");
        assert!(status.success(), "umount {} failed", merged.display());
        self.0.retain(|m| m != merged);
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for merged in self.0.drain(..).rev() {
            let ok = Command::new("umount")
                .arg(&merged)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&merged).status();
            }
        }
    }
}

/// A store with its mounts; field order makes the mounts go first on drop,
/// then the store (which unmounts its image), then the directory.
pub struct Fixture {
    pub mounts: Mounts,
    pub store: Box<dyn SnapshotStore>,
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new(kind: Kind) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("store");
        let store: Box<dyn SnapshotStore> = match kind {
            Kind::Btrfs => Box::new(
                BtrfsStore::open(
                    &store_dir,
                    &ImageOptions {
                        size_bytes: 1 << 30,
                    },
                )
                .expect("btrfs store must open: needs root, btrfs-progs and loop devices"),
            ),
            Kind::Copy => Box::new(CopyStore::open(&store_dir).expect("copy store opens")),
        };
        Self {
            mounts: Mounts::default(),
            store,
            dir,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Sets a user xattr with python3's os module (no setfattr needed).
pub fn set_user_xattr(path: &Path, name: &str, value: &str) {
    let status = Command::new("python3")
        .args([
            "-c",
            "import os,sys; os.setxattr(sys.argv[1], sys.argv[2], sys.argv[3].encode())",
        ])
        .arg(path)
        .args([name, value])
        .status()
        .expect("run python3");
    assert!(status.success(), "setxattr {name} on {}", path.display());
}

pub fn get_xattr(path: &Path, name: &str) -> Option<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import os,sys\ntry: sys.stdout.write(os.getxattr(sys.argv[1], sys.argv[2], follow_symlinks=False).decode())\nexcept OSError: sys.exit(3)",
        ])
        .arg(path)
        .arg(name)
        .stderr(Stdio::inherit())
        .output()
        .expect("run python3");
    match out.status.code() {
        Some(0) => Some(String::from_utf8(out.stdout).unwrap()),
        Some(3) => None,
        other => panic!("getxattr {name} on {}: exit {other:?}", path.display()),
    }
}

/// True when /proc/mounts lists `path` as a mount point.
pub fn mounted(path: &Path) -> bool {
    rollpoint_snapshot::is_mount_point(path).unwrap()
}

/// `losetup -a` output lines that mention `file`.
pub fn loop_devices_for(file: &Path) -> Vec<String> {
    let out = Command::new("losetup")
        .arg("-a")
        .output()
        .expect("run losetup");
    assert!(out.status.success());
    let name = file.to_string_lossy().into_owned();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&name))
        .map(str::to_owned)
        .collect()
}
