//! The raw baseline: a minimal axum/hyper SSE writer with no MCP logic. Each GET gets a
//! bounded channel; a broadcaster sends the same framed event bytes (`id:` + `data:`
//! with the JSON mcpmux would forward) to every connected stream. The body drains all
//! queued chunks into one write, as mcpmux's SSE body does, so both sides use the same
//! write batching and the difference is the proxy's own work.

use std::convert::Infallible;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bytes::{Bytes, BytesMut};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::unix_nanos;

type Streams = Arc<Mutex<Vec<mpsc::Sender<Bytes>>>>;

/// The raw SSE server, running on the runtime given to [`RawServer::start`].
pub struct RawServer {
    pub url: String,
    rt: Handle,
    streams: Streams,
    stop: CancellationToken,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl RawServer {
    /// Binds `127.0.0.1:0`; each stream's channel holds `queue` chunks.
    ///
    /// # Errors
    /// Bind failure.
    pub fn start(rt: &Handle, queue: usize) -> Result<RawServer> {
        use axum::serve::ListenerExt;
        let _guard = rt.enter();
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let addr = listener.local_addr()?;
        let streams: Streams = Arc::default();
        let stop = CancellationToken::new();
        let app = Router::new()
            .route("/sse", get(stream))
            .with_state((streams.clone(), queue));
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        rt.spawn(
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.clone().cancelled_owned())
                .into_future(),
        );
        Ok(RawServer {
            url: format!("http://{addr}/sse"),
            rt: rt.clone(),
            streams,
            stop,
        })
    }

    /// Streams connected so far.
    pub fn connected(&self) -> usize {
        self.streams.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Sends `count` events, each stamped with its creation time, to every stream, as
    /// fast as the channels accept them (waiting when one is full, so nothing is lost).
    /// `batch` events are framed into one chunk per send (1 = one send per event).
    /// Runs on the server runtime; returns when every event is queued.
    pub async fn broadcast(&self, uri: &str, count: u64, first_id: u64, batch: u64) -> Result<()> {
        let senders = self
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let uri = uri.to_owned();
        let batch = batch.max(1);
        self.rt
            .spawn(async move {
                let mut i = 0;
                while i < count {
                    let mut chunk = BytesMut::new();
                    for j in i..(i + batch).min(count) {
                        let frame = format!(
                            "id: {}\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\
                             \"params\":{{\"_meta\":{{\"t\":{}}},\"uri\":\"{uri}\"}}}}\n\n",
                            first_id + j,
                            unix_nanos()
                        );
                        chunk.extend_from_slice(frame.as_bytes());
                    }
                    let chunk = chunk.freeze();
                    for tx in &senders {
                        let _ = tx.send(chunk.clone()).await;
                    }
                    i += batch;
                    if i % 256 < batch {
                        tokio::task::yield_now().await;
                    }
                }
            })
            .await?;
        Ok(())
    }

    /// Drops every stream's sender (ending the responses).
    pub fn close_streams(&self) {
        self.streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

async fn stream(State((streams, queue)): State<(Streams, usize)>) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(queue);
    streams.lock().unwrap_or_else(|p| p.into_inner()).push(tx);
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        let first = rx.recv().await?;
        let Ok(second) = rx.try_recv() else {
            return Some((Ok::<Bytes, Infallible>(first), rx));
        };
        let mut buf = BytesMut::with_capacity(first.len() * 8);
        buf.extend_from_slice(&first);
        buf.extend_from_slice(&second);
        while let Ok(more) = rx.try_recv() {
            buf.extend_from_slice(&more);
        }
        Some((Ok(buf.freeze()), rx))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_default()
}

/// How long the raw server waits for clients to connect before giving up.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
