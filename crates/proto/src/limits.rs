//! Every length limit on an id, in one place. Ids become path components,
//! cgroup and subvolume names and URL segments, so each has a bound, and the
//! ids built from others leave room for what is added.

/// Longest task id (owner tasks). Session and sandbox ids are built from it.
pub const MAX_TASK_ID: usize = 96;
/// Longest rollout id: a task id plus room for a suffix a caller adds.
pub const MAX_ROLLOUT_ID: usize = MAX_TASK_ID + 16;
/// Longest attempt key: a rollout id plus `-a` and a `u32`.
pub const MAX_ATTEMPT_KEY: usize = MAX_ROLLOUT_ID + 12;
/// Longest checkpoint id or participant instance name.
pub const MAX_NAME: usize = 128;
/// Longest sandbox or snapshot id: each becomes a file name (NAME_MAX 255)
/// with a store's `.partial-` prefix and `.tar` suffix, and a cgroup name
/// after `sandbox-<12 hex>-`; 224 leaves room for both.
pub const MAX_STORE_ID: usize = 224;
/// Longest part of a task id a session id keeps: a session id is that part, an
/// owner's nonce and a counter, and a snapshot id a checkpoint id, `--` and a
/// session id, so both stay within [`MAX_STORE_ID`].
pub const SESSION_STEM: usize = 48;
/// Longest session id: a snapshot id (a checkpoint id, `--`, a session id)
/// fits [`MAX_STORE_ID`].
pub const MAX_SESSION_ID: usize = MAX_STORE_ID - MAX_NAME - 2;
/// Longest opaque id a service hands out or takes (launch, snapshot parts).
pub const MAX_OPAQUE_ID: usize = 256;
/// Longest timeout a task may set for one command or launch, in seconds:
/// 30 days (every `*_timeout_s` of a task is in `1..=MAX_TIMEOUT_S`).
pub const MAX_TIMEOUT_S: u64 = 30 * 24 * 3600;
/// Most bytes of stdout (and of stderr) a command's reply may keep.
pub const MAX_OUTPUT_LIMIT: u64 = 64 << 20;
/// Longest sandbox hostname (the kernel's `HOST_NAME_MAX`).
pub const MAX_HOSTNAME: usize = 64;
/// Longest `timeout_ms` of one command run in a sandbox: [`MAX_TIMEOUT_S`].
pub const MAX_COMMAND_TIMEOUT_MS: u64 = MAX_TIMEOUT_S * 1000;

/// The one alphabet of ids and names, each of which becomes a path component,
/// a cgroup or subvolume name or a URL segment somewhere: ASCII letters,
/// digits, `.`, `_`, `-` and `~`. Each kind adds its own rule for the first
/// character and its length.
pub fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~')
}

/// The first character of `id` outside [`is_id_byte`]'s alphabet.
pub fn outside_id_alphabet(id: &str) -> Option<char> {
    id.chars().find(|&c| !u8::try_from(c).is_ok_and(is_id_byte))
}

/// Why `name` is not a path component (`^[A-Za-z0-9][A-Za-z0-9._-]*$`, at
/// most [`MAX_NAME`] bytes), if it is not: checkpoint ids and instance names.
pub fn name_problem(name: &str) -> Option<&'static str> {
    let mut bytes = name.bytes();
    match bytes.next() {
        None => return Some("is empty"),
        Some(b) if !b.is_ascii_alphanumeric() => {
            return Some("must start with a letter or digit");
        }
        Some(_) => {}
    }
    if name.len() > MAX_NAME {
        return Some("is longer than 128 bytes");
    }
    if !bytes.all(is_id_byte) {
        return Some("may hold only letters, digits, '.', '_', '-' and '~'");
    }
    None
}

const _: () = assert!(MAX_NAME == 128, "name_problem's message names the limit");
// A snapshot id: a checkpoint id, `--`, and a branch session (its stem, `-`, a
// 16-hex-digit nonce, `-`, a u64 counter, `.b` and a branch number).
const _: () = assert!(SESSION_STEM + 1 + 16 + 1 + 20 + 2 + 3 <= MAX_SESSION_ID);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_key_fits_where_names_go() {
        let longest = MAX_ROLLOUT_ID + "-a".len() + u32::MAX.to_string().len();
        assert!(longest <= MAX_ATTEMPT_KEY);
        const { assert!(MAX_ATTEMPT_KEY <= MAX_NAME) };
    }
}
