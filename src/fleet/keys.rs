//! Names on NATS: one key id per (upstream name, URI), the subjects and KV keys built
//! from it, and the instance id. Pure; the same on every instance of a fleet.

use sha2::{Digest, Sha256};

/// A key's id: the first 128 bits of SHA-256 over `upstream name \0 URI`, in hex
/// (subjects and KV keys allow only a few characters; URIs may hold anything).
pub fn key_id(upstream_name: &str, uri: &str) -> String {
    let mut h = Sha256::new();
    h.update(upstream_name.as_bytes());
    h.update([0]);
    h.update(uri.as_bytes());
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The notification an owner publishes on a key's update subject once its upstream
/// confirmed the subscription: a follower drops the reads it kept of the key (the owner
/// may have made them before it was told of changes) and tells its holders nothing.
pub const WATCHED: &str = "notifications/mcpmux/fleet_watched";

/// The subject an owner publishes a key's updates on.
pub fn update_subject(fleet: &str, kid: &str) -> String {
    format!("mcpmux.{fleet}.upd.{kid}")
}

/// The subject followers send reads of a key to (the owner answers).
pub fn read_subject(fleet: &str, kid: &str) -> String {
    format!("mcpmux.{fleet}.read.{kid}")
}

/// Every read subject of the fleet (what an owner subscribes to).
pub fn read_wildcard(fleet: &str) -> String {
    format!("mcpmux.{fleet}.read.*")
}

/// The subject an instance serves MRTR retries of the requests it holds on.
pub fn retry_subject(fleet: &str, instance: &str) -> String {
    format!("mcpmux.{fleet}.mrtr.{instance}")
}

/// The bucket of the fleet's shared secrets (no expiry): the MRTR state key.
pub fn secrets_bucket(fleet: &str) -> String {
    format!("mcpmux_{fleet}_secrets")
}

/// The secrets bucket's entry holding the MRTR state key (32 bytes).
pub const STATE_KEY_ENTRY: &str = "mrtr-state-key";

/// The leases bucket.
pub fn lease_bucket(fleet: &str) -> String {
    format!("mcpmux_{fleet}_leases")
}

/// The interest bucket.
pub fn interest_bucket(fleet: &str) -> String {
    format!("mcpmux_{fleet}_interest")
}

/// The presence bucket: one entry per live instance, keyed by its id.
pub fn instances_bucket(fleet: &str) -> String {
    format!("mcpmux_{fleet}_instances")
}

/// An instance's interest entry for a key.
pub fn interest_key(kid: &str, instance: &str) -> String {
    format!("{kid}.{instance}")
}

/// A fresh instance id: letters and digits only.
pub fn new_instance_id() -> String {
    let n: u64 = rand::random();
    format!("i{n:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_are_stable_distinct_and_subject_safe() {
        let a = key_id("files", "file:///a b?c=d");
        assert_eq!(a, key_id("files", "file:///a b?c=d"));
        assert_ne!(a, key_id("other", "file:///a b?c=d"));
        assert_ne!(key_id("a", "bc"), key_id("ab", "c"), "the separator counts");
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
