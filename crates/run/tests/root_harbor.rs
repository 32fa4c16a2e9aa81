//! Harbor datasets through `rollpoint run` (root), on images from a
//! loopback registry, one environment built with buildah from a Dockerfile:
//! the oracle passes every task and an agent that tries to cheat (reads the
//! tests, plants a reward file and its own test files) passes none, both
//! `verified`; the tests are nowhere in the run until grading; a Dockerfile
//! is built once for every sample and every later run; samples come as
//! groups with pass@k in the report; a checkpoint, a SIGKILL and a resume in
//! the middle lose nothing; a multi-container task is refused by name.
//! Infrastructure failures (a failing setup, a sandbox killed mid-run, an
//! unreachable model, an environment that does not build) end as
//! `infra_error` with their class, never a reward, and `retry_infra` runs
//! them again in a fresh sandbox. OpenCode does one Harbor task against the
//! scripted model.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use rollpoint_driver::{InfraClass, RolloutResult, Status};
use rollpoint_testkit::images::{Registry, build_harness_layout};
use rollpoint_testkit::{require_root, supervisor_bin};

const LIMIT: Duration = Duration::from_secs(400);

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

/// A task directory: `task.toml`, `instruction.md`, `tests/test.sh` and
/// `solution/solve.sh`.
fn task(ds: &Path, name: &str, toml: &str, test: &str, solve: &str) -> PathBuf {
    let dir = ds.join(name);
    write(&dir.join("task.toml"), toml);
    write(
        &dir.join("instruction.md"),
        &format!("Do the task {name}.\n"),
    );
    write(
        &dir.join("tests/test.sh"),
        &format!("#!/bin/bash\n{test}\n"),
    );
    write(
        &dir.join("solution/solve.sh"),
        &format!("#!/bin/bash\n{solve}\n"),
    );
    dir
}

/// `test.sh` body: reward 1 in reward.txt when `check` passes, else 0.
fn reward_if(check: &str) -> String {
    format!(
        "if {check}; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi"
    )
}

/// `rollpoint run harbor:SOURCE` into `dir/NAME` (its stderr in
/// `dir/NAME.log`), started: the child, the run directory and the log.
fn spawn_harbor(
    dir: &Path,
    name: &str,
    source: &Path,
    config: &Path,
    extra: &[&str],
) -> (std::process::Child, PathBuf, PathBuf) {
    let run_dir = dir.join(name);
    let log = dir.join(format!("{name}.log"));
    let sup = supervisor_bin();
    let source = format!("harbor:{}", source.display());
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("run"),
        OsStr::new(&source),
        OsStr::new("--config"),
        config.as_os_str(),
        OsStr::new("--run-dir"),
        run_dir.as_os_str(),
        OsStr::new("--supervisor"),
        sup.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let child = spawn(&args, &log);
    (child, run_dir, log)
}

/// [`spawn_harbor`] waited for: its exit status, the run directory and the log.
fn run_harbor(
    dir: &Path,
    name: &str,
    source: &Path,
    config: &Path,
    extra: &[&str],
) -> (std::process::ExitStatus, PathBuf, PathBuf) {
    let (mut child, run_dir, log) = spawn_harbor(dir, name, source, config, extra);
    let status = wait(&mut child, LIMIT, &log);
    (status, run_dir, log)
}

/// `rollpoint report RUN_DIR --out OUT` (it must succeed): the run's document the page
/// draws (its `rp-view` block).
fn report_page(run_dir: &Path, out: &Path) -> serde_json::Value {
    let done = std::process::Command::new(rollpoint_bin())
        .args([
            OsStr::new("report"),
            run_dir.as_os_str(),
            OsStr::new("--out"),
        ])
        .arg(out)
        .output()
        .expect("report");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let page = std::fs::read_to_string(out).expect("report page");
    let open = "<script type=\"application/json\" id=\"rp-view\">";
    let start = page.find(open).expect("the page holds the run's document") + open.len();
    let len = page[start..].find("</script>").expect("the block ends");
    serde_json::from_str(&page[start..start + len]).expect("the run's document is JSON")
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

fn by_rollout(rows: &[RolloutResult]) -> std::collections::BTreeMap<&str, &RolloutResult> {
    let map: std::collections::BTreeMap<&str, &RolloutResult> =
        rows.iter().map(|r| (r.rollout.as_str(), r)).collect();
    assert_eq!(map.len(), rows.len(), "a rollout has two rows: {rows:#?}");
    map
}

fn archives(cache: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cache.join("builds"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".oci.tar"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn root_a_harbor_dataset_is_graded_by_its_own_tests_and_never_by_the_agent() {
    require_root();
    let tmp = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let dir = tmp.path();
    let layout = build_harness_layout(&dir.join("img"), &[]);
    let registry = Registry::start();
    let image = registry.push(&layout, "harbor/base:1");
    let secret = format!("secret-{:016x}", fastrand::u64(..));
    let ds = dir.join("dataset");
    let as_root = "[agent]\nuser = \"root\"\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n";
    task(
        &ds,
        "image-task",
        &format!("version = \"1.0\"\n[environment]\ndocker_image = \"{image}\"\n{as_root}"),
        &reward_if("[ \"$(cat /out.txt)\" = hello ]"),
        "echo hello > /out.txt",
    );
    let built = task(
        &ds,
        "built-task",
        &format!("schema_version = \"1.4\"\n[environment]\nbuild_timeout_sec = 300\n{as_root}"),
        &reward_if(
            "[ \"$(cat /srv/work/answer)\" = \"$(cat /srv/data/seed.txt) $GREETING\" ] && \
             [ \"$(pwd)\" = /srv/work ] && [ \"$(cat /srv/data/marker)\" = built ]",
        ),
        "echo \"$(cat /srv/data/seed.txt) $GREETING\" > answer",
    );
    write(
        &built.join("environment/Dockerfile"),
        &format!(
            "FROM {image}\nUSER root\nRUN mkdir -p /srv/data /srv/work && echo built > /srv/data/marker\n\
             COPY seed.txt /srv/data/seed.txt\nWORKDIR /srv/work\nENV GREETING=bonjour\n"
        ),
    );
    write(&built.join("environment/seed.txt"), "seed-42\n");
    task(
        &ds,
        "json-task",
        &format!("[environment]\ndocker_image = \"{image}\"\nmemory = \"1G\"\n{as_root}"),
        "if [ \"$(cat /json.txt)\" = ok ]; then echo '{\"reward\": 1.0, \"style\": 0.5}' > /logs/verifier/reward.json; \
         else echo '{\"reward\": 0, \"style\": 0}' > /logs/verifier/reward.json; fi",
        "echo ok > /json.txt",
    );
    let hidden = task(
        &ds,
        "hidden-task",
        &format!("[environment]\ndocker_image = \"{image}\"\n{as_root}"),
        &reward_if(
            "[ \"$(cat /answer.txt)\" = \"$(cat /tests/secret.txt)\" ] && [ ! -e /tests/planted.sh ]",
        ),
        &format!("echo {secret} > /answer.txt"),
    );
    write(&hidden.join("tests/secret.txt"), &format!("{secret}\n"));
    let compose = task(
        &ds,
        "compose-task",
        &format!("[environment]\ndocker_image = \"{image}\"\n"),
        "exit 0",
        "exit 0",
    );
    write(
        &compose.join("environment/docker-compose.yaml"),
        "services: {}\n",
    );

    let cache = dir.join("cache");
    let config = dir.join("run.toml");
    write(
        &config,
        &format!(
            "v = 1\nconcurrency = 4\ncheckpoint_every_s = 0\nimage_cache = \"{}\"\n",
            cache.display()
        ),
    );

    // A multi-container task stops the run, named, unless told to skip it.
    let (status, _, log) = run_harbor(dir, "refused", &ds, &config, &["--agent", "oracle"]);
    let text = log_text(&log);
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("compose-task") && text.contains("docker-compose.yaml"),
        "{text}"
    );
    assert!(
        archives(&cache).is_empty(),
        "nothing is built before every task is read"
    );

    // The oracle, four samples of each task: every one passes.
    let (status, run_dir, log) = run_harbor(
        dir,
        "oracle",
        &ds,
        &config,
        &["--agent", "oracle", "--samples", "4", "--skip-refused"],
    );
    let text = log_text(&log);
    assert!(status.success(), "{text}");
    assert!(text.contains("task compose-task refused"), "{text}");
    assert_eq!(text.matches("environment built").count(), 1, "{text}");
    assert_eq!(archives(&cache).len(), 1, "one build for every sample");
    let rows = rollpoint_run::read_results(&run_dir).expect("results");
    let rows_by = by_rollout(&rows);
    for name in ["built-task", "hidden-task", "image-task", "json-task"] {
        for s in 0..4 {
            let r = rows_by
                .get(format!("{name}.s{s}").as_str())
                .unwrap_or_else(|| panic!("{name}.s{s}: {rows:#?}"));
            assert_eq!(r.status, Status::Verified, "{r:#?}\n{text}");
            assert_eq!(r.reward, Some(1.0), "{r:#?}");
            assert_eq!(r.group.as_deref(), Some(name));
        }
    }
    assert_eq!(rows.len(), 16, "four rows a task, the refused one none");
    let json = rows_by["json-task.s0"].verdict.as_ref().expect("verdict");
    assert_eq!(json.rewards.get("style"), Some(&0.5), "{json:?}");
    let view = report_page(&run_dir, &dir.join("oracle.html"));
    assert_eq!(view["groups"]["k"], 4, "pass@4 table");
    let row = view["groups"]["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["group"] == "json-task"))
        .expect("json-task's group row");
    assert_eq!(
        (&row["samples"], &row["passed"], &row["infra_errors"]),
        (&4.into(), &4.into(), &0.into()),
        "{row}"
    );
    assert_eq!(row["pass_at_1"], 1.0, "{row}");
    assert_eq!(row["pass_at_k"], 1.0, "{row}");

    // An agent that tries to cheat, checkpointed, killed and resumed
    // mid-run: it finds no tests, its planted reward and test files count
    // for nothing, the loop it leaves rewriting the reward file is stopped
    // before grading, and the Dockerfile is not built again.
    let cheat = format!(
        "sleep 3; cat /tests/secret.txt > /answer.txt 2>/dev/null; \
         cat {}/tests/secret.txt >> /answer.txt 2>/dev/null; \
         mkdir -p /logs/verifier /tests; echo 1 > /logs/verifier/reward.txt; \
         echo '{{\"reward\": 1}}' > /logs/verifier/reward.json; \
         echo 'echo 1 > /logs/verifier/reward.txt' > /tests/planted.sh; \
         ls /tests > /seen.txt 2>&1; sleep 2; \
         (while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; sleep 0.01; done) \
         </dev/null >/dev/null 2>&1 &",
        hidden.display()
    );
    let kill_config = dir.join("kill.toml");
    write(
        &kill_config,
        &format!(
            "v = 1\nconcurrency = 4\ncheckpoint_every_s = 1\nimage_cache = \"{}\"\n",
            cache.display()
        ),
    );
    let (mut child, run_dir, log) = spawn_harbor(
        dir,
        "cheat",
        &ds,
        &kill_config,
        &["--agent", &cheat, "--skip-refused"],
    );
    wait_file(&run_dir.join("checkpoints/LATEST"), LIMIT, &log);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // Nothing graded yet: the tests were never in a sandbox, so no
    // checkpoint, upper or run file holds them. The snapshot store is read
    // through its mount (it stays mounted after the SIGKILL), not as its
    // sparse image file.
    let store = run_dir.join("owner/store");
    assert!(
        std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&*store.to_string_lossy()),
        "the snapshot store is mounted"
    );
    assert_eq!(
        files_holding(&run_dir, secret.as_bytes()),
        Vec::<String>::new()
    );
    let mut resume = spawn(&[OsStr::new("resume"), run_dir.as_os_str()], &log);
    let status = wait(&mut resume, LIMIT, &log);
    let text = log_text(&log);
    assert!(status.success(), "{text}");
    assert!(!text.contains("environment built"), "built again:\n{text}");
    assert_eq!(archives(&cache).len(), 1);
    let rows = rollpoint_run::read_results(&run_dir).expect("results");
    let rows_by = by_rollout(&rows);
    assert_eq!(rows_by.len(), 4, "{rows:#?}");
    for r in &rows {
        assert_eq!(r.status, Status::Verified, "{r:#?}\n{text}");
        assert_eq!(r.reward, Some(0.0), "the cheat paid: {r:#?}");
        assert!(r.infra_class.is_none());
    }
}

/// Every regular file under `dir` that holds `needle`, but for filesystem
/// images (`*.img`: sparse, gigabytes long), whose files are read through
/// their mounts instead.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            let path = e.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && !path.to_string_lossy().ends_with(".img")
                && std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle))
            {
                out.push(path.display().to_string());
            }
        }
    }
    out
}

/// The id of a process whose command line holds every one of `words`.
fn pids_with(words: &[&str]) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if words.iter().all(|w| text.contains(w)) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn root_infrastructure_failures_are_never_rewards_and_are_run_again() {
    require_root();
    let tmp = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let dir = tmp.path();
    let tag = format!("f{:04x}", fastrand::u16(..));
    let verify = |check: &str| serde_json::json!({"command": ["/bin/sh", "-c", check]});
    let model_call = "import json, os, sys, urllib.request\n\
        url = os.environ['ROLLPOINT_GATEWAY'].rstrip('/') + '/' + os.environ['ROLLPOINT_CAPTURE_KEY'] + '/v1/chat/completions'\n\
        body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}]}).encode()\n\
        req = urllib.request.Request(url, body, {'content-type': 'application/json'})\n\
        try:\n    urllib.request.urlopen(req, timeout=30)\nexcept Exception as e:\n    print('model call failed:', e, file=sys.stderr); sys.exit(1)\n";
    let rows = vec![
        serde_json::json!({
            "v": 1,
            "task": {"id": format!("{tag}setup"), "setup": [["/bin/sh", "-c", "echo no >&2; exit 3"]], "verify": verify("true")},
            "adapter": {"kind": "command", "argv": ["true"]}
        }),
        serde_json::json!({
            "v": 1,
            "task": {"id": format!("{tag}lost"), "verify": verify("test -f done")},
            "adapter": {"kind": "command", "argv": ["/bin/sh", "-c",
                "if [ \"$ROLLPOINT_ATTEMPT\" = 0 ]; then touch started; sleep 120; fi; touch done"]}
        }),
        serde_json::json!({
            "v": 1,
            "task": {"id": format!("{tag}model"), "verify": verify("true")},
            "adapter": {"kind": "command", "argv": ["python3", "-c", model_call]}
        }),
    ];
    let tasks = dir.join("tasks.jsonl");
    write_jsonl(&tasks, &rows);
    // An upstream nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = dead.local_addr().expect("addr").port();
    drop(dead);
    let config = dir.join("run.toml");
    write(
        &config,
        &format!(
            "v = 1\nconcurrency = 4\ncheckpoint_every_s = 0\nretry_infra = 1\nmodel_retry_s = 1\nmodel_outage_s = 3\nmodel_upstream = \"http://127.0.0.1:{port}\"\n"
        ),
    );
    let run_dir = dir.join("r");
    let log = dir.join("run.log");
    let sup = supervisor_bin();
    let mut child = spawn(&run_args(&tasks, &config, &run_dir, &sup), &log);
    // The first attempt of `lost` is running: its sandbox is killed.
    let deadline = std::time::Instant::now() + LIMIT;
    let lost = format!("{tag}lost");
    let anchors = loop {
        let started = workspaces(&run_dir, &lost)
            .iter()
            .any(|w| w.join("started").exists());
        let anchors = pids_with(&["anchor", &lost]);
        if started && !anchors.is_empty() {
            break anchors;
        }
        assert!(std::time::Instant::now() < deadline, "{}", log_text(&log));
        std::thread::sleep(Duration::from_millis(100));
    };
    for pid in anchors {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let status = wait(&mut child, LIMIT, &log);
    let text = log_text(&log);
    assert!(status.success(), "{text}");
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    let rows = by_rollout(&results);
    let setup = rows[format!("{tag}setup").as_str()];
    assert_eq!(
        (setup.status, setup.infra_class, setup.reward),
        (Status::InfraError, Some(InfraClass::SetupFailed), None),
        "{setup:#?}"
    );
    assert_eq!(setup.infra_retries, [InfraClass::SetupFailed]);
    assert_eq!(setup.attempt, 1, "run again as attempt 1");
    let model = rows[format!("{tag}model").as_str()];
    assert_eq!(
        (model.status, model.infra_class, model.reward),
        (Status::InfraError, Some(InfraClass::ModelUnreachable), None),
        "{model:#?}\n{text}"
    );
    assert_eq!(model.infra_retries, [InfraClass::ModelUnreachable]);
    let lost_row = rows[lost.as_str()];
    assert_eq!(
        (lost_row.status, lost_row.reward),
        (Status::Verified, Some(1.0)),
        "the retry in a fresh sandbox passes: {lost_row:#?}\n{text}"
    );
    assert_eq!(
        lost_row.infra_retries,
        [InfraClass::SandboxLost],
        "{lost_row:#?}"
    );
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).expect("events");
    assert_eq!(events.matches("\"infra_retry\"").count(), 3, "{events}");

    // The report counts them as infrastructure errors, not as failures of the policy.
    let view = report_page(&run_dir, &dir.join("report.html"));
    let infra = &view["summary"]["infra_errors"];
    assert_eq!(
        infra["model_unreachable"], 1,
        "infra classes in the report: {infra}"
    );
    assert_eq!(
        infra["setup_failed"], 1,
        "infra classes in the report: {infra}"
    );
}

#[test]
fn root_an_environment_that_does_not_build_ends_its_samples_as_build_failed() {
    require_root();
    let tmp = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let dir = tmp.path();
    let layout = build_harness_layout(&dir.join("img"), &[]);
    let registry = Registry::start();
    let image = registry.push(&layout, "harbor/base:1");
    let ds = dir.join("dataset");
    let broken = task(
        &ds,
        "broken",
        "[agent]\nuser = \"root\"\n",
        &reward_if("true"),
        "true",
    );
    write(
        &broken.join("environment/Dockerfile"),
        &format!("FROM {image}\nUSER root\nRUN exit 7\n"),
    );
    task(
        &ds,
        "fine",
        &format!("[environment]\ndocker_image = \"{image}\"\n[agent]\nuser = \"root\"\n"),
        &reward_if("true"),
        "true",
    );
    let config = dir.join("run.toml");
    write(&config, "v = 1\ncheckpoint_every_s = 0\n");
    let (status, run_dir, log) = run_harbor(
        dir,
        "r",
        &ds,
        &config,
        &["--agent", "oracle", "--samples", "2"],
    );
    let text = log_text(&log);
    assert!(status.success(), "{text}");
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    let rows = by_rollout(&results);
    for s in 0..2 {
        let r = rows[format!("broken.s{s}").as_str()];
        assert_eq!(
            (r.status, r.infra_class, r.reward),
            (Status::InfraError, Some(InfraClass::BuildFailed), None),
            "{r:#?}"
        );
        assert!(
            r.error.as_deref().unwrap_or_default().contains("buildah"),
            "{r:#?}"
        );
        assert_eq!(rows[format!("fine.s{s}").as_str()].reward, Some(1.0));
    }
}

#[test]
fn root_opencode_does_a_harbor_task_against_the_scripted_model() {
    require_root();
    let harnesses = std::env::var("ROLLPOINT_HARNESS_DIR")
        .unwrap_or_else(|_| "/opt/rollpoint/harnesses".to_owned());
    let opencode = Path::new(&harnesses).join("node_modules/.bin/opencode");
    assert!(
        opencode.exists(),
        "{} is missing: run scripts/install-harnesses",
        opencode.display()
    );
    let tmp = tempfile::Builder::new()
        .prefix("rp")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let dir = tmp.path();
    let native = std::fs::canonicalize(&opencode).expect("opencode");
    let layout = build_harness_layout(&dir.join("img"), &[&native]);
    let registry = Registry::start();
    let image = registry.push(&layout, "harbor/opencode:1");
    let ds = dir.join("dataset");
    let t = task(
        &ds,
        "lines",
        &format!(
            "[environment]\ndocker_image = \"{image}\"\n[agent]\nuser = \"root\"\ntimeout_sec = 300\n"
        ),
        &reward_if("seq 1 3 | cmp -s - /app/lines"),
        "seq 1 3 > /app/lines",
    );
    write(
        &t.join("instruction.md"),
        "Append the numbered lines to the file `lines`, one shell call per line.\n",
    );
    // The strict model: it moves on only once a call's result is in the conversation.
    let steps: Vec<serde_json::Value> = (1..=3)
        .map(|n| serde_json::json!({"shell": [format!("echo {n} >> lines")]}))
        .collect();
    let script = serde_json::json!({
        "version": 1,
        "key": "tool_results",
        "steps": steps,
        "after_last": {"text": "all lines written"},
        "no_tools_text": "Numbered lines"
    });
    write(&dir.join("model.json"), &script.to_string());
    let config = dir.join("run.toml");
    write(
        &config,
        "v = 1\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\n",
    );
    let (status, run_dir, log) = run_harbor(dir, "r", &ds, &config, &["--agent", "opencode"]);
    let text = log_text(&log);
    assert!(status.success(), "{text}");
    let results = rollpoint_run::read_results(&run_dir).expect("results");
    assert_eq!(results.len(), 1, "{results:#?}");
    let r = &results[0];
    assert_eq!(
        (r.status, r.reward),
        (Status::Verified, Some(1.0)),
        "{r:#?}\n{text}"
    );
    assert!(
        r.usage.as_ref().is_some_and(|u| u.model_calls >= 3),
        "{r:#?}"
    );
}
