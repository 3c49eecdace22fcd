//! Downstream client sessions: Streamable HTTP and stdio. Each session owns its
//! socket or pipes, feeds client messages to the hub through its [`link::ClientLink`]
//! and drains its outbox. Never imports the hub: the event types it sends are its own.

pub mod connect;
pub mod http;
pub(crate) mod lane;
pub mod link;
pub mod outbox;
pub mod stdio;
pub mod stdio_pipes;
