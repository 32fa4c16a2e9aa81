//! Task images through the whole stack (root): command tasks and a native
//! worker task whose sandboxes are a busybox image from a loopback registry
//! (not the host's root), run by `rollpoint run`, checkpointed, killed with
//! SIGKILL and resumed. Every task ends verified exactly once, no model
//! call reaches the model twice, every sandbox was on the image's files,
//! `rollpoint images list` shows the one image the run pulled, and a
//! prune keeps what the retained checkpoint's snapshots need. OpenCode, from
//! the harness install under `/.rollpoint`, on an image that adds glibc,
//! bash and sqlite3 to the busybox one: a crash after a mid-tool checkpoint
//! continues its saved session in a sandbox forked on the same layers.

mod common;
#[path = "common/harness.rs"]
mod harness;

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use common::*;
use rollpoint_testkit::images::{IMAGE_RELEASE, Registry, build_harness_layout, build_layout};
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(300);

fn on_image(mut task: serde_json::Value, reference: &str) -> serde_json::Value {
    task["task"]["sandbox"] = serde_json::json!({"base": {"kind": "image", "ref": reference}});
    // The image's own files, not the host's, and its config applied.
    also_verify(
        &mut task,
        &format!(
            "test \"$(cat /etc/image-release)\" = {:?} && test \"$IMAGE_VAR\" = from-image && ! test -e /usr/bin/apt",
            IMAGE_RELEASE.trim()
        ),
    );
    task
}

fn rollpoint(args: &[&OsStr]) -> String {
    let out = std::process::Command::new(rollpoint_bin())
        .args(args)
        .output()
        .expect("rollpoint");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn root_tasks_on_an_image_are_checkpointed_killed_and_resumed_once_each() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let layout = build_layout(dir.path());
    let registry = Registry::start();
    let reference = registry.push(&layout, "tasks/busybox:1");

    let tag = format!("i{:04x}", fastrand::u16(..));
    let mut native = on_image(native_task(&format!("{tag}n")), &reference);
    // The static worker the sandbox gets at /.rollpoint/bin, on PATH.
    let wrapper = "#!/bin/sh\nin=\"$1\"; shift\nsed \"s|@MODEL@|$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY/v1|\" \"$in\" > \"$in.live\"\nexec rollpoint-worker \"$in.live\" \"$@\"\n";
    native["task"]["files"]["run-worker"] = wrapper.into();
    // The worker's input names /workspace; the image's WorkingDir is /app.
    native["task"]["sandbox"]["workdir"] = "/workspace".into();
    // One command task as the image's non-root user, through the crash too.
    let mut as_user = on_image(command_task(&format!("{tag}c1"), 300), &reference);
    as_user["task"]["sandbox"]["user"] = "app".into();
    also_verify(&mut as_user, "test \"$(id -u):$HOME\" = 1000:/home/app");
    let rows = vec![
        on_image(command_task(&format!("{tag}c0"), 300), &reference),
        as_user,
        native,
    ];
    let tasks = dir.path().join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    std::fs::write(dir.path().join("model.json"), model_script(400).to_string()).expect("script");
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "v = 1\nconcurrency = 4\ncheckpoint_every_s = 2\nmodel_script = \"model.json\"\n",
    )
    .expect("config");
    let run_dir = dir.path().join("r");
    let log = dir.path().join("stderr.log");
    let sup = supervisor_bin();

    let mut child = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    wait_file(&run_dir.join("checkpoints/LATEST"), LIMIT, &log);
    std::thread::sleep(Duration::from_millis(
        300 + u64::from(fastrand::u16(..1500)),
    ));
    child.kill().expect("SIGKILL");
    let _ = child.wait();

    let mut resume = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    let status = wait(&mut resume, LIMIT, &log);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "resume failed ({status}):\n{text}");

    let results = rollpoint_run::read_results(&run_dir).expect("results");
    let mut ids: Vec<&str> = results.iter().map(|r| r.rollout.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [format!("{tag}c0"), format!("{tag}c1"), format!("{tag}n")],
        "{text}"
    );
    for r in &results {
        assert_eq!(
            r.status,
            rollpoint_driver::Status::Verified,
            "{r:?}\n{text}"
        );
        assert_eq!(r.reward, Some(1.0), "{r:?}");
    }
    let calls = rollpoint_testkit::assert_no_repeated_model_call(&run_dir.join("model-script.log"));
    assert!(
        calls > STEPS as usize,
        "the worker called the model: {calls}"
    );

    let run = run_dir.as_os_str();
    let listed = rollpoint(&[
        OsStr::new("images"),
        OsStr::new("list"),
        OsStr::new("--run"),
        run,
    ]);
    assert_eq!(listed.lines().count(), 2, "one image: {listed}");
    assert!(listed.contains(&reference), "{listed}");
    // The retained checkpoint's snapshots pin the image: a prune keeps it.
    let pruned = rollpoint(&[
        OsStr::new("images"),
        OsStr::new("prune"),
        OsStr::new("--run"),
        run,
    ]);
    let snapshots = std::fs::read_dir(run_dir.join("owner/snapshots"))
        .expect("snapshots")
        .count();
    if snapshots > 0 {
        assert!(pruned.contains("removed 0 images, 0 layers"), "{pruned}");
    }
    let layers = std::fs::read_dir(run_dir.join("owner/images/layers"))
        .expect("layers")
        .count();
    assert_eq!(layers, if snapshots > 0 { 3 } else { 0 }, "{pruned}");
    assert!(!Path::new(&run_dir.join("owner/images/layers/.partial")).exists());
}

#[test]
fn root_opencode_on_an_image_continues_its_session_after_a_crash() {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let harnesses = std::env::var(rollpoint_driver::adapter::harness::HARNESS_DIR_VAR)
        .unwrap_or_else(|_| rollpoint_driver::adapter::harness::DEFAULT_HARNESS_DIR.to_owned());
    let opencode = Path::new(&harnesses).join("node_modules/.bin/opencode");
    assert!(
        opencode.exists(),
        "{} is missing: run scripts/install-harnesses",
        opencode.display()
    );
    let native = std::fs::canonicalize(&opencode).expect("opencode");
    let layout = build_harness_layout(dir.path(), &[&native]);
    let registry = Registry::start();
    let reference = registry.push(&layout, "tasks/opencode:1");
    let case = harness::Case::new(harness::OPENCODE, 'i', &[(1500, 600); 6])
        .on_base(
            serde_json::json!({"kind": "image", "ref": reference}),
            Some("/.rollpoint/harnesses/node_modules/.bin/opencode"),
        )
        // The image's User: the harness edits the workdir as uid 1000.
        .written_by(1000);
    harness::crash_after_mid_tool_checkpoint_of(case);
    drop(registry);
}
