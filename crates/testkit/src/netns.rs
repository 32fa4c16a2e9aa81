//! Test hosts in a network namespace the test makes itself (`ip netns`,
//! a veth pair): a peer at `10.231.N.2` with HTTP servers on the ports
//! asked for, reached from the host's namespace through `10.231.N.1`. No
//! test sends traffic to any address but these and loopback.

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A test host; dropped, its servers, namespace and link are removed.
#[derive(Debug)]
pub struct TestHost {
    ns: String,
    link: String,
    /// The peer's address.
    pub ip: Ipv4Addr,
    /// The /24 the peer and the host's end share.
    pub net: Ipv4Addr,
    servers: Vec<Child>,
    _root: tempfile::TempDir,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e} (install iproute2)"));
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestHost {
    /// Makes the namespace and serves `ports` there, each answering
    /// `GET /id` with `port <N>`.
    pub fn start(ports: &[u16]) -> Self {
        let n = std::process::id() % 200 + 20;
        let ns = format!("rp-test-{}", std::process::id());
        let link = format!("rpt{}", std::process::id() % 100_000);
        let peer = format!("{link}p");
        let (host_ip, peer_ip) = (format!("10.231.{n}.1/24"), format!("10.231.{n}.2/24"));
        let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        let _ = Command::new("ip").args(["link", "del", &link]).output();
        ip(&["netns", "add", &ns]);
        ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &ns]);
        ip(&["addr", "add", &host_ip, "dev", &link]);
        ip(&["link", "set", &link, "up"]);
        ip(&["-n", &ns, "addr", "add", &peer_ip, "dev", &peer]);
        ip(&["-n", &ns, "link", "set", &peer, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let root = tempfile::tempdir().expect("tempdir");
        let ip_addr = Ipv4Addr::new(10, 231, u8::try_from(n).unwrap_or(20), 2);
        let mut host = Self {
            ns,
            link,
            ip: ip_addr,
            net: Ipv4Addr::new(10, 231, u8::try_from(n).unwrap_or(20), 0),
            servers: Vec::new(),
            _root: root,
        };
        for port in ports {
            let dir = host._root.path().join(port.to_string());
            std::fs::create_dir_all(&dir).expect("server dir");
            std::fs::write(dir.join("id"), format!("port {port}")).expect("id file");
            let child = Command::new("ip")
                .args(["netns", "exec", &host.ns, "python3", "-m", "http.server"])
                .args(["--bind", &ip_addr.to_string(), &port.to_string()])
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start a test server");
            host.servers.push(child);
        }
        for port in ports {
            crate::wait_for(Duration::from_secs(20), "the test host's server", || {
                std::net::TcpStream::connect_timeout(
                    &std::net::SocketAddr::from((ip_addr, *port)),
                    Duration::from_millis(200),
                )
                .ok()
            });
        }
        host
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .output();
    }
}
