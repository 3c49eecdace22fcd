//! Host variables in config strings → mcpmux's `${NAME}` (docs/architecture.md,
//! "Commands and configuration": `${NAME}` is expanded from mcpmux's environment in
//! commands, args, env values, cwd, URLs and header values; `$${` is a literal `${`).
//!
//! Owns: the translation table (`${env:X}` and `${X}` → `${X}`, `${input:ID}` →
//! `${INPUT_ID}`, `${userHome}` → `${HOME}`, `${workspaceFolder}` → the project folder,
//! `${X:-default}` → `${X}`; editor-only variables kept literally as `$${...}`), and the
//! list of variables a mapped server needs.
//! Never: reads the environment or a file, or changes a string without a note.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::model::{sanitize_name, scalar, Ctx, FieldNote, NoteKind, Transport};
use super::source::{json_key, Field};

/// `[A-Za-z_][A-Za-z0-9_]*`: what mcpmux's `${...}` may contain.
pub fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The `${NAME}` variables a mapped server uses.
pub fn collect_variables(transport: &Transport, into: &mut BTreeSet<String>) {
    let mut strings: Vec<&String> = Vec::new();
    match transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            strings.push(command);
            strings.extend(args);
            strings.extend(env.values());
            strings.extend(cwd);
        }
        Transport::Http { url, headers, .. } => {
            strings.push(url);
            strings.extend(headers.values());
        }
    }
    for s in strings {
        let mut rest = s.as_str();
        while let Some(at) = rest.find('$') {
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix("$${") {
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${") {
                let end = after.find('}').unwrap_or(after.len());
                into.insert(after[..end].to_owned());
                rest = &after[end..];
            } else {
                rest = &tail[1..];
            }
        }
    }
}

/// VS Code's predefined variables that depend on the editor's state: no value outside it.
const EDITOR_VARIABLES: &[&str] = &[
    "file",
    "fileWorkspaceFolder",
    "relativeFile",
    "relativeFileDirname",
    "fileBasename",
    "fileBasenameNoExtension",
    "fileExtname",
    "fileDirname",
    "fileDirnameBasename",
    "cwd",
    "lineNumber",
    "selectedText",
    "execPath",
    "defaultBuildTask",
];

/// Rewrites host variables in strings into mcpmux's `${NAME}` form, noting each change.
pub struct Translator<'a, 'b> {
    pub ctx: &'a Ctx<'b>,
    pub notes: Vec<FieldNote>,
}

impl Translator<'_, '_> {
    fn note(&mut self, key: &str, line: usize, kind: NoteKind, text: String) {
        self.notes.push(FieldNote {
            key: key.to_owned(),
            line,
            kind,
            text,
        });
    }

    /// `input` as mcpmux config text. `Err`: the server cannot be imported.
    pub fn text(&mut self, input: &str, key: &str, line: usize) -> Result<String, String> {
        let mut out = String::with_capacity(input.len());
        let mut rest = input;
        while let Some(at) = rest.find("${") {
            let literal = &rest[..at];
            out.push_str(literal);
            let after = &rest[at + 2..];
            let Some(end) = after.find('}') else {
                out.push_str("$${");
                out.push_str(after);
                return Ok(out);
            };
            let inner = &after[..end];
            rest = &after[end + 1..];
            let written = self.variable(inner, key, line);
            if written.starts_with("${") && out.ends_with('$') {
                return Err(format!(
                    "not imported: `{key}` has a `$` right before ${{{inner}}}, which an \
                     mcpmux config cannot write"
                ));
            }
            out.push_str(&written);
        }
        out.push_str(rest);
        Ok(out)
    }

    /// What `${inner}` becomes: a `${NAME}` mcpmux expands, a literal, or an escaped
    /// `$${inner}` passed through as written.
    fn variable(&mut self, inner: &str, key: &str, line: usize) -> String {
        let file = self.ctx.file;
        let as_written = format!("$${{{inner}}}");
        let changed = |this: &mut Self, to: String, why: String| {
            let text = format!("${{{inner}}} written as {to}: {why}");
            this.note(key, line, NoteKind::Changed, text);
            to
        };
        if let Some(name) = inner.strip_prefix("env:") {
            if is_var_name(name) {
                let to = format!("${{{name}}}");
                return changed(self, to, "mcpmux reads it from its environment".into());
            }
        } else if let Some(id) = inner.strip_prefix("input:") {
            let var = format!("INPUT_{}", sanitize_name(id).replace('-', "_")).to_uppercase();
            let what = match file.inputs.get(id) {
                Some(input) => {
                    let described = input
                        .description
                        .as_deref()
                        .map_or(String::new(), |d| format!(" ({d:?})"));
                    let secret = if input.password { ", a secret" } else { "" };
                    format!("the host prompts for this input{described}{secret}")
                }
                None => "an input the file does not declare".to_owned(),
            };
            let why = format!("{what}; mcpmux reads ${var} from its environment instead");
            return changed(self, format!("${{{var}}}"), why);
        } else if inner == "userHome" {
            let home = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
            let why = "mcpmux reads it from its environment".to_owned();
            return changed(self, format!("${{{home}}}"), why);
        } else if inner == "pathSeparator" || inner == "/" {
            let sep = std::path::MAIN_SEPARATOR.to_string();
            return changed(self, sep, "this system's path separator".into());
        } else if matches!(
            inner,
            "workspaceFolder" | "workspaceRoot" | "workspaceFolderBasename"
        ) {
            if let Some(dir) = &file.workspace {
                let value = if inner == "workspaceFolderBasename" {
                    dir.file_name().unwrap_or_default().to_string_lossy()
                } else {
                    dir.to_string_lossy()
                };
                let why = format!("the folder holding {}", file.shown);
                return changed(self, value.replace("${", "$${"), why);
            }
            let text = format!(
                "${{{inner}}} kept as written (no workspace folder is known for this file): \
                 replace it with a path"
            );
            self.note(key, line, NoteKind::NotImported, text);
            return as_written;
        } else if is_var_name(inner) && !EDITOR_VARIABLES.contains(&inner) {
            return format!("${{{inner}}}");
        } else if let Some((name, default)) = inner.split_once(":-") {
            if is_var_name(name) {
                let to = format!("${{{name}}}");
                let why =
                    format!("mcpmux has no default values (the default {default:?} is dropped)");
                return changed(self, to, why);
            }
        }
        let text =
            format!("${{{inner}}} is a host variable mcpmux cannot fill in; kept as written");
        self.note(key, line, NoteKind::NotImported, text);
        as_written
    }

    /// An `env` or `headers` object: string values translated, numbers and booleans
    /// written as strings, other values and names `invalid` rejects noted and left out.
    pub fn table(
        &mut self,
        f: &Field,
        key: &str,
        note: &mut impl FnMut(&str, usize, NoteKind, String),
        invalid: impl Fn(&str, &str) -> Option<&'static str>,
    ) -> Result<BTreeMap<String, String>, String> {
        let Value::Object(map) = &f.value else {
            return Err(format!("not imported: `{key}` is not an object"));
        };
        let mut out = BTreeMap::new();
        for (name, value) in map {
            let at = format!("{key}.{}", json_key(name));
            let Some(text) = scalar(value) else {
                let msg = format!("not imported: the value is not a string ({value})");
                note(&at, f.line, NoteKind::NotImported, msg);
                continue;
            };
            if let Some(why) = invalid(name, &text) {
                note(
                    &at,
                    f.line,
                    NoteKind::NotImported,
                    format!("not imported: {why}"),
                );
                continue;
            }
            if !value.is_string() {
                let msg = format!("{value} written as the string {text:?}");
                note(&at, f.line, NoteKind::Changed, msg);
            }
            out.insert(name.clone(), self.text(&text, &at, f.line)?);
        }
        Ok(out)
    }
}
