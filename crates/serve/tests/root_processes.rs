//! A run spread over separate processes on one machine (root): the scripted
//! model, `serve gateway`, `serve owner`, `serve agent` and `serve
//! coordinator`, each a child of this test. Four counting tasks and a
//! native-worker task (its model calls through the gateway) are posted
//! over HTTP, a checkpoint is taken over `/v1/coordinator/checkpoint` while
//! they run, every result is fetched by long poll and passed its check, the
//! checkpoint's manifests verify, and after SIGTERM nothing is left
//! running, mounted or in a cgroup. Then the trainer's recovery: the agent
//! killed with SIGKILL mid-run and started again, a restore over
//! `/v1/coordinator/restore`, and every rollout finishing as its next
//! attempt with every line written exactly once. No model call reaches the
//! scripted model twice.
#![expect(clippy::unwrap_used, reason = "tests")]

use rollpoint_checkpoint::AttemptKey;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::{Client, StatusCode};
use rollpoint_checkpoint::{Kind, store};
use rollpoint_serve::wire::{CheckpointReply, CoordinatorStatus, RolloutList};
use rollpoint_testkit::services::Services;
use rollpoint_testkit::{mounts_under, require_root, sandbox_cgroups, supervisor_bin};
use serde_json::{Value, json};

const TOKEN: &str = "processes-token";
/// Lines each task appends, one every [`TICK`].
const LINES: u32 = 16;
const TICK: &str = "0.25";
const LIMIT: Duration = Duration::from_secs(180);
/// Shell steps of the native worker's script.
const STEPS: u32 = 6;

/// A task appending 1..=`lines` to `lines`, continuing from the file's
/// length; it passes when the file holds each line exactly once and the
/// harness was given `gateway` as ROLLPOINT_GATEWAY.
fn counting_task(id: &str, lines: u32, gateway: &str) -> Value {
    let script = format!(
        "echo \"$ROLLPOINT_GATEWAY\" > gateway; n=$(wc -l < lines 2>/dev/null || echo 0); while [ \"$n\" -lt {lines} ]; do n=$((n+1)); echo \"$n\" >> lines; sleep {TICK}; done"
    );
    let check = format!("seq 1 {lines} | cmp -s - lines && test \"$(cat gateway)\" = {gateway}/r");
    json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["/bin/sh", "-c", check]}},
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", script], "pauses": true}
    })
}

/// A native-worker task: the worker (`$ROLLPOINT_BIN worker`) calls the
/// scripted model through the gateway and runs its STEPS shell steps.
fn native_task(id: &str) -> Value {
    rollpoint_testkit::native_task(id, STEPS)
}

/// Processes whose environment names a rollout starting with `tag`.
fn processes_of(tag: &str) -> Vec<u32> {
    rollpoint_testkit::processes_with_env("ROLLPOINT_ROLLOUT", tag)
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

async fn get_json(http: &Client, url: &str) -> (StatusCode, Value) {
    let reply = http.get(url).bearer_auth(TOKEN).send().await.unwrap();
    let status = reply.status();
    (
        status,
        serde_json::from_slice(&reply.bytes().await.unwrap()).unwrap(),
    )
}

/// The five services of one run, their URLs and its directory.
struct Run {
    _dir: tempfile::TempDir,
    run: PathBuf,
    model_log: PathBuf,
    token: PathBuf,
    services: Services,
    owner: String,
    gateway: String,
    agent: String,
    coordinator: String,
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

impl Run {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(run.join("gateway")).unwrap();
        std::fs::create_dir_all(&logs).unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, TOKEN).unwrap();
        let script = dir.path().join("model.json");
        std::fs::write(
            &script,
            rollpoint_testkit::native_model_script(STEPS, 400).to_string(),
        )
        .unwrap();
        let model_log = dir.path().join("model.log");
        let sup = supervisor_bin();
        let mut services = Services::new(logs);
        let model = services.start(
            "model",
            &[
                os("model-script"),
                os("--script"),
                script.as_os_str(),
                os("--log"),
                model_log.as_os_str(),
            ],
        );
        let ledger = run.join("gateway/ledger.sqlite");
        // The run's route key: every launch's route carries its secret.
        let route_key = run.join("route.key");
        std::fs::write(
            &route_key,
            format!("{{\"v\":1,\"key\":\"{}\"}}", "5a".repeat(32)),
        )
        .unwrap();
        let gateway = url(services.start(
            "gateway",
            &[
                os("serve"),
                os("gateway"),
                os("--upstream"),
                os(&url(model)),
                os("--api"),
                os("all"),
                os("--db"),
                ledger.as_os_str(),
                os("--open-keys"),
                os("--run-dir"),
                run.as_os_str(),
                os("--control-token-file"),
                token.as_os_str(),
                os("--route-key-file"),
                route_key.as_os_str(),
            ],
        ));
        let owner = url(services.start(
            "owner",
            &[
                os("serve"),
                os("owner"),
                os("--gateway"),
                os(&gateway),
                os("--run-dir"),
                run.as_os_str(),
                os("--token-file"),
                token.as_os_str(),
                os("--store"),
                os("copy"),
                os("--supervisor"),
                sup.as_os_str(),
            ],
        ));
        let mut this = Self {
            _dir: dir,
            run,
            model_log,
            token,
            services,
            owner,
            gateway,
            agent: String::new(),
            coordinator: String::new(),
        };
        this.agent = url(this.start_agent("127.0.0.1:0"));
        let coordinator = this.services.start(
            "coordinator",
            &[
                os("serve"),
                os("coordinator"),
                os("--run-dir"),
                this.run.as_os_str(),
                os("--token-file"),
                this.token.as_os_str(),
                os("--participant"),
                os(&format!("model={}", this.gateway)),
                os("--participant"),
                os(&format!("agent={}", this.agent)),
                os("--participant"),
                os(&format!("resources={}", this.owner)),
            ],
        );
        this.coordinator = url(coordinator);
        this
    }

    fn start_agent(&mut self, listen: &str) -> u16 {
        self.services.start(
            "agent",
            &[
                os("serve"),
                os("agent"),
                os("--run-dir"),
                self.run.as_os_str(),
                os("--token-file"),
                self.token.as_os_str(),
                os("--owner"),
                os(&self.owner),
                os("--gateway"),
                os(&self.gateway),
                os("--route-key-file"),
                self.run.join("route.key").as_os_str(),
                os("--concurrency"),
                os("8"),
                os("--listen"),
                os(listen),
            ],
        )
    }

    /// Posts `counting` counting tasks of `lines` lines and one native
    /// task, ids prefixed with `tag`; returns the ids.
    async fn post(&self, http: &Client, tag: &str, counting: usize, lines: u32) -> Vec<String> {
        let mut tasks: Vec<(String, Value)> = (0..counting)
            .map(|i| {
                let id = format!("{tag}-c{i}");
                let task = counting_task(&id, lines, &self.gateway);
                (id, task)
            })
            .collect();
        let native = format!("{tag}-n");
        tasks.push((native.clone(), native_task(&native)));
        for (id, task) in &tasks {
            let reply = http
                .post(format!("{}/v1/rollouts", self.agent))
                .bearer_auth(TOKEN)
                .body(task.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(reply.status(), StatusCode::ACCEPTED, "{id}");
        }
        tasks.into_iter().map(|(id, _)| id).collect()
    }

    /// No model request reached the scripted model twice.
    fn check_model_log(&self) {
        let n = rollpoint_testkit::assert_no_repeated_model_call(&self.model_log);
        assert!(n > STEPS as usize, "the worker called the model: {n}");
    }

    /// Waits until every rollout on the agent runs, then a little more.
    async fn all_running(&self, http: &Client) {
        let end = Instant::now() + LIMIT;
        loop {
            let (_, list) = get_json(http, &format!("{}/v1/rollouts", self.agent)).await;
            let list: RolloutList = serde_json::from_value(list).unwrap();
            if list
                .rollouts
                .iter()
                .all(|r| r.state == rollpoint_serve::wire::RolloutState::Running)
            {
                break;
            }
            assert!(Instant::now() < end, "rollouts never all ran: {list:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    async fn coordinator_post(&self, http: &Client, verb: &str, body: &str) -> Value {
        let reply = http
            .post(format!("{}/v1/coordinator/{verb}", self.coordinator))
            .bearer_auth(TOKEN)
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        let status = reply.status();
        let value: Value = serde_json::from_slice(&reply.bytes().await.unwrap()).unwrap();
        assert_eq!(
            status,
            StatusCode::OK,
            "{verb}: {value}\n{}",
            self.services.log("coordinator")
        );
        value
    }

    /// Every rollout's result, which must have passed its check at `attempt`.
    async fn results_pass(&self, http: &Client, ids: &[String], attempt: u32) {
        for id in ids {
            let (status, result) = get_json(
                http,
                &format!("{}/v1/rollouts/{id}/result?wait_ms=120000", self.agent),
            )
            .await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{id}: {result}\n{}",
                self.services.log("agent")
            );
            assert_eq!(result["status"], "verified", "{id}: {result}");
            assert_eq!(result["verdict"]["passed"], true, "{id}: {result}");
            assert_eq!(result["attempt"], attempt, "{id}: {result}");
        }
    }

    /// Stops every service and checks nothing of rollouts `tag` is left.
    async fn stop_and_check(mut self, tag: &str) {
        self.services.stop();
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let procs = processes_of(tag);
            let mounts = mounts_under(&self.run);
            let groups = sandbox_cgroups(|n| n.contains(tag));
            if procs.is_empty() && mounts.is_empty() && groups.is_empty() {
                break;
            }
            assert!(
                Instant::now() < end,
                "left behind: processes {procs:?}, mounts {mounts:?}, cgroups {groups:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn root_rollouts_over_http_checkpointed_and_forked_by_the_http_coordinator() {
    require_root();
    let run = Run::start();
    let http = Client::new();
    let tag = format!("srv{}", std::process::id());
    let ids = run.post(&http, &tag, 4, LINES).await;
    run.all_running(&http).await;

    let ck = run
        .coordinator_post(&http, "checkpoint", r#"{"v":1}"#)
        .await;
    let ck: CheckpointReply = serde_json::from_value(ck).unwrap();
    let mut keys: Vec<AttemptKey> = ids.iter().map(|id| id.parse().unwrap()).collect();
    keys.sort();
    assert_eq!(ck.scope, keys, "every rollout was in flight");
    assert!(ck.restarts.is_empty(), "{:?}", ck.restarts);
    let count = |kind: Kind| {
        ck.participants
            .iter()
            .find(|m| m.kind == kind)
            .map(|m| m.record_count)
    };
    assert_eq!(count(Kind::Agent), Some(5), "{ck:?}");
    assert_eq!(count(Kind::Resources), Some(5), "{ck:?}");
    assert!(count(Kind::Model).is_some(), "{ck:?}");
    let doc = store::verify(&run.run, &ck.id).unwrap();
    assert_eq!(doc.scope, ck.scope);
    assert_eq!(doc.participants.len(), 3);

    let (_, st) = get_json(&http, &format!("{}/v1/coordinator/status", run.coordinator)).await;
    let st: CoordinatorStatus = serde_json::from_value(st).unwrap();
    assert_eq!(st.latest.as_deref(), Some(ck.id.as_str()));
    assert_eq!(st.peers.len(), 3);
    assert!(st.peers.iter().all(|p| p.error.is_none()), "{st:?}");

    // A counting rollout forked two ways: the branches run on the agent as rollouts of
    // their own, from the checkpoint's state.
    let body = serde_json::json!({"v": 1, "checkpoint": ck.id, "rollout": ids[0], "n": 2});
    let forked = run.coordinator_post(&http, "fork", &body.to_string()).await;
    let branches: Vec<String> = forked["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        branches,
        vec![format!("{}~1", ids[0]), format!("{}~2", ids[0])],
        "{forked}"
    );
    let again = run.coordinator_post(&http, "fork", &body.to_string()).await;
    assert_eq!(
        again["branches"][0],
        format!("{}~3", ids[0]),
        "no number is given out twice: {again}"
    );
    let mut branches = branches;
    branches.extend(
        again["branches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap().to_owned()),
    );

    run.results_pass(&http, &ids, 0).await;
    run.results_pass(&http, &branches, 1).await;
    run.check_model_log();
    run.stop_and_check(&tag).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn root_a_killed_agent_restarted_and_restored_finishes_every_rollout() {
    restore_case("rst", true).await;
}

/// With the agent alive, a restore retires the running attempts (their
/// cancelled runs are not taken for results) and continues each from the
/// checkpoint as its next attempt.
#[tokio::test(flavor = "multi_thread")]
async fn root_a_restore_on_a_live_agent_replaces_the_running_attempts() {
    restore_case("live", false).await;
}

async fn restore_case(prefix: &str, kill_agent: bool) {
    require_root();
    let mut run = Run::start();
    let http = Client::new();
    let tag = format!("{prefix}{}", std::process::id());
    let ids = run.post(&http, &tag, 2, 2 * LINES).await;
    run.all_running(&http).await;
    let ck = run
        .coordinator_post(&http, "checkpoint", r#"{"v":1}"#)
        .await;
    let ck: CheckpointReply = serde_json::from_value(ck).unwrap();
    assert_eq!(ck.scope.len(), 3, "{ck:?}");

    // The agent dies mid-run; its harnesses run on in the owner's sandboxes
    // until the restore retires them.
    if kill_agent {
        let port: u16 = run.agent.rsplit(':').next().unwrap().parse().unwrap();
        run.services.kill("agent");
        tokio::time::sleep(Duration::from_millis(500)).await;
        run.start_agent(&format!("127.0.0.1:{port}"));
    } else {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let restored = run.coordinator_post(&http, "restore", r#"{"v":1}"#).await;
    let restored: rollpoint_serve::wire::RestoreReply = serde_json::from_value(restored).unwrap();
    assert_eq!(restored.source, ck.id);
    let agent_keys = restored
        .restored
        .iter()
        .find(|m| m.kind == Kind::Agent)
        .map(|m| m.keys.clone())
        .unwrap();
    let mut expected: Vec<AttemptKey> = ids
        .iter()
        .map(|id| id.parse::<AttemptKey>().unwrap().next())
        .collect();
    expected.sort();
    let mut agent_keys = agent_keys;
    agent_keys.sort();
    assert_eq!(agent_keys, expected);

    // The verify command compares the file with `seq`: every line once.
    run.results_pass(&http, &ids, 1).await;
    run.check_model_log();
    run.stop_and_check(&tag).await;
}
