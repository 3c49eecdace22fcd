//! One host config file as `mcpmux import` reads it: JSON with comments and trailing
//! commas (JSONC, as VS Code allows) → the server entries in file order, each field with
//! its line, plus the `inputs` and which host most likely wrote the file.
//!
//! Owns: comment and trailing-comma blanking (byte for byte, so the parser's line and
//! column are the file's), the ordered reading of objects, the syntax error message
//! (`FILE:LINE:COLUMN: message`), host detection and the workspace folder of a file.
//! Never: decides how a server maps to mcpmux (that is `map.rs`), reads a file or the
//! environment itself (text, path and home directory are passed in).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use super::ImportError;

/// The host application a file most likely belongs to; decides what `mcpmux import`
/// tells the user to put in it instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    VsCode,
    Windsurf,
    /// Some other host using `mcpServers`; `http` when the file has URL servers (so the
    /// host evidently speaks HTTP).
    Other {
        http: bool,
    },
}

impl Host {
    pub fn label(self) -> &'static str {
        match self {
            Host::ClaudeDesktop => "Claude Desktop",
            Host::ClaudeCode => "Claude Code",
            Host::Cursor => "Cursor",
            Host::VsCode => "VS Code",
            Host::Windsurf => "Windsurf",
            Host::Other { .. } => "an mcpServers host",
        }
    }

    /// Whether the host can connect to a Streamable HTTP server itself (otherwise it is
    /// given `mcpmux connect URL` as a stdio server).
    pub fn speaks_http(self) -> bool {
        !matches!(self, Host::ClaudeDesktop | Host::Other { http: false })
    }
}

/// One field of a server entry.
#[derive(Debug, Clone)]
pub struct Field {
    pub key: String,
    pub line: usize,
    pub value: Value,
}

/// One server entry, in file order.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The key under `mcpServers`/`servers`, as written.
    pub name: String,
    pub line: usize,
    /// `None` when the entry is not a JSON object.
    pub fields: Option<Vec<Field>>,
}

/// A VS Code `inputs` entry (a value the host prompts for).
#[derive(Debug, Clone, Default)]
pub struct Input {
    pub description: Option<String>,
    pub password: bool,
}

/// Something about the file as a whole that was not imported: (line, key, text).
pub type FileNote = (Option<usize>, String, String);

/// A parsed host config.
#[derive(Debug, Clone)]
pub struct HostFile {
    /// The path as given on the command line (for messages).
    pub shown: String,
    /// The absolute path (for the comments in the written config).
    pub absolute: PathBuf,
    pub host: Host,
    /// Where the servers are: `mcpServers`, `servers` or `mcp.servers` (VS Code settings).
    pub container: &'static str,
    pub entries: Vec<Entry>,
    pub inputs: BTreeMap<String, Input>,
    /// What `${workspaceFolder}` means for this file, when it can be known.
    pub workspace: Option<PathBuf>,
    pub notes: Vec<FileNote>,
}

/// Parses `text` (the file at `absolute`, shown as `shown`). `home` is the user's home
/// directory, which is never a workspace folder.
pub fn parse(
    text: &str,
    shown: &str,
    absolute: &Path,
    home: Option<&Path>,
) -> Result<HostFile, ImportError> {
    let clean = strip_jsonc(text).map_err(|(line, column, message)| ImportError::Syntax {
        file: shown.to_owned(),
        line,
        column,
        message,
    })?;
    let syntax = |e: serde_json::Error| {
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = e.to_string();
        ImportError::Syntax {
            file: shown.to_owned(),
            line: e.line().max(1),
            column: e.column().max(1),
            message: message.strip_suffix(&suffix).unwrap_or(&message).to_owned(),
        }
    };
    // The whole document is checked first, so that the error of a malformed file points
    // at its first problem whatever its shape.
    serde_json::from_str::<serde::de::IgnoredAny>(&clean).map_err(syntax)?;
    let not_host = |message: String| ImportError::NotHostConfig {
        file: shown.to_owned(),
        message,
    };
    let top: Ordered<'_> = serde_json::from_str(&clean).map_err(|_| {
        not_host("the top level is not a JSON object: not an MCP host config".into())
    })?;
    let top = last_wins(top.0);

    let settings_mcp = find(&top, "mcp").and_then(object_of);
    let (container, servers, inputs_raw, used): (_, _, _, &[&str]) =
        if let Some(raw) = find(&top, "mcpServers") {
            ("mcpServers", raw, None, &["mcpServers"])
        } else if let Some(raw) = find(&top, "servers") {
            ("servers", raw, find(&top, "inputs"), &["servers", "inputs"])
        } else if let Some(raw) = settings_mcp.as_deref().and_then(|m| find(m, "servers")) {
            let inputs = settings_mcp.as_deref().and_then(|m| find(m, "inputs"));
            ("mcp.servers", raw, inputs, &["mcp"])
        } else {
            return Err(not_host(
                "no `mcpServers` (Claude Desktop, Cursor, Windsurf) or `servers` (VS Code) \
                 object: not an MCP host config"
                    .into(),
            ));
        };
    let Some(servers) = object_of(servers) else {
        return Err(not_host(format!(
            "line {}: `{container}` must be an object of servers",
            line_at(&clean, servers.get())
        )));
    };

    let mut notes = Vec::new();
    let ignored: Vec<&str> = top
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !used.contains(k))
        .collect();
    if !ignored.is_empty() {
        const SHOWN: usize = 8;
        let mut list = ignored[..ignored.len().min(SHOWN)].join(", ");
        if ignored.len() > SHOWN {
            list.push_str(&format!(" and {} more", ignored.len() - SHOWN));
        }
        notes.push((
            None,
            "(top level)".to_owned(),
            format!("not imported (not MCP servers): {list}"),
        ));
    }

    let mut entries: Vec<Entry> = Vec::new();
    for (name, raw) in servers {
        if let Some(earlier) = entries.iter().position(|e| e.name == name) {
            let first = entries.remove(earlier);
            notes.push((
                Some(first.line),
                format!("{container}.{}", json_key(&name)),
                "defined twice; the later definition is used, as hosts do".to_owned(),
            ));
        }
        let fields = object_of(raw).map(|fields| {
            fields
                .into_iter()
                .map(|(key, raw)| Field {
                    key,
                    line: line_at(&clean, raw.get()),
                    value: serde_json::from_str(raw.get()).unwrap_or(Value::Null),
                })
                .collect()
        });
        entries.push(Entry {
            name,
            line: line_at(&clean, raw.get()),
            fields,
        });
    }

    let inputs = inputs_raw
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
        .map(|v| read_inputs(&v))
        .unwrap_or_default();
    let host = detect(absolute, container, &entries);
    Ok(HostFile {
        shown: shown.to_owned(),
        absolute: absolute.to_owned(),
        host,
        container,
        entries,
        inputs,
        workspace: workspace_of(absolute, home),
        notes,
    })
}

fn read_inputs(value: &Value) -> BTreeMap<String, Input> {
    let mut out = BTreeMap::new();
    for item in value.as_array().into_iter().flatten() {
        if let Some(id) = item.get("id").and_then(Value::as_str) {
            out.insert(
                id.to_owned(),
                Input {
                    description: item
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    password: item.get("password").and_then(Value::as_bool) == Some(true),
                },
            );
        }
    }
    out
}

/// The host most likely to have written the file at `path`: by its well-known location
/// first, then by its shape.
pub fn detect(path: &Path, container: &str, entries: &[Entry]) -> Host {
    if container != "mcpServers" {
        return Host::VsCode;
    }
    let has = |key: &str| {
        entries
            .iter()
            .flat_map(|e| e.fields.iter().flatten())
            .any(|f| f.key == key)
    };
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let dirs: Vec<String> = path
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .map(|c| c.as_os_str().to_string_lossy().to_ascii_lowercase())
        .collect();
    if file == "claude_desktop_config.json" {
        Host::ClaudeDesktop
    } else if file == ".mcp.json" || file == ".claude.json" {
        Host::ClaudeCode
    } else if dirs.iter().any(|d| d == ".cursor") {
        Host::Cursor
    } else if has("serverUrl")
        || dirs
            .iter()
            .any(|d| d.contains("windsurf") || d == ".codeium")
    {
        Host::Windsurf
    } else {
        Host::Other { http: has("url") }
    }
}

/// `${workspaceFolder}` of a project file: the folder holding its `.vscode` or `.cursor`
/// directory. A file directly under the home directory is a user-wide config, which has
/// no workspace folder.
pub fn workspace_of(path: &Path, home: Option<&Path>) -> Option<PathBuf> {
    let dir = path.parent()?;
    let name = dir.file_name()?.to_string_lossy();
    if name != ".vscode" && name != ".cursor" {
        return None;
    }
    let workspace = dir.parent()?;
    (Some(workspace) != home && !workspace.as_os_str().is_empty()).then(|| workspace.to_owned())
}

/// The fields of a JSON object in file order, or `None` if `raw` is not an object.
fn object_of(raw: &RawValue) -> Option<Vec<(String, &RawValue)>> {
    serde_json::from_str::<Ordered<'_>>(raw.get())
        .ok()
        .map(|o| o.0)
}

/// The value of `key` among `fields`.
fn find<'a>(fields: &[(String, &'a RawValue)], key: &str) -> Option<&'a RawValue> {
    fields.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// Keeps the last of each key (as `JSON.parse` does), at the place of the first.
fn last_wins(fields: Vec<(String, &RawValue)>) -> Vec<(String, &RawValue)> {
    let mut out: Vec<(String, &RawValue)> = Vec::with_capacity(fields.len());
    for (key, value) in fields {
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => out.push((key, value)),
        }
    }
    out
}

/// A JSON object's members in file order, values left unparsed (they borrow the text,
/// which gives their line).
struct Ordered<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Ordered<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Ordered<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(key) = m.next_key::<String>()? {
                    let value: &'de RawValue = m.next_value()?;
                    out.push((key, value));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The 1-based line at which `part` (a slice of `text`) starts.
fn line_at(text: &str, part: &str) -> usize {
    let offset = (part.as_ptr() as usize)
        .saturating_sub(text.as_ptr() as usize)
        .min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A JSON object key as it appears in a dotted path: bare when it is a plain word,
/// quoted otherwise.
pub fn json_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        serde_json::to_string(key).unwrap_or_else(|_| key.to_owned())
    }
}

/// Blanks `//` and `/* */` comments and trailing commas (before `}` or `]`) with
/// spaces; newlines inside block comments are kept, so every other byte keeps its line
/// and column. A leading byte order mark is dropped. Error: (line, column, message) of
/// an unterminated block comment.
pub fn strip_jsonc(text: &str) -> Result<String, (usize, usize, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut in_string = false;
    let mut last_comma: Option<usize> = None;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match (c, bytes.get(i + 1)) {
            (b'/', Some(b'/')) => {
                let end = bytes[i..]
                    .iter()
                    .position(|&b| b == b'\n' || b == b'\r')
                    .map_or(bytes.len(), |n| i + n);
                out[i..end].fill(b' ');
                i = end;
                continue;
            }
            (b'/', Some(b'*')) => {
                let Some(len) = text[i + 2..].find("*/") else {
                    let line = text[..i].matches('\n').count() + 1;
                    let column = text[..i].rfind('\n').map_or(i, |n| i - n - 1) + 1;
                    return Err((line, column, "`/*` comment is never closed".into()));
                };
                let end = i + 2 + len + 2;
                for b in &mut out[i..end] {
                    if *b != b'\n' && *b != b'\r' {
                        *b = b' ';
                    }
                }
                i = end;
                continue;
            }
            (b'"', _) => {
                in_string = true;
                last_comma = None;
            }
            (b',', _) => last_comma = Some(i),
            (b'}' | b']', _) => {
                if let Some(at) = last_comma.take() {
                    out[at] = b' ';
                }
            }
            (c, _) if c.is_ascii_whitespace() => {}
            _ => last_comma = None,
        }
        i += 1;
    }
    // Only whole characters (comments, ASCII commas) were blanked, so this is still UTF-8.
    Ok(String::from_utf8(out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}
