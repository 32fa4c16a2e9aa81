//! `task.toml`, read field by field as Harbor's task schema (1.x) has it.
//! Every key is either mapped, read and reported as not used, or listed as
//! unknown: nothing is dropped silently. The deprecated spellings
//! (`version`, `environment.memory`, `environment.storage`) are read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::errors::HarborError;

/// Harbor's defaults (`harbor/models/task/config.py`).
pub const DEFAULT_VERIFY_TIMEOUT_S: f64 = 600.0;
pub const DEFAULT_BUILD_TIMEOUT_S: f64 = 600.0;
pub const DEFAULT_CPUS: u64 = 1;
pub const DEFAULT_MEMORY_MB: u64 = 2048;
pub const DEFAULT_STORAGE_MB: u64 = 10240;

/// A phase's network as the task asks for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NetworkPolicy {
    /// `public` (or `allow_internet = true`, the default).
    #[default]
    Public,
    /// `no-network` (or `allow_internet = false`).
    None,
    /// `allowlist` with its hosts.
    Allow(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Healthcheck {
    pub command: String,
    pub interval_sec: f64,
    pub timeout_sec: f64,
    pub start_period_sec: f64,
    pub retries: u64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskConfig {
    pub schema_version: Option<String>,
    /// `[task] name` (`org/name`).
    pub name: Option<String>,
    pub verifier_timeout_s: f64,
    pub verifier_env: BTreeMap<String, String>,
    pub verifier_user: Option<String>,
    pub verifier_network: Option<NetworkPolicy>,
    pub agent_timeout_s: Option<f64>,
    pub agent_user: Option<String>,
    pub agent_network: Option<NetworkPolicy>,
    pub build_timeout_s: f64,
    pub docker_image: Option<String>,
    pub cpus: u64,
    pub memory_mb: u64,
    pub storage_mb: u64,
    pub gpus: u64,
    pub environment_network: NetworkPolicy,
    pub mcp_servers: usize,
    pub environment_env: BTreeMap<String, String>,
    pub skills_dir: Option<String>,
    pub healthcheck: Option<Healthcheck>,
    pub solution_env: BTreeMap<String, String>,
    /// Keys read that rollpoint has no use for (`metadata`, `task.authors`, ...).
    pub not_used: Vec<String>,
    /// Keys the schema does not have, by full name.
    pub unknown: Vec<String>,
    /// Deprecated spellings found.
    pub deprecated: Vec<String>,
}

/// One table of the file, its keys checked off as they are read.
struct Section<'a> {
    path: &'a Path,
    name: &'static str,
    table: Option<&'a toml::Table>,
    seen: BTreeSet<&'static str>,
}

impl<'a> Section<'a> {
    fn new(path: &'a Path, name: &'static str, table: Option<&'a toml::Table>) -> Self {
        Self {
            path,
            name,
            table,
            seen: BTreeSet::new(),
        }
    }

    fn field(&self, key: &str) -> String {
        if self.name.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.name)
        }
    }

    fn bad(&self, key: &str, message: impl Into<String>) -> HarborError {
        HarborError::Field {
            path: self.path.to_owned(),
            field: self.field(key),
            message: message.into(),
        }
    }

    fn get(&mut self, key: &'static str) -> Option<&'a toml::Value> {
        self.seen.insert(key);
        self.table.and_then(|t| t.get(key))
    }

    fn string(&mut self, key: &'static str) -> Result<Option<String>, HarborError> {
        match self.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.bad(
                key,
                format!("expected a string, found {}", other.type_str()),
            )),
        }
    }

    /// A user: a name or a uid.
    fn user(&mut self, key: &'static str) -> Result<Option<String>, HarborError> {
        match self.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(toml::Value::Integer(i)) if *i >= 0 => Ok(Some(i.to_string())),
            Some(other) => Err(self.bad(
                key,
                format!("expected a user name or uid, found {}", other.type_str()),
            )),
        }
    }

    fn seconds(&mut self, key: &'static str) -> Result<Option<f64>, HarborError> {
        let v = match self.get(key) {
            None => return Ok(None),
            Some(toml::Value::Float(f)) => *f,
            #[expect(clippy::cast_precision_loss, reason = "seconds")]
            Some(toml::Value::Integer(i)) => *i as f64,
            Some(other) => {
                return Err(self.bad(key, format!("expected seconds, found {}", other.type_str())));
            }
        };
        if !(v.is_finite() && v > 0.0 && v <= 2_592_000.0) {
            return Err(self.bad(key, format!("{v} is outside (0, 2592000] seconds")));
        }
        Ok(Some(v))
    }

    fn count(&mut self, key: &'static str, max: u64) -> Result<Option<u64>, HarborError> {
        match self.get(key) {
            None => Ok(None),
            Some(toml::Value::Integer(i)) => u64::try_from(*i)
                .ok()
                .filter(|n| *n <= max)
                .map(Some)
                .ok_or_else(|| self.bad(key, format!("{i} is outside 0..={max}"))),
            Some(other) => Err(self.bad(
                key,
                format!("expected an integer, found {}", other.type_str()),
            )),
        }
    }

    fn boolean(&mut self, key: &'static str) -> Result<Option<bool>, HarborError> {
        match self.get(key) {
            None => Ok(None),
            Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
            Some(other) => Err(self.bad(
                key,
                format!("expected true or false, found {}", other.type_str()),
            )),
        }
    }

    fn strings(&mut self, key: &'static str) -> Result<Vec<String>, HarborError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(toml::Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    toml::Value::String(s) => Ok(s.clone()),
                    other => Err(self.bad(
                        &format!("{key}[{i}]"),
                        format!("expected a string, found {}", other.type_str()),
                    )),
                })
                .collect(),
            Some(other) => {
                Err(self.bad(key, format!("expected a list, found {}", other.type_str())))
            }
        }
    }

    fn map(&mut self, key: &'static str) -> Result<BTreeMap<String, String>, HarborError> {
        match self.get(key) {
            None => Ok(BTreeMap::new()),
            Some(toml::Value::Table(t)) => t
                .iter()
                .map(|(k, v)| match v {
                    toml::Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(self.bad(
                        &format!("{key}.{k}"),
                        format!("expected a string, found {}", other.type_str()),
                    )),
                })
                .collect(),
            Some(other) => {
                Err(self.bad(key, format!("expected a table, found {}", other.type_str())))
            }
        }
    }

    fn table(&mut self, key: &'static str) -> Result<Option<&'a toml::Table>, HarborError> {
        match self.get(key) {
            None => Ok(None),
            Some(toml::Value::Table(t)) => Ok(Some(t)),
            Some(other) => {
                Err(self.bad(key, format!("expected a table, found {}", other.type_str())))
            }
        }
    }

    /// Marks `key` read but not used; returns whether it is there.
    fn not_used(&mut self, key: &'static str, out: &mut Vec<String>) -> bool {
        let there = self.get(key).is_some();
        if there {
            out.push(self.field(key));
        }
        there
    }

    fn unknown(&self, out: &mut Vec<String>) {
        if let Some(t) = self.table {
            out.extend(
                t.keys()
                    .filter(|k| !self.seen.contains(k.as_str()))
                    .map(|k| self.field(k)),
            );
        }
    }

    /// `network_mode` and `allowed_hosts` of this phase, as Harbor reads them:
    /// hosts alone mean `allowlist`.
    fn network(&mut self) -> Result<Option<NetworkPolicy>, HarborError> {
        let mode = self.string("network_mode")?;
        let hosts = self.strings("allowed_hosts")?;
        let hosts = normalize_hosts(&hosts).map_err(|m| self.bad("allowed_hosts", m))?;
        match (mode.as_deref(), hosts.is_empty()) {
            (None, true) => Ok(None),
            (None | Some("allowlist"), false) => Ok(Some(NetworkPolicy::Allow(hosts))),
            (Some("allowlist"), true) => Ok(Some(NetworkPolicy::Allow(Vec::new()))),
            (Some("public"), true) => Ok(Some(NetworkPolicy::Public)),
            (Some("no-network"), true) => Ok(Some(NetworkPolicy::None)),
            (Some("public" | "no-network"), false) => Err(self.bad(
                "allowed_hosts",
                "only valid when network_mode = \"allowlist\"",
            )),
            (Some(other), _) => Err(self.bad(
                "network_mode",
                format!("{other:?} is not one of \"public\", \"no-network\", \"allowlist\""),
            )),
        }
    }
}

/// Hosts as Harbor normalizes them: lower case, no trailing dot, hostnames
/// or IPv4 addresses only.
fn normalize_hosts(hosts: &[String]) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for host in hosts {
        let h = host.trim().to_ascii_lowercase();
        let h = h.trim_end_matches('.').to_owned();
        if h.is_empty() {
            continue;
        }
        if h.contains("://") || h.contains('/') || h.contains(':') {
            return Err(format!(
                "{host:?}: hostnames or IPv4 addresses, not URLs, CIDRs, ports or paths"
            ));
        }
        if !out.contains(&h) {
            out.push(h);
        }
    }
    Ok(out)
}

/// `"1G"`, `"512M"`, `"2048K"` in MB, as Harbor reads the deprecated sizes.
fn size_mb(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_uppercase();
    let (number, scale) = match s.chars().last()? {
        'G' => (&s[..s.len() - 1], 1024.0),
        'M' => (&s[..s.len() - 1], 1.0),
        'K' => (&s[..s.len() - 1], 1.0 / 1024.0),
        _ => return None,
    };
    let v: f64 = number.parse().ok()?;
    let mb = v * scale;
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked finite and positive"
    )]
    (0.0..1e12).contains(&mb).then_some(mb as u64)
}

impl TaskConfig {
    /// Reads `path` (a `task.toml`).
    pub fn read(path: &Path) -> Result<Self, HarborError> {
        let text = std::fs::read_to_string(path).map_err(|e| HarborError::io(path, e))?;
        Self::parse(&text, path)
    }

    /// Parses the text of a `task.toml`; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, HarborError> {
        let root: toml::Table = toml::from_str(text).map_err(|e| HarborError::Field {
            path: path.to_owned(),
            field: "task.toml".to_owned(),
            message: e.to_string(),
        })?;
        let mut c = Self::default();
        let mut top = Section::new(path, "", Some(&root));
        c.schema_version = top.string("schema_version")?;
        if let Some(v) = top.string("version")? {
            c.deprecated.push("version (now schema_version)".to_owned());
            c.schema_version.get_or_insert(v);
        }
        let mut task = Section::new(path, "task", top.table("task")?);
        c.name = task.string("name")?;
        for key in ["description", "authors", "keywords"] {
            task.not_used(key, &mut c.not_used);
        }
        top.not_used("metadata", &mut c.not_used);
        top.not_used("source", &mut c.not_used);

        let mut verifier = Section::new(path, "verifier", top.table("verifier")?);
        c.verifier_timeout_s = verifier
            .seconds("timeout_sec")?
            .unwrap_or(DEFAULT_VERIFY_TIMEOUT_S);
        c.verifier_env = verifier.map("env")?;
        c.verifier_user = verifier.user("user")?;
        c.verifier_network = verifier.network()?;

        let mut agent = Section::new(path, "agent", top.table("agent")?);
        c.agent_timeout_s = agent.seconds("timeout_sec")?;
        c.agent_user = agent.user("user")?;
        c.agent_network = agent.network()?;

        let mut env = Section::new(path, "environment", top.table("environment")?);
        c.build_timeout_s = env
            .seconds("build_timeout_sec")?
            .unwrap_or(DEFAULT_BUILD_TIMEOUT_S);
        c.docker_image = env.string("docker_image")?;
        c.cpus = env.count("cpus", 1024)?.unwrap_or(DEFAULT_CPUS);
        c.memory_mb = env
            .count("memory_mb", 1 << 30)?
            .unwrap_or(DEFAULT_MEMORY_MB);
        c.storage_mb = env
            .count("storage_mb", 1 << 40)?
            .unwrap_or(DEFAULT_STORAGE_MB);
        if let Some(m) = env.string("memory")? {
            c.memory_mb = size_mb(&m).ok_or_else(|| {
                env.bad(
                    "memory",
                    format!("{m:?} is not a size like \"2G\" or \"512M\""),
                )
            })?;
            c.deprecated
                .push("environment.memory (now memory_mb)".to_owned());
        }
        if let Some(s) = env.string("storage")? {
            c.storage_mb = size_mb(&s)
                .ok_or_else(|| env.bad("storage", format!("{s:?} is not a size like \"10G\"")))?;
            c.deprecated
                .push("environment.storage (now storage_mb)".to_owned());
        }
        c.gpus = env.count("gpus", 1024)?.unwrap_or(0);
        env.not_used("gpu_types", &mut c.not_used);
        let allow_internet = env.boolean("allow_internet")?.unwrap_or(true);
        c.environment_network = match env.network()? {
            Some(p) => p,
            None if allow_internet => NetworkPolicy::Public,
            None => NetworkPolicy::None,
        };
        c.mcp_servers = match env.get("mcp_servers") {
            None => 0,
            Some(toml::Value::Array(a)) => a.len(),
            Some(_) => return Err(env.bad("mcp_servers", "expected a list")),
        };
        c.environment_env = env.map("env")?;
        c.skills_dir = env.string("skills_dir")?;
        if let Some(h) = env.table("healthcheck")? {
            let mut hs = Section::new(path, "environment.healthcheck", Some(h));
            c.healthcheck = Some(Healthcheck {
                command: hs
                    .string("command")?
                    .ok_or_else(|| hs.bad("command", "missing"))?,
                interval_sec: hs.seconds("interval_sec")?.unwrap_or(5.0),
                timeout_sec: hs.seconds("timeout_sec")?.unwrap_or(30.0),
                start_period_sec: match hs.get("start_period_sec") {
                    None => 0.0,
                    Some(_) => hs.seconds("start_period_sec")?.unwrap_or(0.0),
                },
                retries: hs.count("retries", 1000)?.unwrap_or(3),
            });
            hs.seconds("start_interval_sec")?;
            hs.unknown(&mut c.unknown);
        }

        let mut solution = Section::new(path, "solution", top.table("solution")?);
        c.solution_env = solution.map("env")?;

        for s in [&top, &task, &verifier, &agent, &env, &solution] {
            s.unknown(&mut c.unknown);
        }
        Ok(c)
    }

    /// The agent phase's network: its own, else the environment's.
    #[must_use]
    pub fn agent_network(&self) -> &NetworkPolicy {
        self.agent_network
            .as_ref()
            .unwrap_or(&self.environment_network)
    }

    /// The verifier's network: its own, else the environment's.
    #[must_use]
    pub fn verifier_network(&self) -> &NetworkPolicy {
        self.verifier_network
            .as_ref()
            .unwrap_or(&self.environment_network)
    }
}

/// The `task.toml` of `dir`.
#[must_use]
pub fn config_path(dir: &Path) -> PathBuf {
    dir.join("task.toml")
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TaskConfig, HarborError> {
        TaskConfig::parse(text, Path::new("t/task.toml"))
    }

    #[test]
    fn defaults_are_harbors() {
        let c = parse("").unwrap();
        assert!((c.verifier_timeout_s - 600.0).abs() < f64::EPSILON);
        assert_eq!((c.cpus, c.memory_mb, c.storage_mb), (1, 2048, 10240));
        assert_eq!(c.environment_network, NetworkPolicy::Public);
        assert!(c.unknown.is_empty() && c.deprecated.is_empty());
    }

    #[test]
    fn every_field_is_read_and_unknown_keys_are_listed() {
        let c = parse(
            r#"
version = "1.0"
[task]
name = "org/hello"
authors = [{ name = "a" }]
[metadata]
difficulty = "easy"
[verifier]
timeout_sec = 120.5
env = { A = "1" }
[agent]
timeout_sec = 300
user = 1000
allowed_hosts = ["PyPI.org.", "pypi.org"]
[environment]
docker_image = "reg/img:t"
cpus = 2
memory = "1G"
storage_mb = 4096
allow_internet = false
cache = true
[environment.healthcheck]
command = "test -f /ready"
retries = 5
[solution]
env = { S = "x" }
[extra]
"#,
        )
        .unwrap();
        assert_eq!(c.schema_version.as_deref(), Some("1.0"));
        assert_eq!(c.name.as_deref(), Some("org/hello"));
        assert_eq!(c.agent_user.as_deref(), Some("1000"));
        assert_eq!(
            c.agent_network(),
            &NetworkPolicy::Allow(vec!["pypi.org".into()])
        );
        assert_eq!(c.verifier_network(), &NetworkPolicy::None);
        assert_eq!((c.cpus, c.memory_mb, c.storage_mb), (2, 1024, 4096));
        assert_eq!(c.healthcheck.as_ref().unwrap().retries, 5);
        assert_eq!(
            c.unknown,
            vec!["extra".to_owned(), "environment.cache".to_owned()]
        );
        assert_eq!(c.deprecated.len(), 2);
        assert!(c.not_used.contains(&"metadata".to_owned()));
    }

    #[test]
    fn bad_fields_are_named() {
        for (text, field) in [
            ("[verifier]\ntimeout_sec = -1", "verifier.timeout_sec"),
            ("[environment]\ncpus = \"two\"", "environment.cpus"),
            (
                "[environment]\nnetwork_mode = \"open\"",
                "environment.network_mode",
            ),
            (
                "[agent]\nnetwork_mode = \"public\"\nallowed_hosts = [\"a\"]",
                "agent.allowed_hosts",
            ),
            (
                "[environment]\nallowed_hosts = [\"http://a\"]",
                "environment.allowed_hosts",
            ),
            ("[environment]\nmemory = \"lots\"", "environment.memory"),
            ("[verifier]\nenv = { A = 1 }", "verifier.env.A"),
            ("not toml", "task.toml"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(&format!("field `{field}`")), "{field}: {e}");
        }
    }
}
