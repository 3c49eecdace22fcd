//! `mcpmux stdio` on the kinds of stdin/stdout hosts give it: plain pipes (its stdout
//! then goes into tokio's reactor, non-blocking), a Unix socketpair (how Node.js hosts
//! spawn their children), and a stdout that is the same pipe as stderr (`2>&1`: it
//! must stay blocking, or log lines would be lost to EAGAIN). Each is served: an
//! `initialize` and a `tools/call` round trip.
#![cfg(unix)]

use crate::common;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::Stdio;

use common::{mcpmux_bin, scripted_config, temp_config, EVENT_TIMEOUT};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;

/// Whether `fd`'s open file has `O_NONBLOCK` set.
fn nonblocking(fd: impl AsFd) -> bool {
    // SAFETY: F_GETFL only reads the flags of a descriptor we own.
    let flags = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_GETFL) };
    assert!(flags >= 0, "fcntl F_GETFL");
    flags & libc::O_NONBLOCK != 0
}

fn spawn(stdin: Stdio, stdout: Stdio, stderr: Stdio) -> tokio::process::Child {
    let cfg = temp_config(&scripted_config("", "", ""));
    tokio::process::Command::new(mcpmux_bin())
        .args(["stdio", "--config", cfg.to_str().unwrap()])
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mcpmux stdio")
}

/// `initialize`, `notifications/initialized` and a `tools/call echo` through `input` /
/// `output`; lines that are not JSON-RPC (logs sharing the pipe) are skipped.
async fn round_trips(
    mut input: impl AsyncWrite + Unpin,
    output: impl tokio::io::AsyncRead + Unpin,
) {
    let mut lines = BufReader::new(output).lines();
    let mut answer = async |id: u64| -> Value {
        loop {
            let line = tokio::time::timeout(EVENT_TIMEOUT, lines.next_line())
                .await
                .expect("an answer in time")
                .expect("read")
                .expect("mcpmux stdio ended early");
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue; // a log line on a shared pipe
            };
            if v["id"] == json!(id) {
                return v;
            }
        }
    };
    let send = |v: Value| format!("{v}\n");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "pipes", "version": "1"}}});
    input.write_all(send(init).as_bytes()).await.unwrap();
    let r = answer(1).await;
    assert_eq!(r["result"]["serverInfo"]["name"], "mcpmux", "{r}");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "through the pipe"}}});
    input
        .write_all((send(note) + &send(call)).as_bytes())
        .await
        .unwrap();
    input.flush().await.unwrap();
    let r = answer(2).await;
    assert!(r.to_string().contains("through the pipe"), "{r}");
}

/// A pipe's (read end, write end), both blocking (as a host creates them).
fn pipe_pair() -> (OwnedFd, OwnedFd) {
    let (w, r) = pipe::pipe().expect("pipe");
    (
        r.into_blocking_fd().expect("blocking read end"),
        w.into_blocking_fd().expect("blocking write end"),
    )
}

fn reader(fd: OwnedFd) -> pipe::Receiver {
    pipe::Receiver::from_owned_fd(fd).expect("pipe reader")
}

fn writer(fd: OwnedFd) -> pipe::Sender {
    pipe::Sender::from_owned_fd(fd).expect("pipe writer")
}

#[tokio::test]
async fn plain_pipes_are_served_from_the_reactor() {
    let (in_r, in_w) = pipe_pair();
    let (out_r, out_w) = pipe_pair();
    // A copy of the write end of mcpmux's stdout: the same open file, so its flags
    // are what mcpmux set.
    let probe = out_w.try_clone().unwrap();
    let mut child = spawn(in_r.into(), out_w.into(), Stdio::inherit());
    round_trips(writer(in_w), reader(out_r)).await;
    assert!(
        nonblocking(&probe),
        "mcpmux's stdout pipe is in the reactor (non-blocking)"
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_stdout_shared_with_stderr_stays_blocking() {
    let (in_r, in_w) = pipe_pair();
    let (out_r, out_w) = pipe_pair();
    let probe = out_w.try_clone().unwrap();
    let err_w = out_w.try_clone().unwrap();
    let mut child = spawn(in_r.into(), out_w.into(), err_w.into());
    round_trips(writer(in_w), reader(out_r)).await;
    assert!(
        !nonblocking(&probe),
        "a stdout that is also stderr must stay blocking"
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_unix_socketpair_is_served() {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs_out = theirs.try_clone().unwrap();
    let mut child = spawn(
        OwnedFd::from(theirs).into(),
        OwnedFd::from(theirs_out).into(),
        Stdio::inherit(),
    );
    ours.set_nonblocking(true).unwrap();
    let (r, w) = tokio::net::UnixStream::from_std(ours).unwrap().into_split();
    round_trips(w, r).await;
    child.kill().await.unwrap();
}
