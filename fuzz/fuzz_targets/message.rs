//! Fuzzes the JSON-RPC envelope parser and the line codec on arbitrary bytes: no
//! panic, and every message that parses re-serializes to JSON that parses back to the
//! same kind, id and method. The checks live in `tests/common/fuzz_check.rs`, shared
//! with `tests/fuzz_corpus.rs`, which replays `corpus/message/` on stable.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/fuzz_check.rs"]
mod fuzz_check;

fuzz_target!(|data: &[u8]| {
    fuzz_check::check(data);
});
