//! Root tests over real overlay mounts, run for both stores: a fork shows
//! exactly what the snapshot held, SQLite in WAL mode survives, the btrfs
//! image leaves nothing behind, and sweeps delete exactly the unnamed
//! snapshots.

#![expect(clippy::unwrap_used, reason = "tests")]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rollpoint_snapshot::{
    BtrfsStore, Error, ImageOptions, SnapshotContent, SnapshotIndex, StoreChoice, StoreKind,
    StoreOptions, sweep, syncfs,
};
use support::{Fixture, Kind, get_xattr, hostile, loop_devices_for, mounted, set_user_xattr};

/// A small base: a file to keep, a file to delete, a directory to replace.
fn make_lower(lower: &Path) {
    std::fs::create_dir_all(lower.join("opaque")).unwrap();
    std::fs::write(lower.join("keep"), "kept\n").unwrap();
    std::fs::write(lower.join("gone"), "deleted in the sandbox\n").unwrap();
    std::fs::write(lower.join("opaque/old"), "hidden by the opaque dir\n").unwrap();
}

/// The snapshot's frozen upper as a directory: the btrfs snapshot itself,
/// or the copy store's archive unpacked into `scratch` by GNU tar, so the
/// check is on what the archive holds.
fn frozen_tree(content: &SnapshotContent, scratch: &Path) -> PathBuf {
    match content {
        SnapshotContent::Tree(dir) => dir.clone(),
        SnapshotContent::Archive(archive) => {
            let mode = std::fs::metadata(archive).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "the archive is mode 0600");
            std::fs::create_dir_all(scratch).unwrap();
            let out = Command::new("tar")
                .args(["--xattrs", "--xattrs-include=*", "-xpf"])
                .arg(archive)
                .arg("-C")
                .arg(scratch)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "tar -x {}: {}",
                archive.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            scratch.to_owned()
        }
    }
}

fn fork_sees_exactly_the_snapshot(kind: Kind) {
    let mut fx = Fixture::new(kind);
    let lower = fx.path("lower");
    make_lower(&lower);

    let dirs = fx.store.create_upper("sb1").unwrap();
    let merged = fx.path("merged1");
    fx.mounts.overlay(&lower, &dirs, &merged);

    let a = merged.join("a.txt");
    std::fs::write(&a, "before\n").unwrap();
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o640)).unwrap();
    set_user_xattr(&a, "user.test", "v1");
    std::os::unix::fs::symlink("a.txt", merged.join("link")).unwrap();
    std::fs::hard_link(&a, merged.join("hl")).unwrap();
    std::fs::remove_file(merged.join("gone")).unwrap();
    std::fs::remove_dir_all(merged.join("opaque")).unwrap();
    std::fs::create_dir(merged.join("opaque")).unwrap();
    std::fs::write(merged.join("opaque/new"), "new\n").unwrap();
    syncfs(&merged).unwrap();

    let info = fx.store.snapshot("sb1", "snap1").unwrap();
    assert_eq!(info.sandbox, "sb1");
    let frozen = frozen_tree(&info.content, &fx.path("frozen"));
    let whiteout = std::fs::symlink_metadata(frozen.join("gone")).unwrap();
    assert!(
        whiteout.file_type().is_char_device() && whiteout.rdev() == 0,
        "snapshot keeps the whiteout for 'gone' as a 0:0 char device"
    );
    assert_eq!(
        get_xattr(&frozen.join("opaque"), "trusted.overlay.opaque").as_deref(),
        Some("y"),
        "snapshot keeps the opaque marker"
    );

    // Changes after the snapshot must not reach the fork.
    std::fs::write(merged.join("late.txt"), "after\n").unwrap();
    std::fs::write(&a, "after\n").unwrap();
    std::fs::remove_file(merged.join("keep")).unwrap();

    let forked = fx.store.fork("snap1", "sb2").unwrap();
    assert_eq!(
        std::fs::read_dir(&forked.work).unwrap().count(),
        0,
        "fork gets an empty work dir"
    );
    let merged2 = fx.path("merged2");
    fx.mounts.overlay(&lower, &forked, &merged2);

    let a2 = merged2.join("a.txt");
    assert_eq!(std::fs::read_to_string(&a2).unwrap(), "before\n");
    let meta = std::fs::metadata(&a2).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o640);
    assert_eq!(get_xattr(&a2, "user.test").as_deref(), Some("v1"));
    assert_eq!(
        std::fs::read_link(merged2.join("link")).unwrap(),
        Path::new("a.txt")
    );
    let hl = std::fs::metadata(merged2.join("hl")).unwrap();
    assert_eq!(
        hl.ino(),
        meta.ino(),
        "hard link shares the inode in the fork"
    );
    assert_eq!(meta.nlink(), 2);
    assert!(
        !merged2.join("late.txt").exists(),
        "written after the snapshot"
    );
    assert!(
        !merged2.join("gone").exists(),
        "deleted before the snapshot"
    );
    assert_eq!(
        std::fs::read_to_string(merged2.join("keep")).unwrap(),
        "kept\n"
    );
    assert!(
        !merged2.join("opaque/old").exists(),
        "opaque dir stays opaque"
    );
    assert_eq!(
        std::fs::read_to_string(merged2.join("opaque/new")).unwrap(),
        "new\n"
    );
    // The original sandbox still has its own later state.
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "after\n");
    assert!(merged.join("late.txt").exists());
    assert!(!merged.join("keep").exists());

    // Writes in the fork stay in the fork.
    std::fs::write(merged2.join("fork-only"), "x").unwrap();
    assert!(!merged.join("fork-only").exists());

    let listing = fx.store.list().unwrap();
    assert_eq!(listing.uppers, ["sb1", "sb2"]);
    assert_eq!(listing.snapshots, ["snap1"]);

    let err = fx.store.destroy_upper("sb2").unwrap_err();
    assert!(matches!(err, Error::UpperMounted { .. }), "{err}");
    assert!(err.to_string().contains("sandbox sb2"), "{err}");
    fx.mounts.unmount(&merged2);
    fx.mounts.unmount(&merged);
    fx.store.destroy_upper("sb2").unwrap();
    fx.store.destroy_upper("sb1").unwrap();
    fx.store.delete_snapshot("snap1").unwrap();
    assert_eq!(fx.store.list().unwrap(), Default::default());
}

#[test]
fn root_fork_sees_exactly_the_snapshot_btrfs() {
    fork_sees_exactly_the_snapshot(Kind::Btrfs);
}

#[test]
fn root_fork_sees_exactly_the_snapshot_copy() {
    fork_sees_exactly_the_snapshot(Kind::Copy);
}

/// Runs SQL lines through python3's sqlite3 module, one statement a line.
/// Lines starting with `? ` are queries: their rows are printed, so the
/// caller also learns that everything before them has run.
const SQL_DRIVER: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
for line in sys.stdin:
    if line.startswith("? "):
        for row in con.execute(line[2:]):
            print("|".join(str(c) for c in row), flush=True)
    else:
        con.execute(line).fetchall()
"#;

struct SqlProcess {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl SqlProcess {
    fn start(db: &Path) -> Self {
        let mut child = Command::new("python3")
            .args(["-c", SQL_DRIVER])
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with sqlite3 runs");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one statement and returns its first output line, if it prints.
    fn query(&mut self, sql: &str) -> String {
        writeln!(self.stdin, "? {sql}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_owned()
    }

    fn exec(&mut self, sql: &str) {
        writeln!(self.stdin, "{sql}").unwrap();
    }
}

impl Drop for SqlProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sqlite_wal_survives(kind: Kind) {
    let mut fx = Fixture::new(kind);
    let lower = fx.path("lower");
    make_lower(&lower);
    let dirs = fx.store.create_upper("db1").unwrap();
    let merged = fx.path("merged1");
    fx.mounts.overlay(&lower, &dirs, &merged);
    let db = merged.join("state.db");

    let mut writer = SqlProcess::start(&db);
    assert_eq!(writer.query("PRAGMA journal_mode=WAL;"), "wal");
    // No automatic checkpoints: committed rows stay in the -wal file, so
    // the snapshot must carry db, -wal and -shm together.
    writer.exec("PRAGMA wal_autocheckpoint=0;");
    writer.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);");
    for i in 0..500 {
        writer.exec(&format!(
            "INSERT INTO t (body) VALUES ('row {i} {}');",
            "x".repeat(200)
        ));
    }
    // An open transaction at snapshot time, as a frozen harness would have.
    writer.exec("BEGIN;");
    writer.exec("INSERT INTO t (body) VALUES ('uncommitted');");
    assert_eq!(writer.query("SELECT count(*) FROM t;"), "501");
    assert!(
        std::fs::metadata(merged.join("state.db-wal"))
            .unwrap()
            .len()
            > 0,
        "the WAL holds the committed rows"
    );
    syncfs(&merged).unwrap();
    fx.store.snapshot("db1", "dbsnap").unwrap();

    writer.exec("COMMIT;");
    writer.exec("INSERT INTO t (body) VALUES ('after the snapshot');");
    assert_eq!(writer.query("SELECT count(*) FROM t;"), "502");
    drop(writer);

    let forked = fx.store.fork("dbsnap", "db2").unwrap();
    let merged2 = fx.path("merged2");
    fx.mounts.overlay(&lower, &forked, &merged2);
    let mut reader = SqlProcess::start(&merged2.join("state.db"));
    assert_eq!(reader.query("PRAGMA integrity_check;"), "ok");
    assert_eq!(reader.query("SELECT count(*) FROM t;"), "500");
    assert_eq!(
        reader.query("SELECT count(*) FROM t WHERE body IN ('uncommitted', 'after the snapshot');"),
        "0"
    );
    drop(reader);
    // A second, independent reader: the sqlite3 shell, when installed.
    if let Ok(out) = Command::new("sqlite3")
        .arg(merged2.join("state.db"))
        .arg("PRAGMA integrity_check; SELECT count(*) FROM t;")
        .output()
    {
        assert!(out.status.success(), "sqlite3 shell on the fork");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n500\n");
    }
}

#[test]
fn root_sqlite_wal_survives_snapshot_and_fork_btrfs() {
    sqlite_wal_survives(Kind::Btrfs);
}

#[test]
fn root_sqlite_wal_survives_snapshot_and_fork_copy() {
    sqlite_wal_survives(Kind::Copy);
}

fn sweep_removes_exactly_unnamed(kind: Kind) {
    let fx = Fixture::new(kind);
    let store = fx.store.as_ref();
    let dirs = store.create_upper("sb1").unwrap();
    for (i, snap) in ["s1", "s2", "s3", "s4"].iter().enumerate() {
        std::fs::write(dirs.upper.join(format!("f{i}")), "data").unwrap();
        store.snapshot("sb1", snap).unwrap();
    }
    let index_path = fx.path("index.json");
    let mut index = SnapshotIndex::open(&index_path).unwrap();
    index.retain("ck1", &["s1", "s2"]).unwrap();
    index.retain("ck2", &["s2", "s3"]).unwrap();

    let removed = sweep(&mut index, store, &["ck1"]).unwrap();
    assert_eq!(removed, ["s3", "s4"]);
    assert_eq!(store.list().unwrap().snapshots, ["s1", "s2"]);
    let reread = SnapshotIndex::open(&index_path).unwrap();
    assert_eq!(
        reread.checkpoints().keys().collect::<Vec<_>>(),
        ["ck1"],
        "released checkpoints leave the index on disk"
    );
    // The kept snapshots still fork with their own content.
    let forked = store.fork("s1", "sb2").unwrap();
    assert!(forked.upper.join("f0").exists());
    assert!(!forked.upper.join("f1").exists());

    // Errors name what they are about.
    let err = store.snapshot("nope", "s9").unwrap_err();
    assert!(matches!(err, Error::NoUpper { .. }), "{err}");
    assert!(err.to_string().contains("sandbox nope"), "{err}");
    let err = store.snapshot("sb1", "s1").unwrap_err();
    assert!(
        err.to_string().contains("snapshot s1 already exists"),
        "{err}"
    );
    let err = store.delete_snapshot("s4").unwrap_err();
    assert!(err.to_string().contains("snapshot s4 not found"), "{err}");
    let err = store.fork("s1", "../escape").unwrap_err();
    assert!(
        err.to_string().contains("sandbox id \"../escape\""),
        "{err}"
    );
    let err = store.create_upper("sb1").unwrap_err();
    assert!(
        err.to_string().contains("sandbox sb1 already has an upper"),
        "{err}"
    );

    let removed = sweep(&mut index, store, &[]).unwrap();
    assert_eq!(removed, ["s1", "s2"]);
    store.destroy_upper("sb1").unwrap();
    store.destroy_upper("sb2").unwrap();
    assert_eq!(store.list().unwrap(), Default::default());
}

#[test]
fn root_sweep_removes_exactly_unnamed_snapshots_btrfs() {
    sweep_removes_exactly_unnamed(Kind::Btrfs);
}

#[test]
fn root_sweep_removes_exactly_unnamed_snapshots_copy() {
    sweep_removes_exactly_unnamed(Kind::Copy);
}

#[test]
fn root_btrfs_image_keeps_snapshots_across_close_and_goes_when_empty() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        !rollpoint_snapshot::is_btrfs(dir.path()).unwrap(),
        "this test needs a temporary directory that is not on btrfs"
    );
    let store_dir = dir.path().join("store");
    let options = ImageOptions {
        size_bytes: 1 << 30,
    };
    for explicit_close in [true, false] {
        let store = BtrfsStore::open(&store_dir, &options).expect("btrfs image store opens");
        assert_eq!(
            rollpoint_snapshot::SnapshotStore::kind(&store),
            StoreKind::BtrfsImage
        );
        let image = store.image_file().unwrap().to_owned();
        let mount = store.root().to_owned();
        assert!(image.exists());
        assert!(mounted(&mount), "{} is mounted", mount.display());
        assert_eq!(loop_devices_for(&image).len(), 1, "one loop device");
        let sparse = std::fs::metadata(&image).unwrap();
        assert_eq!(sparse.len(), 1 << 30);
        assert!(
            sparse.blocks() * 512 < sparse.len() / 4,
            "the image is sparse"
        );

        rollpoint_snapshot::SnapshotStore::create_upper(&store, "sb").unwrap();
        rollpoint_snapshot::SnapshotStore::snapshot(&store, "sb", "snap").unwrap();
        drop(store);
        assert!(image.exists(), "an image holding snapshots is kept");
        assert!(!mounted(&mount), "but unmounted");
        assert!(loop_devices_for(&image).is_empty(), "and detached");

        let mut store = BtrfsStore::open(&store_dir, &options).expect("the kept image reopens");
        let listing = rollpoint_snapshot::SnapshotStore::list(&store).unwrap();
        assert_eq!(listing.snapshots, ["snap"], "its snapshots survive");
        rollpoint_snapshot::SnapshotStore::delete_snapshot(&store, "snap").unwrap();
        rollpoint_snapshot::SnapshotStore::destroy_upper(&store, "sb").unwrap();
        if explicit_close {
            rollpoint_snapshot::SnapshotStore::close(&mut store).unwrap();
            let err = rollpoint_snapshot::SnapshotStore::list(&store).unwrap_err();
            assert!(err.to_string().contains("is closed"), "{err}");
            drop(store);
        } else {
            drop(store);
        }
        assert!(!image.exists(), "image removed");
        assert!(!mounted(&mount), "mount removed");
        assert!(!mount.exists(), "mount point removed");
        assert_eq!(
            loop_devices_for(&image),
            Vec::<String>::new(),
            "loop device detached"
        );
    }
}

/// The subvolume ioctls: a snapshot is read-only, a fork of it writable and
/// separate, and deleting a subvolume that still holds files removes it.
#[test]
fn root_btrfs_snapshots_are_read_only_and_forks_writable() {
    use rollpoint_snapshot::SnapshotStore as _;
    let dir = tempfile::tempdir().unwrap();
    let store = BtrfsStore::open(&dir.path().join("store"), &ImageOptions::default()).unwrap();
    let dirs = store.create_upper("sb").unwrap();
    std::fs::write(dirs.upper.join("f"), "one").unwrap();
    let info = store.snapshot("sb", "snap").unwrap();
    let SnapshotContent::Tree(tree) = &info.content else {
        panic!("a btrfs snapshot is a tree: {:?}", info.content)
    };
    assert_eq!(std::fs::read_to_string(tree.join("f")).unwrap(), "one");
    let err = std::fs::write(tree.join("g"), "x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(30), "EROFS: {err}");
    std::fs::write(dirs.upper.join("f"), "two").unwrap();
    assert_eq!(std::fs::read_to_string(tree.join("f")).unwrap(), "one");

    let fork = store.fork("snap", "sb2").unwrap();
    assert_eq!(
        std::fs::read_to_string(fork.upper.join("f")).unwrap(),
        "one"
    );
    std::fs::write(fork.upper.join("f"), "three").unwrap();
    assert_eq!(std::fs::read_to_string(tree.join("f")).unwrap(), "one");
    assert!(fork.work.is_dir() && std::fs::read_dir(&fork.work).unwrap().count() == 0);

    let err = store.snapshot("sb", "snap").unwrap_err();
    assert!(matches!(err, Error::SnapshotExists { .. }), "{err}");
    for (kind, id) in [("upper", "sb"), ("upper", "sb2")] {
        store
            .destroy_upper(id)
            .unwrap_or_else(|e| panic!("{kind} {id}: {e}"));
    }
    store.delete_snapshot("snap").unwrap();
    let listing = store.list().unwrap();
    assert!(
        listing.uppers.is_empty() && listing.snapshots.is_empty(),
        "{listing:?}"
    );
}

#[test]
fn root_auto_choice_takes_btrfs_and_the_override_takes_copy() {
    let dir = tempfile::tempdir().unwrap();
    let auto = rollpoint_snapshot::open(&dir.path().join("a"), &StoreOptions::default()).unwrap();
    assert!(auto.btrfs_error.is_none(), "{:?}", auto.btrfs_error);
    assert!(matches!(
        auto.store.kind(),
        StoreKind::Btrfs | StoreKind::BtrfsImage
    ));
    let copy = rollpoint_snapshot::open(
        &dir.path().join("c"),
        &StoreOptions {
            choice: "copy".parse().unwrap(),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    assert_eq!(copy.store.kind(), StoreKind::Copy);
    // One directory, one store at a time.
    let err = rollpoint_snapshot::CopyStore::open(&dir.path().join("c")).unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    let err = BtrfsStore::open(&dir.path().join("a"), &ImageOptions::default()).unwrap_err();
    assert!(err.to_string().contains("held by another store"), "{err}");
    drop(copy);
    rollpoint_snapshot::CopyStore::open(&dir.path().join("c")).expect("lock released on drop");
    let err = "zfs".parse::<StoreChoice>().unwrap_err();
    assert!(err.to_string().contains("\"zfs\""), "{err}");
}

#[test]
fn copy_store_open_clears_entries_an_interrupted_run_left() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let store = rollpoint_snapshot::CopyStore::open(&store_dir).unwrap();
    let dirs = rollpoint_snapshot::SnapshotStore::create_upper(&store, "sb").unwrap();
    std::fs::write(dirs.upper.join("f"), "x").unwrap();
    drop(store);
    let half_snapshot = store_dir.join("snapshots/.partial-snap");
    let half_fork = store_dir.join("uppers/.partial-sb2");
    let half_archive = store_dir.join("snapshots/.partial-snap2.tar");
    std::fs::create_dir_all(half_snapshot.join("upper")).unwrap();
    std::fs::create_dir_all(half_fork.join("upper")).unwrap();
    std::fs::write(&half_archive, "half an archive").unwrap();

    let store = rollpoint_snapshot::CopyStore::open(&store_dir).unwrap();
    assert!(!half_snapshot.exists() && !half_fork.exists() && !half_archive.exists());
    let listing = rollpoint_snapshot::SnapshotStore::list(&store).unwrap();
    assert_eq!(listing.uppers, ["sb"]);
    assert!(listing.snapshots.is_empty());
    assert!(dirs.upper.join("f").exists(), "finished entries stay");
}

#[test]
fn copy_store_records_its_layout_version_and_refuses_another() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    drop(rollpoint_snapshot::CopyStore::open(&store_dir).unwrap());
    let layout = store_dir.join("layout");
    assert_eq!(
        std::fs::read_to_string(&layout).unwrap(),
        format!("{}\n", rollpoint_snapshot::COPY_STORE_VERSION)
    );
    let mode = std::fs::metadata(&layout).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    rollpoint_snapshot::CopyStore::open(&store_dir).expect("reopens its own version");

    std::fs::write(&layout, "7\n").unwrap();
    let err = rollpoint_snapshot::CopyStore::open(&store_dir).unwrap_err();
    assert!(matches!(err, Error::StoreVersion { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("layout version \"7\""), "{text}");
    assert!(text.contains(&layout.display().to_string()), "{text}");
}

#[test]
fn copy_store_keeps_sparse_files_sparse_and_lists_only_its_archives() {
    let dir = tempfile::tempdir().unwrap();
    let store = rollpoint_snapshot::CopyStore::open(&dir.path().join("store")).unwrap();
    let store: &dyn rollpoint_snapshot::SnapshotStore = &store;
    let dirs = store.create_upper("sb").unwrap();
    let sparse = dirs.upper.join("sparse");
    let file = std::fs::File::create(&sparse).unwrap();
    file.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&file, b"tail", (64 << 20) - 4).unwrap();
    drop(file);

    let info = store.snapshot("sb", "snap").unwrap();
    let SnapshotContent::Archive(archive) = &info.content else {
        panic!("the copy store keeps archives: {:?}", info.content);
    };
    assert!(
        std::fs::metadata(archive).unwrap().len() < 1 << 20,
        "the archive stores the hole as a sparse map"
    );
    // Names that are not archives of valid ids are not snapshots.
    let snapshots = archive.parent().unwrap();
    std::fs::write(snapshots.join("notes.txt"), "x").unwrap();
    std::fs::write(snapshots.join(".hidden.tar"), "x").unwrap();
    assert_eq!(store.list().unwrap().snapshots, ["snap"]);

    let forked = store.fork("snap", "sb2").unwrap();
    let copy = forked.upper.join("sparse");
    let meta = std::fs::metadata(&copy).unwrap();
    assert_eq!(meta.len(), 64 << 20);
    assert!(
        meta.blocks() * 512 < 1 << 20,
        "the fork's file keeps its hole"
    );
    let mut tail = [0_u8; 4];
    let file = std::fs::File::open(&copy).unwrap();
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut tail, (64 << 20) - 4).unwrap();
    assert_eq!(&tail, b"tail");

    store.delete_snapshot("snap").unwrap();
    assert!(!archive.exists());
    assert!(store.list().unwrap().snapshots.is_empty());
}

/// Snapshots and forks the hostile upper (support::hostile) under a limit
/// of 64 open files, then compares the fork with the original walked the
/// same way: every name, kind, owner, mode, time, xattr, link and byte.
fn hostile_upper_survives(kind: Kind) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    use nix::sys::stat::SFlag;

    let fx = Fixture::new(kind);
    let dirs = fx.store.create_upper("hostile").unwrap();
    hostile::build(&dirs.upper);
    // readlink has no O_NOATIME: the first read of a symlink sets its
    // atime (relatime), a later one does not, so read them once first.
    hostile::describe(&dirs.upper);
    let before = hostile::describe(&dirs.upper);
    let deepest = before.keys().map(Vec::len).max().unwrap();
    assert_eq!(
        before[b"suid".as_slice()].mtime.1,
        123_456_791,
        "fixed times"
    );
    assert!(
        deepest > 6_000,
        "the chain is deeper than PATH_MAX: {deepest} bytes"
    );

    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, 64, hard).unwrap();
    let info = fx.store.snapshot("hostile", "snap");
    let forked = fx.store.fork("snap", "forked");
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    let info = info.unwrap();
    let forked = forked.unwrap();

    let after = hostile::describe(&forked.upper);
    let shown = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
    let missing: Vec<String> = before
        .keys()
        .filter(|k| !after.contains_key(*k))
        .map(|k| shown(k))
        .collect();
    let extra: Vec<String> = after
        .keys()
        .filter(|k| !before.contains_key(*k))
        .map(|k| shown(k))
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
    for (path, node) in &before {
        assert_eq!(&after[path], node, "{}", shown(path));
    }

    // The properties named one by one, so a gap in `describe` hides none.
    let node = |name: &[u8]| &after[name];
    let is = |name: &[u8], kind: SFlag| node(name).kind == kind.bits();
    assert!(is(b"whiteout", SFlag::S_IFCHR) && node(b"whiteout").rdev == 0);
    assert!(is(b"fifo", SFlag::S_IFIFO));
    assert!(is(b"sock", SFlag::S_IFSOCK));
    assert!(is(b"link", SFlag::S_IFLNK) && node(b"link").target == b"dangling\ntarget");
    assert_eq!((node(b"link").uid, node(b"link").gid), (4321, 8765));
    assert_eq!(
        node(b"opaque")
            .xattrs
            .get(b"trusted.overlay.opaque".as_slice())
            .map(Vec::as_slice),
        Some(b"y".as_slice())
    );
    assert_eq!(
        node(b"user-xattr")
            .xattrs
            .get(b"user.note".as_slice())
            .map(Vec::as_slice),
        Some(b"hello\0binary\xff".as_slice())
    );
    assert_eq!(
        node(b"cap-bin")
            .xattrs
            .get(b"security.capability".as_slice())
            .map(Vec::as_slice),
        Some(hostile::CAP_NET_RAW_EP.as_slice()),
        "the capability survives the chown"
    );
    assert!(
        node(b"acl-file")
            .xattrs
            .contains_key(b"system.posix_acl_access".as_slice())
    );
    assert!(
        node(b"acl-dir")
            .xattrs
            .contains_key(b"system.posix_acl_default".as_slice())
    );
    assert_eq!((node(b"owned").uid, node(b"owned").gid), (1234, 5678));
    assert_eq!(node(b"suid").mode, 0o4755, "setuid survives the chown");
    assert_eq!(node(b"sgid-dir").mode, 0o2775);
    assert_eq!(node(b"sticky").mode, 0o1777);
    assert_eq!(node(b"hl-a").nlink, 2);
    assert_eq!(node(b"hl-b").inode_of, b"hl-a");
    let bottom = node(b"zz-link-to-bottom");
    assert!(
        bottom.inode_of.len() > 6_000 && bottom.nlink == 2,
        "linked through the chain"
    );
    assert!(after.contains_key(hostile::NEWLINE_NAME) && after.contains_key(hostile::BINARY_NAME));
    assert!(node(b"suid").mtime.1 != 0, "times keep their nanoseconds");
    assert_eq!(node(b"sparse").size, hostile::SPARSE_SIZE);
    assert!(
        hostile::allocated(&forked.upper, b"sparse") * 512 < 1 << 20,
        "the 1 GiB file stays sparse in the fork"
    );
    if let SnapshotContent::Archive(archive) = &info.content {
        let len = std::fs::metadata(archive).unwrap().len();
        assert!(
            len < 8 << 20,
            "the archive keeps only the data: {len} bytes"
        );
        // GNU tar still lists it, deep names, holes and all.
        let out = Command::new("tar")
            .arg("-tvf")
            .arg(archive)
            .output()
            .unwrap();
        let listing = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "tar -tvf: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(listing.contains("d000000599/bottom"), "{listing:.2000}");
        assert!(
            listing.contains(" 1073741824 "),
            "the sparse file's size: {listing:.2000}"
        );
    }

    // Removal walks by descriptor too, within the same limit.
    setrlimit(Resource::RLIMIT_NOFILE, 64, hard).unwrap();
    let destroyed = [
        fx.store.destroy_upper("forked"),
        fx.store.destroy_upper("hostile"),
        fx.store.delete_snapshot("snap"),
    ];
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    for result in destroyed {
        result.unwrap();
    }
    assert_eq!(fx.store.list().unwrap(), Default::default());
}

#[test]
fn root_hostile_upper_survives_snapshot_and_fork_copy() {
    hostile_upper_survives(Kind::Copy);
}

#[test]
fn root_hostile_upper_survives_snapshot_and_fork_btrfs() {
    hostile_upper_survives(Kind::Btrfs);
}

#[test]
fn copy_store_refuses_a_damaged_or_truncated_archive_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = rollpoint_snapshot::CopyStore::open(&dir.path().join("store")).unwrap();
    let store: &dyn rollpoint_snapshot::SnapshotStore = &store;
    let dirs = store.create_upper("sb").unwrap();
    std::fs::create_dir(dirs.upper.join("d")).unwrap();
    std::fs::write(dirs.upper.join("d/f"), vec![b'z'; 20_000]).unwrap();
    std::fs::write(dirs.upper.join("g"), "g\n").unwrap();
    let info = store.snapshot("sb", "snap").unwrap();
    let SnapshotContent::Archive(archive) = &info.content else {
        panic!("the copy store keeps archives: {:?}", info.content);
    };
    let whole = std::fs::read(archive).unwrap();
    let data = whole
        .windows(512)
        .position(|w| w.iter().all(|&b| b == b'z'))
        .unwrap();
    let mut damaged = whole.clone();
    damaged[data + 100] = b'y';
    let gnu_tar = dir.path().join("v1.tar");
    let out = Command::new("tar")
        .arg("-cf")
        .arg(&gnu_tar)
        .arg("-C")
        .arg(&dirs.upper)
        .arg(".")
        .output()
        .unwrap();
    assert!(out.status.success());
    let cases = [
        (
            "cut in a file's data",
            whole[..data + 1000].to_vec(),
            "truncated",
        ),
        (
            "cut before the end blocks",
            whole[..whole.len() - 1024].to_vec(),
            "truncated",
        ),
        (
            "cut before the closing record",
            whole[..whole.len() - 2048].to_vec(),
            "truncated",
        ),
        ("a flipped data byte", damaged, "checksum mismatch"),
        (
            "a version 1 archive",
            std::fs::read(&gnu_tar).unwrap(),
            "version 2",
        ),
        ("empty", Vec::new(), "truncated"),
    ];
    for (what, bytes, expected) in cases {
        std::fs::write(archive, &bytes).unwrap();
        let err = store.fork("snap", "sb2").unwrap_err();
        assert!(matches!(err, Error::Archive { .. }), "{what}: {err}");
        let text = err.to_string();
        assert!(text.contains("snapshot snap:"), "{what}: {text}");
        assert!(
            text.contains(&archive.display().to_string()),
            "{what}: {text}"
        );
        assert!(text.contains("at byte"), "{what}: {text}");
        assert!(text.contains(expected), "{what}: {text}");
        assert_eq!(store.list().unwrap().uppers, ["sb"], "{what}: no fork left");
        let leftovers = std::fs::read_dir(dirs.upper.parent().unwrap().parent().unwrap())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".partial-")
            })
            .count();
        assert_eq!(leftovers, 0, "{what}: no half tree left");
    }
    let cut = whole[..data + 1000].to_vec();
    std::fs::write(archive, &cut).unwrap();
    let text = store.fork("snap", "sb2").unwrap_err().to_string();
    assert!(text.contains("(entry d/f)"), "the entry is named: {text}");

    std::fs::write(archive, &whole).unwrap();
    let forked = store.fork("snap", "sb2").unwrap();
    assert_eq!(
        std::fs::read(forked.upper.join("d/f")).unwrap(),
        vec![b'z'; 20_000]
    );
}

#[test]
fn copy_store_refuses_a_version_1_store_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    std::fs::create_dir_all(&store_dir).unwrap();
    let layout = store_dir.join("layout");
    std::fs::write(&layout, "1\n").unwrap();
    let err = rollpoint_snapshot::CopyStore::open(&store_dir).unwrap_err();
    assert!(matches!(err, Error::StoreVersion { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("layout version \"1\""), "{text}");
    assert!(text.contains("reads version 2"), "{text}");
    assert!(text.contains(&layout.display().to_string()), "{text}");
}
