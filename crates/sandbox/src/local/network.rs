//! A sandbox's network as the anchor is told it: the mode, the gateway's
//! address on the host, the allowed destinations as numbers, and the names
//! the sandbox's `/etc/hosts` gives them. Names are resolved here, on the
//! host, when the sandbox starts; inside, no name server is reachable.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs as _};
use std::path::Path;

use rollpoint_proto::net::Allowed;

use crate::{Network, errors::Error};

/// Most destinations a sandbox may be allowed.
pub const MAX_ALLOWED: usize = 64;

/// One allowed destination as written: a name or an IPv4 address with an
/// optional prefix length, and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Destination {
    Name(String, u16),
    Net(Allowed),
}

fn parse(text: &str) -> Result<Destination, String> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or("expected HOST:PORT, IPv4:PORT or IPv4/N:PORT")?;
    if host.contains(':') || host.starts_with('[') {
        return Err("IPv6 destinations are not supported; give an IPv4 address or a name".into());
    }
    let numeric = host.contains('/') || host.parse::<Ipv4Addr>().is_ok();
    if numeric {
        return Allowed::parse(text).map(Destination::Net);
    }
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or("the port must be 1..=65535")?;
    if !rollpoint_proto::net::is_host_name(host) {
        return Err("not a host name (letters, digits, `-` and `.`)".into());
    }
    Ok(Destination::Name(host.to_ascii_lowercase(), port))
}

/// Checks the spec's network field by field.
pub(crate) fn check(id: &str, network: &Network) -> Result<(), Error> {
    let invalid = |field: String, message: String| Error::Spec {
        sandbox: id.to_owned(),
        field,
        message,
    };
    let Network::Allow(list) = network else {
        return Ok(());
    };
    if list.is_empty() || list.len() > MAX_ALLOWED {
        return Err(invalid(
            "sandbox.network.allow".to_owned(),
            format!("{} destinations; give 1..={MAX_ALLOWED}", list.len()),
        ));
    }
    for (i, text) in list.iter().enumerate() {
        // Well formed, but no network as written: this host cannot tell
        // which was meant.
        if Allowed::parse_written(text).is_ok_and(|a| a.has_host_bits())
            && let Err(e) = Allowed::parse(text)
        {
            return Err(Error::Unsupported {
                sandbox: id.to_owned(),
                field: format!("sandbox.network.allow[{i}]"),
                message: format!("{text:?}: {e}"),
            });
        }
        parse(text).map_err(|e| {
            invalid(
                format!("sandbox.network.allow[{i}]"),
                format!("{text:?}: {e}"),
            )
        })?;
    }
    Ok(())
}

/// The anchor's network options for `network`, with the gateway at
/// `gateway` on the host (none known: the sandbox reaches no gateway),
/// taking listeners at `attach` when it is on this node.
pub(crate) fn anchor_args(
    id: &str,
    network: &Network,
    gateway: Option<SocketAddrV4>,
    attach: Option<&Path>,
) -> Result<Vec<String>, Error> {
    let mut args = vec!["--net".to_owned(), mode(network).to_owned()];
    if network.is_host() {
        return Ok(args);
    }
    if let (Some(gw), Network::Gateway | Network::Allow(_)) = (gateway, network) {
        args.extend(["--gateway".to_owned(), gw.to_string()]);
        if let Some(socket) = attach {
            args.extend([
                "--gateway-attach".to_owned(),
                format!("{id}={}", socket.display()),
            ]);
        }
    }
    let Network::Allow(list) = network else {
        return Ok(args);
    };
    for (i, text) in list.iter().enumerate() {
        // Well formed, but not a destination on this host: a name it cannot
        // resolve, or an address no socket can be bound to.
        let unresolved = |why: String| Error::Unsupported {
            sandbox: id.to_owned(),
            field: format!("sandbox.network.allow[{i}]"),
            message: format!("{text:?}: {why}"),
        };
        let unusable = |ip: &Ipv4Addr| {
            (ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast()).then(|| {
                unresolved(format!(
                    "{ip} is not a destination (unspecified, broadcast or multicast)"
                ))
            })
        };
        match parse(text).map_err(&unresolved)? {
            Destination::Net(allowed) => {
                if allowed.prefix == 32
                    && let Some(e) = unusable(&allowed.net)
                {
                    return Err(e);
                }
                args.extend(["--allow".to_owned(), allowed.to_string()]);
            }
            Destination::Name(name, port) => {
                let ips: Vec<Ipv4Addr> = (name.as_str(), port)
                    .to_socket_addrs()
                    .map_err(|e| unresolved(format!("cannot resolve it on the host: {e}")))?
                    .filter_map(|a| match a {
                        SocketAddr::V4(v4) => Some(*v4.ip()),
                        SocketAddr::V6(_) => None,
                    })
                    .collect();
                if let Some(e) = ips.iter().find_map(unusable) {
                    return Err(e);
                }
                let first = *ips
                    .first()
                    .ok_or_else(|| unresolved("it has no IPv4 address".into()))?;
                for ip in &ips {
                    let allowed = Allowed {
                        net: *ip,
                        prefix: 32,
                        port,
                    };
                    args.extend(["--allow".to_owned(), allowed.to_string()]);
                }
                args.extend(["--host".to_owned(), format!("{name}={first}")]);
            }
        }
    }
    Ok(args)
}

fn mode(network: &Network) -> &'static str {
    match network {
        Network::Gateway => "gateway",
        Network::Allow(_) => "allow",
        Network::Loopback => "none",
        Network::Host => "host",
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_checked_by_index_and_turned_into_numbers() {
        let allow = Network::Allow(vec![
            "10.1.0.0/16:8080".into(),
            "10.2.0.9:443".into(),
            "localhost:9".into(),
        ]);
        check("s", &allow).unwrap();
        let gw = Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4000));
        let args = anchor_args("s", &allow, gw, None).unwrap();
        let text = args.join(" ");
        assert!(
            text.starts_with("--net allow --gateway 127.0.0.1:4000 --allow 10.1.0.0/16:8080 --allow 10.2.0.9/32:443 --allow 127.0.0.1/32:9"),
            "{text}"
        );
        assert!(text.ends_with("--host localhost=127.0.0.1"), "{text}");
        assert_eq!(
            anchor_args("s", &Network::Loopback, gw, None).unwrap(),
            ["--net", "none"]
        );
        assert_eq!(
            anchor_args("s", &Network::Host, gw, None).unwrap(),
            ["--net", "host"]
        );
        assert_eq!(
            anchor_args("s", &Network::Gateway, None, None).unwrap(),
            ["--net", "gateway"]
        );
        let attach = Some(Path::new("/run/r/gateway/attach.sock"));
        assert_eq!(
            anchor_args("s", &Network::Gateway, gw, attach).unwrap(),
            [
                "--net",
                "gateway",
                "--gateway",
                "127.0.0.1:4000",
                "--gateway-attach",
                "s=/run/r/gateway/attach.sock"
            ]
        );
        assert_eq!(
            anchor_args("s", &Network::Loopback, gw, attach).unwrap(),
            ["--net", "none"],
            "no gateway, nothing to attach"
        );
        for (bad, why) in [
            ("10.1.0.1/16:80", "host bits"),
            ("10.1.0.0/40:80", "0..=32"),
            ("[::1]:80", "IPv6"),
            ("a b:80", "host name"),
            ("x:0", "1..=65535"),
            ("x", "HOST:PORT"),
        ] {
            let err = check("s", &Network::Allow(vec!["1.2.3.4:5".into(), bad.into()]))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("allow[1]") && err.contains(why),
                "{bad}: {err}"
            );
        }
        let err = check("s", &Network::Allow(Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("1..=64"), "{err}");
    }
}
