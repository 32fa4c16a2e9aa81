//! The escape suite: code running as root inside a sandbox with the default
//! isolation (strict) tries every door a reward-hacking policy or a careless
//! agent would, on the host-root base and on an image base, and each attempt
//! must fail. A probe prints `open` when the door opened and `closed` (or
//! the errno it got) when it held; the tests assert on every line.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rollpoint_proto::anchor::{ExecOutput, LaunchRequest};
use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_sandbox::{Backend, Base, Isolation, SandboxSpec};
use rollpoint_testkit::images::build_layout;
use rollpoint_testkit::{require_root, supervisor_bin, wait_for};

fn sh(backend: &LocalBackend, id: &str, script: &str) -> ExecOutput {
    backend.exec(id, &rollpoint_testkit::shell(script)).unwrap()
}

/// Probes a shell can run with busybox (on the host and in the image):
/// each line `NAME open` when the attempt succeeded, `NAME closed` when not.
/// A `/proc` file this kernel lacks is as closed as a masked one.
const SHELL_PROBES: &str = r#"
p() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name open"; else echo "$name closed"; fi; }
bb=busybox
mkdir -p /tmp/m /tmp/p /tmp/cg /tmp/o/l /tmp/o/u /tmp/o/w /tmp/o/m
p core_pattern sh -c 'echo "|/tmp/evil" > /proc/sys/kernel/core_pattern'
p sysctl_write sh -c 'echo 1 > /proc/sys/kernel/sysrq'
p kcore_real sh -c '[ -e /proc/kcore ] && [ "$($bb stat -c %t:%T /proc/kcore)" != "1:3" ]'
p keys_real sh -c '[ -e /proc/keys ] && [ "$($bb stat -c %t:%T /proc/keys)" != "1:3" ]'
p sysrq_real sh -c '[ -e /proc/sysrq-trigger ] && [ "$($bb stat -c %t:%T /proc/sysrq-trigger)" != "1:3" ]'
p timer_list_real sh -c '[ -e /proc/timer_list ] && [ "$($bb stat -c %t:%T /proc/timer_list)" != "1:3" ]'
p mount_tmpfs $bb mount -t tmpfs none /tmp/m
p mount_tmpfs_over_tmp $bb mount -t tmpfs none /tmp
p mount_proc $bb mount -t proc proc /tmp/p
p mount_sysfs $bb mount -t sysfs sysfs /tmp/m
p mount_cgroup2 $bb mount -t cgroup2 none /tmp/cg
p mount_cgroup1 $bb mount -t cgroup -o freezer none /tmp/cg
p mount_overlay $bb mount -t overlay none -o lowerdir=/tmp/o/l,upperdir=/tmp/o/u,workdir=/tmp/o/w /tmp/o/m
p mount_bind $bb mount -o bind / /tmp/m
p remount_cgroup_rw $bb mount -o remount,rw /sys/fs/cgroup/unified
p umount_proc_mask $bb umount /proc/kcore
p cgroup_procs sh -c 'echo $$ > /sys/fs/cgroup/unified/cgroup.procs'
p cgroup_freeze sh -c 'echo 0 > /sys/fs/cgroup/unified/cgroup.freeze'
p cgroup_subtree sh -c 'echo +pids > /sys/fs/cgroup/unified/cgroup.subtree_control'
p cgroup_mkdir mkdir /sys/fs/cgroup/unified/escape
p freezer_state sh -c 'echo THAWED > /sys/fs/cgroup/freezer/freezer.state'
p freezer_procs sh -c 'echo $$ > /sys/fs/cgroup/freezer/cgroup.procs'
p mknod_disk sh -c "$bb mknod /tmp/sda b 8 0 && $bb head -c 1 /tmp/sda"
p mknod_mem sh -c "$bb mknod /tmp/mem c 1 1 && $bb head -c 1 /tmp/mem"
p unshare_user $bb unshare -U true
p unshare_mount $bb unshare -m true
p unshare_net $bb unshare -n true
p nsenter_pid1 $bb nsenter -t 1 -m true
p signal_pid1 kill -0 1
p pid1_root ls /proc/1/root/
p pid1_environ cat /proc/1/environ
p anchor_socket test -w /run/rollpoint/anchor.sock
p launches_dir ls /run/rollpoint/launches
p sethostname $bb hostname escaped
p shadow cat /etc/shadow
p cgroup_path_shown grep -q rollpoint /proc/self/cgroup
grep -E '^(CapEff|CapBnd|CapAmb|Seccomp|NoNewPrivs):' /proc/self/status
echo "uid_map $(cat /proc/self/uid_map | tr -s ' ')"
"#;

/// System calls of Docker's refused list and a few the kernel itself must
/// refuse (ptrace of the more privileged PID 1), each printing its errno.
const SYSCALL_PROBES: &str = r#"
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    print(name, "open" if r >= 0 else "errno%d" % ctypes.get_errno())
call("init_module", 175, 0, 0, 0)
call("finit_module", 313, -1, 0, 0)
call("delete_module", 176, 0, 0)
call("kexec_load", 246, 0, 0, 0, 0)
call("kexec_file_load", 320, -1, -1, 0, 0, 0)
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, -1, -1, 0)
call("keyctl", 250, 0, 0, 0, 0, 0)
call("add_key", 248, 0, 0, 0, 0, 0)
call("request_key", 249, 0, 0, 0, 0)
call("unshare_user", 272, 0x10000000)
call("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
call("setns", 308, 0, 0)
call("mount", 165, 0, 0, 0, 0, 0)
call("umount2", 166, 0, 0)
call("open_tree", 428, -100, 0, 1)
call("fsopen", 430, 0, 0)
call("pivot_root", 155, 0, 0)
call("open_by_handle_at", 304, -1, 0, 0)
call("reboot", 169, 0, 0, 0, 0)
call("swapon", 167, 0, 0)
call("clock_settime", 227, 0, 0)
call("settimeofday", 164, 0, 0)
call("userfaultfd", 323, 0)
call("io_uring_setup", 425, 1, 0)
call("acct", 163, 0)
call("syslog", 103, 3, 0, 0)
call("iopl", 172, 3)
call("kcmp", 312, 1, 1, 0, 0, 0)
call("personality_exec", 135, 0x0400000)
call("ptrace_pid1", 101, 16, 1, 0, 0)
call("clone3", 435, 0, 0)
"#;

fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(|c: char| c.is_whitespace()))
        .map(|(k, v)| (k.trim_end_matches(':').to_owned(), v.trim().to_owned()))
        .collect()
}

struct Fixture {
    _dir: tempfile::TempDir,
    backend: LocalBackend,
    owner_dir: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let owner_dir = dir.path().join("owner");
        let backend = LocalBackend::open(&owner_dir, LocalOptions::new(supervisor_bin())).unwrap();
        Self {
            _dir: dir,
            backend,
            owner_dir,
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.backend.destroy_all();
    }
}

/// Asserts that every probe of `seen` held, naming the ones that did not.
fn assert_all_closed(seen: &BTreeMap<String, String>, names: &[&str], base: &str) {
    let open: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| seen.get(*n).map(String::as_str) != Some("closed"))
        .collect();
    assert!(
        open.is_empty(),
        "{base}: doors open or unprobed: {open:?}\nall: {seen:#?}"
    );
}

const SHELL_NAMES: [&str; 36] = [
    "core_pattern",
    "sysctl_write",
    "kcore_real",
    "keys_real",
    "sysrq_real",
    "timer_list_real",
    "mount_tmpfs",
    "mount_tmpfs_over_tmp",
    "mount_proc",
    "mount_sysfs",
    "mount_cgroup2",
    "mount_cgroup1",
    "mount_overlay",
    "mount_bind",
    "remount_cgroup_rw",
    "umount_proc_mask",
    "cgroup_procs",
    "cgroup_freeze",
    "cgroup_subtree",
    "cgroup_mkdir",
    "freezer_state",
    "freezer_procs",
    "mknod_disk",
    "mknod_mem",
    "unshare_user",
    "unshare_mount",
    "unshare_net",
    "nsenter_pid1",
    "signal_pid1",
    "pid1_root",
    "pid1_environ",
    "anchor_socket",
    "launches_dir",
    "sethostname",
    "shadow",
    "cgroup_path_shown",
];

fn check_status(seen: &BTreeMap<String, String>, backend: &LocalBackend, base: &str) {
    let kept = format!("{:016x}", rollpoint_proctree::isolate::kept_mask());
    assert_eq!(seen["CapEff"], kept, "{base}: Docker's default set");
    assert_eq!(seen["CapBnd"], kept, "{base}: nothing more can be gained");
    assert_eq!(seen["CapAmb"], "0000000000000000", "{base}");
    assert_eq!(seen["Seccomp"], "2", "{base}: a filter");
    assert_eq!(seen["NoNewPrivs"], "0", "{base}: as Docker's default");
    let ids = backend.ids();
    assert_eq!(
        seen["uid_map"],
        format!("0 {} {}", ids.host, ids.count),
        "{base}: root inside is an unprivileged id outside"
    );
    assert!(ids.host >= 1 << 30);
}

/// Secrets planted on the host where a default base would have shown them.
struct Planted {
    paths: Vec<PathBuf>,
}

impl Planted {
    fn new() -> Self {
        let tag = std::process::id();
        let paths: Vec<PathBuf> = [
            format!("/root/rollpoint-escape-{tag}"),
            format!("/etc/rollpoint-escape-{tag}"),
            format!("/var/lib/rollpoint-escape-{tag}"),
            format!("/opt/rollpoint-escape-{tag}"),
        ]
        .into_iter()
        .map(PathBuf::from)
        .collect();
        for p in &paths {
            std::fs::write(p, "sk-planted-secret\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        Self { paths }
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn root_a_host_root_sandbox_holds_every_probe() {
    let fx = Fixture::new();
    let planted = Planted::new();
    let b = &fx.backend;
    let info = b.create("probe", &SandboxSpec::default()).unwrap();
    assert_eq!(info.spec.isolation, Isolation::Strict, "strict by default");

    let out = sh(b, "probe", SHELL_PROBES);
    let seen = parse(&out.stdout);
    assert_all_closed(&seen, &SHELL_NAMES, "host root");
    check_status(&seen, b, "host root");

    // The host's secrets and the run's own files: none readable, most not
    // even there.
    let mut reads = String::new();
    for p in &planted.paths {
        let p = p.display();
        reads.push_str(&format!(
            "if cat {p} >/dev/null 2>&1; then echo '{p} open'; else echo '{p} closed'; fi\n"
        ));
    }
    for p in [&fx.owner_dir, &fx.owner_dir.join("ids.json")] {
        let p = p.display();
        reads.push_str(&format!(
            "if ls {p} >/dev/null 2>&1; then echo '{p} open'; else echo '{p} closed'; fi\n"
        ));
    }
    let seen = parse(&sh(b, "probe", &reads).stdout);
    assert!(
        seen.values().all(|v| v == "closed"),
        "host files readable: {seen:#?}"
    );
    // Hidden, not just unreadable: the host's homes and /var are empty
    // directories of the sandbox's own.
    let listing = sh(b, "probe", "ls -A /root /home /opt /var | tr '\\n' ' '");
    assert!(
        !listing.stdout.contains("rollpoint-escape"),
        "{}",
        listing.stdout
    );

    let out = sh(b, "probe", &format!("python3 -c '{SYSCALL_PROBES}'"));
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let seen = parse(&out.stdout);
    for (name, got) in &seen {
        let want = if name == "clone3" {
            "errno38"
        } else {
            "errno1"
        };
        assert_eq!(got, want, "{name}: {out:?}");
    }
    assert_eq!(seen.len(), 32, "every system call probed: {seen:#?}");

    // The sandbox's anchor survived all of it.
    assert_eq!(sh(b, "probe", "echo alive").stdout, "alive\n");
    assert!(Path::new("/proc/sys/kernel/core_pattern").exists());
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    assert!(!pattern.contains("evil"), "{pattern}");
}

#[test]
fn root_an_image_sandbox_holds_every_probe() {
    let fx = Fixture::new();
    let work = tempfile::tempdir().unwrap();
    let layout = build_layout(work.path());
    let b = &fx.backend;
    let spec = SandboxSpec {
        base: Base::OciLayout {
            path: layout.clone(),
            id: None,
        },
        ..SandboxSpec::default()
    };
    b.create("img", &spec).unwrap();
    let out = sh(
        b,
        "img",
        &format!("PATH=/bin:/.rollpoint/bin; {SHELL_PROBES}"),
    );
    let seen = parse(&out.stdout);
    // The image has no /etc/shadow: the probe is closed either way.
    assert_all_closed(&seen, &SHELL_NAMES, "image");
    check_status(&seen, b, "image");
    // The image's files are the sandbox root's own (idmapped layers): root
    // inside may change them, in its upper.
    let out = sh(
        b,
        "img",
        "stat -c %u /etc/passwd; echo edited >> /etc/passwd && echo wrote",
    );
    assert_eq!(out.stdout, "0\nwrote\n", "{out:?}");
}

/// A setuid program owned by the sandbox's root, started by another user,
/// acts as root of the sandbox, as in Docker without `no-new-privileges`:
/// the kept capabilities, under the filter, in the sandbox's namespace, and
/// no way out from there. With `no_new_privs` it gains nothing.
#[test]
fn root_a_setuid_program_acts_only_within_the_sandbox() {
    let fx = Fixture::new();
    let b = &fx.backend;
    let python = std::fs::canonicalize("/usr/bin/python3").expect("python3 on the host");
    let probe = "import ctypes, os
print(os.getuid(), os.geteuid())
for line in open('/proc/self/status'):
    if line.startswith(('CapEff:', 'Seccomp:')):
        print(line.split()[1])
libc = ctypes.CDLL(None, use_errno=True)
print('unshare', 'open' if libc.unshare(0x10000000) == 0 else 'closed')
procs = [p for p in ['/sys/fs/cgroup/unified/cgroup.procs', '/sys/fs/cgroup/cgroup.procs']
         if os.path.exists(p)][0]
for name, path in [('core_pattern', '/proc/sys/kernel/core_pattern'), ('procs', procs)]:
    try:
        open(path, 'w').write(str(os.getpid()))
        print(name, 'open')
    except OSError:
        print(name, 'closed')
";
    let kept = format!("{:016x}", rollpoint_proctree::isolate::kept_mask());
    for (id, no_new_privs) in [("suid", false), ("nnp", true)] {
        let spec = SandboxSpec {
            user: "1000:1000".into(),
            no_new_privs,
            ..SandboxSpec::default()
        };
        let info = b.create(id, &spec).unwrap();
        let suid = info.root.join("tmp/py");
        std::fs::copy(&python, &suid).unwrap();
        let root_host = b.ids().host;
        std::os::unix::fs::chown(&suid, Some(root_host), Some(root_host)).unwrap();
        std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::fs::write(info.root.join("tmp/probe.py"), probe).unwrap();
        let out = sh(b, id, "stat -c '%u %a' /tmp/py; /tmp/py /tmp/probe.py");
        let (euid, caps) = if no_new_privs {
            ("1000", "0000000000000000")
        } else {
            ("0", kept.as_str())
        };
        assert_eq!(
            out.stdout,
            format!(
                "0 4755\n1000 {euid}\n{caps}\n2\nunshare closed\ncore_pattern closed\n\
                 procs closed\n"
            ),
            "{id}: {out:?}"
        );
    }
}

/// A launch that tries to leave its cgroup, then ticks from two processes
/// (one of them setsid'd and double-forked). Paused, it is verified frozen;
/// a second process of the sandbox then tries to thaw it, signal it and
/// move it; nothing it does makes a tick, a file or a CPU microsecond move
/// until the launch is continued.
#[test]
fn root_a_paused_launch_stays_frozen_whatever_the_sandbox_does() {
    let fx = Fixture::new();
    let b = &fx.backend;
    let info = b.create("frz", &SandboxSpec::default()).unwrap();
    let launch = "ticker";
    let script = "cd /workspace
        if echo $$ 2>/dev/null > /sys/fs/cgroup/unified/cgroup.procs; then echo left; else echo stayed; fi > escape
        if mkdir /sys/fs/cgroup/unified/mine; then echo made >> escape; fi 2>/dev/null
        (setsid sh -c 'while :; do echo x >> ticks-bg; sleep 0.05; done' &) 
        while :; do echo x >> ticks; sleep 0.05; done";
    b.launch(
        "frz",
        &LaunchRequest {
            launch_id: launch.into(),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: BTreeMap::new(),
            cwd: String::new(),
            freeze: None,
            options: Vec::new(),
        },
    )
    .unwrap();
    let ws = info.root.join("workspace");
    let lines = |name: &str| {
        std::fs::read_to_string(ws.join(name))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    wait_for(Duration::from_secs(20), "both tickers", || {
        (lines("ticks") > 3 && lines("ticks-bg") > 3).then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(ws.join("escape")).unwrap(),
        "stayed\n"
    );

    let session = info.control.join("launches").join(launch);
    let (code, reply) = rollpoint_testkit::ask(&session, "pause", &[]);
    let receipt = rollpoint_testkit::receipt("pause", &reply);
    assert_eq!(code, 0, "{reply:?}");
    assert!(receipt.confirmed(), "verified frozen: {receipt:?}");
    assert!(
        receipt.members.len() >= 3,
        "both tickers counted: {receipt:?}"
    );

    let cpu = || {
        let stat = rollpoint_testkit::sandbox_cgroups(|n| n.ends_with("-frz"))
            .into_iter()
            .map(|d| d.join("rollpoint").join(launch).join("cpu.stat"))
            .find(|p| p.exists())
            .unwrap();
        std::fs::read_to_string(stat)
            .unwrap()
            .lines()
            .find(|l| l.starts_with("usage_usec"))
            .unwrap()
            .to_owned()
    };
    let before = (lines("ticks"), lines("ticks-bg"), cpu());
    let attack = format!(
        "for f in /sys/fs/cgroup/unified/rollpoint/{launch}/cgroup.freeze \
                  /sys/fs/cgroup/unified/cgroup.freeze; do echo 0 > $f; done
         echo THAWED > /sys/fs/cgroup/freezer/rollpoint/{launch}/freezer.state
         for p in $(cat /sys/fs/cgroup/unified/rollpoint/{launch}/cgroup.procs); do
           kill -CONT $p; echo $p > /sys/fs/cgroup/unified/cgroup.procs
         done
         for p in /proc/[0-9]*; do
           if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^/proc/self/exe run '; then
             python3 -c 'import ctypes, sys
l = ctypes.CDLL(None, use_errno=True)
print(\"ptraced-supervisor\" if l.ptrace(16, int(sys.argv[1]), 0, 0) == 0 else \"ptrace-refused\")' ${{p#/proc/}}
             kill -9 ${{p#/proc/}} && echo killed-supervisor
           fi
         done
         true"
    );
    let out = sh(b, "frz", &attack);
    assert!(
        !out.stdout.contains("killed-supervisor") && !out.stdout.contains("ptraced-supervisor"),
        "the launch's supervisor is out of reach: {out:?}"
    );
    assert!(
        out.stdout.contains("ptrace-refused"),
        "ptrace was tried: {out:?}"
    );
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(700));
    let after = (lines("ticks"), lines("ticks-bg"), cpu());
    assert_eq!(
        before,
        after,
        "nothing moved in {:?} while paused",
        start.elapsed()
    );
    let (code, reply) = rollpoint_testkit::ask(&session, "continue", &[]);
    assert_eq!(code, 0, "{reply:?}");
    let resumed = lines("ticks");
    wait_for(Duration::from_secs(10), "ticks again", || {
        (lines("ticks") > resumed + 2).then_some(())
    });
}

/// `trusted` is today's sandbox: the host's root, all its capabilities,
/// no filter, the host's files in view.
#[test]
fn root_a_trusted_sandbox_is_the_hosts_root_as_asked() {
    let fx = Fixture::new();
    let planted = Planted::new();
    let b = &fx.backend;
    let spec = SandboxSpec {
        isolation: Isolation::Trusted,
        ..SandboxSpec::default()
    };
    b.create("trusted", &spec).unwrap();
    let out = sh(
        b,
        "trusted",
        &format!(
            "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; cat /proc/self/uid_map | tr -s ' '; \
             cat {}",
            planted.paths[0].display()
        ),
    );
    assert_eq!(
        out.stdout, "NoNewPrivs:\t0\nSeccomp:\t0\n 0 0 4294967295\nsk-planted-secret\n",
        "{out:?}"
    );
}

/// A task may drop capabilities from the kept set, never add one.
#[test]
fn root_a_task_drops_capabilities_and_cannot_add_one() {
    let fx = Fixture::new();
    let b = &fx.backend;
    let spec = SandboxSpec {
        drop_capabilities: vec!["NET_RAW".into(), "cap_chown".into()],
        ..SandboxSpec::default()
    };
    let info = b.create("fewer", &spec).unwrap();
    let dropped = rollpoint_proctree::isolate::drop_mask(&spec.drop_capabilities).unwrap();
    let want = format!(
        "{:016x}",
        rollpoint_proctree::isolate::kept_mask() & !dropped
    );
    // In a command and in a launch's harness alike.
    let out = sh(b, "fewer", "grep -E '^CapBnd:' /proc/self/status");
    assert_eq!(out.stdout, format!("CapBnd:\t{want}\n"), "{out:?}");
    b.launch(
        "fewer",
        &LaunchRequest {
            launch_id: "caps".into(),
            argv: vec![
                "sh".into(),
                "-c".into(),
                "grep -E '^CapBnd:' /proc/self/status > /workspace/caps.tmp && mv /workspace/caps.tmp /workspace/caps".into(),
            ],
            env: BTreeMap::new(),
            cwd: String::new(),
            freeze: None,
            options: Vec::new(),
        },
    )
    .unwrap();
    let seen = wait_for(Duration::from_secs(20), "the launch's capabilities", || {
        std::fs::read_to_string(info.root.join("workspace/caps")).ok()
    });
    assert_eq!(seen, format!("CapBnd:\t{want}\n"));

    for (caps, isolation, names) in [
        (vec!["SYS_ADMIN".to_owned()], Isolation::Strict, "SYS_ADMIN"),
        (vec!["NOT_A_CAP".to_owned()], Isolation::Strict, "NOT_A_CAP"),
        (
            vec!["NET_RAW".to_owned()],
            Isolation::Trusted,
            "needs sandbox.isolation",
        ),
    ] {
        let spec = SandboxSpec {
            drop_capabilities: caps,
            isolation,
            ..SandboxSpec::default()
        };
        let err = b.create("refused", &spec).unwrap_err().to_string();
        assert!(
            err.contains("sandbox.drop_capabilities") && err.contains(names),
            "{err}"
        );
    }
}
