//! Long streams leave hyper (docs/architecture.md, "Streamable HTTP", the hand-off):
//! once hyper has written the head of a response marked [`HandOff`], the connection's
//! socket is taken from hyper and the response's body is written on it by a small task
//! of its own. An idle `subscriptions/listen` or session GET stream then costs its
//! socket, its source and that task, not an HTTP/1 connection (hyper's dispatcher and
//! its 8 KiB read and write buffers, which it keeps for the connection's life).
//!
//! How: the service ([`HandoffService`]) swaps the marked response's body for one that
//! ends at once and adds `Connection: close`, so hyper writes the head, a chunked
//! body's end (`0\r\n\r\n`), and then shuts the connection down. The socket's wrapper
//! ([`HandoffIo`]) holds back every byte hyper writes from the moment that body is
//! polled, and at hyper's shutdown hands the socket and those bytes over instead of
//! closing. The connection's task then spawns [`HandedOff::write`]: the held bytes less
//! the chunked end, then the real body as chunks, then the end.
//!
//! Owns: the hand-off and the handed-off stream's chunked framing, its end (written when
//! the body ends) and noticing the client leave (end of file or an error on the
//! socket, or no progress writing for [`WRITE_STALL`]: each drops the body).
//! Never: hands off a response to a request that was not HTTP/1.1 (an HTTP/1.0 answer
//! has no chunked framing; hyper writes it as before), writes the stream when hyper's
//! held bytes do not end with the chunked end it was given (the connection is closed
//! and the body dropped), or reads a request after the hand-off (what the client sends
//! then is read and discarded, up to [`DISCARD_LIMIT`], then the connection is closed:
//! the head said `Connection: close`).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, Version};
use bytes::{Buf, Bytes};
use http_body::Body as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tracing::debug;

/// The end of a chunked body.
const CHUNKED_END: &[u8] = b"0\r\n\r\n";
/// How long a handed-off stream waits for its client to take any of a chunk before
/// the connection is closed (nginx's `send_timeout` default). An idle stream has
/// nothing to write and never waits this; a client that stopped reading while its
/// socket stays open would otherwise keep the stream's task and socket for ever.
const WRITE_STALL: std::time::Duration = std::time::Duration::from_secs(60);
/// What a handed-off stream's client may send (and have discarded) before its
/// connection is closed: room for requests it pipelined before it saw the head.
const DISCARD_LIMIT: usize = 64 * 1024;

/// Marks a response whose body may be written on the bare socket (module docs). Only
/// for bodies that stream for long: the connection closes when the body ends.
#[derive(Clone, Copy, Debug)]
pub(super) struct HandOff;

/// What one connection's service, socket wrapper and task share. Small on every
/// connection: the parts are allocated only for a response that is handed off.
#[derive(Default)]
pub(super) struct HandoffState {
    /// Set when the swapped body was polled: from then on [`HandoffIo`] holds back.
    armed: AtomicBool,
    parts: Mutex<Option<Box<Parts>>>,
}

struct Parts {
    /// The handed-off response's real body.
    body: Body,
    /// What hyper wrote after arming.
    held: Vec<u8>,
    /// The socket, once hyper shut the connection down.
    tcp: Option<TcpStream>,
}

impl HandoffState {
    fn parts(&self) -> std::sync::MutexGuard<'_, Option<Box<Parts>>> {
        self.parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The handed-off stream, when hyper finished the connection by handing the socket
    /// over. `None` for every connection that ended otherwise.
    pub(super) fn take(&self) -> Option<HandedOff> {
        let Parts { body, held, tcp } = *self.parts().take_if(|p| p.tcp.is_some())?;
        Some(HandedOff {
            tcp: tcp?,
            held,
            body,
        })
    }
}

/// A connection's socket as hyper sees it: passed through until the swapped body is
/// armed, then held back and handed over at shutdown (module docs).
pub(super) struct HandoffIo {
    tcp: Option<TcpStream>,
    handoff: Arc<HandoffState>,
    holding: bool,
}

impl HandoffIo {
    pub(super) fn new(tcp: TcpStream, handoff: Arc<HandoffState>) -> Self {
        HandoffIo {
            tcp: Some(tcp),
            handoff,
            holding: false,
        }
    }

    /// Whether writes are held back now (checked at each write: arming happens between
    /// hyper's writes, never within one).
    fn holding(&mut self) -> bool {
        self.holding = self.holding || self.handoff.armed.load(Ordering::Acquire);
        self.holding
    }

    /// Holds `bufs` back; how many bytes that was.
    fn hold<'a>(&self, bufs: impl Iterator<Item = &'a [u8]>) -> usize {
        let mut parts = self.handoff.parts();
        let held = &mut parts.as_mut().expect("armed only with parts").held;
        let before = held.len();
        for buf in bufs {
            held.extend_from_slice(buf);
        }
        held.len() - before
    }

    fn tcp(&mut self) -> io::Result<Pin<&mut TcpStream>> {
        match self.tcp.as_mut() {
            Some(tcp) => Ok(Pin::new(tcp)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl AsyncRead for HandoffIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.tcp()?.poll_read(cx, buf)
    }
}

impl AsyncWrite for HandoffIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.holding() {
            return Poll::Ready(Ok(self.hold(std::iter::once(buf))));
        }
        self.tcp()?.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.holding() {
            return Poll::Ready(Ok(self.hold(bufs.iter().map(|b| &b[..]))));
        }
        self.tcp()?.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.holding() {
            return Poll::Ready(Ok(()));
        }
        self.tcp()?.poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.holding() {
            let tcp = self.tcp.take();
            if let Some(parts) = self.handoff.parts().as_mut() {
                parts.tcp = tcp;
            }
            return Poll::Ready(Ok(()));
        }
        self.tcp()?.poll_shutdown(cx)
    }
}

/// The connection's service: the router's, with marked responses handed off.
#[derive(Clone)]
pub(super) struct HandoffService<S> {
    inner: S,
    handoff: Arc<HandoffState>,
}

impl<S> HandoffService<S> {
    pub(super) fn new(inner: S, handoff: Arc<HandoffState>) -> Self {
        HandoffService { inner, handoff }
    }
}

impl<S, B> hyper::service::Service<Request<B>> for HandoffService<S>
where
    S: hyper::service::Service<Request<B>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = HandingOff<S::Future>;

    fn call(&self, req: Request<B>) -> Self::Future {
        let handoff = (req.version() == Version::HTTP_11).then(|| self.handoff.clone());
        HandingOff {
            inner: self.inner.call(req),
            handoff,
        }
    }
}

pin_project_lite::pin_project! {
    /// The router's answer, handed off when it is marked (and the request was HTTP/1.1).
    pub(super) struct HandingOff<F> {
        #[pin]
        inner: F,
        handoff: Option<Arc<HandoffState>>,
    }
}

impl<F, E> Future for HandingOff<F>
where
    F: Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut resp = ready!(this.inner.poll(cx))?;
        if resp.extensions_mut().remove::<HandOff>().is_none() {
            return Poll::Ready(Ok(resp));
        }
        let Some(handoff) = this.handoff.take() else {
            return Poll::Ready(Ok(resp));
        };
        let mut parts = handoff.parts();
        if parts.is_some() {
            // A second marked response on the connection: the first one's head closes
            // the connection, so this one is never written; hyper drops it.
            return Poll::Ready(Ok(resp));
        }
        let ends = Body::new(EndsAtOnce(handoff.clone()));
        *parts = Some(Box::new(Parts {
            body: std::mem::replace(resp.body_mut(), ends),
            held: Vec::new(),
            tcp: None,
        }));
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        Poll::Ready(Ok(resp))
    }
}

/// The body hyper writes for a handed-off response: none, of unknown length (so hyper
/// frames it chunked and writes only its end). Polling it arms the hold-back.
struct EndsAtOnce(Arc<HandoffState>);

impl http_body::Body for EndsAtOnce {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0.armed.store(true, Ordering::Release);
        Poll::Ready(None)
    }
}

/// A handed-off stream: its socket, hyper's held-back bytes, its body.
pub(super) struct HandedOff {
    tcp: TcpStream,
    held: Vec<u8>,
    body: Body,
}

impl HandedOff {
    /// Writes the rest of hyper's head, then the body as chunks, then the chunked end;
    /// returns when the body ended or the client left (dropping the body tells its
    /// source).
    pub(super) async fn write(self) {
        let HandedOff {
            mut tcp,
            mut held,
            mut body,
        } = self;
        let Some(head) = held.len().checked_sub(CHUNKED_END.len()) else {
            debug!(
                held = held.len(),
                "handed-off stream: hyper wrote less than its end; closing"
            );
            return;
        };
        if &held[head..] != CHUNKED_END {
            debug!("handed-off stream: hyper's last bytes were not the chunked end; closing");
            return;
        }
        held.truncate(head);
        let (mut rd, mut wr) = tcp.split();
        if wr.write_all(&held).await.is_err() {
            return;
        }
        drop(held);
        let mut scratch = [0u8; 64];
        let mut discarded = 0usize;
        loop {
            let frame = tokio::select! {
                biased;
                frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)) => frame,
                read = rd.read(&mut scratch) => match read {
                    // What the client sends after a `Connection: close` head is not read
                    // as a request (a request it pipelined before seeing the head); a
                    // client that keeps sending is cut off.
                    Ok(n) if n > 0 => {
                        discarded += n;
                        if discarded <= DISCARD_LIMIT {
                            continue;
                        }
                        debug!(discarded, "handed-off stream: the client kept sending; closing");
                        return;
                    }
                    _ => return,
                },
            };
            let data = match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => data,
                    _ => continue,
                },
                // A body error: cut the stream without its end, so the client sees it
                // broken rather than complete.
                Some(Err(e)) => {
                    debug!(error = %e, "handed-off stream: the body failed");
                    return;
                }
                None => {
                    if wr.write_all(CHUNKED_END).await.is_ok() {
                        let _ = wr.shutdown().await;
                    }
                    return;
                }
            };
            let mut size = [0u8; 18];
            let n = chunk_size_line(data.len(), &mut size);
            let mut chunk = Buf::chain(&size[..n], data).chain(&b"\r\n"[..]);
            while chunk.has_remaining() {
                match tokio::time::timeout(WRITE_STALL, wr.write_buf(&mut chunk)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        debug!(stall = ?WRITE_STALL, "handed-off stream: the client stopped reading; closing");
                        return;
                    }
                }
            }
        }
    }
}

/// Writes `len` in hex and CRLF into `out`; returns how many bytes that took.
fn chunk_size_line(len: usize, out: &mut [u8; 18]) -> usize {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
    for i in 0..digits {
        out[digits - 1 - i] = HEX[(len >> (4 * i)) & 0xF];
    }
    out[digits] = b'\r';
    out[digits + 1] = b'\n';
    digits + 2
}

#[cfg(test)]
#[path = "handoff_tests.rs"]
mod tests;
