//! One client on a byte stream (mcpmux's own stdin/stdout in `mcpmux stdio`, or any
//! `AsyncRead`/`AsyncWrite` pair in tests): newline-delimited JSON-RPC, bounded lines.
//!
//! Bad input never ends the session: an over-long line, invalid JSON or a malformed
//! message gets a JSON-RPC error and reading goes on. Batches (2025-03-26) are split
//! and their members handled one by one; their responses are written as separate
//! lines. Only MCP goes to the writer; logs go to stderr through tracing.

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::downstream::link::ClientLink;
use crate::downstream::outbox::{OutKind, Outbound, Outbox};
use crate::protocol::codec::{Frame, JsonLines};
use crate::protocol::{code, Incoming, Message, ParseError, RawId};

/// Serves one client until its input ends or the hub closes its outbox.
///
/// # Errors
/// Only when the hub refuses the client (limits or shutdown).
pub async fn serve_stream<R, W>(
    reader: R,
    writer: W,
    hub: ClientLink,
    max_line: usize,
    queue: usize,
) -> Result<(), crate::downstream::link::AdmitError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let outbox = Outbox::new(queue);
    let client = hub.open_client(outbox.clone()).await?;
    let mut lines = FramedRead::new(reader, JsonLines::new(max_line));
    let mut out = FramedWrite::new(writer, JsonLines::new(max_line));

    let read_loop = async {
        while let Some(frame) = lines.next().await {
            let line = match frame {
                Ok(Frame::Line(l)) => l,
                Ok(Frame::TooLong) => {
                    let why = format!(
                        "message longer than limits.max_message_bytes ({max_line} bytes) discarded"
                    );
                    reject(&outbox, code::INVALID_REQUEST, &why);
                    continue;
                }
                Err(e) => {
                    tracing::debug!(%client, error = %e, "client input failed");
                    break;
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let items = match Incoming::parse(line.as_bytes()) {
                Ok(Incoming::Single(m)) => vec![(m, line.as_bytes())],
                Ok(Incoming::Batch(ms)) => ms.into_iter().map(|m| (m, &b""[..])).collect(),
                Err(e) => vec![(Err(e), line.as_bytes())],
            };
            for (item, raw) in items {
                match item {
                    Ok(msg) => {
                        if hub.client_message(client, msg).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => reject_parse(&outbox, Message::salvage_id(raw), &e),
                }
            }
        }
    };
    let write_loop = async {
        let mut batch = Vec::new();
        loop {
            if outbox.drain(&mut batch).is_err() {
                return;
            }
            if batch.is_empty() {
                outbox.ready().await;
                continue;
            }
            for o in batch.drain(..).filter(|o| o.kind != OutKind::Release) {
                if out.feed(o.bytes).await.is_err() {
                    return;
                }
            }
            if out.flush().await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = read_loop => {
            // Input ended: deliver what is already queued, then leave.
            let mut rest = Vec::new();
            if outbox.drain(&mut rest).is_ok() {
                for o in rest.into_iter().filter(|o| o.kind != OutKind::Release) {
                    let _ = out.feed(o.bytes).await;
                }
                let _ = out.flush().await;
            }
        }
        _ = write_loop => {}
    }
    hub.client_closed(client, "stdio client left").await;
    Ok(())
}

fn reject_parse(outbox: &Outbox, id: Option<RawId>, e: &ParseError) {
    reject_with_id(outbox, id.as_ref(), e.code(), &e.to_string());
}

fn reject(outbox: &Outbox, code: i64, message: &str) {
    reject_with_id(outbox, None, code, message);
}

fn reject_with_id(outbox: &Outbox, id: Option<&RawId>, code: i64, message: &str) {
    let m = Message::error_response(id, code, message, None);
    outbox.push(Outbound {
        bytes: m.to_bytes(),
        kind: OutKind::Response,
        related: None,
    });
}
