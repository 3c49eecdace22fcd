//! stub
mod common;
#[path = "interop/harness.rs"]
mod harness;
#[test]
fn stub() {
    harness::ensure_peers();
}
