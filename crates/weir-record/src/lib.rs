//! # weir-record
//!
//! Kafka's record formats, byte for byte: the bytes every other part of Weir moves.
//!
//! - [`RecordBatch`]: a zero-copy view of a v2 batch, with CRC-32C validation and record
//!   iteration ([`Record`]: offset, timestamp, key, value, headers), decompressing when
//!   needed; [`RecordBatchMut`] for a broker's in-place fix-ups.
//! - [`LegacyMessage`]: v0/v1 messages and compressed wrappers, and
//!   [`legacy::convert_to_v2`].
//! - [`BatchBuilder`]: Kafka's `MemoryRecordsBuilder`, with its size estimate.
//! - [`compression`]: gzip, snappy (xerial and raw), lz4 (Kafka's frame), zstd, always
//!   bounded when inflating.
//! - [`LogEntries`]: walk a buffer of entries of any magic, stopping at a torn tail.
//!
//! This crate does no I/O and has no async: it works on byte slices and vectors. Every
//! malformed input gives a [`RecordError`]; none may panic.

pub mod batch;
pub mod builder;
pub mod compression;
pub mod crc;
pub mod entry;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod legacy;
pub mod record;
pub mod varint;

pub use batch::{
    Attributes, DetachedBatchHeader, RecordBatch, RecordBatchMut, Records, TimestampType,
    LOG_OVERHEAD, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
    NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};
pub use builder::{BatchBuilder, BatchHeader, BuiltBatch, CompressionRatioEstimator};
pub use compression::{Compression, CompressionConfig};
pub use entry::{EntryError, EntryRecords, LogEntries, LogEntry};
pub use error::{RecordError, Result};
pub use legacy::{LegacyMessage, LegacyRecords};
pub use record::{ControlRecordType, EndTransactionMarker, Header, Headers, Record};
