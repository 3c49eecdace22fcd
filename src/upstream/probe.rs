//! Finding a server's protocol era (docs/architecture.md, "Upstreams of both eras"):
//! reading the answer to mcpmux's `server/discover` probe as the 2026-07-28 spec's
//! dual-era rules say, and `mcpmux check --probe`, which starts each configured
//! server's actor just long enough to see its first session and reports what it found.
//!
//! The rule ([`read_discover`], [`probe`]; both transports use it):
//! - a `DiscoverResult` whose `supportedVersions` names 2026-07-28: a 2026-07-28 server;
//! - a recognized 2026-07-28 error is evidence of a 2026-07-28 server, so the probe
//!   asks once more, as the spec says ("retry with a supported version"; mcpmux speaks
//!   one): -32022 (unsupported version) whose `data.supported` names 2026-07-28, or
//!   -32020 (header mismatch) / -32021 (missing client capability). A second such
//!   answer falls back like any other;
//! - anything else (another error, -32022 naming only versions mcpmux does not speak,
//!   an error status, silence, other versions): "use the handshake", or a failed
//!   session with `protocol = "modern"`.
//!
//! Never keys the fallback to one error code: only a `DiscoverResult` makes a session
//! 2026-07-28, and every other answer still ends in the handshake.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Era, InitInfo, UpstreamEvent, UpstreamLink};
use crate::config::{CacheScope, Config, UpstreamProtocol};
use crate::protocol::stateless::{code, meta, MODERN_VERSION};
use crate::protocol::Message;
use crate::state::ids::UpstreamId;

/// The id of mcpmux's `server/discover` probe.
pub(crate) const DISCOVER_ID: &str = "\"mcpmux-discover\"";

/// How long a stdio server gets to answer the probe before it is taken to be a
/// legacy server that ignores unknown methods before `initialize` (capped by
/// `restart.init_timeout_ms`).
pub const STDIO_PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// How often the probe asks again after an answer that is evidence of a 2026-07-28
/// server without being its `DiscoverResult`.
pub(crate) const DISCOVER_RETRIES: u32 = 1;

/// What one answer to the probe says.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// A 2026-07-28 server; its discover result.
    Modern(InitInfo),
    /// A recognized 2026-07-28 error: the server is of that era; ask again. Why, for
    /// the log.
    Retry(String),
    /// Not (usable as) a 2026-07-28 server; why, for the log.
    Legacy(String),
}

/// Reads the answer to the `server/discover` probe.
pub(crate) fn read_discover(answer: &Message) -> Verdict {
    if let Some(err) = answer.error() {
        let err: Value = serde_json::from_str(err.get()).unwrap_or_default();
        let why = format!(
            "server/discover answered an error ({} {})",
            err["code"],
            err["message"].as_str().unwrap_or_default()
        );
        let names_ours = err["data"]["supported"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v.as_str() == Some(MODERN_VERSION)));
        return match err["code"].as_i64() {
            Some(code::UNSUPPORTED_VERSION) if names_ours => Verdict::Retry(why),
            Some(code::HEADER_MISMATCH | code::MISSING_CAPABILITY) => Verdict::Retry(why),
            _ => Verdict::Legacy(why),
        };
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

/// One exchange of the probe over a transport: send `server/discover` (with the id
/// [`DISCOVER_ID`]) and read its answer with [`read_discover`].
pub(crate) trait Discover {
    /// # Errors
    /// The transport failed (the session cannot go on).
    async fn discover(&mut self) -> Result<Verdict, String>;
}

/// What the probe decided for a session.
#[derive(Debug)]
pub(crate) enum Probed {
    /// A 2026-07-28 server; its discover result.
    Modern(InitInfo),
    /// Use the `initialize` handshake. `unanswered`: the probe got no answer in time
    /// (a slow server may still answer it during the handshake).
    Legacy { unanswered: bool },
    /// The session fails: the transport failed, or `protocol = "modern"` and the
    /// server is not.
    Failed(String),
}

/// The era probe of one session (the rule in the module header), within `wait`.
/// `protocol` is the server's setting (`legacy` never gets here).
pub(crate) async fn probe(
    name: &str,
    protocol: UpstreamProtocol,
    wait: Duration,
    link: &mut impl Discover,
) -> Probed {
    let ask = async {
        let mut retries = 0;
        loop {
            match link.discover().await? {
                Verdict::Retry(why) if retries < DISCOVER_RETRIES => {
                    retries += 1;
                    tracing::debug!(upstream = %name, %why, "a 2026-07-28 error to server/discover; asking again");
                }
                Verdict::Retry(why) => return Ok(Verdict::Legacy(why)),
                v => return Ok(v),
            }
        }
    };
    let (verdict, unanswered) = match tokio::time::timeout(wait, ask).await {
        Ok(Ok(v)) => (v, false),
        Ok(Err(e)) => return Probed::Failed(e),
        Err(_) => {
            let why = format!(
                "no answer to server/discover within {} ms",
                wait.as_millis()
            );
            (Verdict::Legacy(why), true)
        }
    };
    match verdict {
        Verdict::Modern(info) => Probed::Modern(info),
        Verdict::Legacy(why) | Verdict::Retry(why) if protocol == UpstreamProtocol::Modern => {
            Probed::Failed(format!(
                "not a 2026-07-28 server (protocol = \"modern\"): {why}"
            ))
        }
        Verdict::Legacy(why) | Verdict::Retry(why) => {
            tracing::debug!(upstream = %name, %why, "no 2026-07-28 answer; using the initialize handshake");
            Probed::Legacy { unanswered }
        }
    }
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
            // `check` never opens a browser: a server that needs a login says so.
            crate::oauth::TokenStore::new(&config.auth)
                .ok()
                .map(|s| crate::oauth::OAuthCtx {
                    store: std::sync::Arc::new(s),
                    interactive: false,
                    logins: None,
                }),
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
            UpstreamEvent::Down { reason, .. } | UpstreamEvent::NeedsLogin { reason } => {
                return Err(reason)
            }
            UpstreamEvent::Message(..) | UpstreamEvent::Messages(_) => {}
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
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2027-01-01"]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        ] {
            assert!(
                matches!(read_discover(&parse(text)), Verdict::Legacy(_)),
                "{text}"
            );
        }
    }

    #[test]
    fn modern_errors_are_evidence_of_a_modern_server() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no","data":{"supported":["2027-01-01","2026-07-28"],"requested":"x"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"Header mismatch"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32021,"message":"capability"}}"#,
        ] {
            assert!(
                matches!(read_discover(&parse(text)), Verdict::Retry(_)),
                "{text}"
            );
        }
    }

    /// Answers the probe from a script, one answer per exchange.
    struct Script(Vec<&'static str>, u32);

    impl Discover for Script {
        async fn discover(&mut self) -> Result<Verdict, String> {
            self.1 += 1;
            match self.0.is_empty() {
                true => Err("the server closed its stdout".into()),
                false => Ok(read_discover(&parse(self.0.remove(0)))),
            }
        }
    }

    const UNSUPPORTED: &str = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28"],"requested":"2026-07-28"}}}"#;
    const DISCOVERED: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}}"#;

    async fn run(protocol: UpstreamProtocol, script: Vec<&'static str>) -> (Probed, u32) {
        let mut s = Script(script, 0);
        let p = probe("s", protocol, Duration::from_secs(5), &mut s).await;
        (p, s.1)
    }

    #[tokio::test]
    async fn a_32022_naming_the_modern_version_is_asked_again() {
        let (p, asked) = run(UpstreamProtocol::Auto, vec![UNSUPPORTED, DISCOVERED]).await;
        assert!(matches!(p, Probed::Modern(_)), "{p:?}");
        assert_eq!(asked, 2);
    }

    #[tokio::test]
    async fn modern_errors_twice_fall_back_or_fail() {
        let (p, asked) = run(UpstreamProtocol::Auto, vec![UNSUPPORTED, UNSUPPORTED]).await;
        assert!(matches!(p, Probed::Legacy { unanswered: false }), "{p:?}");
        assert_eq!(asked, 2);
        let (p, _) = run(UpstreamProtocol::Modern, vec![UNSUPPORTED, UNSUPPORTED]).await;
        assert!(
            matches!(p, Probed::Failed(ref why) if why.contains("-32022")),
            "{p:?}"
        );
    }

    #[tokio::test]
    async fn other_errors_are_asked_once() {
        let refused =
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#;
        let (p, asked) = run(UpstreamProtocol::Auto, vec![refused, DISCOVERED]).await;
        assert!(matches!(p, Probed::Legacy { unanswered: false }), "{p:?}");
        assert_eq!(asked, 1);
        let (p, _) = run(UpstreamProtocol::Auto, vec![]).await;
        assert!(matches!(p, Probed::Failed(_)), "{p:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_is_legacy_and_unanswered() {
        struct Silent;
        impl Discover for Silent {
            async fn discover(&mut self) -> Result<Verdict, String> {
                std::future::pending().await
            }
        }
        let p = probe(
            "s",
            UpstreamProtocol::Auto,
            Duration::from_secs(3),
            &mut Silent,
        )
        .await;
        assert!(matches!(p, Probed::Legacy { unanswered: true }), "{p:?}");
    }
}
