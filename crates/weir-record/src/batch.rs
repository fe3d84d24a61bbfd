//! A zero-copy view of a RecordBatch v2 (Kafka's `DefaultRecordBatch`) over borrowed bytes,
//! record iteration (decompressing when the batch is compressed), and the in-place fix-ups
//! a broker makes on append (base offset, leader epoch, LogAppendTime) without re-encoding.
//! Parsing never trusts a length or count field before checking it against the bytes.

use std::borrow::Cow;

use crate::compression::{self, Compression};
use crate::crc::{crc32c, crc32c_append};
use crate::error::{need, RecordError, Result};
use crate::record::{parse_record, Record};

/// Offset (8) + length (4): the prefix every log entry of every magic starts with.
pub const LOG_OVERHEAD: usize = 12;
/// Size of a v2 batch header; the records section starts here.
pub const RECORD_BATCH_OVERHEAD: usize = 61;
/// Value of `producer_id`, `producer_epoch`, `base_sequence` when there is none.
pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;
pub const NO_SEQUENCE: i32 = -1;
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// A timestamp of -1 means "none" (v0 messages, empty batches).
pub const NO_TIMESTAMP: i64 = -1;

// Field positions, from Kafka's DefaultRecordBatch.
pub(crate) const BASE_OFFSET_AT: usize = 0;
pub(crate) const LENGTH_AT: usize = 8;
pub(crate) const PARTITION_LEADER_EPOCH_AT: usize = 12;
pub(crate) const MAGIC_AT: usize = 16;
pub(crate) const CRC_AT: usize = 17;
pub(crate) const ATTRIBUTES_AT: usize = 21;
pub(crate) const LAST_OFFSET_DELTA_AT: usize = 23;
pub(crate) const BASE_TIMESTAMP_AT: usize = 27;
pub(crate) const MAX_TIMESTAMP_AT: usize = 35;
pub(crate) const PRODUCER_ID_AT: usize = 43;
pub(crate) const PRODUCER_EPOCH_AT: usize = 51;
pub(crate) const BASE_SEQUENCE_AT: usize = 53;
pub(crate) const RECORDS_COUNT_AT: usize = 57;

const COMPRESSION_MASK: u16 = 0x07;
const TIMESTAMP_TYPE_MASK: u16 = 0x08;
const TRANSACTIONAL_MASK: u16 = 0x10;
const CONTROL_MASK: u16 = 0x20;
const DELETE_HORIZON_MASK: u16 = 0x40;

#[inline]
pub(crate) fn read_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
pub(crate) fn read_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
pub(crate) fn read_u32(b: &[u8], at: usize) -> u32 {
    read_i32(b, at) as u32
}
#[inline]
pub(crate) fn read_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// How a batch's timestamps were set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Kafka's `NO_TIMESTAMP_TYPE`: a magic 0 message carries no timestamp (its
    /// timestamp reads as -1). A v2 batch or v1 message is never this.
    NoTimestamp,
    /// The producer's timestamps (bit 3 clear).
    CreateTime,
    /// The broker's append time, stored as the batch's max timestamp (bit 3 set).
    LogAppendTime,
}

impl TimestampType {
    pub fn name(self) -> &'static str {
        match self {
            TimestampType::NoTimestamp => "NoTimestampType",
            TimestampType::CreateTime => "CreateTime",
            TimestampType::LogAppendTime => "LogAppendTime",
        }
    }
}

/// The attribute bits of a v2 batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Attributes(pub u16);

impl Attributes {
    /// Assembles attribute bits.
    pub fn new(
        compression: Compression,
        timestamp_type: TimestampType,
        transactional: bool,
        control: bool,
        delete_horizon: bool,
    ) -> Self {
        let mut a = compression.id() as u16;
        if timestamp_type == TimestampType::LogAppendTime {
            a |= TIMESTAMP_TYPE_MASK;
        }
        if transactional {
            a |= TRANSACTIONAL_MASK;
        }
        if control {
            a |= CONTROL_MASK;
        }
        if delete_horizon {
            a |= DELETE_HORIZON_MASK;
        }
        Attributes(a)
    }
    /// The codec id bits (may be an unknown id: see `compression`).
    pub fn compression_id(self) -> u8 {
        (self.0 & COMPRESSION_MASK) as u8
    }
    pub fn compression(self) -> Result<Compression> {
        Compression::from_id(self.compression_id())
    }
    pub fn timestamp_type(self) -> TimestampType {
        if self.0 & TIMESTAMP_TYPE_MASK != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    pub fn is_transactional(self) -> bool {
        self.0 & TRANSACTIONAL_MASK != 0
    }
    pub fn is_control(self) -> bool {
        self.0 & CONTROL_MASK != 0
    }
    pub fn has_delete_horizon(self) -> bool {
        self.0 & DELETE_HORIZON_MASK != 0
    }
}

/// A v2 record batch borrowed from a buffer: exactly `size_in_bytes()` bytes.
#[derive(Clone, Copy)]
pub struct RecordBatch<'a> {
    buf: &'a [u8],
}

impl std::fmt::Debug for RecordBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordBatch")
            .field("base_offset", &self.base_offset())
            .field("last_offset", &self.last_offset())
            .field("count", &self.records_count())
            .field("size", &self.size_in_bytes())
            .field("compression", &self.attributes().compression_id())
            .finish()
    }
}

impl<'a> RecordBatch<'a> {
    /// Reads the batch at the start of `buf`. Checks the length field, the magic and the
    /// record count's sign; the CRC is checked separately by `validate_crc`, so that tools can
    /// still show a damaged batch. Bytes after the batch are ignored.
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        need(buf, LOG_OVERHEAD + 5)?;
        let magic = buf[MAGIC_AT] as i8;
        if magic != 2 {
            return Err(RecordError::BadMagic(magic));
        }
        let length = read_i32(buf, LENGTH_AT);
        if length < (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32 {
            return Err(RecordError::BadLength(
                "batch length below the v2 header size",
            ));
        }
        let size = LOG_OVERHEAD + length as usize;
        need(buf, size)?;
        let batch = RecordBatch { buf: &buf[..size] };
        if batch.records_count() < 0 {
            return Err(RecordError::BadLength("negative record count"));
        }
        Ok(batch)
    }

    /// The batch's bytes, ready to be written to a log or a socket unchanged.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }
    /// Total size including the 12-byte offset and length prefix.
    pub fn size_in_bytes(&self) -> usize {
        self.buf.len()
    }
    pub fn base_offset(&self) -> i64 {
        read_i64(self.buf, BASE_OFFSET_AT)
    }
    /// The length field: size in bytes minus 12.
    pub fn batch_length(&self) -> i32 {
        read_i32(self.buf, LENGTH_AT)
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        read_i32(self.buf, PARTITION_LEADER_EPOCH_AT)
    }
    pub fn magic(&self) -> i8 {
        self.buf[MAGIC_AT] as i8
    }
    /// The stored CRC-32C.
    pub fn crc(&self) -> u32 {
        read_u32(self.buf, CRC_AT)
    }
    pub fn attributes(&self) -> Attributes {
        Attributes(read_i16(self.buf, ATTRIBUTES_AT) as u16)
    }
    pub fn last_offset_delta(&self) -> i32 {
        read_i32(self.buf, LAST_OFFSET_DELTA_AT)
    }
    /// The first record's timestamp, or the delete horizon when `has_delete_horizon`.
    pub fn base_timestamp(&self) -> i64 {
        read_i64(self.buf, BASE_TIMESTAMP_AT)
    }
    pub fn max_timestamp(&self) -> i64 {
        read_i64(self.buf, MAX_TIMESTAMP_AT)
    }
    pub fn producer_id(&self) -> i64 {
        read_i64(self.buf, PRODUCER_ID_AT)
    }
    pub fn producer_epoch(&self) -> i16 {
        read_i16(self.buf, PRODUCER_EPOCH_AT)
    }
    pub fn base_sequence(&self) -> i32 {
        read_i32(self.buf, BASE_SEQUENCE_AT)
    }
    /// The last sequence number, wrapping past `i32::MAX` to 0 as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        let base = self.base_sequence();
        if base == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let delta = self.last_offset_delta();
        let sum = base as i64 + delta as i64;
        if sum > i32::MAX as i64 {
            (sum - i32::MAX as i64 - 1) as i32
        } else {
            sum as i32
        }
    }
    pub fn records_count(&self) -> i32 {
        read_i32(self.buf, RECORDS_COUNT_AT)
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .wrapping_add(self.last_offset_delta() as i64)
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }
    pub fn compression(&self) -> Result<Compression> {
        self.attributes().compression()
    }
    pub fn timestamp_type(&self) -> TimestampType {
        self.attributes().timestamp_type()
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes().is_transactional()
    }
    pub fn is_control(&self) -> bool {
        self.attributes().is_control()
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id() != NO_PRODUCER_ID
    }
    /// The time after which a compacted tombstone or marker in this batch may be dropped.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        self.attributes()
            .has_delete_horizon()
            .then(|| self.base_timestamp())
    }
    /// The raw records section (compressed if the codec says so).
    pub fn records_bytes(&self) -> &'a [u8] {
        &self.buf[RECORD_BATCH_OVERHEAD..]
    }

    /// CRC-32C over the bytes the CRC covers (attributes to the end).
    pub fn compute_crc(&self) -> u32 {
        crc32c(&self.buf[ATTRIBUTES_AT..])
    }
    pub fn is_crc_valid(&self) -> bool {
        self.crc() == self.compute_crc()
    }
    pub fn validate_crc(&self) -> Result<()> {
        let (stored, computed) = (self.crc(), self.compute_crc());
        if stored == computed {
            Ok(())
        } else {
            Err(RecordError::CrcMismatch { stored, computed })
        }
    }

    /// The records, decompressed into a buffer of their own when the batch is compressed
    /// (bounded by `max_decompressed`); borrowed otherwise.
    pub fn records(&self, max_decompressed: usize) -> Result<Records<'a>> {
        let codec = self.compression()?;
        let count = self.records_count();
        let raw = self.records_bytes();
        let data: Cow<'a, [u8]> = if codec == Compression::None || (count == 0 && raw.is_empty()) {
            Cow::Borrowed(raw)
        } else {
            Cow::Owned(compression::decompress(codec, raw, max_decompressed)?)
        };
        Ok(Records {
            data,
            count,
            base_offset: self.base_offset(),
            base_timestamp: self.base_timestamp(),
            log_append_time: (self.timestamp_type() == TimestampType::LogAppendTime)
                .then(|| self.max_timestamp()),
        })
    }

    /// Walks every record (decompressing when needed) and checks the structure Kafka's
    /// reader checks: the count, each record's length and fields, offsets inside the batch's
    /// range, nothing left over. Returns the largest record timestamp (-1 if none).
    pub fn validate_records(&self, max_decompressed: usize) -> Result<i64> {
        let records = self.records(max_decompressed)?;
        let max_delta = crate::record::walk_records(
            records.bytes(),
            self.records_count(),
            self.last_offset_delta(),
        )?;
        Ok(if self.records_count() == 0 {
            NO_TIMESTAMP
        } else {
            self.base_timestamp().wrapping_add(max_delta)
        })
    }
}

/// The records of one batch: a buffer (borrowed, or owned after decompression) and what
/// is needed to give each record its absolute offset and timestamp.
pub struct Records<'a> {
    data: Cow<'a, [u8]>,
    count: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
}

impl Records<'_> {
    /// The uncompressed records section.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
    /// The declared count.
    pub fn count(&self) -> i32 {
        self.count
    }
    /// Iterates the records in order. After the declared count, leftover bytes are an
    /// error, as in Kafka.
    pub fn iter(&self) -> RecordIter<'_> {
        RecordIter {
            rest: &self.data,
            remaining: self.count,
            base_offset: self.base_offset,
            base_timestamp: self.base_timestamp,
            log_append_time: self.log_append_time,
            failed: false,
        }
    }
}

/// Iterator over the records of a batch; yields an error once, then stops.
pub struct RecordIter<'a> {
    rest: &'a [u8],
    remaining: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    failed: bool,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.remaining <= 0 {
            if !self.rest.is_empty() {
                self.failed = true;
                return Some(Err(RecordError::BadLength(
                    "bytes remain after the batch's declared record count",
                )));
            }
            return None;
        }
        match parse_record(
            self.rest,
            self.base_offset,
            self.base_timestamp,
            self.log_append_time,
        ) {
            Ok((record, used)) => {
                self.rest = &self.rest[used..];
                self.remaining -= 1;
                Some(Ok(record))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining.max(0) as usize + 1))
    }
}

/// Writes the timestamp type and max timestamp into a batch header (`header[..61]`);
/// whether anything changed (and so the CRC must be recomputed).
fn put_max_timestamp(header: &mut [u8], timestamp_type: TimestampType, max_timestamp: i64) -> bool {
    let batch = RecordBatch { buf: header };
    if batch.timestamp_type() == timestamp_type && batch.max_timestamp() == max_timestamp {
        return false;
    }
    let mut attrs = batch.attributes().0 & !TIMESTAMP_TYPE_MASK;
    if timestamp_type == TimestampType::LogAppendTime {
        attrs |= TIMESTAMP_TYPE_MASK;
    }
    header[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attrs.to_be_bytes());
    header[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    true
}

/// A v2 batch's header, fixed up apart from its records: a leader's append of a batch that
/// lives in a shared buffer (a produce request's), where copying every record only to change
/// a few header fields would double the bytes the append moves. The header is a copy; the
/// records stay where they are and are never changed, and the batch goes to the file as the
/// two pieces (`as_bytes`, then the records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetachedBatchHeader {
    buf: [u8; RECORD_BATCH_OVERHEAD],
}

impl DetachedBatchHeader {
    /// A copy of the header of `batch`, whose records are `batch.records_bytes()`.
    pub fn new(batch: &RecordBatch<'_>) -> Self {
        let mut buf = [0u8; RECORD_BATCH_OVERHEAD];
        buf.copy_from_slice(&batch.as_bytes()[..RECORD_BATCH_OVERHEAD]);
        DetachedBatchHeader { buf }
    }

    pub fn as_bytes(&self) -> &[u8; RECORD_BATCH_OVERHEAD] {
        &self.buf
    }

    /// Sets the base offset; outside the CRC.
    pub fn set_base_offset(&mut self, base_offset: i64) {
        self.buf[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.to_be_bytes());
    }

    /// Sets the partition leader epoch; outside the CRC.
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) {
        self.buf[PARTITION_LEADER_EPOCH_AT..PARTITION_LEADER_EPOCH_AT + 4]
            .copy_from_slice(&epoch.to_be_bytes());
    }

    /// Sets the timestamp type and max timestamp, and rewrites the CRC over the header's
    /// covered fields and `records` (the batch's records section) unless nothing changes.
    pub fn set_max_timestamp(
        &mut self,
        timestamp_type: TimestampType,
        max_timestamp: i64,
        records: &[u8],
    ) {
        if put_max_timestamp(&mut self.buf, timestamp_type, max_timestamp) {
            let crc = crc32c_append(crc32c(&self.buf[ATTRIBUTES_AT..]), records);
            self.buf[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        }
    }
}

/// A v2 batch borrowed mutably, for the fix-ups a leader makes on append. Changing offsets
/// or the leader epoch needs no new CRC (they are outside it); changing timestamps does.
pub struct RecordBatchMut<'a> {
    buf: &'a mut [u8],
}

impl<'a> RecordBatchMut<'a> {
    /// Checks the header as `RecordBatch::parse` does and borrows exactly the batch.
    pub fn parse(buf: &'a mut [u8]) -> Result<Self> {
        let size = RecordBatch::parse(buf)?.size_in_bytes();
        Ok(RecordBatchMut {
            buf: &mut buf[..size],
        })
    }
    pub fn as_batch(&self) -> RecordBatch<'_> {
        RecordBatch { buf: self.buf }
    }
    /// Sets the base offset (the last offset moves with it).
    pub fn set_base_offset(&mut self, base_offset: i64) {
        self.buf[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.to_be_bytes());
    }
    /// Sets the last offset, as Kafka's `setLastOffset`: base = last - lastOffsetDelta.
    pub fn set_last_offset(&mut self, last_offset: i64) {
        let delta = self.as_batch().last_offset_delta() as i64;
        self.set_base_offset(last_offset - delta);
    }
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) {
        self.buf[PARTITION_LEADER_EPOCH_AT..PARTITION_LEADER_EPOCH_AT + 4]
            .copy_from_slice(&epoch.to_be_bytes());
    }
    /// Sets the timestamp type and max timestamp (LogAppendTime: the append time), and
    /// rewrites the CRC, unless nothing changes.
    pub fn set_max_timestamp(&mut self, timestamp_type: TimestampType, max_timestamp: i64) {
        if put_max_timestamp(self.buf, timestamp_type, max_timestamp) {
            self.update_crc();
        }
    }
    /// Sets the producer id, epoch and base sequence and rewrites the CRC: what an
    /// idempotent producer does to a queued batch after bumping its epoch (Kafka's
    /// `reopenAndRewriteProducerState`).
    pub fn set_producer_state(&mut self, producer_id: i64, epoch: i16, base_sequence: i32) {
        self.buf[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&producer_id.to_be_bytes());
        self.buf[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2].copy_from_slice(&epoch.to_be_bytes());
        self.buf[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4]
            .copy_from_slice(&base_sequence.to_be_bytes());
        self.update_crc();
    }
    /// Recomputes and stores the CRC.
    pub fn update_crc(&mut self) {
        let crc = crc32c(&self.buf[ATTRIBUTES_AT..]);
        self.buf[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    }
}
