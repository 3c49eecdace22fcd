//! `mcpmux status [--url URL]`: reads a running daemon's `/status` and prints it as a
//! terminal table (docs/architecture.md, "Operating mcpmux").
//!
//! Owns only the table layout and the exit decision. Never talks MCP; never changes
//! the daemon.

use serde_json::Value;

/// What `mcpmux status` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Running, every upstream up (or idle until its first client).
    AllUp,
    /// Running, with the names of upstreams that are down or starting.
    Degraded(Vec<String>),
}

/// The `/status` URL of a daemon given by its base URL or its MCP endpoint URL.
///
/// # Errors
/// The URL does not parse.
pub fn status_url(url: &str) -> Result<reqwest::Url, String> {
    let mut u = reqwest::Url::parse(url).map_err(|e| format!("bad URL `{url}`: {e}"))?;
    u.set_path("/status");
    u.set_query(None);
    Ok(u)
}

/// Fetches the status document.
///
/// # Errors
/// The daemon cannot be reached, or it did not answer with a status document.
pub async fn fetch(url: &reqwest::Url, token: Option<&str>) -> Result<Value, String> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let mut req = client.get(url.clone());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| format!("mcpmux is not running at {url} ({e})"))?;
    let status = resp.status();
    if !status.is_success() {
        let body: Value = resp.json().await.unwrap_or_default();
        return Err(refusal(
            url.as_str(),
            status.as_u16(),
            token.is_some(),
            &body,
        ));
    }
    resp.json()
        .await
        .map_err(|e| format!("{url} did not answer with a status document: {e}"))
}

/// The variable `mcpmux status` and `mcpmux reload` take the daemon's bearer token
/// from when no `--token-env NAME` is given (before the config's `auth_token_env`).
pub const TOKEN_ENV: &str = "MCPMUX_TOKEN";

/// The message for a daemon's refusal of `status` or `reload` (HTTP `code`): a 401
/// says how to pass a token, a 403 the guard's own reason; `body` is the answer's JSON
/// (the guard's JSON-RPC error, or `/reload`'s `{"error": …}`).
pub fn refusal(url: &str, code: u16, token_sent: bool, body: &Value) -> String {
    let reason = body["error"]["message"]
        .as_str()
        .or_else(|| body["error"].as_str())
        .unwrap_or("no reason given");
    match code {
        401 if token_sent => format!(
            "{url} refused the bearer token (HTTP 401): it must be the value of the \
             variable the daemon's [listen].auth_token_env names"
        ),
        401 => format!(
            "{url} needs a bearer token (HTTP 401): set {TOKEN_ENV} to it, or pass \
             --token-env NAME (the variable holding it) or --config with the daemon's \
             config (its [listen].auth_token_env)"
        ),
        403 => format!("{url} refused the request (HTTP 403): {reason}"),
        _ => format!("{url} answered HTTP {code}: {reason}"),
    }
}

/// Renders the status document as text tables.
pub fn render(s: &Value) -> String {
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String], widths: &[usize]| {
        let row: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(row.join("  ").trim_end());
        out.push('\n');
    };
    let table = |out: &mut String, head: &[&str], rows: Vec<Vec<String>>| {
        let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        line(
            out,
            &head.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
            &widths,
        );
        for r in rows {
            line(out, &r, &widths);
        }
    };
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    out.push_str(&format!(
        "mcpmux {}: {} clients\n\n",
        text(&s["version"]),
        text(&s["clientsTotal"])
    ));
    let profiles = s["profiles"].as_array().cloned().unwrap_or_default();
    if profiles.len() > 1 {
        table(
            &mut out,
            &["PROFILE", "CLIENTS"],
            profiles
                .iter()
                .map(|p| {
                    let name = p["profile"].as_str().unwrap_or("(default endpoint)");
                    vec![name.to_owned(), text(&p["clients"])]
                })
                .collect(),
        );
    }
    let ups = s["upstreams"].as_array().cloned().unwrap_or_default();
    table(
        &mut out,
        &[
            "UPSTREAM", "STATE", "ERA", "RESTARTS", "REQUESTS", "ERRORS", "REASON",
        ],
        ups.iter()
            .map(|u| {
                vec![
                    text(&u["name"]),
                    text(&u["state"]),
                    text(&u["era"]),
                    text(&u["restarts"]),
                    text(&u["requests"]),
                    text(&u["errors"]),
                    text(&u["reason"]),
                ]
            })
            .collect(),
    );
    let sub = &s["subscriptions"];
    let cache = &s["cache"];
    out.push_str(&format!(
        "\nsubscriptions: {} URIs held upstream, {} holders; {} client subscribes, {} upstream, {} saved\n",
        text(&sub["urisHeld"]),
        text(&sub["holders"]),
        text(&sub["clientSubscribes"]),
        text(&sub["upstreamSubscribes"]),
        text(&sub["upstreamSubscribesSaved"]),
    ));
    out.push_str(&format!(
        "cache: {} hits, {} joined, {} misses (hit ratio {}), {} upstream reads saved, {} entries\n",
        text(&cache["hits"]),
        text(&cache["joined"]),
        text(&cache["misses"]),
        text(&cache["hitRatio"]),
        text(&cache["upstreamReadsSaved"]),
        text(&cache["entries"]),
    ));
    let uris = s["topUris"].as_array().cloned().unwrap_or_default();
    if !uris.is_empty() {
        out.push('\n');
        table(
            &mut out,
            &["URI", "HOLDERS"],
            uris.iter()
                .map(|u| vec![text(&u["uri"]), text(&u["holders"])])
                .collect(),
        );
    }
    let warnings = s["warnings"].as_array().cloned().unwrap_or_default();
    if !warnings.is_empty() {
        out.push_str("\nrecent warnings:\n");
        for w in warnings.iter().rev().take(5) {
            out.push_str(&format!("  {}\n", text(&w["text"])));
        }
    }
    out
}

/// Whether every upstream is up (idle ones count as fine: they start on demand).
pub fn outcome(s: &Value) -> Outcome {
    let bad: Vec<String> = s["upstreams"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|u| !matches!(u["state"].as_str(), Some("up" | "idle")))
        .map(|u| u["name"].as_str().unwrap_or("?").to_owned())
        .collect();
    if bad.is_empty() {
        Outcome::AllUp
    } else {
        Outcome::Degraded(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_status_url_is_found_from_either_form() {
        assert_eq!(
            status_url("http://127.0.0.1:7878/mcp").unwrap().as_str(),
            "http://127.0.0.1:7878/status"
        );
        assert_eq!(
            status_url("http://127.0.0.1:7878").unwrap().as_str(),
            "http://127.0.0.1:7878/status"
        );
    }

    #[test]
    fn a_down_upstream_degrades_and_is_shown() {
        let s = json!({"version": "0", "clientsTotal": 1, "upstreams": [
            {"name": "a", "state": "up", "era": "legacy", "restarts": 0, "requests": 3, "errors": 0, "reason": null},
            {"name": "b", "state": "down", "era": null, "restarts": 1, "requests": 0, "errors": 0, "reason": "exited"}],
            "subscriptions": {}, "cache": {}, "topUris": [], "warnings": []});
        assert_eq!(outcome(&s), Outcome::Degraded(vec!["b".into()]));
        let text = render(&s);
        assert!(
            text.contains("UPSTREAM") && text.contains("exited"),
            "{text}"
        );
    }
}
