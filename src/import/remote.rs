//! `mcp-remote URL` host entries (run by `npx`/`bunx`, or as `mcp-remote` itself) become a
//! native `url =` server: mcp-remote exists to log in to an OAuth server per host; mcpmux
//! logs in itself, once for all hosts (docs/architecture.md, "OAuth toward upstreams").
//!
//! Maps mcp-remote's `--header "Name: value"`, `--transport` and the `client_id` of
//! `--static-oauth-client-info`; every other flag gets a note. Pure: no I/O (an `@file`
//! argument is not read) and never writes a client secret into the config.

use std::collections::BTreeMap;

/// What an mcp-remote entry becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    pub url: String,
    pub headers: BTreeMap<String, String>,
    /// From `--static-oauth-client-info`: a pre-registered client.
    pub client_id: Option<String>,
    /// One line per argument that was not carried over as it was.
    pub notes: Vec<String>,
}

/// `None` when the entry does not run mcp-remote; `Err` (a sentence) when it does but
/// cannot become a native server.
pub fn recognize(command: &str, args: &[String]) -> Option<Result<Remote, String>> {
    let program = command
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(command)
        .trim_end_matches(".cmd")
        .trim_end_matches(".exe");
    let rest: &[String] = if is_mcp_remote(program) {
        args
    } else if matches!(program, "npx" | "bunx" | "pnpx") {
        // Launcher flags first (`-y`, `--yes`, `-q`, `--package X`), then the package.
        let mut i = 0;
        while i < args.len() && args[i].starts_with('-') {
            i += if matches!(args[i].as_str(), "-p" | "--package") {
                2
            } else {
                1
            };
        }
        match args.get(i) {
            Some(pkg) if is_mcp_remote(pkg) => &args[i + 1..],
            _ => return None,
        }
    } else {
        return None;
    };
    Some(parse(rest))
}

fn is_mcp_remote(s: &str) -> bool {
    s == "mcp-remote" || s.starts_with("mcp-remote@")
}

fn parse(args: &[String]) -> Result<Remote, String> {
    let mut url = None;
    let mut headers = BTreeMap::new();
    let mut client_id = None;
    let mut notes = Vec::new();
    let mut i = 0;
    let value = |i: usize, flag: &str| -> Result<String, String> {
        args.get(i + 1)
            .cloned()
            .ok_or_else(|| format!("not imported: mcp-remote's `{flag}` has no value"))
    };
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "--header" => {
                let h = value(i, a)?;
                let Some((name, v)) = h.split_once(':') else {
                    return Err(format!(
                        "not imported: mcp-remote `--header {h:?}` is not `Name: value`"
                    ));
                };
                let (name, v) = (name.trim(), v.trim());
                if !crate::config::is_header_name(name) || v.contains(['\r', '\n', '\0']) {
                    return Err(format!(
                        "not imported: mcp-remote `--header {h:?}` is no valid HTTP header"
                    ));
                }
                headers.insert(name.to_owned(), v.to_owned());
                i += 2;
            }
            "--transport" => {
                let t = value(i, a)?;
                match t.as_str() {
                    "http-only" => {}
                    "http-first" => notes.push("`--transport http-first`: mcpmux speaks Streamable HTTP only (no HTTP+SSE fallback)".to_owned()),
                    "sse-only" | "sse-first" => {
                        return Err(format!(
                            "not imported: mcp-remote `--transport {t}` uses the deprecated HTTP+SSE transport, which mcpmux does not speak"
                        ))
                    }
                    other => notes.push(format!("`--transport {other}` not understood; Streamable HTTP is used")),
                }
                i += 2;
            }
            "--static-oauth-client-info" => {
                let info = value(i, a)?;
                match serde_json::from_str::<serde_json::Value>(&info) {
                    Ok(v) => {
                        client_id = v["client_id"]
                            .as_str()
                            .filter(|c| !c.trim().is_empty())
                            .map(str::to_owned);
                        if client_id.is_none() {
                            notes.push("`--static-oauth-client-info` has no client_id; not imported".to_owned());
                        }
                        if v.get("client_secret").is_some() {
                            notes.push("the client_secret of `--static-oauth-client-info` is not written: put it in an environment variable and name it in `oauth.client_secret_env`".to_owned());
                        }
                    }
                    Err(_) => notes.push(format!(
                        "`--static-oauth-client-info {info}` is not inline JSON (a file?); not imported: set `oauth.client_id` by hand"
                    )),
                }
                i += 2;
            }
            "--static-oauth-client-metadata"
            | "--resource"
            | "--host"
            | "--auth-timeout"
            | "--ignore-tool" => {
                let v = value(i, a)?;
                notes.push(format!(
                    "`{a} {v}` not imported (mcpmux logs in by itself; see `[servers.NAME.oauth]`)"
                ));
                i += 2;
            }
            "--allow-http" | "--debug" | "--silent" | "--enable-proxy" => {
                notes.push(format!("`{a}` not imported (not needed by mcpmux)"));
                i += 1;
            }
            _ if a.starts_with('-') => {
                notes.push(format!("`{a}` not understood; not imported"));
                i += 1;
            }
            _ if url.is_none() => {
                url = Some(a.to_owned());
                i += 1;
            }
            _ if a.parse::<u16>().is_ok() => {
                notes.push(format!(
                    "callback port {a} not imported (mcpmux picks a free loopback port)"
                ));
                i += 1;
            }
            _ => {
                notes.push(format!("argument `{a}` not understood; not imported"));
                i += 1;
            }
        }
    }
    let url = url.ok_or("not imported: mcp-remote without a server URL")?;
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://") || url.starts_with("${")) {
        return Err(format!(
            "not imported: mcp-remote's URL must start with http:// or https:// (got {url:?})"
        ));
    }
    Ok(Remote {
        url,
        headers,
        client_id,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn npx_mcp_remote_with_headers_and_client_info() {
        let r = recognize(
            "npx",
            &s(&[
                "-y",
                "mcp-remote@0.1.29",
                "https://mcp.example/mcp",
                "8080",
                "--header",
                "Authorization: Bearer ${TOKEN}",
                "--transport",
                "http-only",
                "--static-oauth-client-info",
                r#"{"client_id":"abc","client_secret":"s"}"#,
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.url, "https://mcp.example/mcp");
        assert_eq!(r.headers["Authorization"], "Bearer ${TOKEN}");
        assert_eq!(r.client_id.as_deref(), Some("abc"));
        assert!(r.notes.iter().any(|n| n.contains("callback port 8080")));
        assert!(r.notes.iter().any(|n| n.contains("client_secret")));
        assert!(!r.notes.iter().any(|n| n.contains("\"s\"")));
    }

    #[test]
    fn direct_command_and_what_is_not_mcp_remote() {
        let r = recognize("/usr/local/bin/mcp-remote", &s(&["https://x/mcp"]))
            .unwrap()
            .unwrap();
        assert_eq!(r.url, "https://x/mcp");
        assert!(recognize(
            "npx",
            &s(&["-y", "@modelcontextprotocol/server-everything"])
        )
        .is_none());
        assert!(recognize("node", &s(&["mcp-remote", "https://x"])).is_none());
    }

    #[test]
    fn sse_only_and_no_url_are_refused() {
        let e = recognize(
            "npx",
            &s(&["mcp-remote", "https://x/sse", "--transport", "sse-only"]),
        );
        assert!(e.unwrap().unwrap_err().contains("HTTP+SSE"));
        assert!(recognize("npx", &s(&["mcp-remote"])).unwrap().is_err());
    }
}
