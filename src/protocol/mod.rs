//! Wire format only: bytes ↔ JSON-RPC envelopes, the line codec, and the one list of
//! methods the proxy interprets. No tasks, no state, no I/O.

pub mod codec;
pub mod listen;
pub mod message;
pub mod methods;
pub mod modern;
pub mod tag;
pub mod tool_headers;

pub use message::{
    code, nests_deeper_than, Incoming, Kind, Message, ParseError, RawId, MAX_NESTING,
};

/// Protocol versions of the handshake era that mcpmux speaks, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The version mcpmux offers when a client asks for one it does not know.
pub const LATEST_VERSION: &str = SUPPORTED_VERSIONS[0];

/// The only version that allows JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";

/// Picks the version to answer a client's `initialize` with: its own when supported,
/// otherwise our latest (the spec says the server replies with one it supports).
pub fn negotiate_version(requested: &str) -> &'static str {
    SUPPORTED_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST_VERSION)
}
