//! Fuzzes the log-entry and record decoders (v0, v1, v2, every codec) with arbitrary
//! bytes: `cargo +nightly fuzz run batch_decode`. The regression corpus in
//! `fuzz/corpus/batch_decode` is replayed by `cargo test -p weir-record`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    weir_record::fuzzing::exercise_decoder(data, 1 << 20);
});
