//! Picking the harness's shell tool from the offered tools and shaping its arguments from the
//! tool's JSON schema (`{"command": ...}` for OpenCode, Pi and Claude Code, `{"cmd": ...}` for
//! Codex's `exec_command`, an argv array for older shell tools).

use serde_json::{Map, Value, json};

use crate::request::OfferedTool;

/// Names of shell tools, best first.
const SHELL_NAMES: &[&str] = &[
    "bash",
    "Bash",
    "exec_command",
    "shell",
    "run_shell_command",
    "execute_command",
    "local_shell",
];

/// Property names that carry the command line, best first.
const COMMAND_PROPS: &[&str] = &["command", "cmd", "script", "commands"];

/// The shell tool among `tools`: `wanted` if named, else the best-known shell tool name,
/// else the first tool whose name mentions a shell.
#[must_use]
pub fn pick_shell<'a>(tools: &'a [OfferedTool], wanted: Option<&str>) -> Option<&'a OfferedTool> {
    if let Some(name) = wanted {
        return tools.iter().find(|t| t.name == name);
    }
    SHELL_NAMES
        .iter()
        .find_map(|name| tools.iter().find(|t| t.name == *name))
        .or_else(|| {
            tools.iter().find(|t| {
                let n = t.name.to_ascii_lowercase();
                n.contains("bash") || n.contains("shell") || n.contains("exec")
            })
        })
}

/// Arguments for one call of `tool` running `command`, shaped from the tool's schema.
#[must_use]
pub fn shell_arguments(tool: &OfferedTool, command: &str, step: usize) -> Value {
    let props = tool
        .schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let required: Vec<&str> = tool
        .schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let command_prop = COMMAND_PROPS
        .iter()
        .copied()
        .find(|p| props.contains_key(*p))
        .or_else(|| {
            required
                .iter()
                .copied()
                .find(|p| type_of(props.get(*p)) == Some("string"))
        })
        .unwrap_or("command");
    let mut args = Map::new();
    let command_value = if type_of(props.get(command_prop)) == Some("array") {
        json!(["bash", "-lc", command])
    } else {
        json!(command)
    };
    args.insert(command_prop.to_owned(), command_value);
    if props.contains_key("description") {
        args.insert("description".into(), json!(format!("scripted step {step}")));
    }
    for name in required {
        if args.contains_key(name) {
            continue;
        }
        let prop = props.get(name);
        let value = prop
            .and_then(|p| p.get("default"))
            .cloned()
            .unwrap_or_else(|| match type_of(prop) {
                Some("integer" | "number") => json!(1),
                Some("boolean") => json!(false),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!(format!("scripted step {step}")),
            });
        args.insert(name.to_owned(), value);
    }
    Value::Object(args)
}

fn type_of(prop: Option<&Value>) -> Option<&str> {
    let ty = prop?.get("type")?;
    ty.as_str().or_else(|| {
        ty.as_array()?
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tool(name: &str, schema: Value) -> OfferedTool {
        OfferedTool {
            name: name.into(),
            schema,
        }
    }

    #[test]
    fn codex_exec_command_gets_cmd() {
        let tools = [
            tool("write_stdin", json!({})),
            tool(
                "exec_command",
                json!({"type": "object", "properties": {"cmd": {"type": "string"}, "yield_time_ms": {"type": "number"}}, "required": ["cmd"]}),
            ),
        ];
        let t = pick_shell(&tools, None).unwrap();
        assert_eq!(shell_arguments(t, "ls", 0), json!({"cmd": "ls"}));
    }

    #[test]
    fn claude_bash_gets_command_and_description() {
        let tools = [tool(
            "Bash",
            json!({"properties": {"command": {"type": "string"}, "description": {"type": "string"}, "timeout": {"type": "number"}}, "required": ["command"]}),
        )];
        let t = pick_shell(&tools, None).unwrap();
        assert_eq!(
            shell_arguments(t, "ls", 3),
            json!({"command": "ls", "description": "scripted step 3"})
        );
    }

    #[test]
    fn argv_shell_tool_gets_an_array_and_required_fields() {
        let tools = [tool(
            "shell",
            json!({"properties": {"command": {"type": "array"}, "workdir": {"type": "string"}, "timeout_ms": {"type": ["integer", "null"]}}, "required": ["command", "timeout_ms"]}),
        )];
        let t = pick_shell(&tools, None).unwrap();
        assert_eq!(
            shell_arguments(t, "ls", 0),
            json!({"command": ["bash", "-lc", "ls"], "timeout_ms": 1})
        );
    }
}
