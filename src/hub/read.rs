//! `resources/read` through the cache: hits answered locally, concurrent misses for
//! one key sharing one upstream read, results stored only under the rules of
//! [`crate::state::cache`]. Reads of URIs nobody holds go upstream as plain requests.

use bytes::Bytes;

use super::Hub;
use crate::protocol::methods;
use crate::protocol::{code, Message, RawId};
use crate::state::cache::ReadPlan;
use crate::state::ids::{ClientId, SubKey};
use crate::state::pending::Origin;

impl Hub {
    pub(super) fn on_read(&mut self, client: ClientId, id: RawId, msg: Message) {
        let Some(uri) = self.uri_param_or_reply(client, &id, &msg) else {
            return;
        };
        let Some(key) = self.uri_key_or_reply(client, &id, &uri) else {
            return;
        };
        let (upstream, upstream_uri) = (key.upstream, key.uri.to_string());
        // Only reads of watched URIs are shared or cached; a request with a progress
        // token keeps its own stream of progress, so it goes on its own.
        if !self.subs.is_active(&key) || methods::progress_token(msg.params()).is_some() {
            return self.forward_request(client, id, msg);
        }
        if self.upstream_ready(upstream).is_none() {
            let why = self.unavailable(upstream);
            return self.reply_error(client, &id, code::UPSTREAM_UNAVAILABLE, &why);
        }
        match self.cache.read(&key, (client, id.clone())) {
            ReadPlan::Hit(result) => {
                let bytes = response_bytes(&id, "result", &result);
                self.push_response_bytes(client, id, bytes);
            }
            ReadPlan::Joined => {}
            ReadPlan::Fetch { generation } => {
                let origin = Origin::Read { key, generation };
                let pid = self
                    .pending
                    .register(upstream, origin)
                    .expect("internal ids are unique");
                let mut msg = msg;
                if upstream_uri != uri {
                    super::routing::set_param(&mut msg, &["uri"], &upstream_uri);
                }
                msg.set_id(&RawId::from_u64(pid.0));
                self.dispatch_upstream(upstream, pid, &msg);
            }
        }
    }

    /// Answers every waiter of a shared read with `Ok(result)` or `Err(error object)`
    /// (both raw JSON text), each under its own id; stores a success if allowed.
    pub(super) fn finish_read(
        &mut self,
        key: &SubKey,
        generation: u64,
        outcome: Result<&str, &str>,
    ) {
        let still_active = self.subs.is_active(key);
        let stored = outcome.ok().map(std::sync::Arc::<str>::from);
        let waiters = self.cache.complete(key, generation, stored, still_active);
        let (member, body) = match outcome {
            Ok(r) => ("result", r),
            Err(e) => ("error", e),
        };
        for (client, id) in waiters {
            let bytes = response_bytes(&id, member, body);
            self.push_response_bytes(client, id, bytes);
        }
    }
}

/// `{"jsonrpc":"2.0","id":<id>,"<member>":<body>}` without re-encoding `body`.
fn response_bytes(id: &RawId, member: &str, body: &str) -> Bytes {
    let mut s = String::with_capacity(40 + id.as_json().len() + body.len());
    s.push_str(r#"{"jsonrpc":"2.0","id":"#);
    s.push_str(id.as_json());
    s.push_str(",\"");
    s.push_str(member);
    s.push_str("\":");
    s.push_str(body);
    s.push('}');
    Bytes::from(s)
}
