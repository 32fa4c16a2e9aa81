//! Trajectories through the whole stack (root): the native worker against the scripted model
//! in token mode, behind a gateway capturing tokens. A run paused in place twice, then killed
//! and resumed, exports a trajectory with no token break and no repeated model call whose
//! loss mask covers exactly the completion tokens, identical (ids, mask, logprobs) to the
//! trajectory of the same task run with no checkpoint and no crash. While it runs, the
//! control endpoint serves the trajectory so far, not trainable yet. The Parquet export holds
//! the same segment.

mod common;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rollpoint_testkit::{require_root, supervisor_bin};
use rollpoint_trajectory::Trajectory;

const LIMIT: Duration = Duration::from_secs(300);
const TOKEN: &str = "trajectory-token";

/// Each step's answer takes 700 ms and its tool almost nothing, so a checkpoint taken just
/// after a request reached the model lands in that model call.
fn slow_model_script() -> serde_json::Value {
    let steps: Vec<serde_json::Value> = (1..=STEPS)
        .map(|n| serde_json::json!({"shell": [format!("echo step {n} >> work.txt")], "delay_ms": 700}))
        .collect();
    serde_json::json!({"version": 1, "steps": steps,
                       "after_last": {"text": "done", "delay_ms": 700}})
}

struct Run {
    _dir: tempfile::TempDir,
    run_dir: PathBuf,
    log: PathBuf,
    args: Vec<std::ffi::OsString>,
}

impl Run {
    fn new(id: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("rp")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let tasks = dir.path().join("tasks.jsonl");
        write_jsonl(&tasks, &[native_task(id)]);
        std::fs::write(
            dir.path().join("model.json"),
            slow_model_script().to_string(),
        )
        .expect("script");
        let config = dir.path().join("run.toml");
        std::fs::write(
            &config,
            "v = 1\ncheckpoint_every_s = 0\nmodel_script = \"model.json\"\nmodel_tokens = \"vllm\"\n",
        )
        .expect("config");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token");
        let run_dir = dir.path().join("r");
        let args = run_args_listening(&tasks, &config, &run_dir, &supervisor_bin(), &token_file);
        Self {
            log: dir.path().join("stderr.log"),
            _dir: dir,
            run_dir,
            args,
        }
    }

    fn spawn(&self) -> std::process::Child {
        let args: Vec<&OsStr> = self
            .args
            .iter()
            .map(std::ffi::OsString::as_os_str)
            .collect();
        spawn(&args, &self.log)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the model has been asked for step `step`.
    fn wait_step(&self, step: u64) {
        let end = Instant::now() + LIMIT;
        loop {
            let asked = std::fs::read_to_string(self.run_dir.join("model-script.log"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .any(|e| e["step"].as_u64() >= Some(step));
            if asked {
                return;
            }
            assert!(
                Instant::now() < end,
                "step {step} never asked:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `rollpoint export RUN_DIR --out F`, read back.
    fn export(&self) -> Vec<Trajectory> {
        let out = self.run_dir.with_extension("trajectories.jsonl");
        let mut child = spawn(
            &[
                OsStr::new("export"),
                self.run_dir.as_os_str(),
                OsStr::new("--out"),
                out.as_os_str(),
            ],
            &self.log,
        );
        let status = wait(&mut child, LIMIT, &self.log);
        assert!(status.success(), "export failed:\n{}", self.stderr());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&out).expect("export file").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&out).expect("read export");
        rollpoint_trajectory::jsonl::read(&text).expect("trajectories")
    }
}

impl Run {
    /// `rollpoint export RUN_DIR --format parquet`, to standard output: one row per segment.
    fn export_parquet_tokens(&self) -> Vec<Vec<i64>> {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::record::{Field, RowAccessor};
        let out = std::process::Command::new(rollpoint_testkit::rollpoint_bin())
            .args([OsStr::new("export"), self.run_dir.as_os_str()])
            .args(["--format", "parquet"])
            .output()
            .expect("export");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let reader = SerializedFileReader::new(bytes::Bytes::from(out.stdout)).expect("parquet");
        reader
            .get_row_iter(None)
            .expect("rows")
            .map(|row| {
                let row = row.expect("row");
                row.get_list(8)
                    .expect("tokens")
                    .elements()
                    .iter()
                    .map(|f| match f {
                        Field::Int(x) => i64::from(*x),
                        other => panic!("{other:?}"),
                    })
                    .collect()
            })
            .collect()
    }
}

fn check_trainable(t: &Trajectory, what: &str) {
    assert!(t.trainable, "{what}: {:?}", t.not_trainable);
    assert!(t.token_breaks.is_empty(), "{what}: {:?}", t.token_breaks);
    assert_eq!(t.segments.len(), 1, "{what}");
    assert_eq!(t.reward, Some(1.0), "{what}");
    assert_eq!(
        t.calls.len(),
        STEPS as usize + 1,
        "{what}: one call per step and the last"
    );
    // The mask is 1 exactly on each call's completion, in order.
    let seg = &t.segments[0];
    let mut want = Vec::new();
    let mut at = 0;
    for c in &t.calls {
        want.extend(std::iter::repeat_n(0u8, c.prompt_ids.len() - at));
        want.extend(std::iter::repeat_n(1u8, c.completion_ids.len()));
        at = c.prompt_ids.len() + c.completion_ids.len();
        assert!(
            c.logprobs
                .as_ref()
                .is_some_and(|l| l.len() == c.completion_ids.len())
        );
    }
    assert_eq!(seg.loss_mask, want, "{what}");
    assert_eq!(seg.tokens.len(), want.len());
    let generated: usize = t.calls.iter().map(|c| c.completion_ids.len()).sum();
    assert_eq!(seg.loss_mask.iter().filter(|&&m| m == 1).count(), generated);
}

#[test]
fn root_a_paused_crashed_and_resumed_rollout_exports_the_trajectory_of_an_untouched_one() {
    require_root();
    let id = format!("j{:04x}n", fastrand::u16(..));

    // The reference: the same task with no checkpoint and no crash.
    let clean = Run::new(&id);
    let mut child = clean.spawn();
    assert!(
        wait(&mut child, LIMIT, &clean.log).success(),
        "{}",
        clean.stderr()
    );
    let reference = clean.export();
    assert_eq!(reference.len(), 1);
    check_trainable(&reference[0], "clean run");

    let run = Run::new(&id);
    let mut child = run.spawn();
    wait_file(&run.run_dir.join("control.json"), LIMIT, &run.log);
    // Two checkpoints that keep the processes running in place, each in a model call.
    run.wait_step(1);
    checkpoint_held(&run.run_dir, TOKEN, 0);
    run.wait_step(2);
    // The trajectory so far over the control endpoint: calls, not trainable yet.
    let (status, so_far) = control(
        &run.run_dir,
        TOKEN,
        "GET",
        &format!("/v1/rollouts/{id}/trajectory"),
        None,
    );
    assert_eq!(status, 200, "{so_far}");
    assert_eq!(so_far["trainable"], false, "{so_far}");
    assert_eq!(
        so_far["not_trainable"]["reason"], "not_finished",
        "{so_far}"
    );
    assert!(
        so_far["calls"].as_array().is_some_and(|c| !c.is_empty()),
        "{so_far}"
    );
    let (status, missing) = control(
        &run.run_dir,
        TOKEN,
        "GET",
        "/v1/rollouts/nobody/trajectory",
        None,
    );
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    checkpoint_held(&run.run_dir, TOKEN, 0);
    run.wait_step(3);
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    kill(pid, Signal::SIGKILL).expect("kill the run");
    assert!(!wait(&mut child, LIMIT, &run.log).success());
    let mut resume = spawn(&[OsStr::new("resume"), run.run_dir.as_os_str()], &run.log);
    assert!(
        wait(&mut resume, LIMIT, &run.log).success(),
        "resume:\n{}",
        run.stderr()
    );

    let n = rollpoint_testkit::assert_no_repeated_model_call(&run.run_dir.join("model-script.log"));
    assert!(n > STEPS as usize);
    let got = run.export();
    assert_eq!(got.len(), 1);
    let t = &got[0];
    assert!(
        t.attempt >= 1,
        "the crash came before the end: attempt {}",
        t.attempt
    );
    check_trainable(t, "checkpointed, crashed and resumed run");
    let (a, b) = (&reference[0].segments[0], &t.segments[0]);
    assert_eq!(b.tokens, a.tokens, "the same tokens");
    assert_eq!(b.loss_mask, a.loss_mask, "the same mask");
    assert_eq!(b.logprobs, a.logprobs, "the same logprobs");
    assert!(t.metrics.checkpoints >= 1, "{:?}", t.metrics);
    // The same segment as a Parquet row.
    let rows = run.export_parquet_tokens();
    let want: Vec<i64> = b.tokens.iter().map(|&x| i64::from(x)).collect();
    assert_eq!(rows, [want]);
    assert!(
        t.calls.iter().any(|c| c.call_id.contains("-a")),
        "the resumed attempt's calls are on the chain"
    );
}
