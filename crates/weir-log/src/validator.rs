//! Kafka's `LogValidator` for appends from producers: checks every batch of a produce
//! request against the format and the topic's rules, and assigns offsets — in place when
//! the producer's batch can be stored as it came (the common case), or by rebuilding the
//! batch when the topic asks for another codec, the input is a legacy format, or the
//! batch's inner offsets are not 0..n-1. It does no I/O.

use weir_record::{
    legacy, BatchBuilder, Compression, CompressionConfig, Header, LogEntries, LogEntry,
    RecordBatch, RecordBatchMut, RecordError, TimestampType, NO_TIMESTAMP,
};

use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;

use crate::config::{LogConfig, TopicCompression};
use crate::error::{LogError, Result};

/// Who is appending: clients are held to every rule; the broker's own writers (group
/// coordinator, transaction markers) may write control batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    Client,
    Coordinator,
}

/// Producer fields of the appended batch, for idempotence checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatchInfo {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub transactional: bool,
    pub control: bool,
}

/// The outcome of validation: the bytes to append and what they hold.
#[derive(Debug)]
pub struct ValidatedRecords {
    pub records: Vec<u8>,
    pub first_offset: i64,
    pub last_offset: i64,
    /// Largest record timestamp (the append time under LogAppendTime), or -1.
    pub max_timestamp: i64,
    /// Last offset of the batch holding `max_timestamp`.
    pub offset_of_max_timestamp: i64,
    /// The append time when the topic uses LogAppendTime, else -1.
    pub log_append_time: i64,
    pub record_count: usize,
    /// True if the batch was rebuilt (recompressed or converted) rather than kept.
    pub rebuilt: bool,
    pub producer: Option<ProducerBatchInfo>,
}

/// Validates `records` (one partition's part of a produce request) and assigns offsets from
/// `next_offset`. Bytes after the last whole entry are dropped, as Kafka does.
pub fn validate_and_assign(
    mut records: Vec<u8>,
    config: &LogConfig,
    next_offset: i64,
    leader_epoch: i32,
    now_ms: i64,
    origin: AppendOrigin,
) -> Result<ValidatedRecords> {
    // 1. Per-entry checks, and the valid prefix.
    let mut valid_bytes = 0usize;
    let mut entries = 0usize;
    let mut any_legacy = false;
    let mut first_codec = None;
    for item in LogEntries::new(&records) {
        let (pos, entry) = match item {
            Ok(e) => e,
            Err(e) if e.is_torn_tail() => break,
            Err(e) => {
                return Err(LogError::CorruptRecord(format!(
                    "at byte {}: {}",
                    e.position, e.error
                )))
            }
        };
        let size = entry.size_in_bytes();
        if size > config.max_message_bytes as usize {
            return Err(LogError::RecordTooLarge {
                size,
                limit: config.max_message_bytes as usize,
            });
        }
        entry
            .validate_crc()
            .map_err(|e| LogError::CorruptRecord(format!("at byte {pos}: {e}")))?;
        let codec = entry
            .compression()
            .map_err(|e| LogError::CorruptRecord(e.to_string()))?;
        first_codec.get_or_insert(codec);
        match &entry {
            LogEntry::V2(b) => validate_v2_header(b, origin)?,
            LogEntry::Legacy(_) => any_legacy = true,
        }
        entries += 1;
        valid_bytes = pos + size;
    }
    records.truncate(valid_bytes);
    if entries == 0 {
        return Err(LogError::CorruptRecord(
            "no complete record batch in the request".into(),
        ));
    }
    let source_codec = first_codec.unwrap_or_default();
    if !any_legacy && entries > 1 {
        return Err(LogError::InvalidRecord(
            "a v2 produce request must hold exactly one batch per partition".into(),
        ));
    }
    if any_legacy && source_codec != Compression::None && entries > 1 {
        return Err(LogError::InvalidRecord(
            "compressed outer record has more than one batch".into(),
        ));
    }

    let target = match config.compression {
        TopicCompression::Producer => CompressionConfig::new(source_codec),
        TopicCompression::Uncompressed => CompressionConfig::new(Compression::None),
        TopicCompression::Codec(c) => c,
    };

    if !any_legacy && target.codec == source_codec {
        if let Some(mut v) =
            assign_in_place(&mut records, config, next_offset, leader_epoch, now_ms)?
        {
            v.records = records;
            return Ok(v);
        }
    }
    rebuild(&records, config, target, next_offset, leader_epoch, now_ms)
}

fn validate_v2_header(b: &RecordBatch<'_>, origin: AppendOrigin) -> Result<()> {
    let invalid = |m: String| Err(LogError::InvalidRecord(m));
    if origin == AppendOrigin::Client {
        if b.base_offset() != 0 {
            return invalid(format!(
                "the base offset of a produced batch must be 0, not {}",
                b.base_offset()
            ));
        }
        if b.is_control() {
            return invalid("clients may not write control batches".into());
        }
    }
    let count = b.records_count() as i64;
    if count <= 0 || count != b.last_offset_delta() as i64 + 1 {
        return invalid(format!(
            "record count {} does not match the last offset delta {}",
            count,
            b.last_offset_delta()
        ));
    }
    if b.has_producer_id() && b.base_sequence() < 0 {
        return invalid("a batch with a producer id needs a base sequence".into());
    }
    if origin == AppendOrigin::Client && b.timestamp_type() == TimestampType::LogAppendTime {
        return Err(LogError::InvalidTimestamp(
            "producers may not set the LogAppendTime timestamp type".into(),
        ));
    }
    Ok(())
}

fn check_timestamp(config: &LogConfig, ts: i64, now_ms: i64) -> Result<()> {
    if config.message_timestamp_type != TimestampType::CreateTime || ts == NO_TIMESTAMP {
        return Ok(());
    }
    let too_old = now_ms.saturating_sub(ts) > config.message_timestamp_before_max_ms;
    let too_new = ts.saturating_sub(now_ms) > config.message_timestamp_after_max_ms;
    if too_old || too_new {
        return Err(LogError::InvalidTimestamp(format!(
            "timestamp {ts} is outside the allowed range around {now_ms} \
             (message.timestamp.before.max.ms={}, message.timestamp.after.max.ms={})",
            config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
        )));
    }
    Ok(())
}

fn check_key(config: &LogConfig, key: Option<&[u8]>, control: bool) -> Result<()> {
    if config.cleanup_policy.compacts() && !control && key.is_none() {
        return Err(LogError::InvalidRecord(
            "a compacted topic cannot accept a record without a key".into(),
        ));
    }
    Ok(())
}

fn decode_error(e: RecordError) -> LogError {
    LogError::CorruptRecord(e.to_string())
}

/// The one v2 batch kept as it came: records checked, offsets, epoch and (if needed)
/// timestamps fixed in place. `None` if its inner offsets need renumbering (rebuild).
fn assign_in_place(
    records: &mut [u8],
    config: &LogConfig,
    next_offset: i64,
    leader_epoch: i32,
    now_ms: i64,
) -> Result<Option<ValidatedRecords>> {
    let batch = RecordBatch::parse(records).map_err(decode_error)?;
    let count = batch.records_count();
    let control = batch.is_control();
    let mut max_ts = NO_TIMESTAMP;
    {
        let decoded = batch
            .records(MAX_DECOMPRESSED_BATCH_BYTES)
            .map_err(decode_error)?;
        let base = batch.base_offset();
        for (i, r) in decoded.iter().enumerate() {
            let r = r.map_err(decode_error)?;
            if r.offset - base != i as i64 {
                return Ok(None);
            }
            check_timestamp(config, r.timestamp, now_ms)?;
            check_key(config, r.key, control)?;
            max_ts = max_ts.max(r.timestamp);
        }
    }
    let producer = producer_info(&batch, next_offset);
    let mut m = RecordBatchMut::parse(records).map_err(decode_error)?;
    m.set_base_offset(next_offset);
    m.set_partition_leader_epoch(leader_epoch);
    let log_append_time = if config.message_timestamp_type == TimestampType::LogAppendTime {
        m.set_max_timestamp(TimestampType::LogAppendTime, now_ms);
        max_ts = now_ms;
        now_ms
    } else {
        m.set_max_timestamp(TimestampType::CreateTime, max_ts);
        NO_TIMESTAMP
    };
    let last_offset = next_offset + count as i64 - 1;
    Ok(Some(ValidatedRecords {
        records: Vec::new(), // the caller moves the (now fixed-up) input in
        first_offset: next_offset,
        last_offset,
        max_timestamp: max_ts,
        offset_of_max_timestamp: last_offset,
        log_append_time,
        record_count: count as usize,
        rebuilt: false,
        producer: producer.map(|p| ProducerBatchInfo {
            max_timestamp: max_ts,
            ..p
        }),
    }))
}

fn producer_info(batch: &RecordBatch<'_>, first_offset: i64) -> Option<ProducerBatchInfo> {
    batch.has_producer_id().then(|| ProducerBatchInfo {
        producer_id: batch.producer_id(),
        producer_epoch: batch.producer_epoch(),
        first_sequence: batch.base_sequence(),
        last_sequence: batch.last_sequence(),
        first_offset,
        last_offset: first_offset + batch.last_offset_delta() as i64,
        max_timestamp: batch.max_timestamp(),
        transactional: batch.is_transactional(),
        control: batch.is_control(),
    })
}

/// Decompresses (or converts) the input and writes one new batch in the target codec,
/// keeping the producer fields of a v2 input.
fn rebuild(
    records: &[u8],
    config: &LogConfig,
    target: CompressionConfig,
    next_offset: i64,
    leader_epoch: i32,
    now_ms: i64,
) -> Result<ValidatedRecords> {
    let converted;
    let v2_bytes: &[u8] = match LogEntry::parse(records).map_err(decode_error)? {
        LogEntry::V2(_) => records,
        LogEntry::Legacy(_) => {
            converted =
                legacy::convert_to_v2(records, Compression::None, MAX_DECOMPRESSED_BATCH_BYTES)
                    .map_err(decode_error)?;
            &converted
        }
    };
    let source = RecordBatch::parse(v2_bytes).map_err(decode_error)?;
    let control = source.is_control();
    let mut builder = BatchBuilder::new(target, next_offset, usize::MAX)
        .producer(
            source.producer_id(),
            source.producer_epoch(),
            source.base_sequence(),
        )
        .transactional(source.is_transactional())
        .control(control)
        .partition_leader_epoch(leader_epoch);
    let log_append = config.message_timestamp_type == TimestampType::LogAppendTime;
    if log_append {
        builder = builder.log_append_time(now_ms);
    }
    let mut max_ts = NO_TIMESTAMP;
    let decoded = source
        .records(MAX_DECOMPRESSED_BATCH_BYTES)
        .map_err(decode_error)?;
    let mut headers: Vec<Header<'_>> = Vec::new();
    for r in decoded.iter() {
        let r = r.map_err(decode_error)?;
        check_timestamp(config, r.timestamp, now_ms)?;
        check_key(config, r.key, control)?;
        max_ts = max_ts.max(r.timestamp);
        headers.clear();
        headers.extend(r.headers.iter());
        if control {
            let kind = weir_record::ControlRecordType::parse_key(r.key).map_err(decode_error)?;
            builder
                .append_control(r.timestamp, kind, r.value)
                .map_err(decode_error)?;
        } else {
            builder
                .append(r.timestamp, r.key, r.value, &headers)
                .map_err(decode_error)?;
        }
    }
    let count = builder.num_records() as usize;
    if count == 0 {
        return Err(LogError::InvalidRecord(
            "a produced batch must hold at least one record".into(),
        ));
    }
    let built = builder.build().map_err(decode_error)?.bytes;
    if built.len() > config.max_message_bytes as usize {
        return Err(LogError::RecordTooLarge {
            size: built.len(),
            limit: config.max_message_bytes as usize,
        });
    }
    let batch = RecordBatch::parse(&built).map_err(decode_error)?;
    let producer = producer_info(&batch, next_offset);
    let last_offset = next_offset + count as i64 - 1;
    let max_timestamp = if log_append { now_ms } else { max_ts };
    Ok(ValidatedRecords {
        first_offset: next_offset,
        last_offset,
        max_timestamp,
        offset_of_max_timestamp: last_offset,
        log_append_time: if log_append { now_ms } else { NO_TIMESTAMP },
        record_count: count,
        rebuilt: true,
        producer: producer.map(|p| ProducerBatchInfo { max_timestamp, ..p }),
        records: built,
    })
}
