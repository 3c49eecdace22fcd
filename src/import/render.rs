//! Text `mcpmux import` produces: the commented mcpmux TOML, the report lines, and what
//! to put in each host instead of the imported servers.
//!
//! Owns: TOML string and key quoting, the layout of the written file (header naming the
//! sources and the time, `[listen]` with the defaults, one commented table per server),
//! the UTC timestamp, one profile per host file, the per-host client snippets.
//! Never: does I/O or reads the clock (the caller passes the time); writes a key the
//! config does not define (docs/architecture.md, "Commands and configuration").

use std::fmt::Write as _;

use super::map::{Note, Plan, Transport};
use super::source::{Host, HostFile};
use crate::config::ListenConfig;

/// The URL clients use with the `[listen]` defaults written by `mcpmux import`.
pub fn default_url() -> String {
    let listen = ListenConfig::default();
    format!("http://{}{}", listen.http, listen.path)
}

/// One profile per host file (docs/architecture.md, "Profiles"), when servers came from
/// more than one file: (file index, profile name, its servers in file order). Named
/// after the host (`claude-desktop`, `cursor`, `vscode-<folder>`, ...), unique.
pub fn profiles(files: &[HostFile], plan: &Plan) -> Vec<(usize, String, Vec<String>)> {
    let mut out: Vec<(usize, String, Vec<String>)> = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let mut servers: Vec<String> = Vec::new();
        for (_, name) in plan.uses.iter().filter(|(f, _)| *f == i) {
            if !servers.contains(name) {
                servers.push(name.clone());
            }
        }
        if servers.is_empty() {
            continue;
        }
        let wanted = profile_name(file);
        let mut name = wanted.clone();
        let mut n = 2;
        while out.iter().any(|(_, taken, _)| *taken == name) {
            name = format!("{wanted}-{n}");
            n += 1;
        }
        out.push((i, name, servers));
    }
    if out.len() < 2 {
        // One host: the default endpoint is its view.
        out.clear();
    }
    out
}

/// The profile name of a host file.
fn profile_name(file: &HostFile) -> String {
    let slug = |s: &str| -> String {
        let s: String = s
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        s.trim_matches('-').to_owned()
    };
    let base = match file.host {
        Host::ClaudeDesktop => "claude-desktop",
        Host::ClaudeCode => "claude-code",
        Host::Cursor => "cursor",
        Host::Windsurf => "windsurf",
        Host::VsCode => "vscode",
        Host::Other { .. } => "host",
    };
    let folder = (file.host == Host::VsCode)
        .then_some(file.workspace.as_ref())
        .flatten()
        .and_then(|w| w.file_name())
        .map(|f| slug(&f.to_string_lossy()))
        .filter(|f| !f.is_empty());
    match folder {
        Some(f) => format!("{base}-{f}"),
        None => base.to_owned(),
    }
}

/// The URL of the endpoint a host file's clients use: its profile's, or the default.
fn host_url(profiles: &[(usize, String, Vec<String>)], file: usize, url: &str) -> String {
    match profiles.iter().find(|(f, _, _)| *f == file) {
        Some((_, name, _)) => format!("{url}/{name}"),
        None => url.to_owned(),
    }
}

/// The whole mcpmux config for `plan`. `when` is an RFC 3339 timestamp.
pub fn config(files: &[HostFile], plan: &Plan, when: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# mcpmux configuration written by `mcpmux import` on {when} from:"
    );
    for (i, file) in files.iter().enumerate() {
        let count = plan.servers.iter().filter(|s| s.file == i).count();
        let _ = writeln!(
            out,
            "#   {} ({}, {}): {count} server{}",
            comment(&file.absolute.to_string_lossy()),
            file.host.label(),
            file.container,
            if count == 1 { "" } else { "s" }
        );
    }
    let skipped: Vec<&Note> = plan
        .notes
        .iter()
        .filter(|n| n.kind == super::map::NoteKind::Skipped)
        .collect();
    if !skipped.is_empty() {
        out.push_str("#\n# Servers not imported:\n");
        for n in skipped {
            let _ = writeln!(
                out,
                "#   {} in {}: {}",
                comment(&n.key),
                comment(&files[n.file].shown),
                comment(&n.text)
            );
        }
    }
    if !plan.variables.is_empty() {
        let vars: Vec<&str> = plan.variables.iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "#\n# Expanded from mcpmux's environment (set them before `mcpmux check` or\n\
             # `mcpmux serve`): {}",
            vars.join(", ")
        );
    }
    out.push_str(
        "#\n# Every key is described in config.example.toml; `mcpmux check --config FILE`\n\
         # validates this file.\n\n",
    );

    let listen = ListenConfig::default();
    let _ = writeln!(
        out,
        "[listen]\n# The defaults: clients connect to {}.\nhttp = {}\npath = {}",
        default_url(),
        string(&listen.http.to_string()),
        string(&listen.path)
    );

    for server in &plan.servers {
        let file = &files[server.file];
        let _ = writeln!(
            out,
            "\n# From {}, {}.{} (line {})",
            comment(&file.absolute.to_string_lossy()),
            file.container,
            comment(&super::source::json_key(&server.original)),
            server.line
        );
        for n in &server.notes {
            let _ = writeln!(out, "# - {}", comment(n));
        }
        let table = format!("servers.{}", key(&server.name));
        let _ = writeln!(out, "[{table}]");
        let (sub_name, sub) = match &server.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let _ = writeln!(out, "command = {}", string(command));
                if !args.is_empty() {
                    let items: Vec<String> = args.iter().map(|a| string(a)).collect();
                    let _ = writeln!(out, "args = [{}]", items.join(", "));
                }
                if let Some(cwd) = cwd {
                    let _ = writeln!(out, "cwd = {}", string(cwd));
                }
                ("env", env)
            }
            Transport::Http { url, headers, .. } => {
                let _ = writeln!(out, "url = {}", string(url));
                ("headers", headers)
            }
        };
        if !sub.is_empty() {
            let _ = writeln!(out, "\n[{table}.{sub_name}]");
            for (k, v) in sub {
                let _ = writeln!(out, "{} = {}", key(k), string(v));
            }
        }
        if let Transport::Http {
            client_id: Some(id),
            ..
        } = &server.transport
        {
            let _ = writeln!(out, "\n[{table}.oauth]\nclient_id = {}", string(id));
        }
    }
    for (file, name, servers) in profiles(files, plan) {
        let _ = writeln!(
            out,
            "\n# The servers {} had: its clients connect to {}/{name}.",
            comment(&files[file].absolute.to_string_lossy()),
            default_url()
        );
        let items: Vec<String> = servers.iter().map(|s| string(s)).collect();
        let _ = writeln!(
            out,
            "[profiles.{}]\nservers = [{}]",
            key(&name),
            items.join(", ")
        );
    }
    out
}

/// One report line: `FILE[:LINE]: KEY: text`.
pub fn note_line(files: &[HostFile], note: &Note) -> String {
    let line = note.line.map_or(String::new(), |l| format!(":{l}"));
    format!(
        "{}{line}: {}: {}",
        files[note.file].shown, note.key, note.text
    )
}

/// What to put in the host of `file` instead of the servers imported from it: a JSON
/// object to merge into the file. `exe` runs mcpmux (for hosts that only launch stdio
/// servers).
pub fn client_snippet(file: &HostFile, url: &str, exe: &str) -> String {
    let url_json = json(url);
    let entry = match file.host {
        Host::VsCode => format!(r#"{{"type": "http", "url": {url_json}}}"#),
        Host::ClaudeCode => format!(r#"{{"type": "http", "url": {url_json}}}"#),
        Host::Cursor | Host::Other { http: true } => format!(r#"{{"url": {url_json}}}"#),
        Host::Windsurf => format!(r#"{{"serverUrl": {url_json}}}"#),
        Host::ClaudeDesktop | Host::Other { http: false } => format!(
            r#"{{"command": {}, "args": ["connect", {url_json}]}}"#,
            json(exe)
        ),
    };
    let mut object = format!(r#"{{"mcpmux": {entry}}}"#);
    for part in file.container.rsplit('.') {
        object = format!("{{{}: {object}}}", json(part));
    }
    object
}

/// The advice printed after a successful import.
pub fn advice(files: &[HostFile], plan: &Plan, output: &str, url: &str, exe: &str) -> String {
    let mut out = format!(
        "Start mcpmux with `mcpmux serve --config {output}`, then in each host replace the \
         imported servers with mcpmux:\n"
    );
    let profiles = profiles(files, plan);
    for (i, file) in files.iter().enumerate() {
        if !plan.servers.iter().any(|s| s.file == i) {
            continue;
        }
        let how = if file.host.speaks_http() {
            "Streamable HTTP"
        } else {
            "stdio only: through `mcpmux connect`"
        };
        let _ = writeln!(
            out,
            "  {} ({}, {how}):\n    {}",
            file.shown,
            file.host.label(),
            client_snippet(file, &host_url(&profiles, i, url), exe)
        );
    }
    out
}

/// `s` as a TOML basic string.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `k` as a TOML key: bare when it can be, quoted otherwise.
pub fn key(k: &str) -> String {
    let bare = !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        k.to_owned()
    } else {
        string(k)
    }
}

/// Text safe inside a `#` comment (no line breaks or other control characters).
fn comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC, proleptic Gregorian).
pub fn utc_timestamp(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rest = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}
