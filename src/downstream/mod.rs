//! Downstream client sessions: Streamable HTTP and stdio. Each session owns its
//! socket or pipes, feeds client messages to the hub and drains its outbox.

pub mod connect;
pub mod http;
pub mod outbox;
pub mod stdio;
