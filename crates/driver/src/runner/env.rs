//! What every launch's environment carries: the rollout, the attempt, and
//! the gateway route its model calls take (the capture key, and the gateway
//! as a sandbox reaches it).

use rollpoint_proto::key::{AttemptKey, KeyError};

/// Environment variables every launch gets.
pub const ROLLOUT_VAR: &str = "ROLLPOINT_ROLLOUT";
pub const ATTEMPT_VAR: &str = "ROLLPOINT_ATTEMPT";
/// The gateway capture key of this attempt ([`capture_key`]).
pub const CAPTURE_KEY_VAR: &str = "ROLLPOINT_CAPTURE_KEY";
/// The gateway base harnesses call: `$ROLLPOINT_GATEWAY/$ROLLPOINT_CAPTURE_KEY/v1`.
pub const GATEWAY_VAR: &str = "ROLLPOINT_GATEWAY";

/// The [`GATEWAY_VAR`] value for a gateway served at `server`
/// (`http://host:port`): harnesses put a capture key and `/v1` after it.
pub fn gateway_base(server: &str) -> String {
    format!("{}/r", server.trim_end_matches('/'))
}

/// `url` with its host replaced by `127.0.0.1` (the port kept, or the
/// scheme's): where a sandbox's relay serves the gateway.
pub fn on_loopback(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let port = authority
        .rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or(if scheme == "https" { "443" } else { "80" });
    format!("{scheme}://127.0.0.1:{port}{path}")
}

/// The capture key the gateway records an attempt's model calls under.
/// Fails only for a rollout id no checked task can carry.
pub fn capture_key(rollout: &str, attempt: u32) -> Result<AttemptKey, KeyError> {
    AttemptKey::of(rollout, attempt)
}

#[cfg(test)]
mod tests {
    use super::on_loopback;

    #[test]
    fn the_gateway_url_moves_to_loopback_keeping_its_port() {
        assert_eq!(
            on_loopback("http://10.0.0.5:4000/r"),
            "http://127.0.0.1:4000/r"
        );
        assert_eq!(on_loopback("http://gw.example/r"), "http://127.0.0.1:80/r");
        assert_eq!(on_loopback("https://[::1]/r"), "https://127.0.0.1:443/r");
        assert_eq!(on_loopback("http://127.0.0.1:9"), "http://127.0.0.1:9");
        assert_eq!(on_loopback("no-scheme"), "no-scheme");
    }
}
