//! Snapshot and fork times of the btrfs store (loop image here), the copy
//! store (a fsynced tar archive per snapshot) and plain `tar` of the upper
//! (c into an archive, x into a fresh directory; the baseline without sync,
//! and once more with the archive fsynced) for diffs of 1, 1,000 and 10,000
//! files of 4 KiB. Needs root.
//!
//! A second case times the copy store's snapshot and fork of uppers of
//! 5,000, 20,000 and 50,000 files of 4 KiB against `cp -a` of the same
//! tree in the same run, to show how both grow.
//!
//! Run: `cargo bench -p rollpoint-snapshot --bench snapshot` (both cases),
//! or with `-- stores` or `-- copy-vs-cp` for one.

#![expect(clippy::unwrap_used, reason = "benchmark")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rollpoint_snapshot::{BtrfsStore, CopyStore, ImageOptions, SnapshotStore, syncfs};

const SIZES: [usize; 3] = [1, 1_000, 10_000];
const ROUNDS: usize = 7;
const FILE_BYTES: usize = 4096;

struct Row {
    files: usize,
    method: &'static str,
    snapshot: Vec<Duration>,
    fork: Vec<Duration>,
}

fn fill(upper: &Path, files: usize) {
    let block = vec![b'r'; FILE_BYTES];
    for i in 0..files {
        let dir = upper.join(format!("d{}", i / 1000));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i}")), &block).unwrap();
    }
    syncfs(upper).unwrap();
}

/// One way of snapshotting and forking an upper holding a given diff.
trait Method {
    fn name(&self) -> &'static str;
    /// Flushes the upper, as the owner does before a snapshot (untimed).
    fn settle(&self);
    fn snapshot(&self, round: usize);
    fn fork(&self, round: usize);
    /// Removes this round's snapshot and fork (untimed).
    fn cleanup(&self, round: usize);
}

struct Store<'a> {
    name: &'static str,
    store: &'a dyn SnapshotStore,
    base: String,
    upper: PathBuf,
}

impl<'a> Store<'a> {
    fn new(name: &'static str, store: &'a dyn SnapshotStore, files: usize) -> Self {
        let base = format!("base{files}");
        let upper = store.create_upper(&base).unwrap().upper;
        fill(&upper, files);
        Self {
            name,
            store,
            base,
            upper,
        }
    }
}

impl Method for Store<'_> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn settle(&self) {
        syncfs(&self.upper).unwrap();
    }
    fn snapshot(&self, round: usize) {
        self.store
            .snapshot(&self.base, &format!("{}-snap{round}", self.base))
            .unwrap();
    }
    fn fork(&self, round: usize) {
        let snap = format!("{}-snap{round}", self.base);
        self.store
            .fork(&snap, &format!("{}-fork{round}", self.base))
            .unwrap();
    }
    fn cleanup(&self, round: usize) {
        self.store
            .destroy_upper(&format!("{}-fork{round}", self.base))
            .unwrap();
        self.store
            .delete_snapshot(&format!("{}-snap{round}", self.base))
            .unwrap();
    }
}

impl Drop for Store<'_> {
    fn drop(&mut self) {
        let _ = self.store.destroy_upper(&self.base);
    }
}

/// The baseline: `tar -cf` of the upper, then `tar -xpf` into a fresh dir;
/// `durable` also fsyncs the archive, as a store must.
struct Tar {
    dir: PathBuf,
    upper: PathBuf,
    durable: bool,
}

impl Tar {
    fn new(scratch: &Path, files: usize, durable: bool) -> Self {
        let dir = scratch.join(format!("tar{files}-{durable}"));
        let upper = dir.join("upper");
        std::fs::create_dir_all(&upper).unwrap();
        fill(&upper, files);
        Self {
            dir,
            upper,
            durable,
        }
    }

    fn tar(&self, args: &[&str]) {
        let status = Command::new("tar").args(args).status().unwrap();
        assert!(status.success(), "tar {args:?}");
    }

    fn archive(&self, round: usize) -> String {
        self.dir
            .join(format!("snap{round}.tar"))
            .display()
            .to_string()
    }

    fn fresh(&self, round: usize) -> PathBuf {
        self.dir.join(format!("fork{round}"))
    }
}

impl Method for Tar {
    fn name(&self) -> &'static str {
        if self.durable { "tar + fsync" } else { "tar" }
    }
    fn settle(&self) {
        syncfs(&self.upper).unwrap();
    }
    fn snapshot(&self, round: usize) {
        let upper = self.upper.display().to_string();
        self.tar(&["-C", &upper, "-cf", &self.archive(round), "."]);
        if self.durable {
            std::fs::File::open(self.archive(round))
                .unwrap()
                .sync_all()
                .unwrap();
        }
    }
    fn fork(&self, round: usize) {
        let fresh = self.fresh(round);
        std::fs::create_dir(&fresh).unwrap();
        let fresh = fresh.display().to_string();
        self.tar(&["-C", &fresh, "-xpf", &self.archive(round)]);
    }
    fn cleanup(&self, round: usize) {
        std::fs::remove_dir_all(self.fresh(round)).unwrap();
        std::fs::remove_file(self.archive(round)).unwrap();
    }
}

impl Drop for Tar {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the methods' rounds interleaved, so disk noise hits all alike.
fn measure(files: usize, methods: &[&dyn Method]) -> Vec<Row> {
    let mut rows: Vec<Row> = methods
        .iter()
        .map(|m| Row {
            files,
            method: m.name(),
            snapshot: Vec::new(),
            fork: Vec::new(),
        })
        .collect();
    for round in 0..ROUNDS {
        for (method, row) in methods.iter().zip(&mut rows) {
            method.settle();
            let start = Instant::now();
            method.snapshot(round);
            row.snapshot.push(start.elapsed());
            let start = Instant::now();
            method.fork(round);
            row.fork.push(start.elapsed());
            method.cleanup(round);
        }
    }
    rows
}

/// btrfs fork plus the overlay mount that makes it usable, as a restore does.
fn fork_and_mount(scratch: &Path, store: &dyn SnapshotStore, files: usize) -> Vec<Duration> {
    let lower = scratch.join("lower");
    let merged = scratch.join("merged");
    std::fs::create_dir_all(&lower).unwrap();
    std::fs::create_dir_all(&merged).unwrap();
    let base = Store::new("btrfs (image)", store, files);
    let mut samples = Vec::new();
    for round in 0..ROUNDS {
        base.settle();
        base.snapshot(round);
        let snap = format!("{}-snap{round}", base.base);
        let fork = format!("{}-fork{round}", base.base);
        let start = Instant::now();
        let dirs = store.fork(&snap, &fork).unwrap();
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            dirs.upper.display(),
            dirs.work.display()
        );
        let status = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &options])
            .arg(&merged)
            .status()
            .unwrap();
        samples.push(start.elapsed());
        assert!(status.success(), "overlay mount at {}", merged.display());
        let status = Command::new("umount").arg(&merged).status().unwrap();
        assert!(status.success(), "umount {}", merged.display());
        base.cleanup(round);
    }
    samples
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn stats(samples: &[Duration]) -> (Duration, Duration, Duration) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    (
        sorted[sorted.len() / 2],
        sorted[0],
        sorted[sorted.len() - 1],
    )
}

/// Upper sizes of the copy store against `cp -a`.
const CP_SIZES: [usize; 3] = [5_000, 20_000, 50_000];
const CP_ROUNDS: usize = 5;

/// The copy store's snapshot and fork against `cp -a` of the same upper,
/// rounds interleaved; prints a table of medians, extremes and ratios.
fn copy_against_cp(scratch: &Path) {
    let copy = CopyStore::open(&scratch.join("copy-vs-cp")).unwrap();
    println!(
        "copy store against cp -a: {CP_ROUNDS} rounds per row, files of {FILE_BYTES} B in directories of 1,000; ratio = median / cp -a median"
    );
    println!("| files | what | median ms | min | max | vs cp -a |");
    println!("|---:|---|---:|---:|---:|---:|");
    for files in CP_SIZES {
        let store = Store::new("copy", &copy, files);
        let mut snapshot = Vec::new();
        let mut fork = Vec::new();
        let mut cp = Vec::new();
        for round in 0..CP_ROUNDS {
            store.settle();
            let start = Instant::now();
            store.snapshot(round);
            snapshot.push(start.elapsed());
            let start = Instant::now();
            store.fork(round);
            fork.push(start.elapsed());
            store.cleanup(round);

            let target = scratch.join(format!("cp{files}-{round}"));
            let start = Instant::now();
            let status = Command::new("cp")
                .arg("-a")
                .arg(&store.upper)
                .arg(&target)
                .status()
                .unwrap();
            cp.push(start.elapsed());
            assert!(status.success(), "cp -a {}", store.upper.display());
            std::fs::remove_dir_all(&target).unwrap();
        }
        let baseline = ms(stats(&cp).0);
        for (what, samples) in [
            ("cp -a", &cp),
            ("copy store snapshot", &snapshot),
            ("copy store fork", &fork),
        ] {
            let (med, min, max) = stats(samples);
            println!(
                "| {files} | {what} | {:.1} | {:.1} | {:.1} | {:.2}x |",
                ms(med),
                ms(min),
                ms(max),
                ms(med) / baseline
            );
        }
    }
}

fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |case: &str| only.is_empty() || only.iter().any(|a| a == case);
    if wants("copy-vs-cp") {
        copy_against_cp(scratch.path());
    }
    if !wants("stores") {
        return;
    }
    let mut btrfs = BtrfsStore::open(
        &scratch.path().join("btrfs"),
        &ImageOptions {
            size_bytes: 8 << 30,
        },
    )
    .expect("btrfs store opens (needs root, btrfs-progs and a loop device)");
    let copy = CopyStore::open(&scratch.path().join("copy")).unwrap();
    let mut rows = Vec::new();
    for files in SIZES {
        let tar = Tar::new(scratch.path(), files, false);
        let durable = Tar::new(scratch.path(), files, true);
        let on_btrfs = Store::new("btrfs (image)", &btrfs, files);
        let copied = Store::new("copy", &copy, files);
        rows.extend(measure(files, &[&tar, &durable, &on_btrfs, &copied]));
    }
    let mounted = fork_and_mount(scratch.path(), &btrfs, 10_000);
    btrfs.close().unwrap();

    println!(
        "snapshot stores: {ROUNDS} rounds per row, files of {FILE_BYTES} B; ratio = median / tar median"
    );
    println!(
        "| files | store | snapshot median ms | min | max | vs tar | fork median ms | min | max | vs tar |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &rows {
        let baseline = rows
            .iter()
            .find(|r| r.files == row.files && r.method == "tar")
            .unwrap();
        let (s_med, s_min, s_max) = stats(&row.snapshot);
        let (f_med, f_min, f_max) = stats(&row.fork);
        let s_ratio = ms(s_med) / ms(stats(&baseline.snapshot).0);
        let f_ratio = ms(f_med) / ms(stats(&baseline.fork).0);
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2}x | {:.1} | {:.1} | {:.1} | {:.2}x |",
            row.files,
            row.method,
            ms(s_med),
            ms(s_min),
            ms(s_max),
            s_ratio,
            ms(f_med),
            ms(f_min),
            ms(f_max),
            f_ratio
        );
    }
    let (med, min, max) = stats(&mounted);
    println!(
        "btrfs (image) fork + overlay mount, 10000 files: median {:.1} ms, min {:.1}, max {:.1}",
        ms(med),
        ms(min),
        ms(max)
    );
}
