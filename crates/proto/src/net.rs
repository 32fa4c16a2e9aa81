//! A sandbox's network as both sides of it speak of it: a destination it
//! may reach, as the backend hands it to the anchor (`--allow IP/N:PORT`,
//! parsed here once so the owner refuses by field exactly what the anchor
//! would), what the anchor's relay carried (`network.json`, written by
//! the anchor, read by the owner), and the message by which an anchor hands
//! its gateway listener to a gateway on the same node (no relay: the
//! gateway accepts in the sandbox's namespace itself).

use std::fmt;
use std::net::{AddrParseError, Ipv4Addr, SocketAddrV4};
use std::num::ParseIntError;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::version::FormatError;

/// Version of [`RelayUsage`].
pub const RELAY_USAGE_VERSION: u32 = 1;

/// The file in a sandbox's control directory holding its [`RelayUsage`].
pub const RELAY_USAGE_FILE: &str = "network.json";

/// What a sandbox's relay has carried so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayUsage {
    pub v: u32,
    /// Connections relayed to a destination.
    pub connections: u64,
    /// Bytes to the sandbox.
    pub bytes_in: u64,
    /// Bytes from the sandbox.
    pub bytes_out: u64,
    /// Connections closed at once: to no allowed destination, or one that
    /// could not be reached.
    pub refused: u64,
}

impl RelayUsage {
    /// Reads `network.json`; an unknown version is refused by name.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("relay usage", RELAY_USAGE_VERSION, bytes)
    }
}

/// Version of [`GatewayAttach`] and [`AttachReply`].
pub const ATTACH_VERSION: u32 = 1;

/// Sent by an anchor on the gateway's attach socket (a Unix `SOCK_SEQPACKET`
/// socket), one message carrying, as `SCM_RIGHTS`, the listening socket it
/// made at `127.0.0.1:<gateway port>` in the sandbox's network namespace.
/// The anchor keeps the connection open for its whole life: the gateway
/// serves the listener until it sees the connection end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayAttach {
    pub v: u32,
    /// The sandbox whose namespace the listener is in (for the gateway's
    /// logs: a refused route is logged naming it).
    pub sandbox: String,
}

impl GatewayAttach {
    /// Reads one; an unknown version is refused by name.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("gateway attach request", ATTACH_VERSION, bytes)
    }
}

/// The gateway's answer to a [`GatewayAttach`]: `error` says why it does not
/// serve the listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachReply {
    pub v: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl AttachReply {
    /// Reads one; an unknown version is refused by name.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        crate::version::decode("gateway attach reply", ATTACH_VERSION, bytes)
    }
}

/// Every address of `net/prefix`, on `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    pub net: Ipv4Addr,
    pub prefix: u8,
    pub port: u16,
}

impl Allowed {
    /// The network mask of `prefix` bits.
    #[must_use]
    pub fn mask(&self) -> u32 {
        u32::MAX
            .checked_shl(32 - u32::from(self.prefix))
            .unwrap_or(0)
    }

    /// Whether `to` is on this network and port.
    #[must_use]
    pub fn contains(&self, to: SocketAddrV4) -> bool {
        to.port() == self.port && (u32::from(*to.ip()) & self.mask()) == u32::from(self.net)
    }

    /// `IPv4[/N]:PORT`, the network's host bits zero; the error says why
    /// not, as text ([`FromStr`] gives it typed).
    pub fn parse(text: &str) -> Result<Self, String> {
        text.parse().map_err(|e: AllowedError| e.to_string())
    }

    /// Whether the address has bits set past the prefix (`10.0.0.5/24`):
    /// well formed, but naming no network as written.
    #[must_use]
    pub fn has_host_bits(&self) -> bool {
        u32::from(self.net) & !self.mask() != 0
    }

    /// `IPv4[/N]:PORT` as written, host bits and all.
    pub fn parse_written(text: &str) -> Result<Self, AllowedError> {
        let (host, port) = text.rsplit_once(':').ok_or(AllowedError::Shape)?;
        let port = match port.parse::<u16>() {
            Ok(0) => return Err(AllowedError::Port { source: None }),
            Ok(p) => p,
            Err(e) => return Err(AllowedError::Port { source: Some(e) }),
        };
        let (ip, prefix) = host.split_once('/').unwrap_or((host, "32"));
        let net: Ipv4Addr = ip.parse().map_err(AllowedError::Address)?;
        let prefix = match prefix.parse::<u8>() {
            Ok(p) if p <= 32 => p,
            Ok(_) => return Err(AllowedError::Prefix { source: None }),
            Err(e) => return Err(AllowedError::Prefix { source: Some(e) }),
        };
        Ok(Self { net, prefix, port })
    }
}

impl FromStr for Allowed {
    type Err = AllowedError;

    /// `IPv4[/N]:PORT`, the network's host bits zero.
    fn from_str(text: &str) -> Result<Self, AllowedError> {
        let allowed = Self::parse_written(text)?;
        if allowed.has_host_bits() {
            return Err(AllowedError::HostBits {
                prefix: allowed.prefix,
                network: Ipv4Addr::from(u32::from(allowed.net) & allowed.mask()),
            });
        }
        Ok(allowed)
    }
}

/// Why a destination is not `IPv4[/N]:PORT`: each variant names the part
/// (port, address, prefix) at fault; the caller names the text and field.
#[derive(Debug, thiserror::Error)]
pub enum AllowedError {
    #[error("expected IPv4:PORT or IPv4/N:PORT")]
    Shape,
    #[error("the port must be 1..=65535")]
    Port {
        #[source]
        source: Option<ParseIntError>,
    },
    #[error("not an IPv4 address")]
    Address(#[source] AddrParseError),
    #[error("the prefix length must be 0..=32")]
    Prefix {
        #[source]
        source: Option<ParseIntError>,
    },
    #[error("host bits are set after /{prefix} (the network is {network}/{prefix})")]
    HostBits { prefix: u8, network: Ipv4Addr },
}

/// Whether `name` may be an allowed host's name (and a line of a sandbox's
/// `/etc/hosts`): 1 to 253 bytes of ASCII letters, digits, `-` and `.`.
#[must_use]
pub fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}", self.net, self.prefix, self.port)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn attach_messages_carry_a_version_and_refuse_others_by_name() {
        let req = GatewayAttach {
            v: ATTACH_VERSION,
            sandbox: "s1".into(),
        };
        let bytes = serde_json::to_vec(&req).unwrap();
        assert_eq!(GatewayAttach::decode(&bytes).unwrap(), req);
        let err = GatewayAttach::decode(br#"{"v":2,"sandbox":"s1"}"#).unwrap_err();
        assert!(err.to_string().contains("gateway attach request"), "{err}");
        let ok = AttachReply::decode(br#"{"v":1}"#).unwrap();
        assert_eq!(ok.error, None);
        let err = AttachReply::decode(br#"{"v":1,"why":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("gateway attach reply"), "{err}");
    }

    #[test]
    fn networks_parse_print_and_contain() {
        let a = Allowed::parse("10.9.0.0/24:8080").unwrap();
        assert_eq!(a.to_string(), "10.9.0.0/24:8080");
        assert!(a.contains("10.9.0.200:8080".parse().unwrap()));
        assert!(!a.contains("10.9.1.1:8080".parse().unwrap()));
        assert!(!a.contains("10.9.0.1:8081".parse().unwrap()));
        assert_eq!(
            Allowed::parse("1.2.3.4:5").unwrap().to_string(),
            "1.2.3.4/32:5"
        );
        assert!(
            Allowed::parse("0.0.0.0/0:443")
                .unwrap()
                .contains("8.8.8.8:443".parse().unwrap())
        );
        for (bad, why) in [
            ("10.0.0.1/24:80", "host bits"),
            ("10.0.0.0/33:80", "0..=32"),
            ("10.0.0.0:0", "1..=65535"),
            ("x:80", "IPv4"),
            ("10.0.0.1", "IPv4:PORT"),
        ] {
            let err = Allowed::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
