//! The one wall clock of every record, event and id: Unix time in
//! milliseconds. Durations use `Instant`; this is only for times written down.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds (0 before the epoch, saturating far after it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
