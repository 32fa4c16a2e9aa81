//! Real image tooling for the task-image tests: an OCI layout built with
//! `umoci` from a static busybox (three layers, with a whiteout, an opaque
//! directory, a hard link, a symlink, an xattr, a setuid file, an `Env`, a
//! `WorkingDir` and a `User`), and Debian's `docker-registry` (the CNCF
//! distribution registry) on loopback, filled with `skopeo`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd`, failing with its output when it fails.
pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tool the image tests need; its absence fails the test with the fix.
pub fn require(tool: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join(tool);
        if p.exists() {
            return p;
        }
    }
    panic!("{tool} is missing: run scripts/install-deps (it installs the image tests' tools)");
}

/// What [`build_layout`] puts in the image, for assertions.
pub const IMAGE_RELEASE: &str = "rollpoint-test-busybox\n";

/// Builds the test image as an OCI layout at `<dir>/layout` (tag `t`) and
/// returns the layout path.
pub fn build_layout(dir: &Path) -> PathBuf {
    let umoci = require("umoci");
    let busybox = require("busybox");
    let layout = dir.join("layout");
    let bundle = dir.join("bundle");
    let image = format!("{}:t", layout.display());
    run(Command::new(&umoci).args(["init", "--layout"]).arg(&layout));
    run(Command::new(&umoci).args(["new", "--image", &image]));
    run(Command::new(&umoci)
        .args(["unpack", "--image", &image])
        .arg(&bundle));
    let root = bundle.join("rootfs");
    let mk = |p: &str| std::fs::create_dir_all(root.join(p)).unwrap();
    let write = |p: &str, s: &str| std::fs::write(root.join(p), s).unwrap();
    // Layer 1: a busybox userland and the special files.
    for d in [
        "bin", "etc", "data", "opq", "app", "tmp", "root", "home/app",
    ] {
        mk(d);
    }
    std::fs::copy(&busybox, root.join("bin/busybox")).unwrap();
    for applet in [
        "sh", "cat", "ls", "echo", "id", "stat", "sleep", "test", "mkdir", "rm", "wc", "touch",
        "grep", "env", "pwd", "seq", "tail", "head", "printf", "sed", "tr", "date", "true",
        "false", "cp", "mv", "chmod", "readlink", "sort", "uniq", "cmp", "cut", "awk", "find",
        "tee", "dirname", "basename", "kill", "ps", "sync", "xargs", "expr", "ln", "uname", "diff",
        "od", "base64",
    ] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    write(
        "etc/passwd",
        "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n",
    );
    write("etc/group", "root:x:0:\napp:x:1000:\ndev:x:2000:app\n");
    write("etc/image-release", IMAGE_RELEASE);
    write("data/gone", "removed by layer 2\n");
    write("data/keep", "kept\n");
    write("opq/a", "hidden by layer 3\n");
    write("opq/b", "hidden by layer 3\n");
    write("data/hard1", "linked\n");
    std::fs::hard_link(root.join("data/hard1"), root.join("data/hard2")).unwrap();
    std::os::unix::fs::symlink("keep", root.join("data/link")).unwrap();
    write("data/xattr", "has an xattr\n");
    xattr_set(&root.join("data/xattr"), "user.rollpoint", b"yes");
    write("data/suid", "#!/bin/sh\n");
    std::fs::set_permissions(
        root.join("data/suid"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    std::os::unix::fs::chown(root.join("home/app"), Some(1000), Some(1000)).unwrap();
    run(Command::new(&umoci)
        .args(["repack", "--refresh-bundle", "--image", &image])
        .arg(&bundle));
    // Layer 2: a file removed (a whiteout) and one added.
    std::fs::remove_file(root.join("data/gone")).unwrap();
    write("data/layer2", "from layer 2\n");
    run(Command::new(&umoci)
        .args(["repack", "--refresh-bundle", "--image", &image])
        .arg(&bundle));
    // Layer 3, written by hand: an opaque directory.
    let stage = dir.join("layer3");
    std::fs::create_dir_all(stage.join("opq")).unwrap();
    std::fs::write(stage.join("opq/.wh..wh..opq"), "").unwrap();
    std::fs::write(stage.join("opq/c"), "from layer 3\n").unwrap();
    add_layer(&image, &stage, "opq", &dir.join("layer3.tar"));
    run(Command::new(&umoci).args([
        "config",
        "--image",
        &image,
        "--config.env=PATH=/bin",
        "--config.env=IMAGE_VAR=from-image",
        "--config.env=SHARED_VAR=from-image",
        "--config.workingdir=/app",
    ]));
    layout
}

/// The test image plus a fourth layer for a real harness: the host's
/// `bash` and `sqlite3` (what the harness launch scripts use) and the glibc
/// libraries they and `also` (a harness's native binary) link, at the
/// host's paths. The image's `/bin/sh` stays busybox, and nothing else of
/// the host is in it; its `User` is `app` (uid 1000). Returns the layout
/// path.
pub fn build_harness_layout(dir: &Path, also: &[&Path]) -> PathBuf {
    let layout = build_layout(dir);
    let stage = dir.join("layer4");
    let mut files: Vec<PathBuf> = vec![PathBuf::from("/bin/bash"), require("sqlite3")];
    let mut libs = Vec::new();
    for bin in files
        .iter()
        .map(PathBuf::as_path)
        .chain(also.iter().copied())
    {
        let out = Command::new("ldd").arg(bin).output().unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let path = line
                .split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(PathBuf::from);
            libs.extend(path);
        }
    }
    files.extend(libs);
    files.push(PathBuf::from("/etc/ld.so.cache"));
    for file in &files {
        let to = stage.join(file.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        if !to.exists() {
            std::fs::copy(file, &to).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
        }
    }
    let image = format!("{}:t", layout.display());
    add_layer(&image, &stage, ".", &dir.join("layer4.tar"));
    run(Command::new(require("umoci")).args([
        "config",
        "--image",
        &image,
        "--config.env=PATH=/bin:/usr/bin",
        // The harness runs as a user of the image, not root.
        "--config.user=app",
    ]));
    layout
}

/// Adds `what` (relative to `stage`) as a new top layer of `image`, owned
/// by root, through the tarball `tarball`.
fn add_layer(image: &str, stage: &Path, what: &str, tarball: &Path) {
    run(Command::new("tar")
        .arg("-C")
        .arg(stage)
        .args(["--owner=0", "--group=0", "-cf"])
        .arg(tarball)
        .arg(what));
    run(Command::new(require("umoci"))
        .args(["raw", "add-layer", "--image", image])
        .arg(tarball));
}

fn xattr_set(path: &Path, name: &str, value: &[u8]) {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and a buffer of the given length.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "setxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// `skopeo copy SRC DST`, plain HTTP to loopback registries.
pub fn skopeo_copy(src: &str, dst: &str, extra: &[&str]) {
    run(Command::new(require("skopeo"))
        .args([
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
        ])
        .args(extra)
        .args([src, dst]));
}

/// A distribution registry on a loopback port, with its request log.
#[derive(Debug)]
pub struct Registry {
    child: Child,
    pub addr: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    pub fn start() -> Self {
        let bin = require("docker-registry");
        let dir = tempfile::tempdir().unwrap();
        let port = crate::free_port();
        let addr = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = dir.path().join("registry.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let registry = Self {
            child,
            addr,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !registry.answers() {
            assert!(
                Instant::now() < deadline,
                "the registry did not answer: {}",
                registry.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(&self.addr) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr).as_bytes())
            .is_err()
        {
            return false;
        }
        let mut buf = String::new();
        let _ = s.read_to_string(&mut buf);
        buf.starts_with("HTTP/1.0 200") || buf.starts_with("HTTP/1.1 200")
    }

    /// Pushes tag `t` of the OCI layout at `layout` as `<addr>/<repo>`;
    /// returns that reference.
    pub fn push(&self, layout: &Path, repo: &str) -> String {
        let reference = format!("{}/{repo}", self.addr);
        skopeo_copy(
            &format!("oci:{}:t", layout.display()),
            &format!("docker://{reference}"),
            &[],
        );
        reference
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many times the access log shows a `GET` of a blob.
    pub fn blob_gets(&self) -> usize {
        self.log_text()
            .lines()
            .filter(|l| l.contains("\"GET /v2/") && l.contains("/blobs/sha256:"))
            .count()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
