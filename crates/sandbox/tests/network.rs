//! The network suite: code inside a sandbox with the default isolation
//! (strict) tries, in each `network` mode, the host's loopback services,
//! the gateway, a test host on the allow list and one off it, and name
//! lookups. The test hosts are in a network namespace this test makes
//! (`testkit::netns`); nothing is sent to any other address.
#![expect(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rollpoint_sandbox::local::{LocalBackend, LocalOptions};
use rollpoint_sandbox::{Backend, Network, SandboxSpec};
use rollpoint_testkit::netns::TestHost;
use rollpoint_testkit::{require_root, supervisor_bin, wait_for};

/// Each line `NAME open` when the URL answered, `NAME closed` when not.
const PROBE: &str = r#"
import socket, sys, urllib.request
for arg in sys.argv[1:]:
    name, url = arg.split("=", 1)
    try:
        body = urllib.request.urlopen(url, timeout=3).read().decode()
        print(name, "open", body.replace(" ", "_"))
    except Exception as e:
        print(name, "closed", type(e).__name__)
for name in ["example.com", "pypi.org"]:
    try:
        socket.getaddrinfo(name, 443)
        print("dns_" + name, "open")
    except OSError:
        print("dns_" + name, "closed")
"#;

/// An HTTP server on the host's loopback serving `GET /id` as `NAME`.
struct Loopback {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Loopback {
    fn start(name: &str) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("id"), name).unwrap();
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(Duration::from_secs(20), "the loopback server", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        Self {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn probe(backend: &LocalBackend, id: &str, urls: &[(&str, String)]) -> BTreeMap<String, String> {
    let mut argv = vec!["python3".to_owned(), "-c".to_owned(), PROBE.to_owned()];
    argv.extend(urls.iter().map(|(n, u)| format!("{n}={u}")));
    let mut req = rollpoint_testkit::shell("");
    req.argv = argv;
    let out = backend.exec(id, &req).unwrap();
    let text = out.stdout.clone();
    assert_eq!(out.exit_code, Some(0), "{text}{}", out.stderr);
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn root_each_network_mode_reaches_what_it_names_and_nothing_else() {
    require_root();
    let test_host = TestHost::start(&[18080, 18081]);
    let gateway = Loopback::start("gateway");
    let service = Loopback::start("host-service");
    let dir = tempfile::tempdir().unwrap();
    let owner_dir = dir.path().join("owner");
    let backend = LocalBackend::open(&owner_dir, LocalOptions::new(supervisor_bin())).unwrap();
    backend.route_to_gateway(SocketAddrV4::new(Ipv4Addr::LOCALHOST, gateway.port));
    let on = |port: u16| format!("http://{}:{port}/id", test_host.ip);
    let urls = [
        ("gateway", format!("http://127.0.0.1:{}/id", gateway.port)),
        (
            "host_loopback",
            format!("http://127.0.0.1:{}/id", service.port),
        ),
        ("allowed_prefix", on(18080)),
        ("allowed_host", on(18081)),
    ];
    let cases = [
        (
            Network::default(),
            ["open_gateway", "closed", "closed", "closed"],
        ),
        (Network::Loopback, ["closed", "closed", "closed", "closed"]),
        (
            Network::Allow(vec![format!("{}/24:18080", test_host.net)]),
            ["open_gateway", "closed", "open_port_18080", "closed"],
        ),
        (
            Network::Allow(vec![format!("{}:18081", test_host.ip)]),
            ["open_gateway", "closed", "closed", "open_port_18081"],
        ),
        (
            Network::Host,
            [
                "open_gateway",
                "open_host-service",
                "open_port_18080",
                "open_port_18081",
            ],
        ),
    ];
    assert_eq!(
        Network::default(),
        Network::Gateway,
        "gateway is the default"
    );
    for (i, (network, want)) in cases.into_iter().enumerate() {
        let id = format!("net{i}");
        let spec = SandboxSpec {
            network: network.clone(),
            ..SandboxSpec::default()
        };
        backend.create(&id, &spec).unwrap();
        let got = probe(&backend, &id, &urls);
        for ((name, _), want) in urls.iter().zip(want) {
            let seen = got.get(*name).map(String::as_str).unwrap_or("missing");
            let seen = seen.split(' ').collect::<Vec<_>>();
            let seen = if seen[0] == "open" {
                format!("open_{}", seen.get(1).unwrap_or(&""))
            } else {
                seen[0].to_owned()
            };
            assert_eq!(seen, want, "{} in {network:?}: {got:?}", name);
        }
        if !network.is_host() {
            // No name server is reachable and /etc/hosts names only loopback.
            assert_eq!(got["dns_example.com"], "closed", "{network:?}: {got:?}");
            let hosts = backend
                .exec(
                    &id,
                    &rollpoint_testkit::shell("cat /etc/hosts; echo x >> /etc/hosts"),
                )
                .unwrap();
            let text = &hosts.stdout;
            assert!(text.starts_with("127.0.0.1\tlocalhost\n"), "{text}");
            assert_ne!(hosts.exit_code, Some(0), "/etc/hosts is read-only");
            let interfaces = backend
                .exec(
                    &id,
                    &rollpoint_testkit::shell("sed 1,2d /proc/net/dev | cut -d: -f1 | tr -d ' '"),
                )
                .unwrap();
            assert_eq!(interfaces.stdout.trim(), "lo");
        }
        backend.destroy(&id).unwrap();
    }
    // What the relay carried is counted, outside the sandbox's reach.
    backend.create("counted", &SandboxSpec::default()).unwrap();
    probe(&backend, "counted", &urls[..1]);
    let usage: PathBuf = owner_dir.join("sandboxes/counted/control/network.json");
    let text = wait_for(Duration::from_secs(10), "network.json", || {
        std::fs::read_to_string(&usage)
            .ok()
            .filter(|t| t.contains("\"connections\":1"))
    });
    let usage: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(usage["bytes_in"].as_u64().unwrap() > 0, "{usage}");
    assert!(usage["bytes_out"].as_u64().unwrap() > 0, "{usage}");
    backend.destroy_all().unwrap();
}

/// Each line `NAME STATUS` for a request to each URL: `NAME=METHOD=URL`.
const STATUS: &str = r#"
import sys, urllib.request, urllib.error
body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
for arg in sys.argv[1:]:
    name, method, url = arg.split("=", 2)
    data = body if method == "POST" else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        status = urllib.request.urlopen(req, timeout=10).status
    except urllib.error.HTTPError as e:
        status = e.code
    except Exception as e:
        status = type(e).__name__
    print(name, status)
"#;

/// The real gateway on this node (`rollpoint gateway --attach-socket`), over
/// a scripted model, with a route key.
struct NodeGateway {
    child: Child,
    port: u16,
    socket: PathBuf,
    log: PathBuf,
    key: rollpoint_proto::route::RouteKey,
    _dir: tempfile::TempDir,
}

impl NodeGateway {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script.json");
        std::fs::write(&script, r#"{"version": 1, "steps": [{"text": "hello"}]}"#).unwrap();
        let key = rollpoint_proto::route::RouteKey::from_bytes([7; 32]);
        let key_file = dir.path().join("route.key");
        std::fs::write(&key_file, key.encode()).unwrap();
        let (port_file, socket, log) = (
            dir.path().join("port"),
            dir.path().join("attach.sock"),
            dir.path().join("gateway.log"),
        );
        let child = Command::new(rollpoint_testkit::rollpoint_bin())
            .arg("gateway")
            .arg("--model-script")
            .arg(&script)
            .arg("--db")
            .arg(dir.path().join("ledger.sqlite"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--attach-socket")
            .arg(&socket)
            .arg("--route-key-file")
            .arg(&key_file)
            .args(["--register", "k1", "--register", "k2"])
            .env("RUST_LOG", "info,rollpoint_gateway=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let port = wait_for(Duration::from_secs(30), "the gateway's port", || {
            std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|t| t.trim().parse().ok())
        });
        Self {
            child,
            port,
            socket,
            log,
            key,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodeGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With the gateway on this node, a sandbox's anchor hands it the listener
/// it makes in the sandbox's namespace: a call takes no relay, the route's
/// secret still binds it, only the model routes are served, the refusal is
/// logged naming the sandbox, and the gateway lets the listener go with the
/// sandbox. A gateway that cannot be reached stops the sandbox's start.
#[test]
fn root_a_gateway_on_the_node_serves_each_sandbox_in_its_own_namespace() {
    require_root();
    let gateway = NodeGateway::start();
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::open(
        &dir.path().join("owner"),
        LocalOptions::new(supervisor_bin()),
    )
    .unwrap();
    backend.route_to_gateway(SocketAddrV4::new(Ipv4Addr::LOCALHOST, gateway.port));
    backend.attach_to_gateway(Some(gateway.socket.clone()));
    let info = backend.create("zh", &SandboxSpec::default()).unwrap();
    let base = format!("http://127.0.0.1:{}", gateway.port);
    let own = format!("k1@{}", gateway.key.secret("k1"));
    let copied = format!("k2@{}", gateway.key.secret("k1"));
    let mut req = rollpoint_testkit::shell("");
    req.argv = vec!["python3".into(), "-c".into(), STATUS.into()];
    req.argv.extend([
        format!("own=POST={base}/r/{own}/v1/chat/completions"),
        format!("copied=POST={base}/r/{copied}/v1/chat/completions"),
        format!("metrics=GET={base}/metrics"),
    ]);
    let out = backend.exec("zh", &req).unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout, "own 200\ncopied 403\nmetrics 404\n", "{out:?}");
    // No relay: the anchor started no relay thread.
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", info.anchor_pid))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .collect();
    assert!(
        !threads.iter().any(|t| t.starts_with("relay")),
        "{threads:?}"
    );
    let log = gateway.log();
    assert!(
        log.lines()
            .any(|l| l.contains("route k2 refused") && l.contains("sandbox=\"zh\"")),
        "the refusal names the sandbox:\n{log}"
    );
    backend.destroy("zh").unwrap();
    wait_for(
        Duration::from_secs(10),
        "the gateway to let the listener go",
        || {
            gateway
                .log()
                .contains("the sandbox's anchor ended")
                .then_some(())
        },
    );
    // A gateway that is not there: the sandbox does not start, naming the socket.
    let gone = dir.path().join("no-gateway.sock");
    backend.attach_to_gateway(Some(gone.clone()));
    let err = backend
        .create("nogw", &SandboxSpec::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains(&gone.display().to_string()), "{err}");
    // A gateway that refuses the listener: the sandbox does not start either,
    // though its anchor read the answer after PID 1 had begun.
    let refusing = dir.path().join("refusing.sock");
    let mut server = Command::new("python3")
        .args(["-c", REFUSE])
        .arg(&refusing)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(10), "the refusing socket", || {
        refusing.exists().then_some(())
    });
    backend.attach_to_gateway(Some(refusing.clone()));
    let err = backend
        .create("refused", &SandboxSpec::default())
        .unwrap_err()
        .to_string();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        err.contains("does not serve sandbox refused's listener: no room"),
        "{err}"
    );
    backend.destroy_all().unwrap();
}

/// An attach socket at argv[1] answering every request with an error.
const REFUSE: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(sys.argv[1]); s.listen(8)
while True:
    c, _ = s.accept()
    msg, anc, _, _ = c.recvmsg(4096, socket.CMSG_SPACE(4 * 4))
    c.send(b'{"v":1,"error":"no room"}')
    c.close()
"#;

/// Sandboxes with a network of their own take namespaces the backend made
/// ahead (`--owner-netns-fd`): each still has one of its own, none is the
/// host's, and none is shared.
#[test]
fn root_sandboxes_take_network_namespaces_made_ahead_and_share_none() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let backend = LocalBackend::open(
        &dir.path().join("owner"),
        LocalOptions::new(supervisor_bin()),
    )
    .unwrap();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    let mut links = Vec::new();
    let mut taken = 0;
    for i in 0..20 {
        let info = backend
            .create(&format!("ns{i}"), &SandboxSpec::default())
            .unwrap();
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", info.anchor_pid)).unwrap();
        if cmdline.split(|b| *b == 0).any(|a| a == b"--owner-netns-fd") {
            taken += 1;
        }
        let out = backend
            .exec(
                &format!("ns{i}"),
                &rollpoint_testkit::shell("readlink /proc/self/ns/net"),
            )
            .unwrap();
        let link = PathBuf::from(out.stdout.trim());
        assert_ne!(link, host, "sandbox ns{i} is in the host's namespace");
        assert!(!links.contains(&link), "ns{i} shares {link:?}");
        links.push(link);
        if taken >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(taken >= 3, "no anchor took a namespace made ahead");
    backend.destroy_all().unwrap();
}
