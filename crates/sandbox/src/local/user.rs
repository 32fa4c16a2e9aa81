//! The user a sandbox's commands and launches run as: `spec.user` (the
//! image's `User` when the task names none) resolved against the sandbox's
//! own `/etc/passwd` and `/etc/group`, as a container runtime does, once the
//! overlay is mounted. The anchor is told the numbers; it and every launch
//! supervisor stay root (they freeze cgroups) and drop to them only in the
//! children they start.
//!
//! Parsed by hand: two colon-separated text files, and the crates that read
//! them read the host's, not a directory's.

use std::path::Path;

use rollpoint_proctree::isolate::IdRange;
use rollpoint_proctree::spawn::Credentials;

use crate::{confine::SandboxRoot, errors::Error};

/// Largest `/etc/passwd` or `/etc/group` read.
const DB_LIMIT: u64 = 4 << 20;

/// A resolved user: what the anchor sets before running anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: those of `/etc/group` that list the user.
    pub groups: Vec<u32>,
    /// `HOME` for commands whose environment sets none.
    pub home: String,
    /// The sandbox's id range in a strict sandbox: the ids above are
    /// inside its user namespace, and its files on the host are theirs
    /// shifted into the range.
    pub range: Option<IdRange>,
}

impl Identity {
    pub fn root() -> Self {
        Self {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
            home: "/root".into(),
            range: None,
        }
    }

    /// The same user inside a sandbox mapped by `range` (`None`: the
    /// host's ids); `Err` names an id the range does not hold.
    pub fn mapped(mut self, range: Option<IdRange>) -> Result<Self, String> {
        if let Some(r) = range {
            let ids = [self.uid, self.gid]
                .into_iter()
                .chain(self.groups.iter().copied());
            if let Some(id) = ids.into_iter().find(|id| r.to_host(*id).is_none()) {
                return Err(format!(
                    "sandbox.user: id {id} is outside the sandbox's ids 0 to {} \
                     (strict isolation maps {} ids)",
                    r.count - 1,
                    r.count
                ));
            }
        }
        self.range = range;
        Ok(self)
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0 && self.gid == 0 && self.groups.is_empty()
    }

    /// The host's owner (uid, gid) to give what is made for the user:
    /// shifted into the range of a strict sandbox (its root's files too);
    /// `None` for root of a trusted one, whose files need no change.
    pub fn owner(&self) -> Option<(u32, u32)> {
        match self.range {
            // `mapped` checked that the range holds both.
            Some(r) => Some((r.host + self.uid, r.host + self.gid)),
            None => (!self.is_root()).then_some((self.uid, self.gid)),
        }
    }

    /// What the anchor is told (`--user`); `None` for root.
    pub fn credentials(&self) -> Option<Credentials> {
        (!self.is_root()).then(|| Credentials {
            uid: self.uid,
            gid: self.gid,
            groups: self.groups.clone(),
        })
    }
}

/// Resolves `user` (`NAME`, `UID`, `NAME:GROUP`, `UID:GID`, mixed; empty is
/// root) in the mounted root of sandbox `sandbox`, mapped by `range` when
/// the sandbox is strict.
pub fn resolve(
    sandbox: &str,
    root: &SandboxRoot,
    user: &str,
    range: Option<IdRange>,
) -> Result<Identity, Error> {
    let invalid = |message| Error::Invalid {
        sandbox: sandbox.to_owned(),
        message,
    };
    if user.is_empty() {
        return Identity::root().mapped(range).map_err(invalid);
    }
    let read = |path: &str| match root.download(Path::new(path), DB_LIMIT) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(String::new())
        }
        Err(e) => Err(e),
    };
    parse(user, &read("/etc/passwd")?, &read("/etc/group")?)
        .and_then(|id| id.mapped(range))
        .map_err(invalid)
}

struct Passwd<'a> {
    name: &'a str,
    uid: u32,
    gid: u32,
    home: &'a str,
}

fn passwd(text: &str) -> impl Iterator<Item = Passwd<'_>> {
    text.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        Some(Passwd {
            name: f.first()?,
            uid: f.get(2)?.parse().ok()?,
            gid: f.get(3)?.parse().ok()?,
            home: f.get(5).copied().unwrap_or(""),
        })
    })
}

/// `(name, gid, members)` of each well-formed `/etc/group` line.
fn group(text: &str) -> impl Iterator<Item = (&str, u32, Vec<&str>)> {
    text.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        let members = f
            .get(3)
            .map(|m| m.split(',').filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        Some((*f.first()?, f.get(2)?.parse().ok()?, members))
    })
}

/// The pure part of [`resolve`]: `Err` names the user and what is missing.
pub fn parse(user: &str, passwd_text: &str, group_text: &str) -> Result<Identity, String> {
    let (who, grp) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let bad = |why: &str| {
        format!(
            "sandbox.user {user:?}: {why} (NAME, UID, NAME:GROUP or UID:GID, names from the \
             sandbox's /etc/passwd and /etc/group, numbers 0 to {})",
            u32::MAX
        )
    };
    if who.is_empty() || grp.is_some_and(str::is_empty) {
        return Err(bad("empty user or group"));
    }
    let entry = passwd(passwd_text).find(|p| match who.parse::<u32>() {
        Ok(uid) => p.uid == uid,
        Err(_) => p.name == who,
    });
    let (uid, mut gid, name, home) = match (&entry, who.parse::<u32>()) {
        (Some(p), _) => (p.uid, p.gid, Some(p.name), p.home),
        // A number need not be in /etc/passwd: group 0, home `/`.
        (None, Ok(uid)) => (uid, 0, None, "/"),
        (None, Err(_)) => return Err(bad(&format!("no user {who:?} in /etc/passwd"))),
    };
    if let Some(g) = grp {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => group(group_text)
                .find(|(n, ..)| *n == g)
                .map(|(_, gid, _)| gid)
                .ok_or_else(|| bad(&format!("no group {g:?} in /etc/group")))?,
        };
    }
    let mut groups: Vec<u32> = match name {
        Some(name) => group(group_text)
            .filter(|(_, _, members)| members.contains(&name))
            .map(|(_, gid, _)| gid)
            .collect(),
        None => Vec::new(),
    };
    groups.sort_unstable();
    groups.dedup();
    let home = if home.is_empty() { "/" } else { home };
    Ok(Identity {
        uid,
        gid,
        groups,
        home: home.to_owned(),
        range: None,
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
                          node:x:1000:1000::/home/node:/bin/sh\n\
                          broken line\n\
                          svc:x:998:997:::/sbin/nologin\n";
    const GROUP: &str = "root:x:0:\nnode:x:1000:\ndocker:x:999:node,svc\nwheel:x:10:node\n";

    #[test]
    fn names_and_numbers_resolve_as_a_container_runtime_does() {
        let node = parse("node", PASSWD, GROUP).unwrap();
        assert_eq!(
            node,
            Identity {
                uid: 1000,
                gid: 1000,
                groups: vec![10, 999],
                home: "/home/node".into(),
                range: None,
            }
        );
        assert_eq!(parse("1000", PASSWD, GROUP).unwrap(), node);
        let with_group = parse("node:docker", PASSWD, GROUP).unwrap();
        assert_eq!((with_group.uid, with_group.gid), (1000, 999));
        assert_eq!(parse("node:42", PASSWD, GROUP).unwrap().gid, 42);
        // A number without an entry: group 0, home `/`, no extra groups.
        assert_eq!(
            parse("4242:7", "", "").unwrap(),
            Identity {
                uid: 4242,
                gid: 7,
                groups: vec![],
                home: "/".into(),
                range: None,
            }
        );
        assert_eq!(parse("svc", PASSWD, GROUP).unwrap().home, "/");
        assert!(parse("root", PASSWD, GROUP).unwrap().is_root());
    }

    #[test]
    fn unknown_names_are_refused_by_name() {
        let err = parse("ghost", PASSWD, GROUP).unwrap_err();
        assert!(err.contains("no user \"ghost\" in /etc/passwd"), "{err}");
        let err = parse("node:nogroup", PASSWD, GROUP).unwrap_err();
        assert!(err.contains("no group \"nogroup\""), "{err}");
        for bad in [":", "node:", ":root"] {
            let err = parse(bad, PASSWD, GROUP).unwrap_err();
            assert!(err.contains("empty user or group"), "{bad}: {err}");
        }
        let err = parse("99999999999", PASSWD, GROUP).unwrap_err();
        assert!(err.contains("no user"), "{err}");
    }

    #[test]
    fn a_strict_sandbox_owns_its_files_through_its_range() {
        let range = IdRange::parse("1073741824:65536").unwrap();
        let root = Identity::root().mapped(Some(range)).unwrap();
        assert_eq!(root.owner(), Some((1_073_741_824, 1_073_741_824)));
        assert_eq!(Identity::root().owner(), None);
        let node = parse("node", PASSWD, GROUP)
            .unwrap()
            .mapped(Some(range))
            .unwrap();
        assert_eq!(node.owner(), Some((1_073_742_824, 1_073_742_824)));
        let err = parse("70000", "", "")
            .unwrap()
            .mapped(Some(range))
            .unwrap_err();
        assert!(
            err.contains("id 70000 is outside the sandbox's ids 0 to 65535"),
            "{err}"
        );
    }
}
