//! Losing a node (root): two nodes on one machine, each an owner and an agent with its own
//! run directory and snapshot store, one gateway, one coordinator, all keeping checkpoints in
//! a real S3 server (moto's). Rollouts run on both nodes, a checkpoint is taken, then node A's
//! processes are killed with SIGKILL and its whole directory deleted (its sandboxes with it),
//! and the coordinator's directory too. A new coordinator on the surviving participants
//! restores node A's rollouts onto node B from the store alone: node B fetches their
//! snapshots (btrfs send streams), forks them, and every rollout of both nodes finishes
//! exactly once and verified, node A's as their next attempt continuing from the checkpoint
//! (a counting task resumes past its checkpointed line; the native worker from its journal).
//! No model call reaches the scripted model twice.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::{Client, StatusCode};
use rollpoint_testkit::s3::{S3Server, SECRET};
use rollpoint_testkit::services::Services;
use rollpoint_testkit::{mounts_under, require_root, supervisor_bin};
use serde_json::{Value, json};

const TOKEN: &str = "node-loss-token";
const LINES: u32 = 40;
const STEPS: u32 = 6;

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// Appends 1..=LINES to `lines`, continuing from the file's length, and records the length
/// each launch started from in `starts`; the verdict's reward is 1 plus the last start (so a
/// rollout that continued from its checkpoint has a reward above 1).
fn counting_task(id: &str) -> Value {
    let script = format!(
        "n=$(wc -l < lines 2>/dev/null || echo 0); echo \"$n\" >> starts; while [ \"$n\" -lt {LINES} ]; do n=$((n+1)); echo \"$n\" >> lines; sleep 0.2; done"
    );
    let check = format!(
        "if seq 1 {LINES} | cmp -s - lines; then echo \"{{\\\"reward\\\": $((1 + $(tail -n 1 starts)))}}\"; else echo '{{\"reward\": -1}}'; fi"
    );
    json!({
        "v": 1,
        "task": {"id": id, "verify": {"command": ["/bin/sh", "-c", check], "reward": "json"}},
        "adapter": {"kind": "command", "argv": ["/bin/sh", "-c", script], "pauses": true}
    })
}

fn native_task(id: &str) -> Value {
    rollpoint_testkit::native_task(id, STEPS)
}

struct Cluster {
    dir: tempfile::TempDir,
    services: Services,
    token: PathBuf,
    store_args: Vec<String>,
    gateway: String,
}

impl Cluster {
    /// An owner and an agent on node `name`, each with the node's run directory.
    fn node(
        &mut self,
        name: &'static str,
        agent: &'static str,
        owner: &'static str,
    ) -> (String, String) {
        let run = self.dir.path().join(name);
        let (token, store_args) = (self.token.clone(), self.store_args.clone());
        let flags: Vec<&OsStr> = store_args.iter().map(|s| os(s)).collect();
        let sup = supervisor_bin();
        let gateway = self.gateway.clone();
        let mut args: Vec<&OsStr> = vec![
            os("serve"),
            os("owner"),
            os("--gateway"),
            os(&gateway),
            os("--run-dir"),
            run.as_os_str(),
            os("--token-file"),
            token.as_os_str(),
            os("--instance"),
            os(owner),
            os("--supervisor"),
            sup.as_os_str(),
            os("--snapshot-full-every"),
            os("4"),
        ];
        args.extend(flags.iter().copied());
        let owner_url = url(self.services.start(owner, &args));
        let mut args: Vec<&OsStr> = vec![
            os("serve"),
            os("agent"),
            os("--run-dir"),
            run.as_os_str(),
            os("--token-file"),
            token.as_os_str(),
            os("--owner"),
            os(&owner_url),
            os("--gateway"),
            os(&gateway),
            os("--instance"),
            os(agent),
        ];
        args.extend(flags.iter().copied());
        let agent_url = url(self.services.start(agent, &args));
        (owner_url, agent_url)
    }

    fn coordinator(&mut self, name: &'static str, participants: &[String]) -> String {
        let run = self.dir.path().join(name);
        let (token, store_args) = (self.token.clone(), self.store_args.clone());
        let flags: Vec<&OsStr> = store_args.iter().map(|s| os(s)).collect();
        let mut args: Vec<&OsStr> = vec![
            os("serve"),
            os("coordinator"),
            os("--run-dir"),
            run.as_os_str(),
            os("--token-file"),
            token.as_os_str(),
        ];
        for p in participants {
            args.push(os("--participant"));
            args.push(os(p));
        }
        args.extend(flags.iter().copied());
        url(self.services.start(name, &args))
    }
}

async fn post(http: &Client, base: &str, path: &str, body: &Value) -> (StatusCode, Value) {
    let reply = http
        .post(format!("{base}{path}"))
        .bearer_auth(TOKEN)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = reply.status();
    (
        status,
        serde_json::from_slice(&reply.bytes().await.unwrap()).unwrap(),
    )
}

async fn get(http: &Client, url: &str) -> (StatusCode, Value) {
    let reply = http.get(url).bearer_auth(TOKEN).send().await.unwrap();
    let status = reply.status();
    (
        status,
        serde_json::from_slice(&reply.bytes().await.unwrap()).unwrap(),
    )
}

/// Waits until every rollout the agent holds is running.
async fn all_running(http: &Client, agent: &str, n: usize) {
    let end = Instant::now() + Duration::from_secs(180);
    loop {
        let (_, list) = get(http, &format!("{agent}/v1/rollouts")).await;
        let rollouts = list["rollouts"].as_array().cloned().unwrap_or_default();
        if rollouts.len() == n && rollouts.iter().all(|r| r["state"] == "running") {
            return;
        }
        assert!(Instant::now() < end, "rollouts never all ran: {list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn lines_of(run: &Path) -> Vec<String> {
    mounts_under(run)
}

#[tokio::test(flavor = "multi_thread")]
async fn root_a_lost_nodes_rollouts_finish_on_another_node_from_the_object_store() {
    require_root();
    let s3 = S3Server::start();
    let dir = tempfile::Builder::new()
        .prefix("nl")
        .tempdir_in("/var/tmp")
        .unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let options = s3.options_file(dir.path(), "");
    let store_args = vec![
        "--checkpoint-store".to_owned(),
        s3.url("cluster"),
        "--checkpoint-store-options".to_owned(),
        options.display().to_string(),
    ];
    let script = dir.path().join("model.json");
    std::fs::write(
        &script,
        rollpoint_testkit::native_model_script(STEPS, 500).to_string(),
    )
    .unwrap();
    let model_log = dir.path().join("model.log");
    let mut cluster = Cluster {
        services: Services::new(logs),
        token: token.clone(),
        store_args,
        gateway: String::new(),
        dir,
    };
    let model = cluster.services.start(
        "model",
        &[
            os("model-script"),
            os("--script"),
            script.as_os_str(),
            os("--log"),
            model_log.as_os_str(),
        ],
    );
    let gw_run = cluster.dir.path().join("gw");
    std::fs::create_dir_all(gw_run.join("gateway")).unwrap();
    let ledger = gw_run.join("gateway/ledger.sqlite");
    let upstream = url(model);
    let mut args: Vec<&OsStr> = vec![
        os("serve"),
        os("gateway"),
        os("--upstream"),
        os(&upstream),
        os("--api"),
        os("all"),
        os("--db"),
        ledger.as_os_str(),
        os("--open-keys"),
        os("--run-dir"),
        gw_run.as_os_str(),
        os("--control-token-file"),
        token.as_os_str(),
    ];
    let flags: Vec<String> = cluster.store_args.clone();
    args.extend(flags.iter().map(|s| os(s)));
    cluster.gateway = url(cluster.services.start("gateway", &args));
    let (owner_a, agent_a) = cluster.node("a", "agent-a", "owner-a");
    let (owner_b, agent_b) = cluster.node("b", "agent-b", "owner-b");
    let gateway = cluster.gateway.clone();
    let coordinator = cluster.coordinator(
        "coord",
        &[
            format!("model={gateway}"),
            format!("agent={agent_a}"),
            format!("agent={agent_b}"),
            format!("resources={owner_a}"),
            format!("resources={owner_b}"),
        ],
    );

    let http = Client::new();
    let on_a = ["a-c0", "a-c1", "a-n"];
    let on_b = ["b-c0", "b-n"];
    for (agent, ids) in [(&agent_a, &on_a[..]), (&agent_b, &on_b[..])] {
        for id in ids {
            let task = if id.ends_with("-n") {
                native_task(id)
            } else {
                counting_task(id)
            };
            let (status, reply) = post(&http, agent, "/v1/rollouts", &task).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{id}: {reply}");
        }
    }
    all_running(&http, &agent_a, on_a.len()).await;
    all_running(&http, &agent_b, on_b.len()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, checkpoint) = post(
        &http,
        &coordinator,
        "/v1/coordinator/checkpoint",
        &json!({"v": 1}),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{checkpoint}\n{}",
        cluster.services.log("coord")
    );

    // Node A is lost: its processes die at once, then its directory goes with its sandboxes.
    cluster.services.kill("agent-a");
    cluster.services.kill("owner-a");
    cluster.services.kill("coord");
    let node_a = cluster.dir.path().join("a");
    let swept = std::process::Command::new(rollpoint_testkit::rollpoint_bin())
        .args([os("sweep"), node_a.as_os_str()])
        .output()
        .unwrap();
    assert!(
        swept.status.success(),
        "{}",
        String::from_utf8_lossy(&swept.stderr)
    );
    std::fs::remove_dir_all(&node_a).unwrap();
    std::fs::remove_dir_all(cluster.dir.path().join("coord")).unwrap();

    // A coordinator on what is left, with a directory of its own: the store is all it has.
    let coordinator = cluster.coordinator(
        "coord2",
        &[
            format!("model={gateway}"),
            format!("agent={agent_b}"),
            format!("resources={owner_b}"),
        ],
    );
    let (status, restored) = post(
        &http,
        &coordinator,
        "/v1/coordinator/restore",
        &json!({"v": 1, "moves": [
            {"kind": "agent", "from": "agent-a", "to": "agent-b"},
            {"kind": "resources", "from": "owner-a", "to": "owner-b"}
        ]}),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{restored}\n{}",
        cluster.services.log("coord2")
    );
    assert_eq!(restored["source"], checkpoint["id"]);
    let moved: Vec<String> = restored["restored"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["kind"] == "agent")
        .unwrap()["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_owned())
        .collect();
    eprintln!("moved to node B: {moved:?}");
    assert_eq!(moved, ["a-c0-a1", "a-c1-a1", "a-n-a1"]);

    for id in on_a.iter().chain(&on_b) {
        let (status, result) = get(
            &http,
            &format!("{agent_b}/v1/rollouts/{id}/result?wait_ms=180000"),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{id}: {result}\n{}",
            cluster.services.log("agent-b")
        );
        assert_eq!(result["status"], "verified", "{id}: {result}");
        assert_eq!(result["verdict"]["passed"], true, "{id}: {result}");
        let moved_here = on_a.contains(id);
        assert_eq!(result["attempt"], u32::from(moved_here), "{id}: {result}");
        if moved_here && id.contains("-c") {
            let reward = result["verdict"]["reward"].as_f64().unwrap();
            assert!(
                reward > 1.0,
                "{id} continued past its checkpointed line: {result}"
            );
        }
    }
    let n = rollpoint_testkit::assert_no_repeated_model_call(&model_log);
    assert!(
        n >= 2 * STEPS as usize,
        "both workers called the model: {n}"
    );
    let log_b = cluster.services.log("owner-b");
    assert!(
        log_b.contains("snapshots fetched from the checkpoint store"),
        "{log_b}"
    );
    for name in ["gateway", "agent-b", "owner-b", "coord2", "model"] {
        assert!(
            !cluster.services.log(name).contains(SECRET),
            "{name}'s log holds the secret"
        );
    }
    cluster.services.stop();
    let left = lines_of(&cluster.dir.path().join("b"));
    assert!(left.is_empty(), "mounts left on node B: {left:?}");
}
