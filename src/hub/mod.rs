//! The hub: the single owner of the proxy's shared state.

pub mod handle;

pub use handle::{AdmitError, HubEvent, HubGone, HubHandle, HubStats};
