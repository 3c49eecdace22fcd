//! `loadgen relay PROGRAM [ARGS...]`: the least a process between a host and its stdio
//! server can do. It starts PROGRAM with piped stdin and stdout and copies bytes both
//! ways on two blocking threads (one `read`, one `write` per chunk; no parsing, no
//! event loop, no allocation per message).
//!
//! `forwarding` measures it beside `mcpmux stdio`, so the latency any proxy process adds
//! on this machine (two more pipe crossings and two more process wake-ups per call) is
//! shown apart from what mcpmux's own work adds. It is a benchmark peer only: it never
//! looks at what it copies.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use anyhow::{anyhow, Context, Result};

/// Relays until either side closes, then returns (the child is killed if still running).
///
/// # Errors
/// PROGRAM cannot be started.
pub fn run(program: &str, args: &[String]) -> Result<()> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("spawn {program}"))?;
    let mut to_child = child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("no child stdin"))?;
    let mut from_child = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no child stdout"))?;
    let down = std::thread::spawn(move || {
        let stdin = std::io::stdin();
        copy(&mut stdin.lock(), &mut to_child)
    });
    let stdout = std::io::stdout();
    copy(&mut from_child, &mut stdout.lock());
    let _ = child.kill();
    let _ = child.wait();
    let _ = down.join();
    Ok(())
}

/// Copies what each `read` returns with one `write_all` until end of input or an error.
/// The buffer is larger than std's stdin buffer, so reads bypass it.
fn copy(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).and_then(|()| to.flush()).is_err() {
                    return;
                }
            }
        }
    }
}
