//! Test support: a recording in-memory sandbox backend, and a `LocalOwner`
//! over it served on 127.0.0.1:0 with an `HttpOwner` pointed at it.
//!
//! The fake keeps each sandbox's files in a map and answers `exec` from a
//! small script keyed on argv[0]:
//! `true`, `false` (exit 1, stderr `false: failed`), `echo ARGS..`,
//! `cat PATH`, `write PATH TEXT`, `fail CODE MSG` (MSG on stderr),
//! `hang` (times out); anything else exits 127.
#![allow(dead_code, reason = "each test binary uses a different part")]
#![expect(clippy::unwrap_used, reason = "test fixtures")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rollpoint_owner::{HttpOwner, LocalOwner, Owner, OwnerTask};
use rollpoint_proto::anchor::{ExecOutput, ExecRequest, LaunchRequest};
use rollpoint_sandbox::{
    Backend, BackendListing, Error, LaunchHandle, SandboxInfo, SandboxSpec, SnapshotRef,
};

pub const TOKEN: &str = "s3cret-token";

/// One recorded backend call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Create(String),
    Exec(String, Vec<String>, String),
    Launch(String, String),
    Upload(String, String, u32),
    Download(String, String),
    Snapshot(String, String),
    Fork(String, String),
    DeleteSnapshot(String),
    Destroy(String),
    List,
}

type Files = BTreeMap<String, Vec<u8>>;

#[derive(Debug)]
struct Sandbox {
    spec: SandboxSpec,
    files: Files,
    forked_from: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    sandboxes: BTreeMap<String, Sandbox>,
    snapshots: BTreeMap<String, (String, SandboxSpec, Files)>,
    /// Checkpoint -> the snapshots taken for it.
    retained: BTreeMap<String, Vec<String>>,
    calls: Vec<Call>,
    /// Calls (by name) whose next run fails.
    failing: Vec<&'static str>,
}

impl State {
    /// Records `call` and fails it if a failure of it was asked for.
    fn record(&mut self, call: Call, name: &'static str, id: &str) -> Result<(), Error> {
        self.calls.push(call);
        match self.failing.iter().position(|c| *c == name) {
            Some(i) => {
                self.failing.remove(i);
                Err(Error::Invalid {
                    sandbox: id.to_owned(),
                    message: format!("injected {name} failure"),
                })
            }
            None => Ok(()),
        }
    }
}

/// The recording in-memory backend.
#[derive(Debug, Default)]
pub struct FakeBackend {
    state: Mutex<State>,
}

fn unknown(id: &str) -> Error {
    Error::UnknownSandbox {
        sandbox: id.to_owned(),
    }
}

fn info(id: &str, sb: &Sandbox) -> SandboxInfo {
    SandboxInfo {
        id: id.to_owned(),
        root: PathBuf::from(format!("/fake/{id}/root")),
        control: PathBuf::from(format!("/fake/{id}/control")),
        anchor_pid: 4242,
        spec: sb.spec.clone(),
        forked_from: sb.forked_from.clone(),
    }
}

fn output(code: Option<i32>, stdout: String, stderr: String) -> ExecOutput {
    ExecOutput {
        exit_code: code,
        signal: None,
        timed_out: false,
        stdout,
        stderr,
        stdout_truncated: false,
        stderr_truncated: false,
        duration_ms: 1,
    }
}

/// `path` under `cwd` unless absolute.
fn under(cwd: &str, path: &str) -> String {
    if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{}/{path}", cwd.trim_end_matches('/'))
    }
}

impl FakeBackend {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Makes the next `call` (`create`, `exec`, `destroy`, ...) fail.
    pub fn fail_next(&self, call: &'static str) {
        self.state().failing.push(call);
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The live sandboxes.
    pub fn sandboxes(&self) -> Vec<String> {
        self.state().sandboxes.keys().cloned().collect()
    }

    /// The snapshots held.
    /// The snapshots taken for `checkpoint`.
    pub fn retained(&self, checkpoint: &str) -> Vec<String> {
        self.state()
            .retained
            .get(checkpoint)
            .cloned()
            .unwrap_or_default()
    }

    pub fn snapshots(&self) -> Vec<String> {
        self.state().snapshots.keys().cloned().collect()
    }

    /// A file of a live sandbox.
    pub fn file(&self, sandbox: &str, path: &str) -> Option<Vec<u8>> {
        self.state()
            .sandboxes
            .get(sandbox)?
            .files
            .get(path)
            .cloned()
    }

    fn run(files: &mut Files, req: &ExecRequest) -> ExecOutput {
        let args = &req.argv[1..];
        match req.argv[0].as_str() {
            "true" => output(Some(0), String::new(), String::new()),
            "false" => output(Some(1), String::new(), "false: failed\n".into()),
            "echo" => output(Some(0), format!("{}\n", args.join(" ")), String::new()),
            "cat" => {
                let path = under(&req.cwd, &args[0]);
                match files.get(&path) {
                    Some(b) => output(
                        Some(0),
                        String::from_utf8_lossy(b).into_owned(),
                        String::new(),
                    ),
                    None => output(Some(1), String::new(), format!("cat: {path}: missing\n")),
                }
            }
            "write" => {
                files.insert(under(&req.cwd, &args[0]), args[1].clone().into_bytes());
                output(Some(0), String::new(), String::new())
            }
            "fail" => output(
                Some(args[0].parse().unwrap()),
                String::new(),
                args[1..].join(" "),
            ),
            "hang" => ExecOutput {
                timed_out: true,
                signal: Some(9),
                ..output(None, "{\"reward\": 1}\n".into(), String::new())
            },
            other => output(Some(127), String::new(), format!("{other}: not found\n")),
        }
    }
}

impl Backend for FakeBackend {
    fn create(&self, id: &str, spec: &SandboxSpec) -> Result<SandboxInfo, Error> {
        let mut st = self.state();
        st.record(Call::Create(id.into()), "create", id)?;
        if st.sandboxes.contains_key(id) {
            return Err(Error::SandboxExists { sandbox: id.into() });
        }
        // As a backend does: a created sandbox's spec names its workdir.
        let mut spec = spec.clone();
        if spec.workdir.is_empty() {
            spec.workdir = rollpoint_sandbox::DEFAULT_WORKDIR.to_owned();
        }
        let sb = Sandbox {
            spec,
            files: Files::new(),
            forked_from: None,
        };
        let out = info(id, &sb);
        st.sandboxes.insert(id.into(), sb);
        Ok(out)
    }

    fn exec(&self, id: &str, req: &ExecRequest) -> Result<ExecOutput, Error> {
        let mut st = self.state();
        st.record(
            Call::Exec(id.into(), req.argv.clone(), req.cwd.clone()),
            "exec",
            id,
        )?;
        let sb = st.sandboxes.get_mut(id).ok_or_else(|| unknown(id))?;
        Ok(Self::run(&mut sb.files, req))
    }

    /// The fake counts nothing: a live sandbox has used nothing.
    fn usage(&self, id: &str) -> Result<rollpoint_sandbox::ResourceUsage, Error> {
        if !self.state().sandboxes.contains_key(id) {
            return Err(unknown(id));
        }
        Ok(rollpoint_sandbox::ResourceUsage::default())
    }

    fn launch(&self, id: &str, req: &LaunchRequest) -> Result<LaunchHandle, Error> {
        let mut st = self.state();
        st.record(Call::Launch(id.into(), req.launch_id.clone()), "launch", id)?;
        if !st.sandboxes.contains_key(id) {
            return Err(unknown(id));
        }
        Ok(LaunchHandle {
            launch_id: req.launch_id.clone(),
            session: PathBuf::from(format!("/fake/{id}/control/launches/{}", req.launch_id)),
        })
    }

    fn upload(&self, id: &str, path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
        let mut st = self.state();
        let p = path.to_string_lossy().into_owned();
        st.record(Call::Upload(id.into(), p.clone(), mode), "upload", id)?;
        let sb = st.sandboxes.get_mut(id).ok_or_else(|| unknown(id))?;
        sb.files.insert(p, bytes.to_vec());
        Ok(())
    }

    fn fresh_dir(&self, id: &str, path: &Path) -> Result<(), Error> {
        let mut st = self.state();
        let prefix = format!("{}/", path.to_string_lossy().trim_end_matches('/'));
        let sb = st.sandboxes.get_mut(id).ok_or_else(|| unknown(id))?;
        sb.files.retain(|p, _| !p.starts_with(&prefix));
        Ok(())
    }

    fn download(&self, id: &str, path: &Path, limit: u64) -> Result<Vec<u8>, Error> {
        let mut st = self.state();
        let p = path.to_string_lossy().into_owned();
        st.record(Call::Download(id.into(), p.clone()), "download", id)?;
        let sb = st.sandboxes.get(id).ok_or_else(|| unknown(id))?;
        let bytes = sb.files.get(&p).ok_or_else(|| Error::Io {
            what: "read",
            root: PathBuf::from(format!("/fake/{id}/root")),
            path: path.to_owned(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        let size = bytes.len() as u64;
        if size > limit {
            return Err(Error::TooLarge {
                path: path.to_owned(),
                size,
                limit,
            });
        }
        Ok(bytes.clone())
    }

    fn snapshot(&self, id: &str, snapshot: &str, checkpoint: &str) -> Result<SnapshotRef, Error> {
        let mut st = self.state();
        st.record(Call::Snapshot(id.into(), snapshot.into()), "snapshot", id)?;
        st.retained
            .entry(checkpoint.to_owned())
            .or_default()
            .push(snapshot.to_owned());
        let sb = st.sandboxes.get(id).ok_or_else(|| unknown(id))?;
        let (spec, files) = (sb.spec.clone(), sb.files.clone());
        if st.snapshots.contains_key(snapshot) {
            return Err(Error::Invalid {
                sandbox: id.into(),
                message: format!("snapshot {snapshot} exists"),
            });
        }
        st.snapshots
            .insert(snapshot.into(), (id.into(), spec.clone(), files));
        Ok(SnapshotRef {
            id: snapshot.into(),
            sandbox: id.into(),
            spec,
            duration_ms: 0.5,
            bytes: None,
        })
    }

    fn fork(&self, snapshot: &str, new_id: &str) -> Result<SandboxInfo, Error> {
        let mut st = self.state();
        st.record(Call::Fork(snapshot.into(), new_id.into()), "fork", new_id)?;
        let (_, spec, files) =
            st.snapshots
                .get(snapshot)
                .cloned()
                .ok_or_else(|| Error::Invalid {
                    sandbox: new_id.into(),
                    message: format!("snapshot {snapshot}: unknown"),
                })?;
        if st.sandboxes.contains_key(new_id) {
            return Err(Error::SandboxExists {
                sandbox: new_id.into(),
            });
        }
        let sb = Sandbox {
            spec,
            files,
            forked_from: Some(snapshot.into()),
        };
        let out = info(new_id, &sb);
        st.sandboxes.insert(new_id.into(), sb);
        Ok(out)
    }

    fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        let mut st = self.state();
        st.record(
            Call::DeleteSnapshot(snapshot.into()),
            "delete_snapshot",
            snapshot,
        )?;
        st.snapshots
            .remove(snapshot)
            .map(|_| ())
            // As the real stores answer a snapshot that is not there.
            .ok_or_else(|| Error::Store {
                sandbox: "-".into(),
                source: rollpoint_snapshot::Error::NoSnapshot {
                    snapshot: snapshot.into(),
                    path: std::path::PathBuf::from("/nowhere").join(snapshot),
                },
            })
    }

    fn destroy(&self, id: &str) -> Result<(), Error> {
        let mut st = self.state();
        st.record(Call::Destroy(id.into()), "destroy", id)?;
        st.sandboxes
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| unknown(id))
    }

    fn list(&self) -> Result<BackendListing, Error> {
        let mut st = self.state();
        st.calls.push(Call::List);
        Ok(BackendListing {
            sandboxes: st.sandboxes.keys().cloned().collect(),
            snapshots: st.snapshots.keys().cloned().collect(),
        })
    }
}

/// A `LocalOwner` over a fake backend, served on 127.0.0.1:0.
pub struct Served {
    pub fake: Arc<FakeBackend>,
    pub local: Arc<LocalOwner>,
    pub client: HttpOwner,
    pub base: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Served {
    pub async fn start() -> Self {
        Self::over(Arc::new(FakeBackend::default())).await
    }

    /// A fresh owner (as after a restart) over an existing backend.
    pub async fn over(fake: Arc<FakeBackend>) -> Self {
        let local = Arc::new(LocalOwner::new(Arc::clone(&fake) as Arc<dyn Backend>));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let owner: Arc<dyn Owner> = Arc::clone(&local) as Arc<dyn Owner>;
        let server = tokio::spawn(async move {
            rollpoint_owner::serve(listener, owner, TOKEN)
                .await
                .unwrap();
        });
        let base = format!("http://{addr}");
        let client = HttpOwner::new(&base, TOKEN).unwrap();
        Self {
            fake,
            local,
            client,
            base,
            server,
        }
    }

    /// URL of a route path (starting with `/v1/owner/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// A task from JSON.
pub fn task(json: serde_json::Value) -> OwnerTask {
    serde_json::from_value(json).unwrap()
}

/// A plain task graded by `verify`.
pub fn simple_task(id: &str, verify: &[&str]) -> OwnerTask {
    task(serde_json::json!({"id": id, "verify": {"command": verify}}))
}

/// A raw request with an optional token; returns the status and the body
/// parsed as JSON (Null when it is not JSON).
pub async fn raw(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut req = client.request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_owned());
    }
    let reply = req.send().await.unwrap();
    let status = reply.status().as_u16();
    let bytes = reply.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}
