//! The sandbox's network: a namespace of its own whose only ways out are
//! the listeners this module holds.
//!
//! Before it forks, while still the host's root in the new namespace, the
//! anchor brings `lo` up, puts each allowed address on it (a prefix on a
//! loopback device makes every address in it local), and listens where a
//! process of the sandbox may connect: `127.0.0.1:<gateway port>` for the
//! gateway, `IP:PORT` for an allowed host, `0.0.0.0:PORT` for an allowed
//! prefix. Nothing else leaves: there is no other interface and no route,
//! so every other address is unreachable and no name server answers.
//!
//! The host-side process keeps the listeners (PID 1, whose descriptors the
//! sandbox could read, never holds one) and relays each connection from a
//! thread that has joined the host's network namespace again (a namespace
//! is a property of each thread; a socket keeps the namespace it was made
//! in), to the one destination the connection's own local address names.
//! The relay is bytes only: it parses nothing the sandbox sends. The route
//! a call may use is bound by its secret at the gateway, not here.

use std::io::Write as _;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::stat::Mode;

use crate::errors::{Error, io_err};

use crate::net_opts::{NetMode, NetOpts};
use rollpoint_proto::net::{RELAY_USAGE_FILE, RELAY_USAGE_VERSION, RelayUsage};

impl NetOpts {
    /// Whether any listener is relayed (the gateway's is not when a gateway
    /// on this node takes it).
    fn relays(&self) -> bool {
        self.mode == NetMode::Allow && !self.allow.is_empty()
            || matches!(self.mode, NetMode::Gateway | NetMode::Allow) && self.gateway_relayed()
    }

    fn gateway_relayed(&self) -> bool {
        self.gateway.is_some() && self.attached().is_none()
    }

    /// The gateway's listener inside, when it goes to a gateway on this
    /// node: it is then not one of `listen_addrs`. Not when an allowed
    /// destination's listener would hold the same address (a prefix on the
    /// gateway's port listens on every address): then it is relayed.
    fn attached(&self) -> Option<(SocketAddrV4, &str, &Path)> {
        let gw = self.gateway?;
        let (sandbox, path) = self.attach.as_ref()?;
        let inside = SocketAddrV4::new(Ipv4Addr::LOCALHOST, gw.port());
        let shared = self.mode == NetMode::Allow
            && self
                .allow
                .iter()
                .any(|a| a.port == gw.port() && (a.prefix != 32 || a.contains(inside)));
        (matches!(self.mode, NetMode::Gateway | NetMode::Allow) && !shared).then_some((
            inside,
            sandbox.as_str(),
            path.as_path(),
        ))
    }

    /// Where the connection to `local` (the address the sandbox dialled)
    /// goes on the host, if anywhere.
    fn destination(&self, local: SocketAddr) -> Option<SocketAddr> {
        let SocketAddr::V4(local) = local else {
            return None;
        };
        if let Some(gw) = self.gateway.filter(|_| self.gateway_relayed())
            && *local.ip() == Ipv4Addr::LOCALHOST
            && local.port() == gw.port()
        {
            return Some(SocketAddr::V4(gw));
        }
        (self.mode == NetMode::Allow && self.allow.iter().any(|a| a.contains(local)))
            .then_some(SocketAddr::V4(local))
    }

    /// The listeners, each address once: a prefix's port on every address.
    fn listen_addrs(&self) -> Vec<SocketAddrV4> {
        let mut addrs = Vec::new();
        if let Some(gw) = self.gateway.filter(|_| self.gateway_relayed()) {
            addrs.push(SocketAddrV4::new(Ipv4Addr::LOCALHOST, gw.port()));
        }
        if self.mode == NetMode::Allow {
            for a in &self.allow {
                addrs.push(if a.prefix == 32 {
                    SocketAddrV4::new(a.net, a.port)
                } else {
                    SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, a.port)
                });
            }
        }
        let wild: Vec<u16> = addrs
            .iter()
            .filter(|a| a.ip().is_unspecified())
            .map(SocketAddrV4::port)
            .collect();
        addrs.retain(|a| a.ip().is_unspecified() || !wild.contains(&a.port()));
        addrs.sort_by_key(|a| (u32::from(*a.ip()), a.port()));
        addrs.dedup();
        addrs
    }
}

/// What the relay has carried, written to the control directory's
/// `network.json` (`RelayUsage`) as each connection ends.
#[derive(Debug, Default)]
struct Usage {
    connections: AtomicU64,
    to_sandbox: AtomicU64,
    from_sandbox: AtomicU64,
    refused: AtomicU64,
    /// One writer of the file at a time: they share its temporary name.
    writing: std::sync::Mutex<()>,
}

impl Usage {
    /// Writes `network.json` in `dir` atomically, by descriptor: once PID 1
    /// pivots, the host-side process shares its root, so no host path
    /// resolves any more.
    fn write(&self, dir: &OwnedFd) {
        let _one = self
            .writing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let usage = RelayUsage {
            v: RELAY_USAGE_VERSION,
            connections: self.connections.load(Ordering::Relaxed),
            bytes_in: self.to_sandbox.load(Ordering::Relaxed),
            bytes_out: self.from_sandbox.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        };
        let write = || -> std::io::Result<()> {
            let tmp = ".network.json.tmp";
            let fd = nix::fcntl::openat(
                dir,
                tmp,
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            )?;
            let mut file = std::fs::File::from(fd);
            file.write_all(&serde_json::to_vec(&usage)?)?;
            file.sync_all()?;
            nix::fcntl::renameat(dir, tmp, dir, RELAY_USAGE_FILE)?;
            Ok(nix::unistd::fsync(dir)?)
        };
        if let Err(e) = write() {
            eprintln!("rollpoint-supervisor: cannot write the relay's {RELAY_USAGE_FILE}: {e}");
        }
    }
}

/// The sandbox's listeners, made in its namespace before the fork.
#[derive(Debug)]
pub struct Relay {
    opts: NetOpts,
    listeners: Vec<TcpListener>,
    /// The host's network namespace, opened before the anchor left it.
    host: OwnedFd,
    /// The host's pid namespace and the control directory, opened before
    /// the fork (PID 1's pivot moves this process's root too).
    pid_ns: OwnedFd,
    control: OwnedFd,
}

/// Opens the host's network namespace, before `--enter` leaves it; `None`
/// when nothing will be relayed.
pub fn host_namespace(opts: &NetOpts) -> Result<Option<OwnedFd>, Error> {
    if !opts.relays() {
        return Ok(None);
    }
    let path = Path::new("/proc/self/ns/net");
    std::fs::File::open(path)
        .map(|f| Some(OwnedFd::from(f)))
        .map_err(io_err("open the host's network namespace", path))
}

/// In the sandbox's new namespace, before the fork: `lo` up, the allowed
/// addresses on it, the gateway's listener handed to a gateway on this node,
/// and the relay's listeners.
pub fn prepare(
    opts: &NetOpts,
    host: Option<OwnedFd>,
    control: &Path,
) -> Result<Option<HostSide>, Error> {
    if !opts.own_namespace() {
        return Ok(None);
    }
    let sock = Ifreq::socket()?;
    sock.up("lo")?;
    if opts.mode == NetMode::Allow {
        for (i, a) in opts.allow.iter().enumerate() {
            sock.add_address(i + 1, a.net, a.prefix)?;
        }
    }
    let attached = match opts.attached() {
        Some((addr, sandbox, socket)) => {
            let listener = TcpListener::bind(addr).map_err(io_err(
                "listen in the sandbox's network namespace at",
                &PathBuf::from(addr.to_string()),
            ))?;
            // The gateway keeps its copy; this process holds the connection.
            Some(super::attach::send(socket, sandbox, &listener)?)
        }
        None => None,
    };
    let Some(host) = host else {
        return Ok(Some(HostSide {
            relay: None,
            attached,
        }));
    };
    let listeners = opts
        .listen_addrs()
        .into_iter()
        .map(|addr| {
            TcpListener::bind(addr).map_err(io_err(
                "listen in the sandbox's network namespace at",
                &PathBuf::from(addr.to_string()),
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let own = Path::new("/proc/self/ns/pid");
    let pid_ns = std::fs::File::open(own)
        .map(OwnedFd::from)
        .map_err(io_err("open the pid namespace", own))?;
    let control = nix::fcntl::open(
        control,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| Error::Setup {
        what: "open the control directory",
        path: control.to_owned(),
        source,
    })?;
    Ok(Some(HostSide {
        relay: Some(Relay {
            opts: opts.clone(),
            listeners,
            host,
            pid_ns,
            control,
        }),
        attached,
    }))
}

/// What the host-side process holds of the sandbox's network: the relay,
/// and the connection to a gateway serving its gateway listener.
#[derive(Debug)]
pub struct HostSide {
    relay: Option<Relay>,
    attached: Option<super::attach::Sent>,
}

impl HostSide {
    /// Starts the relay, if any, and reads the gateway's answer; the value
    /// returned holds the gateway's connection until it is dropped (when
    /// the sandbox has ended).
    pub fn start(self) -> Result<Option<OwnedFd>, Error> {
        if let Some(relay) = self.relay {
            relay.start()?;
        }
        self.attached.map(super::attach::Sent::confirm).transpose()
    }
}

impl Relay {
    /// Starts relaying on a thread of the host-side process, after the fork
    /// of PID 1. A process whose children go to another pid namespace may
    /// not make threads (EINVAL), so it first points its children back at
    /// its own (the host's) namespace; it makes no more processes.
    pub fn start(self) -> Result<(), Error> {
        nix::sched::setns(self.pid_ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWPID).map_err(
            |source| Error::Setup {
                what: "return the children's pid namespace to",
                path: PathBuf::from("/proc/self/ns/pid"),
                source,
            },
        )?;
        std::thread::Builder::new()
            .name("relay".into())
            .stack_size(256 << 10)
            .spawn(move || self.run())
            .map(drop)
            .map_err(io_err("start the relay thread of", Path::new("net")))
    }

    fn run(self) {
        if let Err(e) = nix::sched::setns(self.host.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET) {
            eprintln!("rollpoint-supervisor: relay: cannot rejoin the host's network: {e}");
            return;
        }
        drop(self.host);
        drop(self.pid_ns);
        let usage = Arc::new(Usage::default());
        let opts = Arc::new(self.opts);
        let file = Arc::new(self.control);
        usage.write(&file);
        loop {
            let mut fds: Vec<PollFd<'_>> = self
                .listeners
                .iter()
                .map(|l| PollFd::new(l.as_fd(), PollFlags::POLLIN))
                .collect();
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    eprintln!("rollpoint-supervisor: relay: poll: {e}");
                    return;
                }
            }
            let ready: Vec<usize> = fds
                .iter()
                .enumerate()
                .filter(|(_, f)| f.revents().is_some_and(|r| !r.is_empty()))
                .map(|(i, _)| i)
                .collect();
            drop(fds);
            for i in ready {
                let Some(listener) = self.listeners.get(i) else {
                    continue;
                };
                let Ok((inside, _)) = listener.accept() else {
                    continue;
                };
                let (opts, usage, file) =
                    (Arc::clone(&opts), Arc::clone(&usage), Arc::clone(&file));
                let spawned = std::thread::Builder::new()
                    .name("relay-conn".into())
                    .stack_size(128 << 10)
                    .spawn(move || {
                        connection(&opts, &usage, inside);
                        usage.write(&file);
                    });
                if let Err(e) = spawned {
                    eprintln!("rollpoint-supervisor: relay: cannot start a thread: {e}");
                }
            }
        }
    }
}

/// How long a connection to a destination may take to open.
const CONNECT: Duration = Duration::from_secs(10);

fn connection(opts: &NetOpts, usage: &Usage, inside: TcpStream) {
    let Some(to) = inside.local_addr().ok().and_then(|l| opts.destination(l)) else {
        usage.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let outside = match TcpStream::connect_timeout(&to, CONNECT) {
        Ok(s) => s,
        Err(e) => {
            usage.refused.fetch_add(1, Ordering::Relaxed);
            eprintln!("rollpoint-supervisor: relay: cannot reach {to}: {e}");
            return;
        }
    };
    usage.connections.fetch_add(1, Ordering::Relaxed);
    // Streams are many small writes: Nagle would hold each behind an ACK.
    let _ = inside.set_nodelay(true);
    let _ = outside.set_nodelay(true);
    let (Ok(inside2), Ok(outside2)) = (inside.try_clone(), outside.try_clone()) else {
        return;
    };
    let up = std::thread::Builder::new()
        .name("relay-up".into())
        .stack_size(128 << 10)
        .spawn(move || pipe(&inside2, &outside2));
    let down = pipe(&outside, &inside);
    usage.to_sandbox.fetch_add(down, Ordering::Relaxed);
    if let Ok(up) = up
        && let Ok(n) = up.join()
    {
        usage.from_sandbox.fetch_add(n, Ordering::Relaxed);
    }
}

/// Copies `from` to `to` until `from` ends, then ends `to`'s writing side.
fn pipe(mut from: &TcpStream, mut to: &TcpStream) -> u64 {
    let n = std::io::copy(&mut from, &mut to).unwrap_or(0);
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
    n
}

/// The interface requests the anchor makes. No crate wraps SIOCSIFFLAGS or
/// SIOCSIFADDR (nix only reads interface flags; the netlink crates bring an
/// async runtime or a message builder for two requests), hence the ioctls.
struct Ifreq(OwnedFd);

// Linux ABI request numbers (linux/sockios.h), typed for this libc.
const SIOCGIFFLAGS: libc::Ioctl = 0x8913;
const SIOCSIFFLAGS: libc::Ioctl = 0x8914;
const SIOCSIFADDR: libc::Ioctl = 0x8916;
const SIOCSIFNETMASK: libc::Ioctl = 0x891c;

impl Ifreq {
    fn socket() -> Result<Self, Error> {
        // SAFETY: socket(2) with constant arguments; checked before use.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(fail("open a socket to configure interface", "lo"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn request(name: &str) -> libc::ifreq {
        // SAFETY: ifreq is plain old data; all zeroes is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        // IFNAMSIZ is 16: every name here ("lo", "lo:N") fits with its NUL.
        for (dst, src) in ifr.ifr_name.iter_mut().take(15).zip(name.bytes()) {
            *dst = libc::c_char::from_ne_bytes([src]);
        }
        ifr
    }

    fn ioctl(&self, request: libc::Ioctl, ifr: &mut libc::ifreq) -> bool {
        // SAFETY: `ifr` is a valid ifreq naming an interface, as each of
        // these requests expects; the kernel reads or writes only it.
        unsafe { libc::ioctl(self.0.as_raw_fd(), request, std::ptr::from_mut(ifr)) >= 0 }
    }

    /// Brings the interface up.
    fn up(&self, name: &str) -> Result<(), Error> {
        let mut ifr = Self::request(name);
        if !self.ioctl(SIOCGIFFLAGS, &mut ifr) {
            return Err(fail("read the flags of interface", name));
        }
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags };
        // IFF_UP is 1: it fits a c_short.
        ifr.ifr_ifru.ifru_flags = flags | libc::c_short::try_from(libc::IFF_UP).unwrap_or(1);
        if !self.ioctl(SIOCSIFFLAGS, &mut ifr) {
            return Err(fail("bring up interface", name));
        }
        Ok(())
    }

    /// Puts `net/prefix` on `lo` under the label `lo:<n>`.
    fn add_address(&self, n: usize, net: Ipv4Addr, prefix: u8) -> Result<(), Error> {
        let name = format!("lo:{n}");
        let sockaddr = |ip: Ipv4Addr| {
            let sin = libc::sockaddr_in {
                sin_family: libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(2),
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from(ip).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in and sockaddr have the same size on Linux,
            // and the kernel reads it as the family says.
            unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
        };
        let mut ifr = Self::request(&name);
        ifr.ifr_ifru.ifru_addr = sockaddr(net);
        if !self.ioctl(SIOCSIFADDR, &mut ifr) {
            return Err(fail("add an allowed address to interface", &name));
        }
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        ifr.ifr_ifru.ifru_netmask = sockaddr(Ipv4Addr::from(mask));
        if !self.ioctl(SIOCSIFNETMASK, &mut ifr) {
            return Err(fail("set the allowed prefix on interface", &name));
        }
        Ok(())
    }
}

fn fail(what: &'static str, name: &str) -> Error {
    Error::SetupIo {
        what,
        path: PathBuf::from(name),
        source: std::io::Error::last_os_error(),
    }
}

/// `/etc/hosts` for a sandbox with a network of its own: loopback, its
/// hostname, and the allowed names.
pub fn hosts_file(hostname: &str, opts: &NetOpts) -> String {
    let mut text = format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
    );
    for (name, ip) in &opts.hosts {
        text.push_str(&format!("{ip}\t{name}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_the_gateway_and_the_allowed_only() {
        let mut opts = NetOpts::default();
        for (k, v) in [
            ("--net", "allow"),
            ("--gateway", "127.0.0.1:4000"),
            ("--allow", "10.9.0.0/24:8080"),
            ("--allow", "10.8.0.5:443"),
            ("--allow", "10.9.0.7:8080"),
        ] {
            opts.set(k, v).expect(k);
        }
        let at = |s: &str| s.parse::<SocketAddr>().expect("addr");
        assert_eq!(
            opts.destination(at("127.0.0.1:4000")),
            Some(at("127.0.0.1:4000"))
        );
        assert_eq!(
            opts.destination(at("10.9.0.200:8080")),
            Some(at("10.9.0.200:8080"))
        );
        assert_eq!(opts.destination(at("10.9.0.200:8081")), None);
        assert_eq!(
            opts.destination(at("10.8.0.5:443")),
            Some(at("10.8.0.5:443"))
        );
        assert_eq!(opts.destination(at("10.8.0.6:443")), None);
        assert_eq!(opts.destination(at("127.0.0.1:4001")), None);
        let addrs: Vec<String> = opts
            .listen_addrs()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(addrs, ["0.0.0.0:8080", "10.8.0.5:443", "127.0.0.1:4000"]);
        opts.mode = NetMode::Gateway;
        assert_eq!(
            opts.destination(at("10.8.0.5:443")),
            None,
            "gateway mode allows none"
        );
        for bad in [
            "10.0.0.1/24:80",
            "10.0.0.0/33:80",
            "10.0.0.0:0",
            "::1:80",
            "x:80",
        ] {
            assert!(NetOpts::default().set("--allow", bad).is_err(), "{bad}");
        }
        let err = NetOpts::default()
            .set("--allow", "10.0.0.1/24:80")
            .expect_err("host bits");
        assert!(
            err.starts_with("--allow") && err.contains("host bits"),
            "{err}"
        );
        assert!(NetOpts::default().set("--host", "a b=1.2.3.4").is_err());
        assert!(NetOpts::default().set("--net", "shared").is_err());
    }

    #[test]
    fn an_attached_gateway_listener_is_not_relayed_unless_another_holds_its_address() {
        let opts = |pairs: &[(&str, &str)]| {
            let mut opts = NetOpts::default();
            for (k, v) in pairs {
                opts.set(k, v).expect(k);
            }
            opts
        };
        let gateway = [
            ("--net", "gateway"),
            ("--gateway", "127.0.0.1:4000"),
            ("--gateway-attach", "s1=/run/g.sock"),
        ];
        let attached = opts(&gateway);
        assert!(attached.attached().is_some());
        assert!(!attached.relays(), "nothing left to relay");
        assert!(attached.listen_addrs().is_empty());
        let at = "127.0.0.1:4000".parse::<SocketAddr>().expect("addr");
        assert_eq!(attached.destination(at), None);
        let mut allow = gateway.to_vec();
        allow[0] = ("--net", "allow");
        allow.push(("--allow", "10.9.0.5:443"));
        let some = opts(&allow);
        assert!(some.attached().is_some() && some.relays());
        let addrs: Vec<String> = some
            .listen_addrs()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(addrs, ["10.9.0.5:443"]);
        // A prefix on the gateway's port listens on 127.0.0.1 too: relayed.
        allow.push(("--allow", "10.0.0.0/8:4000"));
        let shared = opts(&allow);
        assert!(shared.attached().is_none());
        assert_eq!(shared.destination(at), Some(at));
        assert!(
            opts(&gateway[..2]).attached().is_none(),
            "no socket: relayed"
        );
    }
}
