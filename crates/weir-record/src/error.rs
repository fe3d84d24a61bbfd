//! The one error type of weir-record: every way a byte sequence can fail to be a valid
//! Kafka record batch, message set or compressed stream, typed so that the broker can map
//! each to the Kafka error code a client understands. Nothing here allocates on the happy path.

use crate::compression::Compression;

/// A malformed or unsupported input. No input produces a panic; every failure is one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Fewer bytes than the structure declares or needs.
    #[error("truncated: need {needed} bytes, only {available} available")]
    Truncated { needed: usize, available: usize },
    /// A magic byte this crate does not know (Kafka's are 0, 1 and 2).
    #[error("unsupported magic byte {0}")]
    BadMagic(i8),
    /// The stored checksum does not match the bytes.
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    /// A varint longer than 5 bytes (or a varlong longer than 10), or cut short.
    #[error("malformed varint")]
    BadVarint,
    /// A length or count field that is negative, inconsistent or out of bounds.
    #[error("bad length: {0}")]
    BadLength(&'static str),
    /// A compression codec id outside 0..=4.
    #[error("unknown compression codec id {0}")]
    UnknownCodec(u8),
    /// Larger than a configured limit (a batch, or the inflated form of compressed data).
    #[error("too large: {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    /// The compressed stream itself is damaged or not in the expected format.
    #[error("corrupt {codec} data: {reason}")]
    CorruptCompressed { codec: Compression, reason: String },
    /// Structurally readable, but breaks one of Kafka's rules for records.
    #[error("invalid record: {0}")]
    InvalidRecord(&'static str),
}

/// Shorthand used throughout the crate.
pub type Result<T, E = RecordError> = std::result::Result<T, E>;

/// Checks that `buf` holds at least `needed` bytes.
#[inline]
pub(crate) fn need(buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(RecordError::Truncated {
            needed,
            available: buf.len(),
        })
    } else {
        Ok(())
    }
}
