//! `loadgen drive --calls N PROGRAM [ARGS...]`: `initialize`, then N sequential
//! `tools/call echo` through one stdio MCP program, then a clean end of its stdin, so
//! a profiler wrapping the program (callgrind, `perf stat`) writes its figures for a
//! known amount of work. An argument `{config}` is replaced by the path of a mcpmux
//! config with the scripted upstream as its one server (the one `forwarding` uses).
//!
//! It times nothing: the profiler measures. The callgrind method (in the git history of
//! BENCHMARKS.md) takes the difference of two such runs so start-up and shutdown cancel
//! out.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::json;

use super::client::LineClient;
use super::proxy::{config_toml, Limits, TempFile};
use super::scenarios::{check_echo, Bins};

/// How long the program may take to exit once its stdin ended (a profiler writing its
/// output included).
const EXIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Parses `--calls N PROGRAM [ARGS...]` and drives the program.
///
/// # Errors
/// Bad arguments, a failed call, or a program that does not exit cleanly.
pub async fn run(bins: &Bins, mut argv: impl Iterator<Item = String>) -> Result<()> {
    const USAGE: &str = "usage: loadgen drive --calls N PROGRAM [ARGS...]";
    if argv.next().as_deref() != Some("--calls") {
        bail!(USAGE);
    }
    let calls: usize = argv
        .next()
        .context(USAGE)?
        .parse()
        .context("--calls: not a number")?;
    let program = argv.next().context(USAGE)?;
    let config = TempFile::new("toml", &config_toml(&bins.scripted, Limits::default()))?;
    let config_path = config.0.to_string_lossy().into_owned();
    let args: Vec<String> = argv
        .map(|a| {
            if a == "{config}" {
                config_path.clone()
            } else {
                a
            }
        })
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut client = LineClient::start(Path::new(&program), &args).await?;
    for _ in 0..calls {
        check_echo(
            client
                .tool("echo", json!({"text": "hello from loadgen"}))
                .await?,
        )?;
    }
    let status = tokio::time::timeout(EXIT_TIMEOUT, client.finish())
        .await
        .context("the program did not exit after its stdin ended")??;
    ensure!(status.success(), "{program} exited with {status}");
    eprintln!("loadgen drive: {calls} calls through {program}");
    Ok(())
}
