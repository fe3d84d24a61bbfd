//! Checksums: CRC-32C (Castagnoli) for v2 batches and producer snapshots, hardware
//! accelerated through the `crc32c` crate; plain CRC-32 (IEEE) for legacy v0/v1 messages.

/// CRC-32C of `data`, as stored in a v2 batch header.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a CRC-32C over more bytes.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// IEEE CRC-32 of `data`, as stored in a legacy message.
#[inline]
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_values() {
        // The standard check value of each polynomial over "123456789".
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xe306_9283);
    }
}
