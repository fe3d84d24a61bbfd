//! Kafka's `LogValidator` for appends from producers, in two steps that need nothing of the
//! log, so neither holds its lock. [`ProducedRecords::analyze`] walks the entries' headers
//! once — sizes, CRCs, codecs, the v2 header rules — without decompressing anything, and
//! says whether validating will inflate the records. [`ProducedRecords::validate`] checks
//! every record against the topic's rules and fixes the batch up: kept as it came when the
//! producer's batch can be stored as it is (the common case: a copy of its 61-byte header
//! changes, its records stay in the request's buffer and are written from there), or
//! rebuilt when the topic asks for another codec, the input is a legacy format, or its inner
//! offsets are not 0..n-1. The log then gives the batch its offsets under its lock
//! ([`ValidatedBatch::assign`]). It does no I/O.

use bytes::Bytes;
use weir_record::{
    legacy, BatchBuilder, Compression, CompressionConfig, DetachedBatchHeader, Header, LogEntries,
    LogEntry, RecordBatch, RecordBatchMut, RecordError, TimestampType, NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
};

use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;

use crate::config::{LogConfig, TopicCompression};
use crate::error::{LogError, RejectedRecord, Result};
use weir_kafka::ErrorCode;

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
    /// Sent by a client, whose sequence numbers are checked; a coordinator's own batches
    /// (TxnOffsetCommit's) are checked for their epoch only, as in Kafka.
    pub from_client: bool,
}

/// One partition's records from a produce request, analyzed: every entry's size, CRC, codec
/// and header checked, and nothing decompressed yet. The records stay in the request's
/// buffer (`Bytes` share it), cut to their last whole entry.
#[derive(Debug)]
pub struct ProducedRecords {
    records: Bytes,
    entries: usize,
    any_legacy: bool,
    /// The producer (id, epoch) of a transactional batch.
    transactional: Option<(i64, i16)>,
    source_codec: Compression,
    origin: AppendOrigin,
}

impl ProducedRecords {
    /// Walks the entries' headers once: each entry no larger than `max.message.bytes`, its
    /// CRC right, its codec known, a v2 header that keeps Kafka's rules for `origin`; one v2
    /// batch per partition. Bytes after the last whole entry are dropped, as Kafka does.
    pub fn analyze(mut records: Bytes, config: &LogConfig, origin: AppendOrigin) -> Result<Self> {
        let mut valid_bytes = 0usize;
        let mut entries = 0usize;
        let mut any_legacy = false;
        let mut transactional = None;
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
                LogEntry::V2(b) => {
                    validate_v2_header(b, origin)?;
                    if b.is_transactional() {
                        transactional = Some((b.producer_id(), b.producer_epoch()));
                    }
                }
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
        Ok(ProducedRecords {
            records,
            entries,
            any_legacy,
            transactional,
            source_codec,
            origin,
        })
    }

    /// Whether a batch is marked transactional (part of a producer's transaction).
    pub fn is_transactional(&self) -> bool {
        self.transactional.is_some()
    }

    /// The producer id and epoch of a transactional batch.
    pub fn transactional_producer(&self) -> Option<(i64, i16)> {
        self.transactional
    }

    /// Whether validating these records inflates them in memory (a compressed batch is
    /// decompressed, a legacy message set converted), up to `MAX_DECOMPRESSED_BATCH_BYTES`:
    /// callers bound how many such validations run at once.
    pub fn inflates(&self) -> bool {
        self.any_legacy || self.source_codec != Compression::None
    }

    /// The bytes of the whole entries received.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Checks every record against the topic's rules (timestamps, keys of a compacted
    /// topic, inner offsets) and fixes the batch up for the log: kept as it came when the
    /// codec stays and the inner offsets are 0..n-1, else rebuilt in the topic's codec.
    /// Offsets are not assigned yet: `PartitionLog::append_validated` does that under the
    /// log's lock.
    pub fn validate(self, config: &LogConfig, now_ms: i64) -> Result<ValidatedBatch> {
        debug_assert!(
            self.entries >= 1,
            "analyze refuses a request without entries"
        );
        let target = match config.compression {
            TopicCompression::Producer => CompressionConfig::new(self.source_codec),
            TopicCompression::Uncompressed => CompressionConfig::new(Compression::None),
            TopicCompression::Codec(c) => c,
        };
        let mut v = match (!self.any_legacy && target.codec == self.source_codec)
            .then(|| keep(&self.records, config, now_ms))
            .transpose()?
            .flatten()
        {
            Some(v) => v,
            None => rebuild(&self.records, config, target, now_ms, self.origin)?,
        };
        if let Some(p) = &mut v.producer {
            p.from_client = self.origin == AppendOrigin::Client;
        }
        Ok(v)
    }
}

/// The bytes a validated batch goes to the log as.
#[derive(Debug)]
enum Payload {
    /// The producer's batch as it came: a fixed-up copy of its header, then its records,
    /// still in the request's buffer.
    Kept {
        header: DetachedBatchHeader,
        records: Bytes,
    },
    /// A batch built anew (recompressed, or converted from a legacy format).
    Built(Vec<u8>),
}

/// One validated batch, ready for the log but for its offsets and leader epoch, which
/// `assign` sets under the log's lock.
#[derive(Debug)]
pub struct ValidatedBatch {
    payload: Payload,
    record_count: usize,
    /// Largest record timestamp (the append time under LogAppendTime), or -1.
    max_timestamp: i64,
    /// The append time when the topic uses LogAppendTime, else -1.
    log_append_time: i64,
    /// True if the batch was rebuilt (recompressed or converted) rather than kept.
    rebuilt: bool,
    /// The producer fields, offsets relative to the batch's first until `assign`.
    producer: Option<ProducerBatchInfo>,
    /// The offset `assign` gave the first record.
    base_offset: Option<i64>,
}

impl ValidatedBatch {
    /// Gives the batch its offsets, from `base_offset`, and the leader's epoch: both are
    /// outside the batch's CRC, so nothing is recomputed.
    pub fn assign(&mut self, base_offset: i64, leader_epoch: i32) {
        assert!(self.base_offset.is_none(), "a batch gets its offsets once");
        assert!(base_offset >= 0, "offset {base_offset} is negative");
        match &mut self.payload {
            Payload::Kept { header, .. } => {
                header.set_base_offset(base_offset);
                header.set_partition_leader_epoch(leader_epoch);
            }
            Payload::Built(bytes) => {
                // A batch this module built: its header is well-formed by construction.
                let mut m = RecordBatchMut::parse(bytes).expect("a batch we built parses");
                m.set_base_offset(base_offset);
                m.set_partition_leader_epoch(leader_epoch);
            }
        }
        if let Some(p) = &mut self.producer {
            p.first_offset += base_offset;
            p.last_offset += base_offset;
        }
        self.base_offset = Some(base_offset);
    }

    /// The bytes to write, in order.
    pub fn pieces(&self) -> [&[u8]; 2] {
        match &self.payload {
            Payload::Kept { header, records } => [header.as_bytes(), records],
            Payload::Built(bytes) => [bytes, &[]],
        }
    }

    /// The batch's size in bytes.
    pub fn size(&self) -> usize {
        let [a, b] = self.pieces();
        a.len() + b.len()
    }

    pub fn record_count(&self) -> usize {
        self.record_count
    }

    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    pub fn log_append_time(&self) -> i64 {
        self.log_append_time
    }

    pub fn rebuilt(&self) -> bool {
        self.rebuilt
    }

    /// The producer fields; their offsets are absolute once `assign` has run.
    pub fn producer(&self) -> Option<ProducerBatchInfo> {
        self.producer
    }
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

/// The records of one batch that break the topic's rules, each with its index in the
/// batch: every record is checked, so the answer names all of them (KIP-467).
struct RecordChecks<'a> {
    config: &'a LogConfig,
    now_ms: i64,
    /// A control batch's records have no key to check.
    control: bool,
    rejected: Vec<RejectedRecord>,
}

impl<'a> RecordChecks<'a> {
    fn new(config: &'a LogConfig, now_ms: i64, control: bool) -> Self {
        RecordChecks {
            config,
            now_ms,
            control,
            rejected: Vec::new(),
        }
    }

    /// Checks record `index`: its key first, then its timestamp, as Kafka does (one
    /// reason per record).
    fn check(&mut self, index: usize, key: Option<&[u8]>, ts: i64) {
        let config = self.config;
        let reject = |code, message| RejectedRecord {
            index: i32::try_from(index).unwrap_or(i32::MAX),
            code,
            message,
        };
        let bad = if config.cleanup_policy.compacts() && !self.control && key.is_none() {
            Some(reject(
                ErrorCode::InvalidRecord,
                "a compacted topic cannot accept a record without a key".into(),
            ))
        } else if config.message_timestamp_type == TimestampType::CreateTime
            && ts != NO_TIMESTAMP
            && (self.now_ms.saturating_sub(ts) > config.message_timestamp_before_max_ms
                || ts.saturating_sub(self.now_ms) > config.message_timestamp_after_max_ms)
        {
            Some(reject(
                ErrorCode::InvalidTimestamp,
                format!(
                    "timestamp {ts} is outside [{}, {}] \
                     (message.timestamp.before.max.ms={}, message.timestamp.after.max.ms={})",
                    self.now_ms
                        .saturating_sub(config.message_timestamp_before_max_ms),
                    self.now_ms
                        .saturating_add(config.message_timestamp_after_max_ms),
                    config.message_timestamp_before_max_ms,
                    config.message_timestamp_after_max_ms
                ),
            ))
        } else {
            None
        };
        self.rejected.extend(bad);
    }

    fn all_good(&self) -> bool {
        self.rejected.is_empty()
    }

    /// The batch's verdict: refused if any record was.
    fn finish(self) -> Result<()> {
        if self.rejected.is_empty() {
            Ok(())
        } else {
            Err(LogError::RejectedRecords {
                records: self.rejected,
            })
        }
    }
}

fn decode_error(e: RecordError) -> LogError {
    LogError::CorruptRecord(e.to_string())
}

/// The one v2 batch kept as it came: records checked, and a copy of its header with the
/// timestamps fixed. `None` if its inner offsets need renumbering (rebuild).
fn keep(records: &Bytes, config: &LogConfig, now_ms: i64) -> Result<Option<ValidatedBatch>> {
    let batch = RecordBatch::parse(records).map_err(decode_error)?;
    let count = batch.records_count();
    // validate_v2_header refused any other count, so the batch's own last offset (base plus
    // last offset delta) is the `last_offset` computed from the count below.
    debug_assert!(
        count >= 1 && i64::from(count) == i64::from(batch.last_offset_delta()) + 1,
        "record count {count} against last offset delta {}",
        batch.last_offset_delta()
    );
    let mut checks = RecordChecks::new(config, now_ms, batch.is_control());
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
            checks.check(i, r.key, r.timestamp);
            max_ts = max_ts.max(r.timestamp);
        }
    }
    checks.finish()?;
    let producer = producer_info(&batch);
    let mut header = DetachedBatchHeader::new(&batch);
    let log_append_time = if config.message_timestamp_type == TimestampType::LogAppendTime {
        header.set_max_timestamp(TimestampType::LogAppendTime, now_ms, batch.records_bytes());
        max_ts = now_ms;
        now_ms
    } else {
        header.set_max_timestamp(TimestampType::CreateTime, max_ts, batch.records_bytes());
        NO_TIMESTAMP
    };
    let size = batch.size_in_bytes();
    debug_assert_eq!(
        size,
        records.len(),
        "analyze cut the records to whole entries"
    );
    Ok(Some(ValidatedBatch {
        payload: Payload::Kept {
            header,
            records: records.slice(RECORD_BATCH_OVERHEAD..size),
        },
        record_count: count as usize,
        max_timestamp: max_ts,
        log_append_time,
        rebuilt: false,
        producer: producer.map(|p| ProducerBatchInfo {
            max_timestamp: max_ts,
            ..p
        }),
        base_offset: None,
    }))
}

/// The batch's producer fields, its offsets relative to its first record.
fn producer_info(batch: &RecordBatch<'_>) -> Option<ProducerBatchInfo> {
    batch.has_producer_id().then(|| ProducerBatchInfo {
        producer_id: batch.producer_id(),
        producer_epoch: batch.producer_epoch(),
        first_sequence: batch.base_sequence(),
        last_sequence: batch.last_sequence(),
        first_offset: 0,
        last_offset: batch.last_offset_delta() as i64,
        max_timestamp: batch.max_timestamp(),
        transactional: batch.is_transactional(),
        control: batch.is_control(),
        from_client: true,
    })
}

/// Decompresses (or converts) the input and writes one new batch in the target codec,
/// keeping the producer fields of a v2 input.
fn rebuild(
    records: &[u8],
    config: &LogConfig,
    target: CompressionConfig,
    now_ms: i64,
    origin: AppendOrigin,
) -> Result<ValidatedBatch> {
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
    debug_assert!(
        !control || origin == AppendOrigin::Coordinator,
        "analyze refuses control batches from clients"
    );
    // Offsets and the leader epoch are set by `assign`, under the log's lock.
    let mut builder = BatchBuilder::new(target, 0, usize::MAX)
        .producer(
            source.producer_id(),
            source.producer_epoch(),
            source.base_sequence(),
        )
        .transactional(source.is_transactional())
        .control(control);
    let log_append = config.message_timestamp_type == TimestampType::LogAppendTime;
    if log_append {
        builder = builder.log_append_time(now_ms);
    }
    let mut max_ts = NO_TIMESTAMP;
    let decoded = source
        .records(MAX_DECOMPRESSED_BATCH_BYTES)
        .map_err(decode_error)?;
    let mut headers: Vec<Header<'_>> = Vec::new();
    let mut checks = RecordChecks::new(config, now_ms, control);
    for (i, r) in decoded.iter().enumerate() {
        let r = r.map_err(decode_error)?;
        // Once a record is refused, the rest are only checked: the batch will not be
        // written.
        checks.check(i, r.key, r.timestamp);
        if !checks.all_good() {
            continue;
        }
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
    checks.finish()?;
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
    // The builder numbered the records 0..count, one offset each; `assign` moves them.
    debug_assert!(
        batch.base_offset() == 0 && batch.last_offset() == count as i64 - 1,
        "rebuilt batch holds offsets {}..={}, expected 0..={}",
        batch.base_offset(),
        batch.last_offset(),
        count as i64 - 1
    );
    let producer = producer_info(&batch);
    let max_timestamp = if log_append { now_ms } else { max_ts };
    Ok(ValidatedBatch {
        record_count: count,
        max_timestamp,
        log_append_time: if log_append { now_ms } else { NO_TIMESTAMP },
        rebuilt: true,
        producer: producer.map(|p| ProducerBatchInfo { max_timestamp, ..p }),
        payload: Payload::Built(built),
        base_offset: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CleanupPolicy;
    use weir_record::BatchBuilder;

    const NOW: i64 = 1_700_000_000_000;

    /// A produced batch of `records` (key, timestamp) in `codec`.
    fn batch(codec: Compression, records: &[(Option<&[u8]>, i64)]) -> Bytes {
        let mut b = BatchBuilder::new(CompressionConfig::new(codec), 0, usize::MAX);
        for (key, ts) in records {
            b.append(*ts, *key, Some(b"value"), &[]).unwrap();
        }
        Bytes::from(b.build().unwrap().bytes)
    }

    fn validate(records: Bytes, config: &LogConfig) -> Result<ValidatedBatch> {
        ProducedRecords::analyze(records, config, AppendOrigin::Client)?.validate(config, NOW)
    }

    fn rejected(r: Result<ValidatedBatch>) -> (ErrorCode, Vec<(i32, ErrorCode)>, String) {
        let e = r.expect_err("the batch is refused");
        let code = e.error_code();
        let summary = e.to_string();
        match e {
            LogError::RejectedRecords { records } => (
                code,
                records.iter().map(|r| (r.index, r.code)).collect(),
                summary,
            ),
            other => panic!("not a per-record refusal: {other}"),
        }
    }

    #[test]
    fn every_bad_record_of_a_batch_is_named_by_its_index() {
        let compacted = LogConfig {
            cleanup_policy: CleanupPolicy::Compact,
            ..LogConfig::default()
        };
        let recompressed = LogConfig {
            compression: TopicCompression::Codec(CompressionConfig::new(Compression::Lz4)),
            ..compacted.clone()
        };
        let k: Option<&[u8]> = Some(b"k");
        let keyless = [(k, NOW), (None, NOW), (k, NOW), (None, NOW), (k, NOW)];
        // Kept as it came, inflated to be checked, and rebuilt in the topic's codec: the
        // same verdict on each path.
        for (codec, config) in [
            (Compression::None, &compacted),
            (Compression::Gzip, &compacted),
            (Compression::None, &recompressed),
        ] {
            let (code, records, summary) = rejected(validate(batch(codec, &keyless), config));
            assert_eq!(code, ErrorCode::InvalidRecord, "{codec:?}");
            assert_eq!(
                records,
                vec![(1, ErrorCode::InvalidRecord), (3, ErrorCode::InvalidRecord)]
            );
            assert!(
                summary.starts_with("2 record(s) of the batch were refused"),
                "{summary}"
            );
        }
        // A timestamp out of range makes the batch's error INVALID_TIMESTAMP, as in Kafka;
        // a record with no key and a bad timestamp is named once, for its key.
        let day = 86_400_000;
        let mixed = [
            (k, NOW - 400 * day),
            (None, NOW),
            (None, NOW + 2 * day),
            (k, NOW),
        ];
        let strict = LogConfig {
            message_timestamp_before_max_ms: 7 * day,
            message_timestamp_after_max_ms: day,
            ..compacted.clone()
        };
        let (code, records, _) = rejected(validate(batch(Compression::None, &mixed), &strict));
        assert_eq!(code, ErrorCode::InvalidTimestamp);
        assert_eq!(
            records,
            vec![
                (0, ErrorCode::InvalidTimestamp),
                (1, ErrorCode::InvalidRecord),
                (2, ErrorCode::InvalidRecord),
            ]
        );
        // Good records alone pass.
        let good = [(k, NOW), (k, NOW)];
        assert_eq!(
            validate(batch(Compression::None, &good), &strict)
                .unwrap()
                .record_count(),
            2
        );
    }
}
