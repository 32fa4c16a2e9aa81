//! Trajectories as JSONL: one document per line, each with its version.

use crate::format::{TRAJECTORY_VERSION, Trajectory};

/// Appends `t` as one line to `out`.
pub fn write_line(out: &mut Vec<u8>, t: &Trajectory) {
    // Numbers, strings, lists and maps with string keys: serializing cannot fail.
    out.extend_from_slice(&serde_json::to_vec(t).unwrap_or_default());
    out.push(b'\n');
}

/// Reads JSONL trajectories; an error names the line and, for an unknown version, the
/// version found.
pub fn read(text: &str) -> Result<Vec<Trajectory>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        match value.get("v").and_then(serde_json::Value::as_u64) {
            Some(v) if v == u64::from(TRAJECTORY_VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "line {}: trajectory version {v} is not {TRAJECTORY_VERSION}, the one this build reads",
                    i + 1
                ));
            }
            None => return Err(format!("line {}: no trajectory version `v`", i + 1)),
        }
        out.push(serde_json::from_value(value).map_err(|e| format!("line {}: {e}", i + 1))?);
    }
    Ok(out)
}
