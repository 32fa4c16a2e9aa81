//! Upload and download stay beneath the sandbox root, whatever links the
//! sandbox's own processes planted.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use rollpoint_sandbox::{Error, SandboxRoot, sandbox_relative};

fn root_with_outside() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("work")).expect("root");
    std::fs::create_dir(&outside).expect("outside");
    std::fs::write(outside.join("secret"), b"host secret").expect("secret");
    (dir, root, outside)
}

#[test]
fn upload_and_download_round_trip_with_mode() {
    let (_d, root, _) = root_with_outside();
    let sb = SandboxRoot::open(&root).expect("open");
    sb.upload(Path::new("/work/task.json"), b"{\"a\":1}", 0o600)
        .expect("upload");
    let meta = std::fs::metadata(root.join("work/task.json")).expect("uploaded");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        sb.download(Path::new("/work/task.json"), 1024)
            .expect("download"),
        b"{\"a\":1}"
    );
    // Replacing is atomic and leaves no temp file behind.
    sb.upload(Path::new("work/task.json"), b"new", 0o644)
        .expect("replace");
    let names: Vec<_> = std::fs::read_dir(root.join("work"))
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("task.json")]);
    assert_eq!(
        std::fs::read(root.join("work/task.json")).expect("read"),
        b"new"
    );
}

#[test]
fn dot_dot_is_refused_by_name() {
    let (_d, root, _) = root_with_outside();
    let sb = SandboxRoot::open(&root).expect("open");
    for p in ["../outside/secret", "/work/../../outside/secret", "work/.."] {
        let err = sb.download(Path::new(p), 1024).expect_err(p);
        assert!(matches!(err, Error::ParentComponent { .. }), "{p}: {err}");
        assert!(err.to_string().contains(p), "{err}");
        let err = sb.upload(Path::new(p), b"x", 0o600).expect_err(p);
        assert!(matches!(err, Error::ParentComponent { .. }), "{p}: {err}");
    }
    assert!(matches!(
        sandbox_relative(Path::new("/")),
        Err(Error::NotAFile { .. })
    ));
}

#[test]
fn symlinks_that_lead_out_are_refused() {
    let (_d, root, outside) = root_with_outside();
    // Planted by the sandbox: absolute and relative links out, file and dir.
    symlink(outside.join("secret"), root.join("work/abs-file")).expect("link");
    symlink("../../outside/secret", root.join("work/rel-file")).expect("link");
    symlink(&outside, root.join("work/abs-dir")).expect("link");
    symlink("../../outside", root.join("work/rel-dir")).expect("link");
    let sb = SandboxRoot::open(&root).expect("open");
    for p in [
        "/work/abs-file",
        "/work/rel-file",
        "/work/abs-dir/secret",
        "/work/rel-dir/secret",
    ] {
        let err = sb.download(Path::new(p), 1024).expect_err(p);
        assert!(matches!(err, Error::Escape { .. }), "{p}: {err}");
        assert!(err.to_string().contains(p), "{err}");
    }
    for p in ["/work/abs-dir/planted", "/work/rel-dir/planted"] {
        let err = sb.upload(Path::new(p), b"pwned", 0o600).expect_err(p);
        assert!(matches!(err, Error::Escape { .. }), "{p}: {err}");
    }
    // An upload onto a link that points out replaces the link itself, inside
    // the root; the file it pointed at is untouched.
    sb.upload(Path::new("/work/abs-file"), b"mine", 0o600)
        .expect("replace the link");
    let replaced = std::fs::symlink_metadata(root.join("work/abs-file")).expect("entry");
    assert!(replaced.is_file(), "the link was replaced by a file");
    assert!(
        !outside.join("planted").exists(),
        "a write landed outside the root"
    );
    assert_eq!(
        std::fs::read(outside.join("secret")).expect("secret"),
        b"host secret"
    );
}

#[test]
fn links_that_stay_inside_are_followed() {
    let (_d, root, _) = root_with_outside();
    std::fs::write(root.join("work/real"), b"inside").expect("real");
    symlink("real", root.join("work/alias")).expect("link");
    let sb = SandboxRoot::open(&root).expect("open");
    assert_eq!(
        sb.download(Path::new("/work/alias"), 1024)
            .expect("download"),
        b"inside"
    );
}

#[test]
fn downloads_over_the_limit_are_refused() {
    let (_d, root, _) = root_with_outside();
    std::fs::write(root.join("work/big"), vec![b'x'; 4096]).expect("big");
    let sb = SandboxRoot::open(&root).expect("open");
    let err = sb
        .download(Path::new("/work/big"), 1000)
        .expect_err("too big");
    assert!(
        matches!(
            err,
            Error::TooLarge {
                size: 4096,
                limit: 1000,
                ..
            }
        ),
        "{err}"
    );
}
