//! The stdio upstream actor: spawns the server process, probes its era with
//! `server/discover` (unless `protocol = "legacy"`), performs the handshake or runs a
//! 2026-07-28 session through its [`StatelessSession`], shuttles lines between the process and
//! the hub. It is a [`Transport`]: the one restart loop (`driver`) starts a new
//! process after backoff when one dies.
//!
//! Owns the child process: it is started with `kill_on_drop`, stopped by closing
//! stdin, waiting, then killing — never left as a zombie. Reading and writing run as
//! separate futures so a server that stops reading stdin cannot stop us reading its
//! stdout. A legacy session never interprets messages after the handshake; never
//! awaits a client.

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;

use super::driver::{self, Inbound, SessionEnd, Supervisor, Transport};
use super::probe::{self, Probed, Verdict};
use super::process_group::ProcessGroup;
use super::stateless::{self, StatelessSession};
use super::stdio_read::{read_message, read_ready, READ_BATCH, READ_BUFFER};
use super::{InitInfo, Related, UpstreamCmd, UpstreamEvent, UpstreamLink};
use crate::config::{RestartConfig, ServerConfig, UpstreamProtocol, UpstreamTransport};
use crate::protocol::codec::{Frame, JsonLines};
use crate::protocol::{methods, Kind, Message, RawId};
use crate::state::ids::UpstreamId;

/// How long a server gets to exit after its stdin closes, before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// The id of the proxy's own `initialize` request on each upstream session.
const INIT_ID: &str = "\"mcpmux-initialize\"";

/// How a handshake after the era probe ended.
enum Handshake {
    /// `initialize` answered: a legacy session.
    Legacy(InitInfo),
    /// The probe's `server/discover` was answered after all, naming 2026-07-28.
    LateDiscover(InitInfo),
}

pub(crate) struct StdioUpstream {
    pub id: UpstreamId,
    pub config: ServerConfig,
    pub restart: RestartConfig,
    pub max_line: usize,
    pub hub: UpstreamLink,
    pub shutdown: CancellationToken,
}

impl StdioUpstream {
    pub async fn run(self, rx: mpsc::Receiver<UpstreamCmd>) {
        driver::run(self.supervisor(), &self, rx).await;
    }

    fn command(&self) -> Result<Command, String> {
        let UpstreamTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } = self.config.transport()
        else {
            return Err("not a stdio server".into());
        };
        let mut cmd = Command::new(&command);
        cmd.args(&args)
            .envs(&env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // A process group of its own: stopping the server stops what it started too
        // (`npx`, `uvx` and `sh -c` wrappers start the real server as their child).
        #[cfg(unix)]
        cmd.process_group(0);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        Ok(cmd)
    }
}

impl Transport for StdioUpstream {
    /// One child process: spawn, probe, handshake, then lines both ways until it
    /// dies or mcpmux shuts down; the child is stopped either way.
    async fn session(&self, rx: &mut mpsc::Receiver<UpstreamCmd>) -> SessionEnd {
        let name = &self.config.name;
        let mut child = match self
            .command()
            .and_then(|mut c| c.spawn().map_err(|e| e.to_string()))
        {
            Ok(c) => c,
            Err(e) => {
                let cmd = self.config.command.as_deref().unwrap_or_default();
                return SessionEnd::Died(format!("cannot start `{cmd}`: {e}"));
            }
        };
        // Whichever way the session ends (stopped, crashed, exited at stdin's EOF, or
        // dead before its handshake), what the server started is told to stop too.
        let _group = ProcessGroup::of(&child);
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(log_stderr(stderr, name.clone()));
        }
        let mut writer = FramedWrite::new(stdin, JsonLines::new(self.max_line));
        let mut reader =
            FramedRead::with_capacity(stdout, JsonLines::new(self.max_line), READ_BUFFER);

        let init_timeout = Duration::from_millis(self.restart.init_timeout_ms);
        // Whether the probe went unanswered in time: its answer may still come (a
        // server slow to start), and the handshake then takes it.
        let mut probe_pending = false;
        let mut discovered = None;
        if self.config.protocol != UpstreamProtocol::Legacy {
            let wait = if self.config.protocol == UpstreamProtocol::Modern {
                init_timeout
            } else {
                init_timeout.min(probe::STDIO_PROBE_TIMEOUT)
            };
            let caps = crate::config::ClientCapability::declared(&self.config.client_capabilities);
            let mut link = StdioDiscoverer {
                writer: &mut writer,
                reader: &mut reader,
                name,
                capabilities: &caps,
            };
            let probed = tokio::select! {
                p = probe::probe(name, self.config.protocol, wait, &mut link) => p,
                status = child.wait() => return SessionEnd::Died(exit_text(status)),
                _ = self.shutdown.cancelled() => return self.stop(child, writer, SessionEnd::Shutdown).await,
            };
            match probed {
                Probed::Modern(info) => discovered = Some(info),
                Probed::Legacy { unanswered } => probe_pending = unanswered,
                Probed::Failed(e) => return self.stop(child, writer, SessionEnd::Died(e)).await,
            }
        }
        let mut legacy = None;
        if discovered.is_none() {
            let handshake = tokio::time::timeout(
                init_timeout,
                self.handshake(&mut writer, &mut reader, probe_pending),
            );
            match tokio::select! {
                r = handshake => match r {
                    Ok(Ok(h)) => h,
                    Ok(Err(e)) => return self.stop(child, writer, SessionEnd::Died(e)).await,
                    Err(_) => {
                        let e = format!("no answer to initialize within {} ms (restart.init_timeout_ms)", init_timeout.as_millis());
                        return self.stop(child, writer, SessionEnd::Died(e)).await;
                    }
                },
                status = child.wait() => return SessionEnd::Died(exit_text(status)),
                _ = self.shutdown.cancelled() => return self.stop(child, writer, SessionEnd::Shutdown).await,
            } {
                Handshake::Legacy(info) => legacy = Some(info),
                Handshake::LateDiscover(info) => {
                    tracing::debug!(upstream = %name, "server/discover answered after the probe's wait; the server is modern");
                    discovered = Some(info);
                }
            }
        }
        if let Some(info) = discovered {
            tracing::info!(upstream = %name, era = "modern", versions = ?info.supported_versions, "upstream speaks 2026-07-28");
            let caps = crate::config::ClientCapability::declared(&self.config.client_capabilities);
            let core = StatelessSession::new(name, caps, &info.capabilities);
            if !self.announce(info).await {
                return self.stop(child, writer, SessionEnd::Shutdown).await;
            }
            let end = self
                .stateless_session(core, rx, &mut child, &mut writer, &mut reader)
                .await;
            return self.stop(child, writer, end).await;
        }
        let info = legacy.expect("a handshake, when nothing was discovered");
        tracing::debug!(upstream = %name, era = "legacy", version = %info.protocol_version, "upstream session started");
        if !self.announce(info).await {
            return self.stop(child, writer, SessionEnd::Shutdown).await;
        }

        let end = {
            let write_loop = async {
                while let Some(cmd) = rx.recv().await {
                    if let Err(e) = writer.send(cmd.into_bytes()).await {
                        return format!("writing to the server failed: {e}");
                    }
                }
                "mcpmux is shutting down".to_owned()
            };
            let read_loop = async {
                loop {
                    let msg = match read_message(&mut reader, name, "").await {
                        Ok(msg) => msg,
                        Err(e) => return e,
                    };
                    // What the server wrote behind it goes along, in one send: a burst
                    // reaches the hub in a few batches, not a send per line.
                    let mut rest = Vec::new();
                    let end = read_ready(&mut reader, name, &mut rest, READ_BATCH - 1);
                    let event = if rest.is_empty() {
                        UpstreamEvent::Message(msg, Related::Unknown)
                    } else {
                        rest.insert(0, msg);
                        UpstreamEvent::Messages(rest)
                    };
                    if self.hub.send(self.id, event).await.is_err() {
                        return "mcpmux is shutting down".to_owned();
                    }
                    if let Some(e) = end {
                        return e;
                    }
                }
            };
            tokio::select! {
                r = write_loop => SessionEnd::Died(r),
                r = read_loop => SessionEnd::Died(r),
                status = child.wait() => SessionEnd::Died(exit_text(status)),
                _ = self.shutdown.cancelled() => SessionEnd::Shutdown,
            }
        };
        if let SessionEnd::Shutdown = end {
            // Deliver what the hub queued while shutting down (the last unsubscribes).
            let flush = async {
                while let Ok(cmd) = rx.try_recv() {
                    if writer.send(cmd.into_bytes()).await.is_err() {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(STOP_GRACE, flush).await;
        }
        self.stop(child, writer, end).await
    }
}

impl StdioUpstream {
    /// A 2026-07-28 session: the shared stateless loop (`driver::run_stateless`) over
    /// the child's pipes; a separate write loop keeps a server that stops reading from
    /// stopping us reading it.
    async fn stateless_session(
        &self,
        mut session: StatelessSession,
        rx: &mut mpsc::Receiver<UpstreamCmd>,
        child: &mut Child,
        writer: &mut Writer,
        reader: &mut Reader,
    ) -> SessionEnd {
        let (wtx, mut wrx) = mpsc::channel::<Bytes>(super::QUEUE_CAPACITY);
        let mut io = Pipes {
            wtx,
            reader,
            name: &self.config.name,
        };
        let end = {
            let write_loop = async {
                while let Some(bytes) = wrx.recv().await {
                    if let Err(e) = writer.send(bytes).await {
                        return format!("writing to the server failed: {e}");
                    }
                }
                "mcpmux is shutting down".to_owned()
            };
            let sup = self.supervisor();
            tokio::select! {
                r = write_loop => SessionEnd::Died(r),
                r = driver::run_stateless(&sup, &mut session, &mut io, rx) => r,
                status = child.wait() => SessionEnd::Died(exit_text(status)),
                _ = self.shutdown.cancelled() => SessionEnd::Shutdown,
            }
        };
        if let SessionEnd::Shutdown = end {
            // The hub's last unsubscribes close the listen; deliver what that writes.
            driver::settle_queued(&mut session, &mut io, rx);
            let flush = async {
                while let Ok(bytes) = wrx.try_recv() {
                    if writer.send(bytes).await.is_err() {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(STOP_GRACE, flush).await;
        }
        end
    }

    fn supervisor(&self) -> Supervisor<'_> {
        Supervisor {
            id: self.id,
            name: &self.config.name,
            hub: &self.hub,
            restart: &self.restart,
            shutdown: &self.shutdown,
        }
    }

    /// Sends `initialize`, waits for its answer (answering pings, logging anything
    /// else), then sends `notifications/initialized`.
    /// With `probe_pending` (the `server/discover` probe went unanswered in time), a
    /// late answer to it that names 2026-07-28 wins over the handshake: the server
    /// was only slow to start (its answer to `initialize`, if any, is then ignored).
    async fn handshake(
        &self,
        writer: &mut FramedWrite<ChildStdin, JsonLines>,
        reader: &mut FramedRead<ChildStdout, JsonLines>,
        probe_pending: bool,
    ) -> Result<Handshake, String> {
        let init_id = RawId::parse(INIT_ID).expect("valid id");
        let discover_id = RawId::parse(probe::DISCOVER_ID).expect("valid id");
        let params = super::initialize_params(&self.config);
        let req = Message::request(&init_id, methods::INITIALIZE, Some(&params));
        writer
            .send(req.to_bytes())
            .await
            .map_err(|e| format!("writing initialize failed: {e}"))?;
        loop {
            let msg = read_message(reader, &self.config.name, " during initialize").await?;
            match msg.kind() {
                Kind::Response if probe_pending && msg.id() == Some(&discover_id) => {
                    match probe::read_discover(&msg) {
                        Verdict::Modern(info) => return Ok(Handshake::LateDiscover(info)),
                        Verdict::Legacy(why) | Verdict::Retry(why) => {
                            tracing::debug!(upstream = %self.config.name, %why, "late server/discover answer: not modern");
                        }
                    }
                }
                Kind::Response if msg.id() == Some(&init_id) => {
                    let info = InitInfo::from_answer(&msg)?;
                    let note = Message::notification(methods::INITIALIZED, None);
                    writer
                        .send(note.to_bytes())
                        .await
                        .map_err(|e| format!("writing initialized failed: {e}"))?;
                    return Ok(Handshake::Legacy(info));
                }
                Kind::Request if msg.method() == Some(methods::PING) => {
                    let pong = Message::response(msg.id().expect("requests have ids"), &json!({}));
                    writer
                        .send(pong.to_bytes())
                        .await
                        .map_err(|e| e.to_string())?;
                }
                _ => {
                    tracing::debug!(upstream = %self.config.name, message = ?msg, "message before initialize ignored")
                }
            }
        }
    }

    /// Tells the hub the session is ready; `false` when the hub is gone (shutdown).
    async fn announce(&self, info: InitInfo) -> bool {
        self.hub
            .send(self.id, UpstreamEvent::Ready(info))
            .await
            .is_ok()
    }

    /// Stops the child as the spec asks: close stdin and wait up to [`STOP_GRACE`];
    /// then SIGTERM (unix) and wait as long again; then kill and reap.
    async fn stop(
        &self,
        mut child: Child,
        writer: FramedWrite<ChildStdin, JsonLines>,
        end: SessionEnd,
    ) -> SessionEnd {
        drop(writer);
        if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_ok() {
            return end;
        }
        #[cfg(unix)]
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            tracing::debug!(upstream = %self.config.name, "server did not exit after stdin closed; sending SIGTERM to its process group");
            // SAFETY: kill(2) of the process group the server leads (`process_group(0)`
            // in `command`): it has not been reaped (`wait` has not returned), so the
            // group's id cannot name another group.
            unsafe {
                libc::kill(-pid, libc::SIGTERM);
            }
            if tokio::time::timeout(STOP_GRACE, child.wait()).await.is_ok() {
                return end;
            }
            tracing::debug!(upstream = %self.config.name, "server did not exit; killing its process group");
            // SAFETY: as above; the leader is still not reaped.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        tracing::debug!(upstream = %self.config.name, "server did not exit; killing it");
        let _ = child.kill().await;
        end
    }
}

/// `notifications/cancelled` for the request or listen `id` (stdio's way to stop it).
fn cancel_note(id: &RawId) -> Message {
    let params = json!({"requestId": serde_json::value::RawValue::from_string(id.as_json().to_owned()).expect("ids are JSON"), "reason": "mcpmux no longer needs it"});
    Message::notification(methods::CANCELLED, Some(&params))
}

type Writer = FramedWrite<ChildStdin, JsonLines>;
type Reader = FramedRead<ChildStdout, JsonLines>;

/// The probe over stdio: `server/discover` as one line, then the lines up to its
/// answer (anything else the server says meanwhile is logged and dropped).
struct StdioDiscoverer<'a> {
    writer: &'a mut Writer,
    reader: &'a mut Reader,
    name: &'a str,
    capabilities: &'a serde_json::Value,
}

impl probe::Discover for StdioDiscoverer<'_> {
    async fn discover(&mut self) -> Result<Verdict, String> {
        let id = RawId::parse(probe::DISCOVER_ID).expect("valid id");
        let params = stateless::discover_params(self.capabilities);
        let req = Message::request(&id, methods::SERVER_DISCOVER, Some(&params));
        self.writer
            .send(req.to_bytes())
            .await
            .map_err(|e| format!("writing server/discover failed: {e}"))?;
        loop {
            let msg = read_message(self.reader, self.name, " during server/discover").await?;
            if msg.kind() == Kind::Response && msg.id() == Some(&id) {
                return Ok(probe::read_discover(&msg));
            }
            tracing::debug!(upstream = %self.name, message = ?msg, "message before the server/discover answer ignored");
        }
    }
}

/// A stateless session's side of the child's pipes: writes go to the write loop,
/// reads come from stdout.
struct Pipes<'a> {
    /// To the write loop. Bounded as the hub's queue of a legacy server is: a server
    /// that stops reading its input gets no more than this queued for it; what does
    /// not fit is dropped (a request then times out in the hub).
    wtx: mpsc::Sender<Bytes>,
    reader: &'a mut Reader,
    name: &'a str,
}

impl Pipes<'_> {
    fn write(&self, bytes: Bytes) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.wtx.try_send(bytes) {
            tracing::warn!(upstream = %self.name, "the server is not reading its input; a message to it was dropped");
        }
    }
}

impl driver::StatelessIo for Pipes<'_> {
    fn send(&mut self, msg: Message, _listen: bool, _param_headers: Vec<(String, String)>) {
        self.write(msg.to_bytes());
    }

    fn stop(&mut self, id: &RawId) {
        self.write(cancel_note(id).to_bytes());
    }

    async fn inbound(&mut self) -> Result<Inbound, String> {
        loop {
            let msg = read_message(self.reader, self.name, "").await?;
            // The answer to a handshake begun before a late `server/discover` answer
            // made the session modern.
            if msg.kind() == Kind::Response && msg.id().is_some_and(|i| i.as_json() == INIT_ID) {
                tracing::debug!(upstream = %self.name, "answer to the abandoned initialize ignored");
                continue;
            }
            return Ok(Inbound::Message(msg, Related::Unknown));
        }
    }
}

/// Logs the server's stderr line by line until it closes it. Read as long as the pipe
/// is open, whatever comes (a line that is not UTF-8, or over [`STDERR_LINE_MAX`]
/// bytes, is logged as such): a pipe left unread would block the server or kill it
/// with SIGPIPE.
async fn log_stderr(stderr: tokio::process::ChildStderr, name: String) {
    let mut lines = FramedRead::new(stderr, JsonLines::new(STDERR_LINE_MAX));
    while let Some(Ok(frame)) = lines.next().await {
        let line = match frame {
            Frame::Line(l) => l.to_string(),
            Frame::TooLong => format!("(a line over {STDERR_LINE_MAX} bytes, not shown)"),
            Frame::NotUtf8 => "(a line that is not UTF-8, not shown)".to_owned(),
        };
        tracing::info!(target: "mcpmux::upstream_stderr", upstream = %name, "{line}");
    }
}

/// The longest stderr line logged (default 64 KiB): a server that prints progress with
/// `\r` alone must not grow mcpmux's memory without bound.
const STDERR_LINE_MAX: usize = 64 * 1024;

fn exit_text(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(s) => format!("the server exited ({s})"),
        Err(e) => format!("waiting for the server failed: {e}"),
    }
}
