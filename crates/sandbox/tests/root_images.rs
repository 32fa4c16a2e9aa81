//! Root tests of sandboxes on task images from a real registry (the test
//! image: a static busybox, three layers with a whiteout and an opaque
//! directory): commands see the image's files and not the host's, the
//! image config applies, the tools are mounted read-only, a fork is on the
//! very layers the snapshot was taken on even after the tag moved, and
//! sixteen sandboxes started at once pull and unpack each layer once; an
//! image's `User` runs every command and launch and owns what is made for
//! it.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rollpoint_proto::anchor::{ExecOutput, LaunchRequest};
use rollpoint_sandbox::local::{LocalBackend, LocalOptions, Tool};
use rollpoint_sandbox::{Backend, Base, SandboxSpec};
use rollpoint_testkit::images::{IMAGE_RELEASE, Registry, build_layout, skopeo_copy};
use rollpoint_testkit::{require_root, supervisor_bin};

fn sh(backend: &LocalBackend, id: &str, script: &str) -> ExecOutput {
    backend.exec(id, &rollpoint_testkit::shell(script)).unwrap()
}

fn ok(out: &ExecOutput) -> &str {
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    &out.stdout
}

/// Bytes the files under `dir` take on disk, each inode once (as `du`
/// counts them), directories left out: a directory's own blocks grow with
/// the entries it ever held (temporaries of concurrent pulls) and never
/// shrink, which says nothing about how many copies of the content exist.
fn disk_use(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    fn walk(dir: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> u64 {
        let mut total = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                total += walk(&path, seen);
            } else if seen.insert((meta.dev(), meta.ino())) {
                total += meta.blocks() * 512;
            }
        }
        total
    }
    walk(dir, &mut std::collections::HashSet::new())
}

struct Setup {
    _work: tempfile::TempDir,
    registry: Registry,
    reference: String,
    layout: std::path::PathBuf,
    owner: std::path::PathBuf,
}

fn setup() -> Setup {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let layout = build_layout(work.path());
    let registry = Registry::start();
    let reference = registry.push(&layout, "tasks/busybox:1");
    let owner = work.path().join("owner");
    Setup {
        _work: work,
        registry,
        reference,
        layout,
        owner,
    }
}

fn open(owner: &Path) -> LocalBackend {
    let mut options = LocalOptions::new(supervisor_bin());
    options.tools = vec![Tool {
        at: "share/marker".into(),
        host: supervisor_bin(),
    }];
    LocalBackend::open(owner, options).unwrap()
}

#[test]
fn an_image_sandbox_sees_the_image_and_forks_on_its_layers_after_the_tag_moved() {
    let s = setup();
    let backend = open(&s.owner);
    let mut env = BTreeMap::new();
    env.insert("SHARED_VAR".to_owned(), "from-task".to_owned());
    let spec = SandboxSpec {
        base: Base::Image {
            reference: s.reference.clone(),
            id: None,
        },
        env,
        ..SandboxSpec::default()
    };
    let info = backend.create("img", &spec).unwrap();
    let Base::Image { id: Some(id), .. } = &info.spec.base else {
        panic!("not pinned: {:?}", info.spec.base)
    };
    assert_eq!(info.spec.workdir, "/app", "the image's WorkingDir");
    let out = sh(
        &backend,
        "img",
        "cat /etc/image-release; readlink /bin/sh; pwd; echo $IMAGE_VAR $SHARED_VAR; \
         ls /data; ls /opq; test -e /usr/bin/apt && echo host-visible; echo $PATH",
    );
    let text = ok(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], IMAGE_RELEASE.trim());
    assert_eq!(lines[1], "busybox", "the image's shell, not the host's");
    assert_eq!(lines[2], "/app");
    assert_eq!(lines[3], "from-image from-task", "the task's env wins");
    assert!(
        !text.contains("gone") && text.contains("layer2"),
        "whiteout: {text}"
    );
    assert_eq!(
        lines.iter().filter(|l| ["a", "b", "c"].contains(l)).count(),
        1,
        "opaque: {text}"
    );
    assert!(!text.contains("host-visible"), "{text}");
    assert!(
        lines.last().unwrap().ends_with(":/.rollpoint/bin"),
        "{text}"
    );
    // Tools: mounted read-only, at their places.
    let out = sh(
        &backend,
        "img",
        "test -x /.rollpoint/bin/rollpoint-supervisor && echo tool; \
         touch /.rollpoint/x 2>/dev/null || echo ro; \
         touch /.rollpoint/share/marker 2>/dev/null || echo ro-file; \
         mkdir -p /app && echo 1 > /app/state; id -u",
    );
    let text = ok(&out);
    assert!(
        text.contains("tool") && text.contains("ro\n") && text.contains("ro-file"),
        "{text}"
    );
    let record: rollpoint_sandbox::local::SandboxRecord =
        serde_json::from_slice(&std::fs::read(s.owner.join("sandboxes/img/sandbox.json")).unwrap())
            .unwrap();
    assert!(
        !record.upper.join(".rollpoint/bin").exists(),
        "tools must not land in the upper"
    );

    backend.snapshot("img", "snap1", "ck1").unwrap();
    // The tag moves to another image; the fork keeps the snapshot's.
    let other = s.layout.parent().unwrap().join("other");
    std::process::Command::new("cp")
        .arg("-a")
        .arg(&s.layout)
        .arg(&other)
        .status()
        .unwrap();
    let image = format!("{}:t", other.display());
    let status = std::process::Command::new("umoci")
        .args(["config", "--image", &image, "--config.env=MOVED=yes"])
        .status()
        .unwrap();
    assert!(status.success());
    skopeo_copy(
        &format!("oci:{image}"),
        &format!("docker://{}", s.reference),
        &[],
    );
    backend.destroy("img").unwrap();
    drop(backend);

    let backend = open(&s.owner);
    let forked = backend.fork("snap1", "img2").unwrap();
    assert_eq!(&forked.spec.base, &info.spec.base, "{id}");
    let text = sh(
        &backend,
        "img2",
        "cat /app/state; echo moved=$MOVED; cat /etc/image-release",
    )
    .stdout;
    assert_eq!(text, format!("1\nmoved=\n{IMAGE_RELEASE}"));
    // A new sandbox of the tag gets the moved image.
    let fresh = backend.create("img3", &spec).unwrap();
    assert_ne!(fresh.spec.base, info.spec.base);
    assert_eq!(sh(&backend, "img3", "echo $MOVED").stdout, "yes\n");
    backend.destroy_all().unwrap();
    drop(backend);

    // A dynamically linked supervisor cannot start launches off the host's root: refused by name.
    let dynamic = LocalBackend::open(&s.owner, LocalOptions::new("/bin/sh".into())).unwrap();
    let err = dynamic.create("dyn", &spec).unwrap_err().to_string();
    assert!(
        err.contains("dynamically linked") && err.contains("ld-linux"),
        "{err}"
    );
    drop(s.registry);
}

#[test]
fn sixteen_sandboxes_of_one_image_pull_it_once_and_share_one_copy() {
    let s = setup();
    let backend = Arc::new(open(&s.owner));
    let before = s.registry.blob_gets();
    let spec = SandboxSpec {
        base: Base::Image {
            reference: s.reference.clone(),
            id: None,
        },
        ..SandboxSpec::default()
    };
    std::thread::scope(|scope| {
        for i in 0..16 {
            let (backend, spec) = (Arc::clone(&backend), spec.clone());
            scope.spawn(move || {
                let id = format!("s{i}");
                backend.create(&id, &spec).unwrap();
                assert_eq!(
                    sh(&backend, &id, "cat /etc/image-release").stdout,
                    IMAGE_RELEASE
                );
            });
        }
    });
    // Three layers and one config, each fetched once.
    assert_eq!(
        s.registry.blob_gets() - before,
        4,
        "{}",
        s.registry.log_text()
    );
    let layers = s.owner.join("images/layers");
    let names: Vec<String> = std::fs::read_dir(&layers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    // One copy: the cache holds what one unpack of the image holds.
    let one = tempfile::tempdir().unwrap();
    let cache = rollpoint_image::ImageCache::open(one.path()).unwrap();
    cache
        .pull(
            &rollpoint_image::Source::OciLayout(s.layout.clone()),
            &Default::default(),
        )
        .unwrap();
    assert_eq!(disk_use(&layers), disk_use(&one.path().join("layers")));
    backend.destroy_all().unwrap();
}

/// The image's `User` (`app`, uid 1000, also in group `dev`): every command
/// and every launch run as it with its `HOME`, the workdir, rollpoint's state
/// directory and uploads are its own, a fork keeps it, a task can say root
/// instead, and an unknown user is refused by name.
#[test]
fn root_an_image_user_runs_every_command_and_launch() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let layout = build_layout(work.path());
    let status = std::process::Command::new("umoci")
        .args(["config", "--image"])
        .arg(format!("{}:t", layout.display()))
        .arg("--config.user=app")
        .status()
        .unwrap();
    assert!(status.success());
    let backend = open(&work.path().join("owner"));
    let spec = SandboxSpec {
        base: Base::OciLayout {
            path: layout.clone(),
            id: None,
        },
        ..SandboxSpec::default()
    };
    let info = backend.create("u", &spec).unwrap();
    assert_eq!(info.spec.user, "app", "the image's User");
    let script = "id -u; id -g; id -G; echo $HOME; stat -c %u /app /var/lib/rollpoint; \
                  touch /app/made && echo wrote; touch /etc/x 2>/dev/null || echo etc-refused";
    let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        lines(ok(&sh(&backend, "u", script))),
        [
            "1000",
            "1000",
            "1000 2000",
            "/home/app",
            "1000",
            "1000",
            "wrote",
            "etc-refused"
        ]
    );
    backend
        .upload("u", Path::new("/app/task.txt"), b"task\n", 0o644)
        .unwrap();
    let meta = std::fs::metadata(info.root.join("app/task.txt")).unwrap();
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::uid(&meta),
            std::os::unix::fs::MetadataExt::gid(&meta)
        ),
        (backend.ids().host + 1000, backend.ids().host + 1000),
        "an upload is the user's: 1000 inside the sandbox's range on the host"
    );
    backend
        .launch(
            "u",
            &LaunchRequest {
                launch_id: "who".into(),
                argv: vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    "echo $(id -u) $(id -G) $HOME > /app/launch.tmp && mv /app/launch.tmp \
                     /app/launch; sleep 600"
                        .into(),
                ],
                env: BTreeMap::new(),
                cwd: String::new(),
                freeze: None,
                options: Vec::new(),
            },
        )
        .unwrap();
    let seen = info.root.join("app/launch");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !seen.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the launch never wrote"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "1000 1000 2000 /home/app\n"
    );
    // Its supervisor stays the host's root (it freezes the harness's
    // cgroup), an id the sandbox's user namespace does not map: it reads as
    // the overflow id, 65534.
    let text = ok(&sh(
        &backend,
        "u",
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline | grep -q '^/proc/self/exe run ' \
         && stat -c %u $p; done; true",
    ))
    .to_owned();
    assert_eq!(
        text, "65534\n",
        "the launch's supervisor is the host's root"
    );

    backend.snapshot("u", "snap-u", "ck").unwrap();
    let forked = backend.fork("snap-u", "u2").unwrap();
    assert_eq!(forked.spec.user, "app");
    assert_eq!(ok(&sh(&backend, "u2", "id -u; cat /app/made")), "1000\n");

    let as_root = SandboxSpec {
        user: "0".into(),
        ..spec.clone()
    };
    backend.create("r", &as_root).unwrap();
    assert_eq!(ok(&sh(&backend, "r", "id -u; echo $HOME")), "0\n/root\n");

    let ghost = SandboxSpec {
        user: "ghost:dev".into(),
        ..spec
    };
    let err = backend.create("g", &ghost).unwrap_err().to_string();
    assert!(
        err.contains("sandbox.user \"ghost:dev\"") && err.contains("/etc/passwd"),
        "{err}"
    );
    assert!(
        !work.path().join("owner/sandboxes/g").exists(),
        "a refused create leaves nothing"
    );
    backend.destroy_all().unwrap();
}
