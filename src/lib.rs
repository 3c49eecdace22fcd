//! mcpmux: a local aggregating proxy for the Model Context Protocol.
//!
//! # Layout
//!
//! - [`protocol`]: bytes ↔ JSON-RPC envelopes, the bounded line codec, the one list
//!   of interpreted methods. No state.
//! - [`state`]: pure decisions (subscription registry, pending requests, cache rules).
//!   No I/O; every operation takes `now` and returns effects.
//! - [`hub`]: one task owning the state; turns events into effects; never awaits a
//!   client or an upstream (`try_send` only).
//! - [`upstream`]: one actor per configured server, owning its transport.
//! - [`downstream`]: client sessions (Streamable HTTP, stdio) and their outboxes.
//! - [`config`]: the TOML file, validated.
//! - [`fdlimit`]: the open-file limit, raised at startup; the connections' share of it.
//! - [`import`]: `mcpmux import`, host JSON configs (Claude Desktop, Cursor, VS Code,
//!   Windsurf) → an mcpmux config. Used by the command only.
//!
//! # Task graph
//!
//! ```text
//! client sessions ──ClientEvent──────────▶ ┌──────────────────────┐ ──Outbound (outbox push)──▶ client writers
//!   (ClientLink)                           │ hub: owns the state  │
//! upstream actors ──(id, UpstreamEvent)───▶ │ (pure state+effects) │ ──UpstreamCmd (try_send)──▶ upstream actors
//!   (UpstreamLink)                         └──────────────────────┘
//! ```
//!
//! Dependencies point one way: the hub imports `downstream` and `upstream` (their link
//! and event types, outboxes, actor handles); neither imports the hub.

pub mod config;
pub mod downstream;
pub mod fdlimit;
pub mod fleet;
pub mod hub;
pub mod import;
pub mod observe;
pub mod protocol;
pub mod run;
pub mod state;
pub mod upstream;
