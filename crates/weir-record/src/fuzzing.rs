//! The decoder workout shared by the cargo-fuzz target (`fuzz/`), the committed regression
//! corpus replayed by `cargo test`, and the property tests: walk every entry of arbitrary
//! bytes, check CRCs, decode every record and header. It must never panic.

use crate::entry::LogEntries;

/// Decodes everything decodable in `data`; returns how many records were read.
pub fn exercise_decoder(data: &[u8], max_decompressed: usize) -> usize {
    let mut n = 0;
    for (_, entry) in LogEntries::new(data).flatten() {
        let _ = entry.is_crc_valid();
        let _ = entry.last_offset();
        let Ok(records) = entry.records(max_decompressed) else {
            continue;
        };
        for record in records.iter().flatten() {
            n += 1;
            for h in record.headers.iter() {
                std::hint::black_box(h);
            }
        }
    }
    n
}
