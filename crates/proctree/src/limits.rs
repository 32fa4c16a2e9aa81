//! The process's own limits that grow with the sandboxes it holds.

/// Raises the soft limit of open descriptors to the hard one: an owner holds
/// one per sandbox (its root's mount) and an attaching gateway two, and a
/// node runs thousands, past the common soft limit of 1,024. Returns the
/// limits as they were when the soft one was raised, `None` when it already
/// was the hard one.
pub fn raise_open_files() -> Result<Option<(u64, u64)>, nix::Error> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= hard {
        return Ok(None);
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok(Some((soft, hard)))
}
