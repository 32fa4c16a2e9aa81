//! The anchor's network options as the command line gives them (`--net`, `--gateway`,
//! `--allow`, `--host`, `--gateway-attach`): read here, below both the command line and the
//! anchor, so the command line does not reach into the anchor for its types. What the
//! options make (the namespace, the relay) is the anchor's (`anchor::net`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

pub use rollpoint_proto::net::Allowed;

/// How the sandbox reaches the network (`--net`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NetMode {
    /// The host's network namespace (no new one).
    #[default]
    Host,
    /// Loopback only.
    None,
    /// Loopback and the gateway.
    Gateway,
    /// Loopback, the gateway and the allowed destinations.
    Allow,
}

/// The network options of the anchor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetOpts {
    pub mode: NetMode,
    /// The gateway as the host reaches it; inside, `127.0.0.1` and its port.
    pub gateway: Option<SocketAddrV4>,
    pub allow: Vec<Allowed>,
    /// Names `/etc/hosts` gives (the allowed hosts'); no other name
    /// resolves.
    pub hosts: Vec<(String, Ipv4Addr)>,
    /// The sandbox and the attach socket of a gateway on this node: the
    /// gateway listener is handed to it instead of relayed (`attach`).
    pub attach: Option<(String, PathBuf)>,
}

impl NetOpts {
    /// One option of the command line.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        match name {
            "--net" => {
                self.mode = match value {
                    "host" => NetMode::Host,
                    "none" => NetMode::None,
                    "gateway" => NetMode::Gateway,
                    "allow" => NetMode::Allow,
                    _ => return Err(format!("--net {value:?}: expected host|none|gateway|allow")),
                }
            }
            "--gateway" => {
                self.gateway = Some(
                    value
                        .parse()
                        .map_err(|_| format!("--gateway {value:?}: expected IPv4:PORT"))?,
                );
            }
            "--allow" => self
                .allow
                .push(Allowed::parse(value).map_err(|e| format!("--allow {value:?}: {e}"))?),
            "--gateway-attach" => self.attach = Some(attach(value)?),
            _ => {
                let bad = || format!("--host {value:?}: expected NAME=IPv4");
                let (host, ip) = value.split_once('=').ok_or_else(bad)?;
                if !rollpoint_proto::net::is_host_name(host) {
                    return Err(bad());
                }
                self.hosts
                    .push((host.to_owned(), ip.parse().map_err(|_| bad())?));
            }
        }
        Ok(())
    }

    /// Whether the sandbox gets a network namespace of its own.
    pub fn own_namespace(&self) -> bool {
        self.mode != NetMode::Host
    }
}

/// `SANDBOX=PATH` of `--gateway-attach`.
fn attach(value: &str) -> Result<(String, PathBuf), String> {
    let bad = || format!("--gateway-attach {value:?}: expected SANDBOX=PATH (an absolute path)");
    let (sandbox, path) = value.split_once('=').ok_or_else(bad)?;
    if sandbox.is_empty() || !path.starts_with('/') {
        return Err(bad());
    }
    Ok((sandbox.to_owned(), PathBuf::from(path)))
}
