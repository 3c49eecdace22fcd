//! What the hub tells a stateless upstream about the client a request is for
//! (docs/architecture.md, "Upstreams of both eras"): that client's capabilities
//! within what mcpmux routes, its log level, whether the client needs
//! `input_required` bridged (it has a live channel instead), and the `Mcp-Param-*`
//! headers of a `tools/call`. Whether an upstream wants this is the upstream's own
//! answer (`InitInfo::is_stateless`); everything else about its era lives in its actor.
//! Never changes a message.

use serde_json::{Map, Value};

use super::{lists, Hub, UpstreamStatus};
use crate::protocol::stateless;
use crate::protocol::{methods, Message};
use crate::state::catalog::ListKind;
use crate::state::ids::{ProxyId, UpstreamId};
use crate::state::pending::Origin;
use crate::upstream::RequestCtx;

impl Hub {
    /// The envelope facts for request `pid` to `upstream`; `None` for an upstream
    /// with sessions (its actor needs none).
    pub(super) fn request_ctx(
        &self,
        upstream: UpstreamId,
        pid: ProxyId,
        msg: &Message,
    ) -> Option<RequestCtx> {
        let slot = self.upstreams.get(upstream.0)?;
        let UpstreamStatus::Ready(info) = &slot.status else {
            return None;
        };
        if !info.is_stateless() {
            return None;
        }
        let client = match self.pending.get(pid).map(|e| &e.origin) {
            Some(Origin::Client { client, .. }) => *client,
            // mcpmux's own requests (catalog, shared reads): what it routes.
            _ => {
                return Some(RequestCtx {
                    client_capabilities: slot.declared_caps.clone(),
                    ..RequestCtx::default()
                })
            }
        };
        let init = self.clients.get(&client)?.init.as_ref()?;
        let stateless_client = init.stateless.as_ref();
        let param_headers = if msg.method() == Some(methods::TOOLS_CALL) {
            match stateless_client.and_then(|m| m.param_headers.clone()) {
                Some(forwarded) => forwarded,
                None => self.computed_param_headers(upstream, msg),
            }
        } else {
            Vec::new()
        };
        Some(RequestCtx {
            client_capabilities: within(&slot.declared_caps, &init.capabilities),
            log_level: self
                .log_levels
                .get(client)
                .and_then(lists::level_name)
                .map(str::to_owned),
            bridge_input: stateless_client.is_none(),
            for_client: true,
            param_headers,
        })
    }

    /// `Mcp-Param-*` headers for a session client's `tools/call`, from the tool's
    /// `x-mcp-header` annotations (the upstream's own tool name is in `msg`).
    fn computed_param_headers(&self, upstream: UpstreamId, msg: &Message) -> Vec<(String, String)> {
        let params: Value = msg
            .params()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or_default();
        let Some(name) = params["name"].as_str() else {
            return Vec::new();
        };
        let Some(tool) = self.catalog.own_item(upstream, ListKind::Tools, name) else {
            return Vec::new();
        };
        stateless::param_headers(&tool["inputSchema"], &params["arguments"])
    }
}

/// The capabilities of `client` that mcpmux also declares (`declared`): what the
/// upstream may ask this client for.
fn within(declared: &Value, client: &Value) -> Value {
    let mut out = Map::new();
    if let Some(d) = declared.as_object() {
        for key in d.keys() {
            if let Some(v) = client.get(key).filter(|v| v.is_object()) {
                out.insert(key.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn capabilities_are_the_clients_within_what_mcpmux_declares() {
        let declared = json!({"sampling": {}, "elicitation": {"form": {}}});
        let client = json!({"elicitation": {"form": {}, "url": {}}, "roots": {}});
        assert_eq!(
            super::within(&declared, &client),
            json!({"elicitation": {"form": {}, "url": {}}})
        );
    }
}
