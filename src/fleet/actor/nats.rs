//! NATS plumbing of the fleet actor (docs/architecture.md, "Fleet"): per-key update
//! subscriptions forwarded to the actor, the interest lookup of one key, and opening
//! the KV buckets.
//!
//! Owns no state of its own: every function works on what the actor passes in. Never
//! decides a role and never talks to the hub.

use async_nats::jetstream::kv;
use futures_util::{StreamExt, TryStreamExt};
use tokio::sync::mpsc;

use super::{keys, FleetInbound};

/// A task forwarding one NATS subscription to the actor; dropping it ends the task and
/// so the subscription (async-nats unsubscribes a dropped subscriber).
pub(super) struct Relay(pub(super) tokio::task::JoinHandle<()>);

impl Drop for Relay {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Subscribes to `subject` and forwards its messages as updates (`None`: the
/// subscription failed; the key is then followed without updates until the next role
/// change, as when NATS drops them).
pub(super) async fn relay(
    client: &async_nats::Client,
    subject: String,
    inbound: &mpsc::Sender<FleetInbound>,
) -> Option<Relay> {
    let mut sub = match client.subscribe(subject).await {
        Ok(sub) => sub,
        Err(e) => {
            tracing::warn!(error = %e, "fleet: cannot subscribe to a key's updates");
            return None;
        }
    };
    let tx = inbound.clone();
    Some(Relay(tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            if tx.send(FleetInbound::Update(m)).await.is_err() {
                return;
            }
        }
    })))
}

/// Whether an instance other than `me` has a live interest entry for `kid`. Only that
/// key's entries are looked at (`KID.INSTANCE`, listed by subject filter), not the whole
/// bucket.
pub(super) async fn others_interested(interest: &kv::Store, kid: &str, me: &str) -> bool {
    let mine = keys::interest_key(kid, me);
    let filter = format!("{}{}", interest.prefix, keys::interest_key(kid, "*"));
    let Ok(mut subjects) = interest.stream.info_with_subjects(filter).await else {
        return false;
    };
    while let Ok(Some((subject, _))) = subjects.try_next().await {
        let Some(name) = subject.strip_prefix(interest.prefix.as_str()) else {
            continue;
        };
        if name == mine {
            continue;
        }
        // A deleted or purged entry leaves a marker on its subject: only a put counts.
        if let Ok(Some(e)) = interest.entry(name).await {
            if e.operation == kv::Operation::Put {
                return true;
            }
        }
    }
    false
}

/// Opens the bucket, creating it when absent.
pub(super) async fn bucket_or_create(
    js: &async_nats::jetstream::Context,
    config: kv::Config,
) -> Result<kv::Store, String> {
    match js.get_key_value(config.bucket.clone()).await {
        Ok(store) => Ok(store),
        Err(_) => js.create_key_value(config).await.map_err(|e| e.to_string()),
    }
}
