//! mcpmux: a local aggregating proxy for the Model Context Protocol.
//!
//! # Layout
//!
//! - [`protocol`]: bytes ↔ JSON-RPC envelopes, the bounded line codec, the one list
//!   of interpreted methods, the 2026-07-28 era's `_meta` and validation. No state.
//! - [`state`]: pure decisions (subscription registry, pending requests, cache rules,
//!   catalog). No I/O; every operation takes `now` and returns effects.
//! - [`hub`]: one task owning the state; turns events into effects; never awaits a
//!   client or an upstream (`try_send` only).
//! - [`upstream`]: one actor per configured server, owning its transport and its era.
//! - [`downstream`]: client sessions (Streamable HTTP, stdio, the `connect` bridge)
//!   and their outboxes.
//! - [`observe`]: the operator's view (`/metrics`, `/status`, the status page,
//!   `mcpmux status`), rendered from snapshots it is handed; never names the hub.
//! - [`fleet`]: several instances over NATS (leases, updates, reads, MRTR retries); its
//!   actor talks to the hub only through the hub's client link and fleet channels.
//! - [`run`]: wiring for `serve` and `stdio`: config → upstream actors, hub, fleet,
//!   reload.
//! - [`config`]: the TOML file, validated.
//! - [`telemetry`]: OpenTelemetry over OTLP/HTTP (spans, two histograms), W3C trace
//!   context in `_meta`; off unless configured.
//! - [`fdlimit`]: the open-file limit, raised at startup; the connections' share of it.
//! - [`signals`]: SIGINT/SIGTERM (stop; a second one exits at once) and SIGHUP.
//! - [`oauth`]: mcpmux as the OAuth client of HTTP upstreams that ask for it
//!   (discovery, registration, PKCE login, refresh, the token store).
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
//! Dependencies point one way: the hub imports `downstream`, `upstream`, `observe` and
//! `fleet` (their link and event types, outboxes, actor handles, the snapshot type);
//! `downstream`, `upstream` and `observe` never import the hub (checked by
//! `.ci/structure.sh`). `fleet` reaches the hub through the `ClientLink` it is given.

pub mod config;
pub mod downstream;
pub mod fdlimit;
pub mod fleet;
pub mod hub;
pub mod import;
pub mod oauth;
pub mod observe;
pub mod protocol;
pub mod run;
pub mod signals;
pub mod state;
pub mod telemetry;
pub mod upstream;
