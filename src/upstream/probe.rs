//! Finding a server's protocol era (docs/architecture.md, "Upstreams of both eras"):
//! reading the answer to mcpmux's `server/discover` probe as the 2026-07-28 spec's
//! dual-era rules say, and `mcpmux check --probe`, which starts each configured
//! server's actor just long enough to see its first session and reports what it found.
//!
//! Never keys the fallback to one error code: anything that is not a `DiscoverResult`
//! naming 2026-07-28 means "use the handshake" (unless `protocol = "modern"`).

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Era, InitInfo, UpstreamEvent, UpstreamLink};
use crate::config::{CacheScope, Config, UpstreamProtocol};
use crate::protocol::modern::{meta, MODERN_VERSION};
use crate::protocol::Message;
use crate::state::ids::UpstreamId;

/// The id of mcpmux's `server/discover` probe.
pub(crate) const DISCOVER_ID: &str = "\"mcpmux-discover\"";

/// How long a stdio server gets to answer the probe before it is taken to be a
/// legacy server that ignores unknown methods before `initialize` (capped by
/// `restart.init_timeout_ms`).
pub const STDIO_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What the probe found.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// A 2026-07-28 server; its discover result.
    Modern(InitInfo),
    /// Not (usable as) a 2026-07-28 server; why, for the log.
    Legacy(String),
}

/// Reads the answer to the `server/discover` probe.
pub(crate) fn read_discover(answer: &Message) -> Verdict {
    if let Some(err) = answer.error() {
        let err: Value = serde_json::from_str(err.get()).unwrap_or_default();
        return Verdict::Legacy(format!(
            "server/discover answered an error ({} {})",
            err["code"],
            err["message"].as_str().unwrap_or_default()
        ));
    }
    let result: Value = answer
        .result()
        .and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or_default();
    let Some(versions) = result["supportedVersions"].as_array() else {
        return Verdict::Legacy("server/discover answered without supportedVersions".into());
    };
    let versions: Vec<String> = versions
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    if !versions.iter().any(|v| v == MODERN_VERSION) {
        return Verdict::Legacy(format!(
            "the server supports {versions:?}, not {MODERN_VERSION}"
        ));
    }
    let scope = match result["cacheScope"].as_str() {
        Some("public") => CacheScope::Public,
        _ => CacheScope::Private,
    };
    Verdict::Modern(InitInfo {
        era: Era::Modern,
        supported_versions: versions,
        discover_hints: Some((result["ttlMs"].as_u64().unwrap_or(0), scope)),
        protocol_version: MODERN_VERSION.to_owned(),
        capabilities: result["capabilities"].clone(),
        server_info: result["_meta"][meta::SERVER_INFO].clone(),
        instructions: result["instructions"].as_str().map(str::to_owned),
        dual: None,
    })
}

/// What `check --probe` reports for one server.
#[derive(Debug)]
pub struct ProbeReport {
    pub name: String,
    pub protocol: UpstreamProtocol,
    pub outcome: Result<InitInfo, String>,
}

impl ProbeReport {
    /// One JSON object per server (what `check --probe` prints).
    pub fn to_json(&self) -> Value {
        match &self.outcome {
            Ok(info) if info.dual.is_some() => {
                let faces = info.dual.as_deref().expect("checked");
                let face = |f: &InitInfo| {
                    json!({
                        "version": f.protocol_version,
                        "supportedVersions": f.supported_versions,
                        "serverInfo": f.server_info,
                        "capabilities": f.capabilities,
                    })
                };
                json!({
                    "server": self.name,
                    "protocol": format!("{:?}", self.protocol).to_lowercase(),
                    "era": "dual",
                    "choice": "both eras, one session each: the 2026-07-28 face does not offer everything the initialize face does",
                    "faces": {"legacy": face(&faces.legacy), "modern": face(&faces.modern)},
                    "capabilities": info.capabilities,
                })
            }
            Ok(info) => json!({
                "server": self.name,
                "protocol": format!("{:?}", self.protocol).to_lowercase(),
                "era": match info.era { Era::Modern => "modern", Era::Legacy => "legacy" },
                "version": info.protocol_version,
                "supportedVersions": info.supported_versions,
                "serverInfo": info.server_info,
                "capabilities": info.capabilities,
            }),
            Err(why) => json!({
                "server": self.name,
                "protocol": format!("{:?}", self.protocol).to_lowercase(),
                "error": why,
            }),
        }
    }
}

/// Starts each configured server's actor, waits for its first session (or its first
/// failure), and stops it. Servers are probed one after another.
pub async fn probe_all(config: &Config) -> Vec<ProbeReport> {
    let mut reports = Vec::new();
    for (i, server) in config.servers.0.iter().enumerate() {
        let mut server = server.clone();
        server.lazy = false;
        let (tx, mut rx) = mpsc::channel(64);
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let restart = crate::config::RestartConfig {
            max_failures: 1,
            ..config.restart.clone()
        };
        let _handle = super::spawn_upstream(
            UpstreamId(i),
            server.clone(),
            restart.clone(),
            config.limits.max_message_bytes,
            UpstreamLink::new(tx),
            shutdown.clone(),
            &tracker,
        );
        let wait = Duration::from_millis(restart.init_timeout_ms.saturating_mul(2) + 1000);
        let outcome = match tokio::time::timeout(wait, first_outcome(&mut rx)).await {
            Ok(o) => o,
            Err(_) => Err(format!("no session within {} ms", wait.as_millis())),
        };
        shutdown.cancel();
        tracker.close();
        // The actor stops its server; drain its events meanwhile.
        let stop = async {
            loop {
                tokio::select! {
                    _ = tracker.wait() => break,
                    ev = rx.recv() => if ev.is_none() { tracker.wait().await; break; },
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(10), stop).await;
        reports.push(ProbeReport {
            name: server.name.clone(),
            protocol: server.protocol,
            outcome,
        });
    }
    reports
}

async fn first_outcome(
    rx: &mut mpsc::Receiver<(UpstreamId, UpstreamEvent)>,
) -> Result<InitInfo, String> {
    while let Some((_, ev)) = rx.recv().await {
        match ev {
            UpstreamEvent::Ready(info) => return Ok(info),
            UpstreamEvent::Down { reason, .. } => return Err(reason),
            UpstreamEvent::Message(..) => {}
        }
    }
    Err("the upstream actor stopped".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Message {
        Message::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_discover_result_naming_the_modern_version_is_modern() {
        let m = parse(
            r#"{"jsonrpc":"2.0","id":"mcpmux-discover","result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}},"ttlMs":5,"cacheScope":"public","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s"}}}}"#,
        );
        let Verdict::Modern(info) = read_discover(&m) else {
            panic!()
        };
        assert_eq!(info.era, Era::Modern);
        assert_eq!(info.server_info["name"], "s");
        assert_eq!(info.discover_hints, Some((5, CacheScope::Public)));
    }

    #[test]
    fn errors_and_other_versions_fall_back_to_the_handshake() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no","data":{"supported":["2027-01-01"]}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2027-01-01"]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ] {
            assert!(
                matches!(read_discover(&parse(text)), Verdict::Legacy(_)),
                "{text}"
            );
        }
    }
}
