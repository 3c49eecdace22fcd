//! Pure decisions, no I/O and no tokio: every operation takes its inputs (and `now`)
//! and returns effects for the hub to carry out. Unit- and property-tested.

pub mod cache;
pub mod capabilities;
pub mod catalog;
pub mod ids;
pub mod pending;
pub mod subscriptions;
pub mod views;
