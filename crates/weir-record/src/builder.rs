//! `BatchBuilder`: Kafka's `MemoryRecordsBuilder` for v2 batches. Records are appended in
//! their uncompressed form; `build` writes the header and CRC, compressing the records
//! section when a codec is set. `has_room_for` uses Kafka's size estimate, including the
//! adaptive compression-ratio guess (`CompressionRatioEstimator`), so a producer fills
//! batches the way the Java client does. The first record always fits.

use crate::batch::{
    Attributes, TimestampType, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
    NO_SEQUENCE, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};
use crate::compression::{self, Compression, CompressionConfig};
use crate::crc::crc32c;
use crate::error::{RecordError, Result};
use crate::record::{record_size, write_record, ControlRecordType, EndTransactionMarker, Header};

/// Kafka's safety margin on the estimated compressed size.
pub const COMPRESSION_RATE_ESTIMATION_FACTOR: f32 = 1.05;

/// A finished batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BuiltBatch {
    /// The batch bytes (empty when no record was appended).
    pub bytes: Vec<u8>,
    /// Compressed records size / uncompressed records size (1.0 when uncompressed).
    pub compression_ratio: f32,
    /// Records in the batch.
    pub count: i32,
}

/// Builds one v2 record batch.
#[derive(Debug)]
pub struct BatchBuilder {
    buf: Vec<u8>,
    compression: CompressionConfig,
    timestamp_type: TimestampType,
    log_append_time: i64,
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    delete_horizon_ms: Option<i64>,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    last_offset: Option<i64>,
    /// A last offset kept from the batch this one replaces (compaction).
    last_offset_override: Option<i64>,
    count: i32,
    write_limit: usize,
    estimated_ratio: f32,
}

impl BatchBuilder {
    /// A builder for records from `base_offset` on, aiming to stay within `write_limit`
    /// bytes (Kafka's `batch.size` for a producer).
    pub fn new(
        compression: impl Into<CompressionConfig>,
        base_offset: i64,
        write_limit: usize,
    ) -> Self {
        Self::with_buffer(Vec::new(), compression, base_offset, write_limit)
    }

    /// As `new`, reusing `buf`'s allocation (it is cleared first).
    pub fn with_buffer(
        mut buf: Vec<u8>,
        compression: impl Into<CompressionConfig>,
        base_offset: i64,
        write_limit: usize,
    ) -> Self {
        buf.clear();
        buf.resize(RECORD_BATCH_OVERHEAD, 0);
        BatchBuilder {
            buf,
            compression: compression.into(),
            timestamp_type: TimestampType::CreateTime,
            log_append_time: NO_TIMESTAMP,
            base_offset,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            delete_horizon_ms: None,
            base_timestamp: None,
            max_timestamp: NO_TIMESTAMP,
            last_offset: None,
            last_offset_override: None,
            count: 0,
            write_limit,
            estimated_ratio: 1.0,
        }
    }

    /// Producer id, epoch and first sequence (idempotent and transactional producers).
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.set_producer_state(producer_id, producer_epoch, base_sequence);
        self
    }
    /// Marks the batch as part of a transaction.
    pub fn transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }
    /// Makes this a control batch: only `append_control` may add records.
    pub fn control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }
    /// Uses the broker's append time as every record's timestamp.
    pub fn log_append_time(mut self, now_ms: i64) -> Self {
        self.timestamp_type = TimestampType::LogAppendTime;
        self.log_append_time = now_ms;
        self
    }
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }
    /// Sets the delete horizon (compaction): stored as the base timestamp with bit 6 set.
    pub fn delete_horizon(mut self, horizon_ms: i64) -> Self {
        self.delete_horizon_ms = Some(horizon_ms);
        self
    }
    /// The compression ratio to assume when estimating size (Kafka keeps one per topic
    /// and codec; see `CompressionRatioEstimator`).
    pub fn estimated_compression_ratio(mut self, ratio: f32) -> Self {
        self.estimated_ratio = ratio;
        self
    }

    /// Keeps the batch's last offset at `offset` even if its last record is earlier:
    /// compaction rewrites a batch with fewer records but the same offset range, so that
    /// producer sequences stay consistent (Kafka's `overrideLastOffset`).
    pub fn override_last_offset(&mut self, offset: i64) {
        self.last_offset_override = Some(offset);
    }

    /// Sets the producer fields after records were added: the Java producer assigns
    /// sequences when a batch is drained for sending, not when it is created.
    pub fn set_producer_state(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
    }
    pub fn set_transactional(&mut self, transactional: bool) {
        self.transactional = transactional;
    }

    pub fn compression(&self) -> Compression {
        self.compression.codec
    }
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn num_records(&self) -> i32 {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The offset the next `append` takes.
    pub fn next_offset(&self) -> i64 {
        self.last_offset.map_or(self.base_offset, |o| o + 1)
    }
    /// Bytes of records appended so far, uncompressed.
    pub fn uncompressed_records_size(&self) -> usize {
        self.buf.len() - RECORD_BATCH_OVERHEAD
    }
    pub fn write_limit(&self) -> usize {
        self.write_limit
    }

    /// Kafka's `estimatedBytesWritten`: header plus records, scaled by the expected
    /// compression ratio (with a 5% margin) when compressing.
    pub fn estimated_size_in_bytes(&self) -> usize {
        let records = self.uncompressed_records_size();
        if self.compression.codec == Compression::None {
            RECORD_BATCH_OVERHEAD + records
        } else {
            RECORD_BATCH_OVERHEAD
                + (records as f32 * self.estimated_ratio * COMPRESSION_RATE_ESTIMATION_FACTOR)
                    as usize
        }
    }

    /// True once the estimate reaches the write limit (never while empty).
    pub fn is_full(&self) -> bool {
        self.count > 0 && self.write_limit <= self.estimated_size_in_bytes()
    }

    /// Whether a record of this shape fits within the write limit; the first always does.
    pub fn has_room_for(
        &self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> bool {
        if self.is_full() {
            return false;
        }
        if self.count == 0 {
            return true;
        }
        let delta = (self.next_offset() - self.base_offset) as i32;
        let ts_delta = timestamp.wrapping_sub(self.timestamp_base().unwrap_or(timestamp));
        let size = record_size(delta, ts_delta, key, value, headers);
        self.write_limit >= self.estimated_size_in_bytes() + size
    }

    fn timestamp_base(&self) -> Option<i64> {
        self.delete_horizon_ms.or(self.base_timestamp)
    }

    /// Appends a record at the next offset; returns that offset.
    pub fn append(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Result<i64> {
        let offset = self.next_offset();
        self.append_with_offset(offset, timestamp, key, value, headers)?;
        Ok(offset)
    }

    /// Appends a record at an explicit offset, which must be above every offset so far
    /// (compacted batches have gaps).
    pub fn append_with_offset(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Result<()> {
        if self.control {
            return Err(RecordError::InvalidRecord(
                "a control batch takes only control records",
            ));
        }
        self.append_inner(offset, timestamp, key, value, headers)
    }

    /// Appends a control record (a control batch only).
    pub fn append_control(
        &mut self,
        timestamp: i64,
        kind: ControlRecordType,
        value: Option<&[u8]>,
    ) -> Result<i64> {
        if !self.control {
            return Err(RecordError::InvalidRecord(
                "control records go only in a control batch",
            ));
        }
        let offset = self.next_offset();
        let key = kind.key_bytes();
        self.append_inner(offset, timestamp, Some(&key), value, &[])?;
        Ok(offset)
    }

    /// Appends a COMMIT or ABORT marker (a control batch only).
    pub fn append_end_txn_marker(
        &mut self,
        timestamp: i64,
        marker: EndTransactionMarker,
    ) -> Result<i64> {
        let value = marker.value_bytes();
        self.append_control(timestamp, marker.kind, Some(&value))
    }

    fn append_inner(
        &mut self,
        offset: i64,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> Result<()> {
        if timestamp < 0 && timestamp != NO_TIMESTAMP {
            return Err(RecordError::InvalidRecord("negative timestamp"));
        }
        if let Some(last) = self.last_offset {
            if offset <= last {
                return Err(RecordError::InvalidRecord(
                    "offsets must increase within a batch",
                ));
            }
        } else if offset < self.base_offset {
            return Err(RecordError::InvalidRecord(
                "offset below the batch's base offset",
            ));
        }
        let delta = offset - self.base_offset;
        if delta > i32::MAX as i64 {
            return Err(RecordError::InvalidRecord("offset delta overflows 32 bits"));
        }
        let too_long = |len: usize| len > i32::MAX as usize;
        if key.is_some_and(|k| too_long(k.len())) || value.is_some_and(|v| too_long(v.len())) {
            return Err(RecordError::TooLarge {
                size: key.map_or(0, |k| k.len()).max(value.map_or(0, |v| v.len())) as u64,
                limit: i32::MAX as u64,
            });
        }
        if self.base_timestamp.is_none() {
            self.base_timestamp = Some(timestamp);
        }
        let base = self.timestamp_base().unwrap_or(timestamp);
        write_record(
            &mut self.buf,
            delta as i32,
            timestamp.wrapping_sub(base),
            key,
            value,
            headers,
        );
        if timestamp > self.max_timestamp {
            self.max_timestamp = timestamp;
        }
        self.last_offset = Some(offset);
        self.count += 1;
        Ok(())
    }

    /// Writes the header and CRC (compressing the records when a codec is set) and returns
    /// the finished batch. An empty builder gives empty bytes, as Kafka's does.
    pub fn build(self) -> Result<BuiltBatch> {
        if self.count == 0 {
            return Ok(BuiltBatch {
                bytes: Vec::new(),
                compression_ratio: 1.0,
                count: 0,
            });
        }
        let uncompressed = self.uncompressed_records_size();
        let base_timestamp = self.timestamp_base().unwrap_or(NO_TIMESTAMP);
        let mut out = if self.compression.codec == Compression::None {
            self.buf
        } else {
            let mut out = Vec::with_capacity(RECORD_BATCH_OVERHEAD + uncompressed / 2 + 64);
            out.resize(RECORD_BATCH_OVERHEAD, 0);
            compression::compress(
                self.compression,
                &self.buf[RECORD_BATCH_OVERHEAD..],
                &mut out,
            )?;
            out
        };
        let compressed = out.len() - RECORD_BATCH_OVERHEAD;
        let last_offset = self
            .last_offset_override
            .unwrap_or(self.base_offset)
            .max(self.last_offset.unwrap_or(self.base_offset));
        let header = BatchHeader {
            base_offset: self.base_offset,
            partition_leader_epoch: self.partition_leader_epoch,
            attributes: Attributes::new(
                self.compression.codec,
                self.timestamp_type,
                self.transactional,
                self.control,
                self.delete_horizon_ms.is_some(),
            ),
            last_offset_delta: (last_offset - self.base_offset) as i32,
            base_timestamp,
            max_timestamp: if self.timestamp_type == TimestampType::LogAppendTime {
                self.log_append_time
            } else {
                self.max_timestamp
            },
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            records_count: self.count,
        };
        header.write(&mut out)?;
        Ok(BuiltBatch {
            bytes: out,
            compression_ratio: if uncompressed == 0 {
                1.0
            } else {
                compressed as f32 / uncompressed as f32
            },
            count: self.count,
        })
    }
}

/// Every field of a v2 batch header; `write` fills the first 61 bytes of a buffer whose
/// records section is already in place, and computes the CRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub partition_leader_epoch: i32,
    pub attributes: Attributes,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Writes the header into `buf[..61]` (records must follow) and the CRC over the rest.
    pub fn write(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < RECORD_BATCH_OVERHEAD {
            return Err(RecordError::Truncated {
                needed: RECORD_BATCH_OVERHEAD,
                available: buf.len(),
            });
        }
        let length = i32::try_from(buf.len() - 12).map_err(|_| RecordError::TooLarge {
            size: buf.len() as u64,
            limit: i32::MAX as u64,
        })?;
        buf[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        buf[8..12].copy_from_slice(&length.to_be_bytes());
        buf[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        buf[16] = 2;
        buf[21..23].copy_from_slice(&self.attributes.0.to_be_bytes());
        buf[23..27].copy_from_slice(&self.last_offset_delta.to_be_bytes());
        buf[27..35].copy_from_slice(&self.base_timestamp.to_be_bytes());
        buf[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        buf[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        buf[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        buf[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        buf[57..61].copy_from_slice(&self.records_count.to_be_bytes());
        let crc = crc32c(&buf[21..]);
        buf[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok(())
    }

    /// A batch of no records that keeps an offset range: what compaction leaves to hold a
    /// producer's last sequence (`writeEmptyHeader`).
    pub fn empty_batch(&self) -> Vec<u8> {
        let mut buf = vec![0u8; RECORD_BATCH_OVERHEAD];
        let header = BatchHeader {
            records_count: 0,
            ..*self
        };
        // Cannot fail: the buffer is exactly the header's size.
        let _ = header.write(&mut buf);
        buf
    }
}

/// Kafka's `CompressionRatioEstimator` for one (topic, codec): starts at 1.0, moves towards
/// what closed batches show — quickly (+0.05) when compression was worse than guessed,
/// slowly (-0.005) when better.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompressionRatioEstimator {
    ratio: f32,
}

impl Default for CompressionRatioEstimator {
    fn default() -> Self {
        CompressionRatioEstimator { ratio: 1.0 }
    }
}

impl CompressionRatioEstimator {
    pub const DETERIORATE_STEP: f32 = 0.05;
    pub const IMPROVING_STEP: f32 = 0.005;

    pub fn estimate(&self) -> f32 {
        self.ratio
    }

    /// Folds in the ratio a closed batch showed; returns the new estimate.
    pub fn update(&mut self, observed: f32) -> f32 {
        let current = self.ratio;
        if observed > current {
            self.ratio = (current + Self::DETERIORATE_STEP).max(observed);
        } else if observed < current {
            self.ratio = (current - Self::IMPROVING_STEP).max(observed);
        }
        self.ratio
    }
}
