//! The sandbox anchor (`rollpoint-supervisor anchor`) started the way the
//! host starts it: over an overlay of the host root, in new mount, uts, ipc
//! and pid namespaces (`unshare` without `--fork`), optionally inside a
//! sandbox cgroup. Every test tears its sandbox down and checks that no
//! process and no mount of it is left.

use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rollpoint_proctree::scan::Table;
use rollpoint_proto::anchor::{
    ANCHOR_SOCKET, AnchorReply, AnchorRequest, ExecOutput, ExecRequest, LAUNCH_OUTPUT,
    LAUNCHES_DIR, LaunchRequest,
};
use rollpoint_proto::launch::{LaunchPhase, LaunchRecord};
use rollpoint_proto::receipt::{Method, Outcome};
use rollpoint_proto::session::LAUNCH_FILE;
use rollpoint_proto::supervisor::{Reply, Request, SUPERVISOR_SOCKET, Verb};
use rollpoint_testkit::{fake_harness_bin, receipt, require_root, supervisor_bin, wait_for};

const LONG: Duration = Duration::from_secs(60);

/// Where the fake harness is copied inside every sandbox.
const HARNESS: &str = "/opt/rollpoint-test/fake-harness";

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// An overlay of the host root with its upper and work under a tempdir, and
/// an empty opaque /tmp in the upper.
struct Overlay {
    dir: tempfile::TempDir,
    merged: PathBuf,
    upper: PathBuf,
    control: PathBuf,
    mounted: bool,
}

impl Overlay {
    fn new() -> Self {
        Self::new_with(|_| {})
    }

    /// An overlay whose upper `prepare` fills first.
    fn new_with(prepare: impl FnOnce(&Path)) -> Self {
        require_root();
        let dir = tempfile::tempdir().expect("tempdir");
        let upper = dir.path().join("upper");
        let work = dir.path().join("work");
        let merged = dir.path().join("merged");
        let control = dir.path().join("control");
        for d in [&upper, &work, &merged, &control] {
            std::fs::create_dir(d).expect("create overlay dirs");
        }
        let tmp = upper.join("tmp");
        std::fs::create_dir(&tmp).expect("create upper/tmp");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        set_opaque(&tmp);
        let harness = upper.join(HARNESS.trim_start_matches('/'));
        std::fs::create_dir_all(harness.parent().expect("parent")).expect("mkdir");
        std::fs::copy(fake_harness_bin(), &harness).expect("copy the fake harness");
        prepare(&upper);
        let status = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o"])
            .arg(format!(
                "lowerdir=/,upperdir={},workdir={}",
                upper.display(),
                work.display()
            ))
            .arg(&merged)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount overlay at {}", merged.display());
        Self {
            dir,
            merged,
            upper,
            control,
            mounted: true,
        }
    }

    fn unmount(&mut self) {
        if std::mem::take(&mut self.mounted) {
            let status = Command::new("umount")
                .arg(&self.merged)
                .status()
                .expect("run umount");
            assert!(status.success(), "umount {}", self.merged.display());
        }
    }

    /// Mount points under the tempdir, from /proc/mounts.
    fn mounts(&self) -> Vec<String> {
        let prefix = self.dir.path().display().to_string();
        std::fs::read_to_string("/proc/mounts")
            .expect("/proc/mounts")
            .lines()
            .filter_map(|l| l.split(' ').nth(1))
            .filter(|m| m.starts_with(&prefix))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.merged).status();
        }
    }
}

/// Marks an upper directory opaque, as overlayfs reads it.
fn set_opaque(dir: &Path) {
    let path = CString::new(dir.as_os_str().as_bytes()).expect("path without NUL");
    // SAFETY: both strings are NUL-terminated and outlive the call; the value
    // pointer and length describe a one-byte buffer.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            c"trusted.overlay.opaque".as_ptr(),
            b"y".as_ptr().cast(),
            1,
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "setxattr opaque on {}: {}",
        dir.display(),
        std::io::Error::last_os_error()
    );
}

/// The sandbox cgroups the test creates, as the host does: cgroup2 and the
/// v1 freezer.
struct SandboxCgroup {
    v2: PathBuf,
    freezer: PathBuf,
}

impl SandboxCgroup {
    fn new(name: &str) -> Self {
        let v2 = rollpoint_proctree::cgroup::v2_root().expect("a cgroup2 mount on this host");
        let freezer =
            rollpoint_proctree::cgroup::v1_freezer_root().expect("a v1 freezer on this host");
        let me = Self {
            v2: v2.join("rollpoint").join(name),
            freezer: freezer.join("rollpoint").join(name),
        };
        for d in [&me.v2, &me.freezer] {
            std::fs::create_dir_all(d).expect("create the sandbox cgroup");
        }
        me
    }
}

impl Drop for SandboxCgroup {
    fn drop(&mut self) {
        remove_cgroup_tree(&self.v2);
        remove_cgroup_tree(&self.freezer);
    }
}

/// Removes a cgroup and every cgroup below it, deepest first (launch
/// cgroups are left behind when a failed test kills their supervisor).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = rollpoint_proctree::cgroup::remove(dir);
}

/// A running anchor over an overlay.
struct Sandbox {
    overlay: Overlay,
    cgroup: Option<SandboxCgroup>,
    name: String,
    /// The process the host spawned: the anchor's parent, in the host pid
    /// namespace.
    anchor: Child,
    /// The anchor's child: PID 1 of the sandbox, by its host pid.
    pid1: u32,
    log: PathBuf,
    finished: bool,
}

/// Runs `unshare ... rollpoint-supervisor anchor ARGS`, with an empty
/// environment and the output in `log`, inside `cgroup` when given; `net`
/// adds a network namespace.
fn spawn_anchor(args: &[String], cgroup: Option<&SandboxCgroup>, net: bool, log: &Path) -> Child {
    spawn_logged(anchor_argv(args, cgroup, net), log)
}

/// The command line that starts the anchor as the host does: a shell joins
/// `cgroup` and execs `unshare ... rollpoint-supervisor anchor ARGS`.
fn anchor_argv(args: &[String], cgroup: Option<&SandboxCgroup>, net: bool) -> Vec<OsString> {
    let procs = |d: &Path| d.join("cgroup.procs").display().to_string();
    let (v2, freezer) = cgroup.map_or_else(Default::default, |c| (procs(&c.v2), procs(&c.freezer)));
    let mut argv: Vec<OsString> = vec![
        "/bin/sh".into(),
        "-c".into(),
        r#"for f in "$1" "$2"; do [ -z "$f" ] || echo $$ > "$f"; done; shift 2; exec "$@""#.into(),
        "sh".into(),
        v2.into(),
        freezer.into(),
        which("unshare").into(),
    ];
    argv.extend(["--mount", "--uts", "--ipc", "--pid"].map(OsString::from));
    if net {
        argv.push("--net".into());
    }
    argv.extend(["--".into(), supervisor_bin().into(), "anchor".into()]);
    argv.extend(args.iter().map(OsString::from));
    argv
}

/// Spawns `argv` with an empty environment and its output in `log`.
fn spawn_logged(argv: Vec<OsString>, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("create the anchor log");
    Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup log"))
        .stderr(log)
        .spawn()
        .expect("spawn the anchor")
}

fn which(program: &str) -> PathBuf {
    PATH.split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{program} is not installed (util-linux)"))
}

impl Sandbox {
    fn start(prefix: &str) -> Self {
        Self::start_with(prefix, false, false)
    }

    fn start_with(prefix: &str, with_cgroup: bool, isolated_net: bool) -> Self {
        let overlay = Overlay::new();
        let name = format!("{prefix}-{}", std::process::id());
        let cgroup = with_cgroup.then(|| SandboxCgroup::new(&name));
        let log = overlay.dir.path().join("anchor.log");
        let mut args = vec![
            "--root".to_owned(),
            overlay.merged.display().to_string(),
            "--control".to_owned(),
            overlay.control.display().to_string(),
            "--hostname".to_owned(),
            name.clone(),
        ];
        if let Some(c) = &cgroup {
            args.extend(["--cgroup-v2".to_owned(), c.v2.display().to_string()]);
            args.extend([
                "--cgroup-freezer".to_owned(),
                c.freezer.display().to_string(),
            ]);
        }
        if isolated_net {
            args.extend(["--net".to_owned(), "none".to_owned()]);
        }
        let mut anchor = spawn_anchor(&args, cgroup.as_ref(), isolated_net, &log);
        let socket = overlay.control.join(ANCHOR_SOCKET);
        wait_for(LONG, "the anchor socket", || {
            if let Some(status) = anchor.try_wait().expect("try_wait") {
                panic!(
                    "the anchor exited ({status}) before serving: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            UnixStream::connect(&socket).ok()
        });
        let parent = anchor.id();
        let pid1 = wait_for(LONG, "the sandbox's PID 1", || {
            Table::scan().children(parent).first().copied()
        });
        Self {
            overlay,
            cgroup,
            name,
            anchor,
            pid1,
            log,
            finished: false,
        }
    }

    fn request(&self, req: &AnchorRequest) -> AnchorReply {
        request_at(&self.overlay.control, req)
    }

    fn exec_with(&self, argv: &[&str], timeout_ms: u64, output_limit: u64) -> AnchorReply {
        self.request(&AnchorRequest::exec(ExecRequest {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            env: env(),
            cwd: "/".into(),
            timeout_ms,
            output_limit,
            stdin: None,
        }))
    }

    /// Runs `argv` and returns its output, failing on an error reply.
    fn exec(&self, argv: &[&str]) -> ExecOutput {
        let reply = self.exec_with(argv, 60_000, 1 << 20);
        reply
            .exec
            .unwrap_or_else(|| panic!("exec {argv:?} failed: {:?}", reply.error))
    }

    /// Every process of the sandbox now (host pids, zombies included): PID 1
    /// and its descendants, which is all of its pid namespace since orphans
    /// are reparented to PID 1.
    fn members(&self) -> Vec<rollpoint_proctree::stat::Stat> {
        members_of(self.pid1)
    }

    /// The host path of a launch's session directory.
    fn session(&self, launch_id: &str) -> PathBuf {
        self.overlay.control.join(LAUNCHES_DIR).join(launch_id)
    }

    fn pid_ns(&self) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/{}/ns/pid", self.pid1)).ok()
    }

    /// Stops the anchor, unmounts the overlay and checks nothing is left.
    fn finish(self) {
        self.finish_with(libc::SIGTERM);
    }

    /// As [`Self::finish`], ending the anchor's host-side parent with `signal`.
    fn finish_with(mut self, signal: i32) {
        let ns = self.pid_ns().expect("the sandbox's pid namespace");
        let members = self.members();
        // SAFETY: kill(2) on the pid of a child this test spawned and has
        // not reaped.
        let rc = unsafe { libc::kill(i32::try_from(self.anchor.id()).expect("pid"), signal) };
        assert_eq!(rc, 0, "signal {signal} to the anchor");
        let anchor = &mut self.anchor;
        let status = wait_for(LONG, "the anchor to exit", || {
            anchor.try_wait().expect("try_wait")
        });
        let expected = if signal == libc::SIGTERM {
            (Some(0), None)
        } else {
            (None, Some(signal))
        };
        assert_eq!(
            (status.code(), status.signal()),
            expected,
            "anchor exit; log: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        wait_for(LONG, "every sandbox process to be gone", || {
            let left: Vec<u32> = members
                .iter()
                .filter(|m| {
                    rollpoint_proctree::scan::read_stat(m.pid)
                        .is_some_and(|s| s.start_time == m.start_time)
                })
                .map(|m| m.pid)
                .collect();
            left.is_empty().then_some(())
        });
        let in_ns: Vec<u32> = rollpoint_proctree::scan::list_pids()
            .into_iter()
            .filter(|p| std::fs::read_link(format!("/proc/{p}/ns/pid")).is_ok_and(|l| l == ns))
            .collect();
        assert!(in_ns.is_empty(), "left in the sandbox: {in_ns:?}");
        self.overlay.unmount();
        let mounts = self.overlay.mounts();
        assert!(mounts.is_empty(), "mounts left: {mounts:?}");
        if let Some(cg) = self.cgroup.take() {
            let dirs = [cg.v2.clone(), cg.freezer.clone()];
            drop(cg);
            for d in dirs {
                assert!(!d.exists(), "cgroup left: {}", d.display());
            }
        }
        self.finished = true;
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // A failed test: kill PID 1 (which kills the namespace) and the
        // parent, then let the overlay and cgroup guards clean up.
        for pid in [self.pid1, self.anchor.id()] {
            if let Ok(pid) = i32::try_from(pid) {
                // SAFETY: kill(2) with a pid; at worst ESRCH.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.anchor.wait();
        let pid1 = self.pid1;
        let end = std::time::Instant::now() + LONG;
        while Path::new(&format!("/proc/{pid1}")).exists() && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Every process of the sandbox whose PID 1 has host pid `pid1`.
fn members_of(pid1: u32) -> Vec<rollpoint_proctree::stat::Stat> {
    let t = Table::scan();
    let mut pids = vec![pid1];
    pids.extend(t.descendants([pid1]));
    pids.iter().filter_map(|p| t.get(*p).cloned()).collect()
}

/// One request to the anchor serving in `control`, one reply.
fn request_at(control: &Path, req: &AnchorRequest) -> AnchorReply {
    let mut stream =
        UnixStream::connect(control.join(ANCHOR_SOCKET)).expect("connect to the anchor");
    let mut line = serde_json::to_vec(req).expect("encode");
    line.push(b'\n');
    stream.write_all(&line).expect("send the request");
    let mut reply = Vec::new();
    BufReader::new(stream)
        .read_until(b'\n', &mut reply)
        .expect("read the reply");
    let reply = AnchorReply::decode(&reply).unwrap_or_else(|e| {
        panic!(
            "bad anchor reply ({e}): {:?}",
            String::from_utf8_lossy(&reply)
        )
    });
    assert_eq!(reply.pid, 1, "the anchor is PID 1: {reply:?}");
    reply
}

/// Asks a launch's supervisor over its control socket (on the host, through
/// the control directory), in the control protocol itself: no client
/// fallback can stand in for it.
fn control(session: &Path, verb: Verb) -> Reply {
    let mut stream = UnixStream::connect(session.join(SUPERVISOR_SOCKET))
        .expect("connect to the control socket");
    let mut line = serde_json::to_vec(&Request::new(verb)).expect("encode");
    line.push(b'\n');
    stream.write_all(&line).expect("send");
    let mut reply = Vec::new();
    BufReader::new(stream)
        .read_until(b'\n', &mut reply)
        .expect("read the reply");
    Reply::decode(&reply).expect("a control reply")
}

fn env() -> BTreeMap<String, String> {
    BTreeMap::from([("PATH".to_owned(), PATH.to_owned())])
}

fn sh(script: &str) -> [&str; 3] {
    ["sh", "-c", script]
}

#[test]
fn root_exec_runs_in_the_sandbox_hostname_and_pid_namespace() {
    let sb = Sandbox::start("anchor-ns");
    let status = sb.request(&AnchorRequest::status());
    assert_eq!((status.pid, status.error), (1, None));

    let out = sb.exec(&["hostname"]);
    assert_eq!(out.stdout.trim_end(), sb.name, "{out:?}");
    assert_eq!(out.exit_code, Some(0));

    let out = sb.exec(&["cat", "/proc/1/cmdline"]);
    let argv: Vec<&str> = out.stdout.split('\0').collect();
    assert_eq!(
        argv.get(1),
        Some(&"anchor"),
        "PID 1 is the anchor: {argv:?}"
    );

    // The test itself is a host process: invisible and unreachable inside.
    let me = std::process::id();
    let out = sb.exec(&sh(&format!(
        "test -e /proc/{me} && echo visible; kill -0 {me} 2>/dev/null && echo reachable; echo $$"
    )));
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "host pid {me} seen from inside: {out:?}");
    let inner: u32 = lines[0].parse().expect("a pid");
    assert!(inner > 1, "in-sandbox pid {inner}");

    // A process of the sandbox cannot end it by signalling PID 1.
    let out = sb.exec(&sh("kill -TERM 1; kill -INT 1; echo sent"));
    assert_eq!(out.stdout, "sent\n", "{out:?}");
    let status = sb.request(&AnchorRequest::status());
    assert_eq!((status.pid, status.error), (1, None));

    sb.finish();
}

#[test]
fn root_dev_null_works_and_tmp_lives_in_the_upper() {
    let sb = Sandbox::start("anchor-dev");
    let out = sb.exec(&sh(
        "test -c /dev/null && echo gone > /dev/null && cat /dev/null && \
         test -c /dev/zero && test -c /dev/urandom && test -d /dev/pts && test -d /dev/shm && \
         echo data > /tmp/probe && echo ok",
    ));
    assert_eq!(
        (out.exit_code, out.stdout.as_str()),
        (Some(0), "ok\n"),
        "{out:?}"
    );
    let probe = sb.overlay.upper.join("tmp/probe");
    assert_eq!(
        std::fs::read_to_string(&probe).expect("probe in the upper"),
        "data\n"
    );
    // /tmp in the sandbox starts empty (opaque), not the host's /tmp.
    let out = sb.exec(&["ls", "-A", "/tmp"]);
    assert_eq!(out.stdout, "probe\n", "{out:?}");
    sb.finish();
}

#[test]
fn root_exec_caps_output_and_flags_truncation() {
    let sb = Sandbox::start("anchor-cap");
    let reply = sb.exec_with(
        &sh("head -c 300000 /dev/zero | tr '\\0' a; echo short >&2"),
        60_000,
        1000,
    );
    let out = reply.exec.expect("exec output");
    assert_eq!(out.exit_code, Some(0), "the rest was drained: {out:?}");
    assert_eq!(out.stdout, "a".repeat(1000));
    assert!(out.stdout_truncated);
    assert_eq!(out.stderr, "short\n");
    assert!(!out.stderr_truncated);
    assert!(!out.timed_out);

    // stdin is delivered, then closed.
    let reply = sb.request(&AnchorRequest::exec(ExecRequest {
        argv: vec!["cat".into()],
        env: env(),
        cwd: "/tmp".into(),
        timeout_ms: 60_000,
        output_limit: 100,
        stdin: Some("fed in\n".into()),
    }));
    let out = reply.exec.expect("exec output");
    assert_eq!(out.stdout, "fed in\n", "{out:?}");
    sb.finish();
}

#[test]
fn root_exec_timeout_kills_the_whole_group() {
    let sb = Sandbox::start("anchor-timeout");
    let reply = sb.exec_with(&sh("sleep 300 & echo $!; wait"), 1000, 1000);
    let out = reply.exec.expect("exec output");
    assert!(out.timed_out, "{out:?}");
    assert_eq!((out.exit_code, out.signal), (None, Some(libc::SIGKILL)));
    let sleeper: u32 = out.stdout.trim().parse().expect("the sleep's pid");
    // The child sleep was in the group: killed, then reaped by PID 1 (its
    // orphan), so it leaves the sandbox's /proc and only PID 1 is left.
    let check = format!("test -e /proc/{sleeper} && echo alive; true");
    wait_for(LONG, "the group's sleep to be killed and reaped", || {
        sb.exec(&sh(&check)).stdout.is_empty().then_some(())
    });
    wait_for(LONG, "only PID 1 left", || {
        (sb.members().len() == 1).then_some(())
    });
    sb.finish();
}

#[test]
fn root_exec_reports_exit_code_and_signal() {
    let sb = Sandbox::start("anchor-exit");
    let out = sb.exec(&sh("exit 7"));
    assert_eq!(
        (out.exit_code, out.signal, out.timed_out),
        (Some(7), None, false)
    );
    let out = sb.exec(&sh("kill -TERM $$"));
    assert_eq!((out.exit_code, out.signal), (None, Some(libc::SIGTERM)));
    sb.finish();
}

#[test]
fn root_exec_of_a_bad_cwd_or_program_ends_as_a_shell_would() {
    let sb = Sandbox::start("anchor-bad");
    let reply = sb.request(&AnchorRequest::exec(ExecRequest {
        argv: vec!["ls".into()],
        env: env(),
        cwd: "/no/such/dir".into(),
        timeout_ms: 60_000,
        output_limit: 100,
        stdin: None,
    }));
    // A command that cannot start ends as a shell's would: 126 for a working
    // directory it cannot use, 127 for a program that is not there, the
    // reason on stderr.
    let out = reply.exec.expect("the command's outcome");
    assert!(reply.error.is_none());
    assert_eq!(out.exit_code, Some(126));
    assert!(out.stderr.contains("/no/such/dir"), "{}", out.stderr);

    let reply = sb.exec_with(&["no-such-program-here"], 60_000, 100);
    let out = reply.exec.expect("the command's outcome");
    assert_eq!(out.exit_code, Some(127));
    assert!(
        out.stderr.contains("no-such-program-here"),
        "{}",
        out.stderr
    );

    // A malformed request is answered, by field, and the anchor lives on.
    let mut stream = UnixStream::connect(sb.overlay.control.join(ANCHOR_SOCKET)).expect("connect");
    stream
        .write_all(b"{\"v\":1,\"verb\":\"exec\",\"exec\":{\"argv\":[],\"cwd\":7}}\n")
        .expect("send");
    let mut line = Vec::new();
    BufReader::new(stream)
        .read_until(b'\n', &mut line)
        .expect("read");
    let reply = AnchorReply::decode(&line).expect("a reply");
    assert!(reply.error.expect("an error").contains("cwd"));
    assert_eq!(sb.exec(&["true"]).exit_code, Some(0));
    sb.finish();
}

#[test]
fn root_orphans_are_reaped() {
    let sb = Sandbox::start("anchor-orphans");
    // Three double-forked sleeps: their parent exits at once, so they are
    // reparented to PID 1.
    let out = sb.exec(&sh(
        "for i in 1 2 3; do (sleep 300 >/dev/null 2>&1 &); done; exit 0",
    ));
    assert_eq!(out.exit_code, Some(0));
    let orphans: Vec<u32> = sb
        .members()
        .iter()
        .filter(|m| m.ppid == sb.pid1)
        .map(|m| m.pid)
        .collect();
    assert_eq!(orphans.len(), 3, "orphans under PID 1: {:?}", sb.members());
    // Killed from outside, they are PID 1's to reap.
    for pid in orphans {
        // SAFETY: kill(2) on a pid just read as a live child of PID 1.
        let rc = unsafe { libc::kill(i32::try_from(pid).expect("pid"), libc::SIGKILL) };
        assert_eq!(rc, 0, "kill {pid}");
    }
    // The fake harness orphans more that exit at once.
    let out = sb.exec(&[HARNESS, "abandon", "20"]);
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    wait_for(LONG, "every orphan reaped, no zombie left", || {
        let m = sb.members();
        (m.len() == 1 && m[0].pid == sb.pid1).then_some(())
    });
    sb.finish();
}

#[test]
fn root_launch_runs_under_its_supervisor_in_the_sandbox_cgroup() {
    let sb = Sandbox::start_with("anchor-launch", true, false);
    let cg = sb.cgroup.as_ref().expect("cgroup");
    let (cg, freezer) = (cg.v2.clone(), cg.freezer.clone());
    let id = "launch-1";
    let reply = sb.request(&AnchorRequest::launch(LaunchRequest {
        launch_id: id.into(),
        argv: vec![
            HARNESS.into(),
            "tick".into(),
            "/tmp/ticks".into(),
            "20".into(),
            "100000".into(),
        ],
        env: env(),
        cwd: "/tmp".into(),
        freeze: Some("cgroup-v2".into()),
        options: vec!["--stop-grace".into(), "1".into()],
    }));
    assert_eq!(reply.error, None);
    let supervisor = reply.launched.expect("the supervisor's pid");
    assert!(supervisor > 1);

    let session = sb.session(id);
    let mode = std::fs::metadata(&session)
        .expect("session")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    let log = std::fs::metadata(session.join(LAUNCH_OUTPUT)).expect("output.log");
    assert_eq!(log.permissions().mode() & 0o777, 0o600);

    // The reply comes at once; the supervisor then starts the harness.
    let record = wait_for(LONG, "the launch to run", || {
        let bytes = std::fs::read(session.join(LAUNCH_FILE)).ok()?;
        LaunchRecord::decode(&bytes)
            .ok()
            .filter(|r| r.phase == LaunchPhase::Running)
    });
    let reply = control(&session, Verb::Status);
    assert_eq!(reply.launch.as_ref(), Some(&record), "{reply:?}");
    assert_eq!(record.supervisor_pid, supervisor);
    // The launch cgroup nests under the sandbox's, and holds the harness.
    let launch_cg = cg.join("rollpoint").join(id);
    let procs = std::fs::read_to_string(launch_cg.join("cgroup.procs")).expect("launch cgroup");
    assert!(
        !procs.trim().is_empty(),
        "harness in {}",
        launch_cg.display()
    );
    assert_eq!(
        record.cgroup_v2.as_deref(),
        Some(format!("/sys/fs/cgroup/unified/rollpoint/{id}").as_str())
    );
    let launch_freezer = freezer.join("rollpoint").join(id);
    let procs = std::fs::read_to_string(launch_freezer.join("cgroup.procs")).expect("freezer");
    assert!(
        !procs.trim().is_empty(),
        "harness in {}",
        launch_freezer.display()
    );
    assert_eq!(
        record.cgroup_v1_freezer.as_deref(),
        Some(format!("/sys/fs/cgroup/freezer/rollpoint/{id}").as_str())
    );
    let ticks = sb.overlay.upper.join("tmp/ticks");
    wait_for(LONG, "ticks", || {
        (rollpoint_testkit::lines(&ticks) > 3).then_some(())
    });

    let r = receipt("pause", &control(&session, Verb::Pause));
    assert_eq!(
        (r.outcome, r.method),
        (Outcome::Confirmed, Method::CgroupV2)
    );
    let events = std::fs::read_to_string(launch_cg.join("cgroup.events")).expect("events");
    assert!(events.contains("frozen 1"), "{events}");
    let held = rollpoint_testkit::lines(&ticks);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        rollpoint_testkit::lines(&ticks),
        held,
        "a paused launch ticked"
    );

    let r = receipt("continue", &control(&session, Verb::Continue));
    assert_eq!(r.outcome, Outcome::Confirmed);
    wait_for(LONG, "ticking to resume", || {
        (rollpoint_testkit::lines(&ticks) > held).then_some(())
    });

    let r = receipt("stop", &control(&session, Verb::Stop));
    assert_eq!(
        (r.outcome, r.cleanup_confirmed),
        (Outcome::Confirmed, Some(true)),
        "{r:?}"
    );
    wait_for(LONG, "the launch cgroups to be removed", || {
        (!launch_cg.exists() && !launch_freezer.exists()).then_some(())
    });
    wait_for(LONG, "the launch supervisor to be reaped", || {
        (sb.members().len() == 1).then_some(())
    });
    // The supervisor is gone; its record keeps the end.
    let bytes = std::fs::read(session.join(LAUNCH_FILE)).expect("launch record");
    let record = LaunchRecord::decode(&bytes).expect("record");
    assert_eq!(record.phase, LaunchPhase::Ended);
    assert!(record.ended.is_some());
    sb.finish();
}

#[test]
fn root_launch_refuses_bad_and_duplicate_ids() {
    let sb = Sandbox::start("anchor-ids");
    let launch = |id: &str| {
        sb.request(&AnchorRequest::launch(LaunchRequest {
            launch_id: id.into(),
            argv: vec!["sleep".into(), "300".into()],
            env: env(),
            cwd: "/".into(),
            freeze: Some("sigstop".into()),
            options: Vec::new(),
        }))
    };
    for bad in ["../escape", "", "a/b", ".."] {
        let err = launch(bad).error.expect("refused");
        assert!(err.contains("launch_id"), "{bad:?}: {err}");
    }
    assert!(!sb.overlay.dir.path().join("escape").exists());
    let first = launch("dup");
    assert_eq!(first.error, None);
    assert!(first.launched.is_some());
    let err = launch("dup").error.expect("refused");
    assert!(err.contains("already exists"), "{err}");
    sb.finish();
}

#[test]
fn root_setup_failure_names_the_path_and_exits_non_zero() {
    let mut overlay = Overlay::new();
    let log = overlay.dir.path().join("anchor.log");
    let missing = overlay.dir.path().join("no-such-control-dir");
    let args = [
        "--root".to_owned(),
        overlay.merged.display().to_string(),
        "--control".to_owned(),
        missing.display().to_string(),
        "--hostname".to_owned(),
        "setup-fails".to_owned(),
    ];
    let mut anchor = spawn_anchor(&args, None, false, &log);
    let status = wait_for(LONG, "the anchor to fail", || {
        anchor.try_wait().expect("try_wait")
    });
    assert!(!status.success(), "{status}");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains(&missing.display().to_string()) && text.contains("ENOENT"),
        "{text}"
    );
    overlay.unmount();
    assert!(overlay.mounts().is_empty(), "{:?}", overlay.mounts());
}

/// `--owner-userns-fd` takes the owner's descriptor and refuses one that
/// is not a user namespace, before the sandbox starts.
#[test]
fn root_an_owner_descriptor_that_is_not_a_user_namespace_is_refused() {
    use std::os::fd::AsRawFd;
    let mut overlay = Overlay::new();
    let log = overlay.dir.path().join("anchor.log");
    let control = overlay.control.clone();
    // This process is the anchor's parent, its owner; the descriptor is a
    // plain file (inherited by nothing: close-on-exec).
    let plain = std::fs::File::open("/etc/hostname").expect("a plain file");
    let args: Vec<String> = [
        "--root",
        &overlay.merged.display().to_string(),
        "--control",
        &control.display().to_string(),
        "--hostname",
        "not-a-namespace",
        "--userns",
        "1073741824:65536",
        "--owner-userns-fd",
        &plain.as_raw_fd().to_string(),
    ]
    .map(str::to_owned)
    .to_vec();
    let mut anchor = spawn_anchor(&args, None, false, &log);
    let status = wait_for(LONG, "the anchor to refuse", || {
        anchor.try_wait().expect("try_wait")
    });
    assert!(!status.success(), "{status}");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains(&format!(
            "descriptor {} is not a user namespace",
            plain.as_raw_fd()
        )),
        "{text}"
    );
    assert!(!control.join(ANCHOR_SOCKET).exists(), "it never served");
    overlay.unmount();
}

#[test]
fn root_isolated_net_has_only_loopback_and_it_is_up() {
    let sb = Sandbox::start_with("anchor-net", false, true);
    // python3 is in every image the tests run on (scripts/install-deps).
    let probe = "import socket\n\
                 print(sorted(n for _, n in socket.if_nameindex()))\n\
                 s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
                 socket.create_connection(s.getsockname(), timeout=10)\n\
                 print('connected')\n";
    let out = sb.exec(&["python3", "-c", probe]);
    assert_eq!(
        (out.exit_code, out.stdout.as_str()),
        (Some(0), "['lo']\nconnected\n"),
        "{out:?}"
    );
    sb.finish();
}

#[test]
fn root_the_sandbox_dies_with_a_killed_host_side_parent() {
    let sb = Sandbox::start("anchor-orphaned");
    let out = sb.exec(&sh("sleep 300 >/dev/null 2>&1 & exit 0"));
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(
        sb.members().len(),
        2,
        "PID 1 and the sleep: {:?}",
        sb.members()
    );
    // SIGKILL cannot be forwarded: PID 1's parent-death signal ends it, and
    // with it every process of the sandbox.
    sb.finish_with(libc::SIGKILL);
}

#[test]
fn root_a_symlinked_mount_point_in_the_root_is_refused() {
    // An absolute link resolves on the host before the pivot: the anchor
    // must not create or mount anything through it.
    let outside = tempfile::tempdir().expect("tempdir");
    let target = outside.path().to_owned();
    let mut overlay = Overlay::new_with(|upper| {
        std::os::unix::fs::symlink(&target, upper.join("run")).expect("symlink");
    });
    let log = overlay.dir.path().join("anchor.log");
    let args = [
        "--root".to_owned(),
        overlay.merged.display().to_string(),
        "--control".to_owned(),
        overlay.control.display().to_string(),
        "--hostname".to_owned(),
        "symlinked".to_owned(),
    ];
    let mut anchor = spawn_anchor(&args, None, false, &log);
    let status = wait_for(LONG, "the anchor to fail", || {
        anchor.try_wait().expect("try_wait")
    });
    assert!(!status.success(), "{status}");
    let text = std::fs::read_to_string(&log).expect("log");
    let link = overlay.merged.join("run").display().to_string();
    assert!(text.contains(&link) && text.contains("symlink"), "{text}");
    assert!(
        !target.join("rollpoint").exists(),
        "created through the link"
    );
    overlay.unmount();
    assert!(overlay.mounts().is_empty(), "{:?}", overlay.mounts());
}

/// Runs the anchor the wrong way inside a private mount namespace of a
/// shell (so a regression could not touch the host): the anchor is the
/// shell's child, sharing its mount namespace and with no new pid
/// namespace. Returns the anchor's exit code, its stderr, and the shell's
/// mount count before and after.
fn anchor_run_wrongly(root: &Path, control: &Path) -> (i32, String, usize, usize) {
    let script = format!(
        "before=$(wc -l < /proc/self/mountinfo); \
         {sup} anchor --root {root} --control {control} --hostname wrong 2>{err}; \
         code=$?; echo \"$code $before $(wc -l < /proc/self/mountinfo)\"",
        sup = supervisor_bin().display(),
        root = root.display(),
        control = control.display(),
        err = control.with_extension("err").display(),
    );
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<i64> = text
        .split_whitespace()
        .map(|w| w.parse().expect("number"))
        .collect();
    let err = std::fs::read_to_string(control.with_extension("err")).unwrap_or_default();
    let n = |i: usize| usize::try_from(f[i]).expect("count");
    (i32::try_from(f[0]).expect("code"), err, n(1), n(2))
}

#[test]
fn root_the_anchor_refuses_a_missing_root_or_a_shared_namespace() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let control = dir.path().join("control");
    std::fs::create_dir(&control).expect("control");

    let missing = dir.path().join("no-such-root");
    let (code, err, before, after) = anchor_run_wrongly(&missing, &control);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("refusing") && err.contains("no-such-root"),
        "{err}"
    );
    assert!(!missing.exists(), "the anchor created its missing root");
    assert_eq!(before, after, "mounts were made: {err}");

    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let (code, err, before, after) = anchor_run_wrongly(&root, &control);
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("refusing") && err.contains("mount namespace"),
        "{err}"
    );
    assert_eq!(before, after, "mounts were made: {err}");
    assert!(
        std::fs::read_dir(&root).expect("root").next().is_none(),
        "the anchor wrote into the root"
    );
}

/// Which cgroup an owned sandbox is frozen with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FreezeWith {
    /// `--cgroup-v2` and `--cgroup-freezer`, as the host passes them: v2.
    V2,
    /// `--cgroup-freezer` alone: the v1 freezer.
    V1,
}

/// A sandbox whose anchor was started by an owner of its own, a shell that
/// starts it and waits, so the test can kill the owner as a crash would.
/// The test process is a child subreaper, so the orphaned anchor becomes its
/// child and is reaped here.
struct Owned {
    overlay: Overlay,
    cgroup: SandboxCgroup,
    freeze: FreezeWith,
    owner: Child,
    /// The anchor's host-side process (the owner's child).
    anchor: u32,
    pid1: u32,
    log: PathBuf,
    /// Torn down and checked: nothing for Drop to do.
    finished: bool,
}

impl Owned {
    fn start(prefix: &str, freeze: FreezeWith) -> Self {
        // SAFETY: prctl(2) with constant arguments.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(rc, 0, "PR_SET_CHILD_SUBREAPER");
        let overlay = Overlay::new();
        let name = format!("{prefix}-{}", std::process::id());
        let cgroup = SandboxCgroup::new(&name);
        let log = overlay.dir.path().join("anchor.log");
        let mut args = vec![
            "--root".to_owned(),
            overlay.merged.display().to_string(),
            "--control".to_owned(),
            overlay.control.display().to_string(),
            "--hostname".to_owned(),
            name,
        ];
        if freeze == FreezeWith::V2 {
            args.extend(["--cgroup-v2".to_owned(), cgroup.v2.display().to_string()]);
        }
        args.extend([
            "--cgroup-freezer".to_owned(),
            cgroup.freezer.display().to_string(),
        ]);
        // Only the anchor joins the sandbox's cgroups; the owner stays in
        // the test's.
        let mut argv: Vec<OsString> = ["/bin/sh", "-c", r#""$@" --owner $$ & wait"#, "owner"]
            .map(OsString::from)
            .into();
        argv.extend(anchor_argv(&args, Some(&cgroup), false));
        let mut owner = spawn_logged(argv, &log);
        let socket = overlay.control.join(ANCHOR_SOCKET);
        wait_for(LONG, "the anchor socket", || {
            if let Some(status) = owner.try_wait().expect("try_wait") {
                panic!(
                    "the owner exited ({status}) before the anchor served: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            UnixStream::connect(&socket).ok()
        });
        let t = Table::scan();
        let anchor = match t.children(owner.id()) {
            [one] => *one,
            other => panic!("the owner's children: {other:?}"),
        };
        let cmdline = std::fs::read(format!("/proc/{anchor}/cmdline")).expect("cmdline");
        assert!(
            cmdline.split(|b| *b == 0).any(|a| a == b"anchor"),
            "the owner's child is the anchor: {:?}",
            String::from_utf8_lossy(&cmdline)
        );
        let pid1 = wait_for(LONG, "the sandbox's PID 1", || {
            Table::scan().children(anchor).first().copied()
        });
        Self {
            overlay,
            cgroup,
            freeze,
            owner,
            anchor,
            pid1,
            log,
            finished: false,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The host path of `pid`'s cgroup in the hierarchy the sandbox is
    /// frozen with, from /proc/PID/cgroup.
    fn cgroup_of(&self, pid: u32) -> Option<PathBuf> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let (root, controller) = match self.freeze {
            FreezeWith::V2 => (rollpoint_proctree::cgroup::v2_root()?, ""),
            FreezeWith::V1 => (rollpoint_proctree::cgroup::v1_freezer_root()?, "freezer"),
        };
        text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
            (names.split(',').any(|n| n == controller) || names == controller)
                .then(|| root.join(path.trim_start_matches('/')))
        })
    }

    /// The sandbox's cgroup in that hierarchy.
    fn sandbox_cgroup(&self) -> &Path {
        match self.freeze {
            FreezeWith::V2 => &self.cgroup.v2,
            FreezeWith::V1 => &self.cgroup.freezer,
        }
    }

    /// The kernel reports the cgroup `dir` frozen.
    fn frozen(&self, dir: &Path) -> bool {
        match self.freeze {
            FreezeWith::V2 => std::fs::read_to_string(dir.join("cgroup.events"))
                .is_ok_and(|e| e.lines().any(|l| l.trim() == "frozen 1")),
            FreezeWith::V1 => std::fs::read_to_string(dir.join("freezer.state"))
                .is_ok_and(|s| s.trim() == "FROZEN"),
        }
    }

    /// Waits for the orphaned anchor (the test's child now) to exit and
    /// returns its exit code.
    fn reap_anchor(&self) -> i32 {
        let pid = i32::try_from(self.anchor).expect("pid");
        let status = wait_for(LONG, "the anchor to exit", || {
            let mut status = 0;
            // SAFETY: waitpid(2) on a child of this process, with a valid
            // status pointer.
            let rc = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
            assert!(
                rc >= 0,
                "waitpid {pid}: {}",
                std::io::Error::last_os_error()
            );
            (rc == pid).then_some(status)
        });
        assert!(libc::WIFEXITED(status), "anchor status {status:#x}");
        libc::WEXITSTATUS(status)
    }
}

impl Owned {
    /// After the anchor was reaped: checks that no process of `members` and
    /// none of the pid namespace `ns` is left, unmounts the overlay and
    /// removes the cgroups, and checks that no mount and no cgroup is left.
    fn finish(mut self, members: &[rollpoint_proctree::stat::Stat], ns: &Path) {
        let left: Vec<u32> = members
            .iter()
            .filter(|m| {
                rollpoint_proctree::scan::read_stat(m.pid)
                    .is_some_and(|s| s.start_time == m.start_time)
            })
            .map(|m| m.pid)
            .collect();
        assert!(left.is_empty(), "left: {left:?}");
        let in_ns: Vec<u32> = rollpoint_proctree::scan::list_pids()
            .into_iter()
            .filter(|p| std::fs::read_link(format!("/proc/{p}/ns/pid")).is_ok_and(|l| l == ns))
            .collect();
        assert!(in_ns.is_empty(), "left in the sandbox: {in_ns:?}");
        self.overlay.unmount();
        let mounts = self.overlay.mounts();
        assert!(mounts.is_empty(), "mounts left: {mounts:?}");
        let dirs = [self.cgroup.v2.clone(), self.cgroup.freezer.clone()];
        self.finished = true;
        drop(self);
        for d in dirs {
            assert!(!d.exists(), "cgroup left: {}", d.display());
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // A failed test: kill everything, thaw a v1 freezer so the killed
        // can die, reap the anchor, then let the guards clean up.
        let _ = self.owner.kill();
        let _ = self.owner.wait();
        let _ = std::fs::write(self.cgroup.v2.join("cgroup.kill"), "1");
        for pid in members_of(self.pid1)
            .iter()
            .map(|m| m.pid)
            .chain([self.anchor])
        {
            if let Ok(pid) = i32::try_from(pid) {
                // SAFETY: kill(2) with a pid; at worst ESRCH.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        thaw_tree(&self.cgroup.freezer);
        // Whatever is orphaned to this subreaper is reaped here.
        let end = std::time::Instant::now() + LONG;
        while std::time::Instant::now() < end {
            // SAFETY: waitpid(2) with a null status pointer.
            while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
            if [self.pid1, self.anchor]
                .iter()
                .all(|p| !Path::new(&format!("/proc/{p}")).exists())
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Thaws a v1 freezer cgroup and every cgroup below it (a frozen v1 task
/// cannot die).
fn thaw_tree(dir: &Path) {
    let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                thaw_tree(&e.path());
            }
        }
    }
}

/// A crashed owner's sandbox stops acting at once: the anchor sees its
/// parent die, freezes the whole sandbox (a launch's supervisor and harness
/// in their nested cgroups included), logs it and stays, keeping every
/// process; then the sandbox is torn down as a sweep does and nothing is
/// left.
fn a_dead_owner_freezes_its_sandbox(freeze: FreezeWith) {
    let prefix = match freeze {
        FreezeWith::V2 => "anchor-owner-v2",
        FreezeWith::V1 => "anchor-owner-v1",
    };
    let mut sb = Owned::start(prefix, freeze);
    let reply = request_at(
        &sb.overlay.control,
        &AnchorRequest::launch(LaunchRequest {
            launch_id: "ticker".into(),
            argv: vec![
                HARNESS.into(),
                "tick".into(),
                "/tmp/ticks".into(),
                "50".into(),
                "100000".into(),
            ],
            env: env(),
            cwd: "/tmp".into(),
            freeze: None,
            options: Vec::new(),
        }),
    );
    assert_eq!(reply.error, None, "{reply:?}");
    let ticks = sb.overlay.upper.join("tmp/ticks");
    wait_for(LONG, "ticks", || {
        (rollpoint_testkit::lines(&ticks) > 3).then_some(())
    });
    let members = members_of(sb.pid1);
    assert!(
        members.len() >= 3,
        "PID 1, the launch's supervisor and the harness: {members:?}"
    );
    let ns = std::fs::read_link(format!("/proc/{}/ns/pid", sb.pid1)).expect("pid ns");

    // The crash: the owner is SIGKILLed.
    sb.owner.kill().expect("SIGKILL the owner");
    sb.owner.wait().expect("reap the owner");
    let sandbox = sb.sandbox_cgroup().to_owned();
    wait_for(
        Duration::from_secs(10),
        "the sandbox's cgroup frozen",
        || sb.frozen(&sandbox).then_some(()),
    );
    wait_for(Duration::from_secs(10), "the freeze logged", || {
        sb.log().contains("sandbox frozen").then_some(())
    });
    let log = sb.log();
    assert!(
        log.contains(&format!("owner (pid {}) is gone", sb.owner.id())),
        "{log}"
    );

    // It stopped acting: the file no longer grows.
    let size = || std::fs::metadata(&ticks).expect("ticks").len();
    let held = size();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(size(), held, "a frozen sandbox ticked");
    }
    // Every process is still there, in a cgroup the kernel reports frozen,
    // and none was added.
    for m in &members {
        let now = rollpoint_proctree::scan::read_stat(m.pid);
        assert!(
            now.as_ref()
                .is_some_and(|s| s.start_time == m.start_time && s.state != 'Z'),
            "pid {} is gone: {now:?}",
            m.pid
        );
        let cg = sb.cgroup_of(m.pid).expect("its cgroup");
        assert!(
            cg.starts_with(&sandbox) && sb.frozen(&cg),
            "pid {} in {} is not frozen",
            m.pid,
            cg.display()
        );
    }
    let now: Vec<u32> = members_of(sb.pid1).iter().map(|m| m.pid).collect();
    let before: Vec<u32> = members.iter().map(|m| m.pid).collect();
    assert_eq!(now, before);
    // The anchor stays, itself outside the frozen cgroup.
    let anchor = rollpoint_proctree::scan::read_stat(sb.anchor).expect("the anchor stays");
    assert_ne!(anchor.state, 'Z');
    assert_eq!(
        sb.cgroup_of(sb.anchor).as_deref(),
        sandbox.parent(),
        "the anchor left for the parent cgroup"
    );

    // Teardown: as a sweep does on v2 (cgroup.kill ends frozen tasks); on
    // v1, where frozen tasks die only once thawed, by asking the anchor.
    match freeze {
        FreezeWith::V2 => std::fs::write(sandbox.join("cgroup.kill"), "1").expect("cgroup.kill"),
        FreezeWith::V1 => {
            // SAFETY: kill(2) on the anchor, a child of this process now.
            let rc = unsafe { libc::kill(i32::try_from(sb.anchor).expect("pid"), libc::SIGTERM) };
            assert_eq!(rc, 0, "SIGTERM to the anchor");
        }
    }
    let code = sb.reap_anchor();
    assert_eq!(
        code,
        128 + libc::SIGKILL,
        "PID 1 was killed; log: {}",
        sb.log()
    );
    sb.finish(&members, &ns);
}

#[test]
fn root_a_dead_owner_freezes_its_sandbox_v2() {
    a_dead_owner_freezes_its_sandbox(FreezeWith::V2);
}

#[test]
fn root_a_dead_owner_freezes_its_sandbox_v1() {
    a_dead_owner_freezes_its_sandbox(FreezeWith::V1);
}

#[test]
fn root_the_anchor_refuses_an_existing_pid_namespace() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let (root, control) = (dir.path().join("root"), dir.path().join("control"));
    for d in [&root, &control] {
        std::fs::create_dir(d).expect("mkdir");
    }
    // A mount namespace of its own, but inside a pid namespace whose init
    // (the shell) already runs: its first child would not be PID 1.
    let script = format!(
        "unshare --mount {sup} anchor --root {root} --control {control} --hostname pidns; \
         code=$?; exit $code",
        sup = supervisor_bin().display(),
        root = root.display(),
        control = control.display(),
    );
    let out = Command::new(which("unshare"))
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .expect("unshare");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        err.contains("refusing") && err.contains("no new pid namespace"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(&root).expect("root").next().is_none(),
        "the anchor wrote into the root"
    );
}

#[test]
fn root_the_anchor_refuses_an_owner_that_is_not_its_parent() {
    // The owner died before the anchor looked: its parent is whoever
    // adopted it, not the pid the host named.
    let mut overlay = Overlay::new();
    let log = overlay.dir.path().join("anchor.log");
    let args = [
        "--root".to_owned(),
        overlay.merged.display().to_string(),
        "--control".to_owned(),
        overlay.control.display().to_string(),
        "--hostname".to_owned(),
        "adopted".to_owned(),
        "--owner".to_owned(),
        "1".to_owned(),
    ];
    let mut anchor = spawn_anchor(&args, None, false, &log);
    let status = wait_for(LONG, "the anchor to refuse", || {
        anchor.try_wait().expect("try_wait")
    });
    assert!(!status.success(), "{status}");
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(text.contains("owner (pid 1"), "{text}");
    assert!(
        !overlay.control.join(ANCHOR_SOCKET).exists(),
        "it served: {text}"
    );
    overlay.unmount();
    assert!(overlay.mounts().is_empty(), "{:?}", overlay.mounts());
}

/// A freeze the kernel cannot confirm must not hold up the sandbox's end:
/// the anchor goes on reaping while it waits for the confirmation, so when a
/// sweep kills PID 1 the anchor exits at once. The unconfirmable task here
/// is a host process in the sandbox's cgroup held by a v1 freezer cgroup of
/// its own, which the v2 freezer cannot count and SIGKILL cannot end.
#[test]
fn root_a_sweep_during_an_unconfirmed_freeze_is_not_held_up() {
    let mut sb = Owned::start("anchor-owner-stuck", FreezeWith::V2);
    let mut held = Command::new("sleep")
        .arg("300")
        .spawn()
        .expect("spawn a sleep");
    let stuck = sb.cgroup.freezer.join("stuck");
    std::fs::create_dir(&stuck).expect("a v1 freezer cgroup of its own");
    for procs in [
        sb.cgroup.v2.join("cgroup.procs"),
        stuck.join("cgroup.procs"),
    ] {
        std::fs::write(&procs, held.id().to_string()).expect("move the sleep");
    }
    std::fs::write(stuck.join("freezer.state"), "FROZEN").expect("v1 freeze");
    wait_for(LONG, "the sleep frozen by v1", || {
        std::fs::read_to_string(stuck.join("freezer.state"))
            .is_ok_and(|s| s.trim() == "FROZEN")
            .then_some(())
    });
    let members = members_of(sb.pid1);
    let ns = std::fs::read_link(format!("/proc/{}/ns/pid", sb.pid1)).expect("pid ns");

    sb.owner.kill().expect("SIGKILL the owner");
    sb.owner.wait().expect("reap the owner");
    wait_for(Duration::from_secs(10), "the freeze asked for", || {
        sb.log().contains("freezing the sandbox").then_some(())
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !sb.frozen(&sb.cgroup.v2) && !sb.log().contains("sandbox frozen"),
        "confirmed: {}",
        sb.log()
    );

    // A sweep kills the cgroup: PID 1 dies, the held sleep cannot.
    let started = std::time::Instant::now();
    std::fs::write(sb.cgroup.v2.join("cgroup.kill"), "1").expect("cgroup.kill");
    let code = sb.reap_anchor();
    assert_eq!(code, 128 + libc::SIGKILL, "log: {}", sb.log());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the anchor exited {:?} after PID 1 was killed; log: {}",
        started.elapsed(),
        sb.log()
    );
    assert!(!sb.log().contains("did not confirm"), "{}", sb.log());
    // Thawed, the killed sleep dies.
    std::fs::write(stuck.join("freezer.state"), "THAWED").expect("thaw");
    let status = held.wait().expect("reap the sleep");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    sb.finish(&members, &ns);
}
