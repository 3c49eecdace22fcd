//! `mcpmux import FILE… [--output PATH] [--force]`: turns the MCP server lists of
//! Claude Desktop, Claude Code, Cursor, VS Code and Windsurf (JSON, comments and
//! trailing commas allowed) into one mcpmux config (docs/architecture.md, "Commands
//! and configuration").
//!
//! Owns: the command's I/O: reading the host files, the report on stderr (every field
//! or server not imported, every value changed on the way), writing the config (never
//! over an existing file without `--force`; `-` is stdout), and the advice naming what
//! each host should run instead.
//! Never: writes to a host config, starts or contacts a server, or drops anything
//! without a report line. The rules live in `map.rs` and `vars.rs`, the reading in
//! `source.rs`, the text in `render.rs`; `mcp-remote URL` entries become native `url =`
//! servers (`remote.rs`).
//!
//! The written file loads with `mcpmux check` once the variables it names are set: it
//! is checked here with [`crate::config::parse_with_env`] before it is written.

mod map;
mod model;
mod remote;
mod render;
mod source;
#[cfg(test)]
mod tests;
mod vars;

use std::io::Write as _;
use std::path::{Path, PathBuf};

pub use map::{Note, NoteKind, Plan, Server, Transport};
pub use source::{Host, HostFile};

/// Why `mcpmux import` stopped without writing anything. Each message is one line.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// Not JSON (with comments): `FILE:LINE:COLUMN: message`.
    #[error("{file}:{line}:{column}: invalid JSON: {message}")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// JSON, but without an MCP server list.
    #[error("{file}: {message}")]
    NotHostConfig { file: String, message: String },
    #[error("no server could be imported (see the lines above); nothing written")]
    NothingToImport,
    #[error("{} already exists; pass --force to overwrite it, or --output another file", path.display())]
    Exists { path: PathBuf },
    #[error("cannot write {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The generated config does not load: a bug in the import rules.
    #[error("the imported config does not validate (please report this): {0}")]
    Invalid(String),
}

/// Reads and parses every file (`home` is the user's home directory, for
/// `${workspaceFolder}`), then maps them.
///
/// # Errors
///
/// [`ImportError::Read`], [`ImportError::Syntax`] or [`ImportError::NotHostConfig`]
/// for the first file that cannot be used.
pub fn read_all(
    files: &[PathBuf],
    home: Option<&Path>,
) -> Result<(Vec<HostFile>, Plan), ImportError> {
    let mut parsed = Vec::with_capacity(files.len());
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|error| ImportError::Read {
            path: path.clone(),
            error,
        })?;
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        let shown = path.display().to_string();
        parsed.push(source::parse(&text, &shown, &absolute, home)?);
    }
    let plan = map::plan(&parsed);
    Ok((parsed, plan))
}

/// The generated config for `files` and `plan`, validated. `when` is an RFC 3339 time.
///
/// # Errors
///
/// [`ImportError::NothingToImport`] when no server was mapped, [`ImportError::Invalid`]
/// if the text does not load (a bug).
pub fn render_config(files: &[HostFile], plan: &Plan, when: &str) -> Result<String, ImportError> {
    if plan.servers.is_empty() {
        return Err(ImportError::NothingToImport);
    }
    let text = render::config(files, plan, when);
    // Every variable counts as set, to something that passes the `url` check even when
    // a whole URL is one `${NAME}`: only the file's structure is checked here.
    crate::config::parse_with_env(&text, "imported config", |_| Some("http://x".into()))
        .map_err(|e| ImportError::Invalid(e.to_string()))?;
    Ok(text)
}

/// The `mcpmux import` command.
///
/// # Errors
///
/// Any [`ImportError`]; nothing is written then.
pub fn run(files: &[PathBuf], output: &Path, force: bool) -> Result<(), ImportError> {
    let to_stdout = output == Path::new("-");
    if !to_stdout && !force && output.exists() {
        return Err(ImportError::Exists {
            path: output.to_owned(),
        });
    }
    let home = std::env::var_os(if cfg!(windows) { "USERPROFILE" } else { "HOME" })
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let (parsed, plan) = read_all(files, home.as_deref())?;

    let mut stderr = std::io::stderr().lock();
    for note in &plan.notes {
        let _ = writeln!(
            stderr,
            "mcpmux import: {}",
            render::note_line(&parsed, note)
        );
    }
    let text = render_config(&parsed, &plan, &render::utc_timestamp(now_secs()))?;

    if to_stdout {
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .map_err(|error| ImportError::Write {
                path: output.to_owned(),
                error,
            })?;
    } else {
        write_file(output, &text, force)?;
    }

    let skipped = count(&plan, NoteKind::Skipped);
    let not_imported = count(&plan, NoteKind::NotImported);
    let _ = writeln!(
        stderr,
        "mcpmux import: {} server{} from {} file{} written to {}; {skipped} skipped, \
         {not_imported} field{} not imported (listed above)",
        plan.servers.len(),
        plural(plan.servers.len()),
        parsed.len(),
        plural(parsed.len()),
        if to_stdout {
            "stdout".to_owned()
        } else {
            output.display().to_string()
        },
        plural(not_imported),
    );
    if !plan.variables.is_empty() {
        let vars: Vec<&str> = plan.variables.iter().map(String::as_str).collect();
        let _ = writeln!(
            stderr,
            "mcpmux import: set these in mcpmux's environment before `mcpmux check` or \
             `mcpmux serve`: {}",
            vars.join(", ")
        );
    }
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.to_str().map(str::to_owned))
        .unwrap_or_else(|| "mcpmux".to_owned());
    let shown_output = if to_stdout {
        "FILE".to_owned()
    } else {
        output.display().to_string()
    };
    let advice = render::advice(&parsed, &plan, &shown_output, &render::default_url(), &exe);
    // The advice goes to stdout unless stdout carries the config itself.
    if to_stdout {
        let _ = write!(stderr, "{advice}");
    } else {
        print!("{advice}");
    }
    Ok(())
}

fn count(plan: &Plan, kind: NoteKind) -> usize {
    plan.notes.iter().filter(|n| n.kind == kind).count()
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Seconds since the epoch: `$SOURCE_DATE_EPOCH` when set (reproducible output), else now.
fn now_secs() -> u64 {
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        })
}

/// Writes `text` to `path`, creating it only if absent unless `force`. The file may
/// hold secrets copied from `env` and `headers`, so a new one is private (0600 on unix).
fn write_file(path: &Path, text: &str, force: bool) -> Result<(), ImportError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let result = options
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    result.map_err(|error| match error.kind() {
        std::io::ErrorKind::AlreadyExists => ImportError::Exists {
            path: path.to_owned(),
        },
        _ => ImportError::Write {
            path: path.to_owned(),
            error,
        },
    })
}
