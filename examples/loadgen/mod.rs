//! The load generator's harness, shared by `examples/loadgen.rs` (the measured runs)
//! and `tests/bench_smoke.rs` (the same scenarios at tiny sizes, counts only).
//!
//! Layout: [`client`] (HTTP and stdio MCP clients, the GET-stream receiver),
//! [`proxy`] (mcpmux in-process or as `mcpmux serve`), [`raw`] (the no-MCP SSE
//! baseline), [`scenarios`] (the measurements), [`memory`] (RSS of `mcpmux serve`), [`peer`] (npm `mcp-proxy`),
//! [`fleet`] (three `mcpmux serve` over NATS vs one) with [`fleet_peers`] (nats-server
//! and the HTTP-mode scripted upstream, shared with `tests/common/fleet.rs`),
//! [`stats`] (percentiles, formatting), [`otel`] (tracing on or off, spans counted), [`relay`] and [`drive`] (helpers for the stdio
//! measurements).
#![allow(dead_code)] // The smoke test uses a subset.

pub mod client;
pub mod drive;
pub mod fleet;
pub mod fleet_peers;
pub mod memory;
pub mod otel;
pub mod peer;
pub mod proxy;
pub mod raw;
pub mod relay;
pub mod scenarios;
pub mod stats;
