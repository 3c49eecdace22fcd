//! The OTLP exporter's HTTP client: mcpmux's reqwest client behind opentelemetry-http's
//! trait. The SDK exports from its own thread; each request is spawned on mcpmux's
//! runtime and awaited from there.
//!
//! Never: follows redirects or waits longer than [`TIMEOUT`] for a collector.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// Longest an export may take.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub(super) struct ExportClient {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl ExportClient {
    pub(super) fn new(runtime: tokio::runtime::Handle) -> anyhow::Result<ExportClient> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(ExportClient { http, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for ExportClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let task = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let resp = http
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = resp.bytes().await?;
            let mut out = Response::builder().status(status);
            if let Some(h) = out.headers_mut() {
                *h = headers;
            }
            Ok::<_, HttpError>(out.body(body)?)
        });
        task.await?
    }
}
