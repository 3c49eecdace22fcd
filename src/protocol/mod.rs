//! Wire format only: bytes ↔ JSON-RPC envelopes, the line codec, and the one list of
//! methods the proxy interprets. No tasks, no state, no I/O.

pub mod codec;
pub mod listen;
mod members;
pub mod message;
pub mod methods;
pub mod shape;
pub mod stateless;
pub mod tag;
pub mod tool_headers;

pub use members::{nests_deeper_than, object_members, push_key, MAX_NESTING};
pub use message::{code, Incoming, Kind, Message, ParseError, Raw, RawId};

/// Protocol versions of the handshake era that mcpmux speaks, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The version mcpmux offers when a client asks for one it does not know.
pub const LATEST_VERSION: &str = SUPPORTED_VERSIONS[0];

/// The only version that allows JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";

/// Why a session (a client that did not name a 2026-07-28 version in `_meta`) gets no
/// answer to `server/discover`: the versions it can speak, and what to send instead.
pub fn session_discover_refusal() -> String {
    let newest = SUPPORTED_VERSIONS[0];
    let oldest = SUPPORTED_VERSIONS[SUPPORTED_VERSIONS.len() - 1];
    format!(
        "server/discover is not supported: mcpmux speaks protocol versions {oldest} to \
         {newest}; send initialize"
    )
}

/// Picks the version to answer a client's `initialize` with: its own when supported,
/// otherwise our latest (the spec says the server replies with one it supports).
pub fn negotiate_version(requested: &str) -> &'static str {
    SUPPORTED_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST_VERSION)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sessions_discover_is_refused_naming_the_versions_it_speaks() {
        assert_eq!(
            super::session_discover_refusal(),
            "server/discover is not supported: mcpmux speaks protocol versions 2024-11-05 to \
             2025-11-25; send initialize"
        );
    }
}
