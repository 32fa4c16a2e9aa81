//! One Harbor task directory read into memory: `task.toml`, `instruction.md`,
//! the environment (an image or `environment/Dockerfile`), `tests/` and
//! `solution/`. What rollpoint cannot give is refused here, by name, with
//! the reason.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::config::{NetworkPolicy, TaskConfig, config_path};
use crate::errors::HarborError;

/// Where a task's sandbox comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Environment {
    /// `[environment] docker_image`.
    Image(String),
    /// `environment/Dockerfile`, built with the `environment/` directory as
    /// its context.
    Dockerfile { context: PathBuf },
}

/// A file of `tests/` or `solution/`: its bytes and permission bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFile {
    pub bytes: Vec<u8>,
    pub mode: u32,
}

/// One task directory, read.
#[derive(Debug, Clone)]
pub struct HarborTask {
    /// The rollout id: the directory's name in rollpoint's id alphabet.
    pub id: String,
    pub dir: PathBuf,
    pub config: TaskConfig,
    pub instruction: String,
    pub environment: Environment,
    /// `tests/`, by path relative to it.
    pub tests: BTreeMap<String, TaskFile>,
    /// `solution/`, by path relative to it (empty when there is none).
    pub solution: BTreeMap<String, TaskFile>,
    /// `[environment] env` with `${VAR:-default}` resolved to its default.
    pub env: BTreeMap<String, String>,
}

/// Compose files: a multi-container environment.
const COMPOSE_FILES: [&str; 4] = [
    "docker-compose.yaml",
    "docker-compose.yml",
    "compose.yaml",
    "compose.yml",
];

/// Most bytes read of `tests/` or `solution/`.
pub const MAX_DIR_BYTES: usize = rollpoint_owner::MAX_UPLOAD_BYTES;

impl HarborTask {
    /// Reads the task at `dir`.
    pub fn read(dir: &Path) -> Result<Self, HarborError> {
        let dir = std::path::absolute(dir).map_err(|e| HarborError::io(dir, e))?;
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let id = rollout_id(&name);
        let refuse = |reason: String| HarborError::Refused {
            task: id.clone(),
            reason,
        };
        let config = TaskConfig::read(&config_path(&dir))?;
        let instruction_path = dir.join("instruction.md");
        let instruction = std::fs::read_to_string(&instruction_path)
            .map_err(|e| HarborError::io(&instruction_path, e))?;
        if instruction.trim().is_empty() {
            return Err(HarborError::Field {
                path: instruction_path,
                field: "instruction.md".to_owned(),
                message: "is empty".to_owned(),
            });
        }
        let env_dir = dir.join("environment");
        if let Some(compose) = COMPOSE_FILES.iter().find(|f| env_dir.join(f).exists()) {
            return Err(refuse(format!(
                "environment/{compose}: a multi-container environment; a rollpoint sandbox is \
                 one container"
            )));
        }
        if config.gpus > 0 {
            return Err(refuse(format!(
                "environment.gpus = {}: rollpoint sandboxes have no GPUs",
                config.gpus
            )));
        }
        if config.mcp_servers > 0 {
            return Err(refuse(
                "environment.mcp_servers: MCP servers beside the sandbox are not run".to_owned(),
            ));
        }
        if config.skills_dir.is_some() {
            return Err(refuse(
                "environment.skills_dir: copying skills into a harness's configuration is not \
                 done"
                    .to_owned(),
            ));
        }
        if config.verifier_user.is_some() && config.verifier_user != config.agent_user {
            return Err(refuse(
                "verifier.user differs from agent.user: the verifier runs as the sandbox's user"
                    .to_owned(),
            ));
        }
        if config.verifier_network() != config.agent_network() {
            return Err(refuse(
                "the verifier's network differs from the agent's: one sandbox has one network"
                    .to_owned(),
            ));
        }
        if let NetworkPolicy::Allow(hosts) = config.agent_network()
            && hosts.is_empty()
        {
            return Err(refuse(
                "network_mode = \"allowlist\" names no host".to_owned(),
            ));
        }
        let dockerfile = env_dir.join("Dockerfile");
        let environment = match (&config.docker_image, dockerfile.is_file()) {
            (Some(image), _) => Environment::Image(image.clone()),
            (None, true) => Environment::Dockerfile { context: env_dir },
            (None, false) => {
                return Err(refuse(
                    "neither environment.docker_image nor environment/Dockerfile".to_owned(),
                ));
            }
        };
        let env = resolve_env(&config.environment_env).map_err(refuse)?;
        let tests = read_tree(&dir.join("tests"))?;
        if !tests.contains_key("test.sh") {
            return Err(HarborError::Field {
                path: dir.join("tests"),
                field: "tests/test.sh".to_owned(),
                message: "missing".to_owned(),
            });
        }
        let solution_dir = dir.join("solution");
        let solution = if solution_dir.is_dir() {
            read_tree(&solution_dir)?
        } else {
            BTreeMap::new()
        };
        Ok(Self {
            id,
            dir,
            config,
            instruction,
            environment,
            tests,
            solution,
            env,
        })
    }
}

/// A directory name in rollpoint's id alphabet: other characters become
/// `_`, a leading `.` or `-` is prefixed, and a tail that reads as an
/// attempt (`-a<digits>`) gets `_`.
#[must_use]
pub fn rollout_id(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| {
            if u8::try_from(c).is_ok_and(rollpoint_proto::limits::is_id_byte) && c != '~' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() || id.starts_with(['.', '-']) {
        id.insert(0, 't');
    }
    if let Some((_, tail)) = id.rsplit_once("-a")
        && !tail.is_empty()
        && tail.bytes().all(|b| b.is_ascii_digit())
    {
        id.push('_');
    }
    id
}

/// `[environment] env`: literal values, and `${VAR:-default}` as its
/// default. A bare `${VAR}` would copy a host variable into the sandbox,
/// where a secret has no place: refused.
fn resolve_env(env: &BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
    env.iter()
        .map(|(k, v)| {
            let value = match v.strip_prefix("${").and_then(|r| r.strip_suffix('}')) {
                Some(inner) => match inner.split_once(":-") {
                    Some((_, default)) => default.to_owned(),
                    None => {
                        return Err(format!(
                            "environment.env.{k} = {v:?} takes a value from the host; rollpoint \
                             never passes host variables into a sandbox (give a literal or \
                             ${{VAR:-default}})"
                        ));
                    }
                },
                None if v.contains("${") => {
                    return Err(format!(
                        "environment.env.{k} = {v:?}: only a whole ${{VAR:-default}} is read"
                    ));
                }
                None => v.clone(),
            };
            Ok((k.clone(), value))
        })
        .collect()
}

/// Every regular file under `root`, by relative path. A symlink is
/// refused by name: it could point anywhere on the host.
fn read_tree(root: &Path) -> Result<BTreeMap<String, TaskFile>, HarborError> {
    let mut out = BTreeMap::new();
    let mut total = 0usize;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| HarborError::io(&dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| HarborError::io(&dir, e))?;
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).map_err(|e| HarborError::io(&path, e))?;
            if meta.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            if !meta.is_file() {
                return Err(HarborError::Field {
                    path: path.clone(),
                    field: rel,
                    message: "not a regular file (symlinks are not followed)".to_owned(),
                });
            }
            let bytes = std::fs::read(&path).map_err(|e| HarborError::io(&path, e))?;
            total = total.saturating_add(bytes.len());
            if total > MAX_DIR_BYTES {
                return Err(HarborError::Field {
                    path: root.to_owned(),
                    field: root
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    message: format!("holds more than {MAX_DIR_BYTES} bytes"),
                });
            }
            out.insert(
                rel,
                TaskFile {
                    bytes,
                    mode: meta.permissions().mode() & 0o7777,
                },
            );
        }
    }
    Ok(out)
}

/// The task directories of `path`: itself when it holds a `task.toml`,
/// else each subdirectory that does, by name.
pub fn task_dirs(path: &Path) -> Result<Vec<PathBuf>, HarborError> {
    if config_path(path).is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| HarborError::io(path, e))? {
        let p = entry.map_err(|e| HarborError::io(path, e))?.path();
        if p.is_dir() && config_path(&p).is_file() {
            dirs.push(p);
        }
    }
    dirs.sort();
    if dirs.is_empty() {
        return Err(HarborError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(dirs)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_to_the_alphabet() {
        assert_eq!(rollout_id("hello-world"), "hello-world");
        assert_eq!(rollout_id("fix git/merge"), "fix_git_merge");
        assert_eq!(rollout_id(".hidden"), "t.hidden");
        assert_eq!(rollout_id("task-a1"), "task-a1_");
        assert_eq!(rollout_id("a~b"), "a_b");
    }

    #[test]
    fn host_variables_never_reach_the_sandbox() {
        let env = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        let ok = resolve_env(&env(&[("A", "1"), ("B", "${HOME:-/root}")])).unwrap();
        assert_eq!(ok["B"], "/root");
        let e = resolve_env(&env(&[("KEY", "${OPENAI_API_KEY}")])).unwrap_err();
        assert!(
            e.contains("environment.env.KEY") && e.contains("never passes"),
            "{e}"
        );
        assert!(resolve_env(&env(&[("X", "a${Y}")])).is_err());
    }
}
