//! Fuzzes the broker's request decoding (`weir_broker::wire::decode_request`): the
//! frame's API key, version and correlation id, the request header, and the body of every
//! API and version Weir serves, exactly as a connection decodes what a client sends:
//! `cargo +nightly fuzz run request_decode`. The regression corpus in
//! `fuzz/corpus/request_decode` is replayed by `cargo test -p weir-broker`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = weir_broker::wire::decode_request(bytes::Bytes::copy_from_slice(data));
});
