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
