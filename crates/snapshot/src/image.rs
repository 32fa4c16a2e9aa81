//! The sparse btrfs image a [`crate::BtrfsStore`] loop-mounts when its
//! directory is not on btrfs: created, formatted and mounted on open;
//! unmounted, its loop device detached and the file removed on close.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::command::run;
use crate::errors::Error;
use crate::fsutil;

/// File name of the image inside the store directory.
const IMAGE_FILE: &str = "btrfs.img";
/// Mount point of the image inside the store directory.
const MOUNT_DIR: &str = "btrfs";
/// How long to wait for the kernel's autoclear to free the loop device.
const DETACH_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct Image {
    pub(crate) file: PathBuf,
    pub(crate) mount: PathBuf,
}

impl Image {
    /// Mounts the image under `dir`, creating and formatting it when it does
    /// not exist. An image already mounted there (left by a crashed owner) is
    /// adopted, so its snapshots can still be swept.
    pub(crate) fn open(dir: &Path, size_bytes: u64) -> Result<Self, Error> {
        let image = Self {
            file: dir.join(IMAGE_FILE),
            mount: dir.join(MOUNT_DIR),
        };
        if fsutil::is_mount_point(&image.mount)? {
            return Ok(image);
        }
        let created = !image.file.exists();
        let result = image.format_and_mount(created, size_bytes);
        if let Err(e) = result {
            // Leave nothing behind from a failed start.
            let _ = std::fs::remove_dir(&image.mount);
            if created {
                let _ = std::fs::remove_file(&image.file);
            }
            return Err(e);
        }
        Ok(image)
    }

    fn format_and_mount(&self, create: bool, size_bytes: u64) -> Result<(), Error> {
        if create {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&self.file)
                .map_err(Error::io("create image", &self.file))?;
            // set_len on a new file makes it sparse: no blocks are written.
            file.set_len(size_bytes)
                .map_err(Error::io("size image", &self.file))?;
            run(
                "mkfs.btrfs",
                [std::ffi::OsStr::new("-q"), self.file.as_os_str()],
            )?;
        }
        match std::fs::create_dir(&self.mount) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(Error::io("create directory", &self.mount)(e));
            }
            _ => {}
        }
        run(
            "mount",
            [
                std::ffi::OsStr::new("-t"),
                "btrfs".as_ref(),
                "-o".as_ref(),
                "loop".as_ref(),
                self.file.as_os_str(),
                self.mount.as_os_str(),
            ],
        )?;
        Ok(())
    }

    /// Unmounts, detaches the loop device and removes the image and its
    /// mount point.
    /// Unmounts the image and frees its loop device; deletes the file too
    /// when `delete` (the store holds nothing worth keeping).
    pub(crate) fn remove(&self, delete: bool) -> Result<(), Error> {
        if fsutil::is_mount_point(&self.mount)? {
            run("umount", [self.mount.as_os_str()])?;
        }
        // `mount -o loop` sets autoclear, so the kernel frees the device once
        // the last user is gone; wait for that, then detach by hand if not.
        let deadline = Instant::now() + DETACH_WAIT;
        loop {
            let devices = self.loop_devices()?;
            if devices.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                for device in devices {
                    run("losetup", ["-d", device.as_str()])?;
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        match std::fs::remove_dir(&self.mount) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io("remove", &self.mount)(e));
            }
            _ => {}
        }
        if !delete {
            return Ok(());
        }
        match std::fs::remove_file(&self.file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("remove", &self.file)(e))
            }
            _ => Ok(()),
        }
    }

    /// Loop devices backed by the image file (`losetup -j`).
    pub(crate) fn loop_devices(&self) -> Result<Vec<String>, Error> {
        if !self.file.exists() {
            return Ok(Vec::new());
        }
        let out = run(
            "losetup",
            [std::ffi::OsStr::new("-j"), self.file.as_os_str()],
        )?;
        Ok(out
            .lines()
            .filter_map(|line| line.split(':').next())
            .filter(|dev| dev.starts_with("/dev/"))
            .map(str::to_owned)
            .collect())
    }
}
