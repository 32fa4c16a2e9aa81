//! `usage`: what a sandbox has used, read where the kernel and the relay
//! count it: its cgroups (CPU time, peak memory, the limits that stopped
//! something), the relay's `network.json` in its control directory, and
//! the bytes its upper holds.

use std::path::Path;

use rollpoint_proto::net::{RELAY_USAGE_FILE, RelayUsage};

use super::backend::LocalBackend;
use super::record::{self, SandboxRecord};
use crate::{ResourceUsage, errors::Error};

/// Files and directories walked at most to size an upper.
const MAX_ENTRIES: usize = 1_000_000;

impl LocalBackend {
    pub(super) fn usage(&self, id: &str) -> Result<ResourceUsage, Error> {
        let (control, cgroups) = self.control_and_cgroups(id)?;
        let rec: SandboxRecord =
            record::read("sandbox record", &self.sandbox_dir(id).join("sandbox.json"))?;
        let mut usage = cgroups.usage();
        usage.disk_bytes = disk_bytes(&rec.upper);
        if let Some(limit) = rec.spec.limits.disk_bytes
            && crate::backend::disk_limit_hit(usage.disk_bytes, limit)
        {
            usage.limits_hit.push(format!(
            "disk: its files take {} bytes of its limit of {limit} (a btrfs qgroup; writes past it fail with EDQUOT)",
            usage.disk_bytes
        ));
        }
        // A sandbox on the host's network has no relay and so no file.
        let path = control.join(RELAY_USAGE_FILE);
        if let Ok(text) = std::fs::read(&path) {
            match RelayUsage::decode(&text) {
                Ok(net) => {
                    usage.net_bytes_in = net.bytes_in;
                    usage.net_bytes_out = net.bytes_out;
                    usage.net_connections = net.connections;
                }
                Err(e) => tracing::warn!(
                    sandbox = id,
                    path = %path.display(),
                    error = %e,
                    "the relay's count is unreadable; the usage says no network"
                ),
            }
        }
        Ok(usage)
    }
}

/// Bytes allocated to the files under `dir`, not following links.
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0_u64;
    let mut stack = vec![dir.to_owned()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return total;
            }
            let Ok(meta) = entry.metadata() else { continue };
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}
