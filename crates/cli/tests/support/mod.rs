//! What the CLI's process tests share: waiting for a server's port file.

use std::path::Path;
use std::time::{Duration, Instant};

/// The port a server wrote to `file`, once it has (60 s at most).
pub fn wait_for_port(file: &Path) -> u16 {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(port) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return port;
        }
        assert!(Instant::now() < end, "no port in {}", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}
