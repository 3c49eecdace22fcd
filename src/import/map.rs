//! The mapping rules of `mcpmux import`: one host server entry → one `[servers.NAME]`
//! table (docs/architecture.md, "Commands and configuration"), or a reason it is skipped,
//! with a note for every field that is not carried over or is changed on the way.
//!
//! Owns: transport choice (`type`, `command`, `url`/`serverUrl`), field checks that
//! mirror the config's own rules (so the output always loads), host variables
//! (through `vars.rs`), server names (sanitized, unique, identical duplicates merged).
//! Never: does I/O, or drops a field without a note.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::model::scalar;
pub use super::model::{sanitize_name, Ctx, FieldNote, NoteKind, Transport};
use super::source::{json_key, Entry, Field, HostFile};
use super::vars::{collect_variables, Translator};

/// One line of the import report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Index of the file in the `files` given to [`plan`].
    pub file: usize,
    pub line: Option<usize>,
    /// The JSON path in the host file, e.g. `mcpServers.github.autoApprove`.
    pub key: String,
    pub kind: NoteKind,
    pub text: String,
}

/// A server that will be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The `[servers.NAME]` key: sanitized and unique.
    pub name: String,
    pub file: usize,
    /// The key in the host file.
    pub original: String,
    pub line: usize,
    pub transport: Transport,
    /// This server's notes, repeated as comments above its table.
    pub notes: Vec<String>,
}

/// What `mcpmux import` will write and report.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub servers: Vec<Server>,
    /// Every note, in file and entry order.
    pub notes: Vec<Note>,
    /// The variables the written config expands: they must be set for `mcpmux check`
    /// and `mcpmux serve`.
    pub variables: BTreeSet<String>,
    /// (file index, server name): every server each file had, including those imported
    /// once from an earlier file (for the per-host profiles).
    pub uses: Vec<(usize, String)>,
}

/// Maps every entry of every file, in order.
pub fn plan(files: &[HostFile]) -> Plan {
    let mut plan = Plan::default();
    for (index, file) in files.iter().enumerate() {
        for (line, key, text) in &file.notes {
            plan.notes.push(Note {
                file: index,
                line: *line,
                key: key.clone(),
                kind: NoteKind::NotImported,
                text: text.clone(),
            });
        }
        for entry in &file.entries {
            add_entry(&mut plan, files, index, entry);
        }
    }
    plan
}

fn add_entry(plan: &mut Plan, files: &[HostFile], index: usize, entry: &Entry) {
    let file = &files[index];
    let base = format!("{}.{}", file.container, json_key(&entry.name));
    let ctx = Ctx { file };
    let mapped = match &entry.fields {
        Some(fields) => map_entry(fields, &ctx),
        None => Err("not imported: the entry is not a JSON object".to_owned()),
    };
    let (transport, notes) = match mapped {
        Ok(ok) => ok,
        Err(reason) => {
            plan.notes.push(Note {
                file: index,
                line: Some(entry.line),
                key: base,
                kind: NoteKind::Skipped,
                text: reason,
            });
            return;
        }
    };
    let mut server_notes = Vec::new();
    let mut push = |plan: &mut Plan, line: usize, key: String, kind, text: String| {
        server_notes.push(format!("{key}: {text}"));
        plan.notes.push(Note {
            file: index,
            line: Some(line),
            key,
            kind,
            text,
        });
    };
    for n in notes {
        let key = if n.key.is_empty() {
            base.clone()
        } else {
            format!("{base}.{}", n.key)
        };
        push(plan, n.line, key, n.kind, n.text);
    }

    let wanted = sanitize_name(&entry.name);
    // The same server under the same host key, whatever it was imported as (a third
    // file's copy must match the second's `NAME-2`, not only a server named NAME).
    if let Some(same) = plan.servers.iter().find(|s| {
        (s.name == wanted || sanitize_name(&s.original) == wanted) && s.transport == transport
    }) {
        let text = format!(
            "the same server as servers.{} (from {}): imported once",
            same.name, files[same.file].shown
        );
        let same = same.name.clone();
        push(plan, entry.line, base, NoteKind::Changed, text);
        plan.uses.push((index, same));
        return;
    }
    let mut name = wanted.clone();
    let mut n = 2;
    while plan.servers.iter().any(|s| s.name == name) {
        name = format!("{wanted}-{n}");
        n += 1;
    }
    if name != wanted {
        let first = plan.servers.iter().find(|s| s.name == wanted);
        let from = first.map_or(String::new(), |s| {
            format!(" (from {})", files[s.file].shown)
        });
        let text = format!(
            "servers.{wanted} is already taken by a different server{from}; imported as \
             servers.{name} (their tools may collide: the first in the file wins unless one \
             gets a `prefix`)"
        );
        push(plan, entry.line, base.clone(), NoteKind::Changed, text);
    } else if name != entry.name {
        let text = format!("imported as servers.{name} (a plain TOML key)");
        push(plan, entry.line, base.clone(), NoteKind::Changed, text);
    }
    collect_variables(&transport, &mut plan.variables);
    plan.uses.push((index, name.clone()));
    plan.servers.push(Server {
        name,
        file: index,
        original: entry.name.clone(),
        line: entry.line,
        transport,
        notes: server_notes,
    });
}

/// Maps one entry. `Err` is the reason the server is skipped, a full sentence.
pub fn map_entry(fields: &[Field], ctx: &Ctx<'_>) -> Result<(Transport, Vec<FieldNote>), String> {
    let get = |key: &str| fields.iter().rev().find(|f| f.key == key);
    let mut notes = Vec::new();
    let mut note = |key: &str, line: usize, kind, text: String| {
        notes.push(FieldNote {
            key: key.to_owned(),
            line,
            kind,
            text,
        })
    };
    let mut used: Vec<&str> = vec![];

    for (key, off) in [("disabled", true), ("enabled", false)] {
        if let Some(f) = get(key) {
            used.push(key);
            match &f.value {
                Value::Bool(b) if *b == off => {
                    return Err(format!(
                        "not imported: `{key}: {off}` in the host (add it by hand to use it)"
                    ))
                }
                Value::Bool(_) | Value::Null => {}
                other => note(
                    key,
                    f.line,
                    NoteKind::NotImported,
                    format!("not a boolean ({other}); ignored"),
                ),
            }
        }
    }

    let command = get("command");
    let url = get("url").or_else(|| get("serverUrl"));
    let type_field = get("type").or_else(|| get("transportType"));
    let stdio = match type_field.map(|f| &f.value) {
        Some(Value::String(t)) => match t.to_ascii_lowercase().as_str() {
            "stdio" => true,
            "http" | "streamable-http" | "streamablehttp" | "streamable_http" => false,
            "sse" => {
                return Err("not imported: `type: \"sse\"` is the deprecated HTTP+SSE \
                            transport, which mcpmux does not speak (if the server also \
                            serves Streamable HTTP, add that URL by hand)"
                    .to_owned())
            }
            _ => return Err(format!("not imported: unknown transport `type: {t:?}`")),
        },
        Some(other) => return Err(format!("not imported: `type` is not a string ({other})")),
        None => match (command, url) {
            (Some(_), Some(_)) => {
                return Err(
                    "not imported: it has both `command` and a URL and no `type` \
                            saying which to use"
                        .to_owned(),
                )
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => {
                return Err("not imported: it has neither `command` (stdio) nor `url` \
                            (HTTP)"
                    .to_owned())
            }
        },
    };
    if let Some(f) = type_field {
        used.push(f.key.as_str());
    }

    let mut tr = Translator {
        ctx,
        notes: Vec::new(),
    };
    let transport = if stdio {
        let f = command.ok_or("not imported: `type: \"stdio\"` but no `command`")?;
        used.extend(["command", "args", "env", "cwd"]);
        let command = match &f.value {
            Value::String(c) if !c.trim().is_empty() => tr.text(c, "command", f.line)?,
            _ => return Err("not imported: `command` is not a non-empty string".to_owned()),
        };
        let mut args = Vec::new();
        if let Some(f) = get("args") {
            let Value::Array(items) = &f.value else {
                return Err("not imported: `args` is not a list".to_owned());
            };
            for (i, item) in items.iter().enumerate() {
                let key = format!("args[{i}]");
                let text = scalar(item)
                    .ok_or_else(|| format!("not imported: `{key}` is not a string ({item})"))?;
                if !item.is_string() {
                    let msg = format!("{item} written as the string {text:?}");
                    note(&key, f.line, NoteKind::Changed, msg);
                }
                args.push(tr.text(&text, &key, f.line)?);
            }
        }
        let env = match get("env") {
            Some(f) => tr.table(f, "env", &mut note, |k, v| {
                if k.is_empty() || k.contains(['=', '\0']) {
                    Some("not a valid environment variable name")
                } else if v.contains('\0') {
                    Some("the value holds a NUL byte")
                } else {
                    None
                }
            })?,
            None => BTreeMap::new(),
        };
        let cwd = match get("cwd") {
            Some(Field {
                value: Value::String(c),
                line,
                ..
            }) => Some(tr.text(c, "cwd", *line)?),
            Some(f) => {
                let msg = format!("not a string ({}); not imported", f.value);
                note("cwd", f.line, NoteKind::NotImported, msg);
                None
            }
            None => None,
        };
        match super::remote::recognize(&command, &args) {
            None => Transport::Stdio {
                command,
                args,
                env,
                cwd,
            },
            Some(remote) => {
                // mcp-remote logs in per host; mcpmux logs in once for all of them.
                let remote = remote?;
                let msg = "runs mcp-remote: written as a native `url =` server that mcpmux \
                           logs in to itself, once for every host (`mcpmux login NAME`)";
                note("command", f.line, NoteKind::Changed, msg.to_owned());
                for n in remote.notes {
                    note("args", f.line, NoteKind::Changed, n);
                }
                for k in env.keys() {
                    let msg = "not imported: an HTTP server has no environment (set it \
                               where mcpmux runs if a header uses it)";
                    note(
                        &format!("env.{k}"),
                        f.line,
                        NoteKind::NotImported,
                        msg.to_owned(),
                    );
                }
                if cwd.is_some() {
                    let msg = "not imported: an HTTP server has no working directory";
                    note("cwd", f.line, NoteKind::NotImported, msg.to_owned());
                }
                Transport::Http {
                    url: remote.url,
                    headers: remote.headers,
                    client_id: remote.client_id,
                }
            }
        }
    } else {
        let f = url.ok_or("not imported: an HTTP `type` but no `url`")?;
        used.extend([f.key.as_str(), "headers"]);
        let Value::String(raw) = &f.value else {
            return Err(format!("not imported: `{}` is not a string", f.key));
        };
        let url = tr.text(raw, &f.key, f.line)?;
        let lower = url.to_ascii_lowercase();
        let scheme_ok = ["http://", "https://"]
            .iter()
            .any(|s| lower.strip_prefix(s).is_some_and(|rest| !rest.is_empty()));
        if !scheme_ok && !url.starts_with("${") {
            return Err(format!(
                "not imported: `{}` must start with http:// or https:// (got {url:?})",
                f.key
            ));
        }
        if type_field.is_none() && lower.trim_end_matches('/').ends_with("/sse") {
            let msg = "ends in /sse: if this is the deprecated HTTP+SSE transport, mcpmux \
                       cannot use it (`mcpmux check --probe` tells)";
            note(&f.key, f.line, NoteKind::Changed, msg.to_owned());
        }
        if let Some(other) = ["url", "serverUrl"]
            .into_iter()
            .filter(|k| *k != f.key)
            .find_map(&get)
        {
            used.push(other.key.as_str());
            if other.value != f.value {
                let msg = format!("not imported: `{}` is used instead", f.key);
                note(&other.key, other.line, NoteKind::NotImported, msg);
            }
        }
        let headers = match get("headers") {
            Some(f) => tr.table(f, "headers", &mut note, |k, v| {
                if !crate::config::is_header_name(k) {
                    Some("not a valid HTTP header name")
                } else if v.contains(['\r', '\n', '\0']) {
                    Some("the value holds a line break")
                } else {
                    None
                }
            })?,
            None => BTreeMap::new(),
        };
        Transport::Http {
            url,
            headers,
            client_id: None,
        }
    };

    for f in fields.iter().filter(|f| !used.contains(&f.key.as_str())) {
        let text = format!("not imported: {}", unmapped_reason(&f.key, stdio));
        note(&f.key, f.line, NoteKind::NotImported, text);
    }
    notes.append(&mut tr.notes);
    notes.sort_by_key(|n| n.line);
    Ok((transport, notes))
}

/// Why a field mcpmux does not take is left out.
fn unmapped_reason(key: &str, stdio: bool) -> &'static str {
    match key {
        "command" | "args" | "env" | "cwd" | "envFile" if !stdio => {
            "it only applies to a stdio server (this one is HTTP)"
        }
        "url" | "serverUrl" | "headers" if stdio => {
            "it only applies to an HTTP server (this one is stdio)"
        }
        "autoApprove" | "alwaysAllow" | "autoapprove" => {
            "approving tools is the host's decision; set it there for the mcpmux server"
        }
        "disabledTools" | "enabledTools" | "includeTools" | "excludeTools" | "tools" => {
            "mcpmux does not filter a server's tools"
        }
        "timeout" | "networkTimeout" | "requestTimeout" | "startupTimeout" | "initTimeout" => {
            "mcpmux's timeouts are global: [limits] request_timeout_ms, [restart] init_timeout_ms"
        }
        "envFile" => {
            "mcpmux reads no env file: put the variables in `env` (values may be ${NAME}, \
             read from mcpmux's environment)"
        }
        "oauth" | "auth" => {
            "mcpmux logs in to a server that asks for OAuth by itself (`mcpmux login NAME`); \
             a pre-registered client goes in [servers.NAME.oauth]"
        }
        "dev" => "VS Code's development mode (watch, debug) has no mcpmux equivalent",
        "description" | "name" | "title" | "gallery" | "version" | "icon" => {
            "descriptive only; mcpmux has no such key"
        }
        _ => "not a key mcpmux knows",
    }
}
