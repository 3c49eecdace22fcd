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
}

impl Request {
    pub fn new(method: Method, uri: Uri, headers: HeaderMap) -> Self {
        Request {
            method,
            uri,
            headers,
            body: Bytes::new(),
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
        let resp = client
            .request(req.build())
            .await
            .map_err(|e| SendError::new(&req.uri, "error sending request", Some(e.into())))?;
        let Some(next) = redirect(&req, resp.status(), resp.headers()) else {
            return Ok(resp.map(|b| b.map_err(BoxError::from).boxed_unsync()));
        };
        tracing::debug!(from = %req.uri, to = %next.uri, status = %resp.status(), "following a redirect");
        req = next;
    }
    Err(SendError::new(&req.uri, "too many redirects", None))
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
}
