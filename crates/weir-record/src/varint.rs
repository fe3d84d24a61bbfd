//! Zigzag varints and varlongs as Kafka writes them (`ByteUtils.writeVarint` and friends):
//! zigzag-encode, then LEB128 with 7 bits per byte, low bits first. Decoding accepts at most
//! 5 bytes for an int and 10 for a long, as Kafka does, and never reads past the slice.

use crate::error::{RecordError, Result};

/// Zigzag-encodes a 32-bit value.
#[inline]
pub fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

/// Zigzag-encodes a 64-bit value.
#[inline]
pub fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Number of bytes `encode_varint(v)` writes.
#[inline]
pub fn varint_size(v: i32) -> usize {
    let z = zigzag32(v);
    // 1 byte per started group of 7 bits; 0 still takes a byte.
    let bits = 32 - (z | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Number of bytes `encode_varlong(v)` writes.
#[inline]
pub fn varlong_size(v: i64) -> usize {
    let z = zigzag64(v);
    let bits = 64 - (z | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Appends the zigzag varint form of `v`.
#[inline]
pub fn encode_varint(v: i32, out: &mut Vec<u8>) {
    let mut z = zigzag32(v);
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Appends the zigzag varlong form of `v`.
#[inline]
pub fn encode_varlong(v: i64, out: &mut Vec<u8>) {
    let mut z = zigzag64(v);
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Reads a zigzag varint from the front of `buf`; returns the value and the bytes used.
#[inline]
pub fn decode_varint(buf: &[u8]) -> Result<(i32, usize)> {
    // Fast path: most record fields (attributes, small deltas, short lengths) fit one byte.
    if let Some(&b) = buf.first() {
        if b < 0x80 {
            let z = b as u32;
            return Ok((((z >> 1) as i32) ^ -((z & 1) as i32), 1));
        }
    }
    let mut z: u32 = 0;
    for (i, &b) in buf.iter().take(5).enumerate() {
        z |= ((b & 0x7f) as u32).wrapping_shl(7 * i as u32);
        if b < 0x80 {
            return Ok((((z >> 1) as i32) ^ -((z & 1) as i32), i + 1));
        }
    }
    Err(RecordError::BadVarint)
}

/// Reads a zigzag varlong from the front of `buf`; returns the value and the bytes used.
#[inline]
pub fn decode_varlong(buf: &[u8]) -> Result<(i64, usize)> {
    if let Some(&b) = buf.first() {
        if b < 0x80 {
            let z = b as u64;
            return Ok((((z >> 1) as i64) ^ -((z & 1) as i64), 1));
        }
    }
    let mut z: u64 = 0;
    for (i, &b) in buf.iter().take(10).enumerate() {
        z |= ((b & 0x7f) as u64).wrapping_shl(7 * i as u32);
        if b < 0x80 {
            return Ok((((z >> 1) as i64) ^ -((z & 1) as i64), i + 1));
        }
    }
    Err(RecordError::BadVarint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        // Values and bytes from Kafka's ByteUtilsTest.
        let cases: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (-65, &[0x81, 0x01]),
            (8191, &[0xfe, 0x7f]),
            (-8192, &[0xff, 0x7f]),
            (8192, &[0x80, 0x80, 0x01]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for &(v, bytes) in cases {
            let mut out = Vec::new();
            encode_varint(v, &mut out);
            assert_eq!(out, bytes, "encoding {v}");
            assert_eq!(varint_size(v), bytes.len());
            assert_eq!(decode_varint(bytes).unwrap(), (v, bytes.len()));
        }
    }

    #[test]
    fn too_long_and_truncated_are_errors() {
        assert_eq!(decode_varint(&[0x80; 6]), Err(RecordError::BadVarint));
        assert_eq!(decode_varint(&[0x80, 0x80]), Err(RecordError::BadVarint));
        assert_eq!(decode_varint(&[]), Err(RecordError::BadVarint));
        assert_eq!(decode_varlong(&[0xff; 11]), Err(RecordError::BadVarint));
        assert_eq!(decode_varlong(&[]), Err(RecordError::BadVarint));
    }

    proptest! {
        #[test]
        fn varint_round_trip(v: i32, tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut out = Vec::new();
            encode_varint(v, &mut out);
            prop_assert_eq!(out.len(), varint_size(v));
            out.extend_from_slice(&tail);
            prop_assert_eq!(decode_varint(&out).unwrap(), (v, varint_size(v)));
        }

        #[test]
        fn varlong_round_trip(v: i64, tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut out = Vec::new();
            encode_varlong(v, &mut out);
            prop_assert_eq!(out.len(), varlong_size(v));
            out.extend_from_slice(&tail);
            prop_assert_eq!(decode_varlong(&out).unwrap(), (v, varlong_size(v)));
        }

        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = decode_varint(&bytes);
            let _ = decode_varlong(&bytes);
        }
    }
}
