//! The HTTP client of an upstream's MCP traffic (docs/architecture.md, "Upstream HTTP
//! client"): hyper's pooled HTTP/1.1 client with rustls, with the pool, TLS roots,
//! connect timeout, proxies and redirects the earlier reqwest client had, without
//! reqwest's per-request layers (a tenth of mcpmux's CPU per routed request,
//! BENCHMARKS.md "Upstream HTTP client").
//!
//! - Proxies: when `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` (less `NO_PROXY`) apply to the
//!   upstream's URL, its requests go through reqwest, which speaks to proxies; every
//!   other upstream is reached directly.
//! - Redirects: followed up to [`MAX_REDIRECTS`] times, as browsers and reqwest do: 307
//!   and 308 keep the method and body, 303 (and 301/302 after a POST) become a GET
//!   without a body; credentials are not sent to another origin.
//!
//! Owns no task and no state beyond its connection pool. Never reads a body: the
//! response goes back with its body unread, boxed the same way on both paths.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioExecutor;

/// Any error of a body or a request.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// A response body, whichever path carried it.
pub(crate) type Body = UnsyncBoxBody<Bytes, BoxError>;
/// A response, its body unread.
pub(crate) type Response = hyper::Response<Body>;

/// Redirects followed for one request before it fails.
pub const MAX_REDIRECTS: usize = 10;

type Direct =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// One upstream's pooled client.
#[derive(Clone)]
pub(crate) enum HttpClient {
    /// Straight to the server.
    Direct(Direct),
    /// A proxy from the environment applies to this upstream's URL.
    Proxied(reqwest::Client),
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HttpClient::Direct(_) => "HttpClient::Direct",
            HttpClient::Proxied(_) => "HttpClient::Proxied",
        })
    }
}

impl HttpClient {
    /// The client for `url`: direct unless a proxy from the environment applies to it.
    ///
    /// # Errors
    /// The TLS roots or the proxied client could not be set up.
    pub fn new(url: &Uri, connect_timeout: Duration, idle: Duration) -> Result<Self, String> {
        Self::with_proxies(&Matcher::from_env(), url, connect_timeout, idle)
    }

    /// The client for `url` given the proxies `proxies` names.
    ///
    /// # Errors
    /// As [`HttpClient::new`].
    pub fn with_proxies(
        proxies: &Matcher,
        url: &Uri,
        connect_timeout: Duration,
        idle: Duration,
    ) -> Result<Self, String> {
        if proxies.intercept(url).is_some() {
            let mut builder = reqwest::Client::builder();
            if let Some(p) = proxies.intercept(url) {
                let mut proxy = reqwest::Proxy::all(p.uri().to_string())
                    .map_err(|e| format!("bad proxy for {url}: {e}"))?;
                if let Some(auth) = p.basic_auth() {
                    proxy = proxy.custom_http_auth(auth.clone());
                }
                builder = builder.proxy(proxy);
            }
            let client = builder
                .connect_timeout(connect_timeout)
                .pool_idle_timeout(idle)
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
            return Ok(HttpClient::Proxied(client));
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(provider)
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(idle)
            .build(https);
        Ok(HttpClient::Direct(client))
    }

    /// Sends `req`, following redirects.
    ///
    /// # Errors
    /// The request could not be sent or its answer not received, or too many redirects.
    pub async fn send(&self, req: Request) -> Result<Response, SendError> {
        match self {
            HttpClient::Proxied(client) => send_proxied(client, req).await,
            HttpClient::Direct(client) => send_direct(client, req).await,
        }
    }
}

/// One request: method, absolute URI, headers and a body held whole.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Sent once more when the connection breaks before any answer began
    /// ([`broke_midway`]): only for a request a server may get twice.
    pub repeatable: bool,
}

impl Request {
    pub fn new(method: Method, uri: Uri, headers: HeaderMap) -> Self {
        Request {
            method,
            uri,
            headers,
            body: Bytes::new(),
            repeatable: false,
        }
    }

    /// Adds (never replaces) a header.
    #[must_use]
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    #[must_use]
    pub fn body(mut self, body: Bytes) -> Self {
        self.body = body;
        self
    }

    /// Marks it safe to send twice (`methods::safe_to_repeat`).
    #[must_use]
    pub fn repeatable(mut self, yes: bool) -> Self {
        self.repeatable = yes;
        self
    }

    fn build(&self) -> hyper::Request<Full<Bytes>> {
        let mut req = hyper::Request::new(Full::new(self.body.clone()));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// Why a request got no response.
#[derive(Debug)]
pub(crate) struct SendError {
    uri: Uri,
    source: Option<BoxError>,
    what: &'static str,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.what, self.uri)
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl SendError {
    fn new(uri: &Uri, what: &'static str, source: Option<BoxError>) -> Self {
        SendError {
            uri: uri.clone(),
            source,
            what,
        }
    }
}

async fn send_direct(client: &Direct, mut req: Request) -> Result<Response, SendError> {
    for _ in 0..=MAX_REDIRECTS {
        let resp = match client.request(req.build()).await {
            Ok(resp) => resp,
            Err(e) if req.repeatable && broke_midway(&e) => {
                // Most often a pooled connection the server closed (its keep-alive
                // timer) as the request went out: once more, on another connection.
                tracing::debug!(uri = %req.uri, error = %e, "connection broke before the answer; sending again");
                client.request(req.build()).await.map_err(|e| {
                    SendError::new(&req.uri, "error sending request", Some(e.into()))
                })?
            }
            Err(e) => {
                return Err(SendError::new(
                    &req.uri,
                    "error sending request",
                    Some(e.into()),
                ))
            }
        };
        let Some(next) = redirect(&req, resp.status(), resp.headers()) else {
            return Ok(resp.map(|b| b.map_err(BoxError::from).boxed_unsync()));
        };
        tracing::debug!(from = %req.uri, to = %next.uri, status = %resp.status(), "following a redirect");
        req = next;
    }
    Err(SendError::new(&req.uri, "too many redirects", None))
}

/// Whether a request failed because an established connection broke (reset, or closed
/// before the answer's head) rather than because the server could not be reached.
fn broke_midway(e: &hyper_util::client::legacy::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    if e.is_connect() {
        return false;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if matches!(io.kind(), ConnectionReset | ConnectionAborted | BrokenPipe) {
                return true;
            }
        }
        source = s.source();
    }
    false
}

async fn send_proxied(client: &reqwest::Client, req: Request) -> Result<Response, SendError> {
    let url = req.uri.to_string();
    let resp = client
        .request(req.method, url)
        .headers(req.headers)
        .body(req.body)
        .send()
        .await
        .map_err(|e| SendError::new(&req.uri, "error sending request", Some(e.into())))?;
    let resp: hyper::Response<reqwest::Body> = resp.into();
    Ok(resp.map(|b| b.map_err(BoxError::from).boxed_unsync()))
}

/// The request a redirect answer asks for, if it is one to follow.
fn redirect(req: &Request, status: StatusCode, headers: &HeaderMap) -> Option<Request> {
    let keeps_method = match status {
        StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT => true,
        StatusCode::SEE_OTHER => req.method == Method::GET || req.method == Method::HEAD,
        StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND => req.method != Method::POST,
        _ => return None,
    };
    let location = headers.get(hyper::header::LOCATION)?.to_str().ok()?;
    let uri = resolve(&req.uri, location)?;
    let mut next = req.clone();
    if !keeps_method {
        next.method = Method::GET;
        next.body = Bytes::new();
        next.headers.remove(hyper::header::CONTENT_TYPE);
        next.headers.remove(hyper::header::CONTENT_LENGTH);
    }
    if uri.scheme() != req.uri.scheme() || uri.authority() != req.uri.authority() {
        for h in [
            hyper::header::AUTHORIZATION,
            hyper::header::COOKIE,
            hyper::header::PROXY_AUTHORIZATION,
        ] {
            next.headers.remove(h);
        }
    }
    next.uri = uri;
    Some(next)
}

/// `location` resolved against `base` (absolute, or relative as URLs are).
fn resolve(base: &Uri, location: &str) -> Option<Uri> {
    let base = url::Url::parse(&base.to_string()).ok()?;
    let next = base.join(location).ok()?;
    matches!(next.scheme(), "http" | "https")
        .then(|| next.as_str().parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(uri: &str) -> Request {
        let mut headers = HeaderMap::new();
        headers.insert(
            hyper::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer t"),
        );
        headers.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Request::new(Method::POST, uri.parse().unwrap(), headers).body(Bytes::from_static(b"{}"))
    }

    fn located(to: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(hyper::header::LOCATION, HeaderValue::from_str(to).unwrap());
        h
    }

    #[test]
    fn a_307_keeps_the_post_and_its_body() {
        let req = post("http://a.example/mcp");
        let next = redirect(&req, StatusCode::TEMPORARY_REDIRECT, &located("/mcp/")).unwrap();
        assert_eq!(next.uri, "http://a.example/mcp/");
        assert_eq!(next.method, Method::POST);
        assert_eq!(&next.body[..], b"{}");
        assert!(next.headers.contains_key(hyper::header::AUTHORIZATION));
    }

    #[test]
    fn a_303_or_a_302_after_a_post_becomes_a_get_without_body() {
        let req = post("http://a.example/mcp");
        let next = redirect(&req, StatusCode::SEE_OTHER, &located("/other")).unwrap();
        assert_eq!(next.method, Method::GET);
        assert!(next.body.is_empty());
        assert!(!next.headers.contains_key(hyper::header::CONTENT_TYPE));
        let next = redirect(&req, StatusCode::FOUND, &located("/other")).unwrap();
        assert_eq!(next.method, Method::GET);
        let get = Request::new(
            Method::GET,
            "http://a.example/s".parse().unwrap(),
            HeaderMap::new(),
        );
        let next = redirect(&get, StatusCode::FOUND, &located("s2")).unwrap();
        assert_eq!(
            (next.method, next.uri),
            (Method::GET, "http://a.example/s2".parse::<Uri>().unwrap())
        );
    }

    #[test]
    fn credentials_stay_with_their_origin() {
        let req = post("http://a.example/mcp");
        let next = redirect(
            &req,
            StatusCode::PERMANENT_REDIRECT,
            &located("https://b.example/mcp"),
        )
        .unwrap();
        assert!(!next.headers.contains_key(hyper::header::AUTHORIZATION));
        assert_eq!(next.method, Method::POST);
    }

    #[test]
    fn other_statuses_and_bad_locations_are_not_followed() {
        let req = post("http://a.example/mcp");
        assert!(redirect(&req, StatusCode::OK, &located("/x")).is_none());
        assert!(redirect(&req, StatusCode::TEMPORARY_REDIRECT, &HeaderMap::new()).is_none());
        assert!(redirect(&req, StatusCode::TEMPORARY_REDIRECT, &located("ftp://x/")).is_none());
    }

    /// A loopback server whose connections number `breaks` and up are answered 200,
    /// and whose first `breaks` are reset after reading a few bytes; its URL and the
    /// count of connections it accepted.
    async fn breaking_server(
        breaks: usize,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering::SeqCst;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let n = count.fetch_add(1, SeqCst);
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 8];
                    if n < breaks {
                        // Unread bytes left behind: closing resets the connection.
                        let _ = s.read(&mut buf).await;
                        return;
                    }
                    while !seen.ends_with(b"\r\n\r\n{}") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => seen.extend_from_slice(&buf[..k]),
                        }
                    }
                    let answer =
                        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
                    let _ = s.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, accepted)
    }

    #[tokio::test]
    async fn only_a_repeatable_request_is_sent_again_when_its_connection_breaks() {
        use std::sync::atomic::Ordering::SeqCst;
        let timeout = Duration::from_secs(10);
        let (url, accepted) = breaking_server(1).await;
        let client = HttpClient::new(&url.parse().unwrap(), timeout, timeout).unwrap();
        let resp = client.send(post(&url).repeatable(true)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(accepted.load(SeqCst), 2, "sent again on a new connection");

        let (url, accepted) = breaking_server(1).await;
        let client = HttpClient::new(&url.parse().unwrap(), timeout, timeout).unwrap();
        let e = client.send(post(&url)).await.unwrap_err();
        assert!(e.to_string().contains("error sending request"), "{e}");
        assert_eq!(
            accepted.load(SeqCst),
            1,
            "a request that may not be repeated is not"
        );

        // Twice broken: the second failure is the answer.
        let (url, accepted) = breaking_server(2).await;
        let client = HttpClient::new(&url.parse().unwrap(), timeout, timeout).unwrap();
        assert!(client.send(post(&url).repeatable(true)).await.is_err());
        assert_eq!(accepted.load(SeqCst), 2);
    }

    #[test]
    fn only_requests_without_effects_are_safe_to_repeat() {
        use crate::protocol::methods::safe_to_repeat;
        for m in [
            "tools/list",
            "resources/read",
            "server/discover",
            "ping",
            "prompts/get",
        ] {
            assert!(safe_to_repeat(m), "{m}");
        }
        for m in [
            "tools/call",
            "initialize",
            "sampling/createMessage",
            "subscriptions/listen",
        ] {
            assert!(!safe_to_repeat(m), "{m}");
        }
    }
}
