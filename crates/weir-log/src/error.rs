//! The storage engine's errors, each mapped to the Kafka error code a client understands,
//! so the broker can answer without knowing how the log works inside.

use std::io;

use weir_kafka::{ApiError, ErrorCode};
use weir_record::RecordError;

use crate::config::ConfigError;

/// Why a log operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A batch is damaged or breaks the format (bad CRC, bad sizes, bad offsets).
    #[error("corrupt record: {0}")]
    CorruptRecord(String),
    /// A batch is well-formed but breaks one of Kafka's rules (e.g. no key on a compacted topic).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// One batch is larger than `max.message.bytes`.
    #[error("record batch of {size} bytes exceeds max.message.bytes {limit}")]
    RecordTooLarge { size: usize, limit: usize },
    /// The whole append is larger than a segment may be.
    #[error("append of {size} bytes exceeds segment.bytes {limit}")]
    RecordListTooLarge { size: usize, limit: usize },
    /// A record timestamp is outside the window `message.timestamp.*.max.ms` allows.
    #[error("invalid timestamp: {0}")]
    InvalidTimestamp(String),
    /// Single records of a batch break the topic's rules (a missing key on a compacted
    /// topic, a timestamp out of range): the whole batch is refused, and each bad record is
    /// named by its index in the batch (KIP-467), so a client can fail exactly those and
    /// send the others again.
    #[error("{}", rejected_summary(records))]
    RejectedRecords { records: Vec<RejectedRecord> },
    /// A codec the log cannot use.
    #[error("unsupported compression: {0}")]
    UnsupportedCompression(String),
    /// An offset outside [log start offset, log end offset].
    #[error("offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// The producer's epoch is older than the one the log knows.
    #[error("invalid producer epoch: {0}")]
    InvalidProducerEpoch(String),
    /// An idempotent producer's sequence number that goes back, or restarts wrongly.
    #[error("out of order sequence: {0}")]
    OutOfOrderSequence(String),
    /// A batch whose sequence is ahead of the next one expected: the producer's batches
    /// before it have not reached this log (still in flight, or refused and to be sent
    /// again, often across a change of leader). Answered with a retriable error, not
    /// OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka takes that as a gap to close by bumping
    /// its epoch and renumbering what it holds, which writes twice any record whose first
    /// answer was lost (its issue 4953). Retried, the batch lands once the earlier ones
    /// have, and only once.
    #[error("sequence ahead: {0}")]
    SequenceAhead(String),
    /// A producer that has a transaction open on this partition wrote outside it.
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// A transaction marker from a coordinator older than the one that wrote the last.
    #[error("transaction coordinator fenced: {0}")]
    TransactionCoordinatorFenced(String),
    /// The log knows nothing of this producer id and the batch does not start a sequence.
    #[error("unknown producer id: {0}")]
    UnknownProducerId(String),
    /// A configuration value that is not allowed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The log directory is offline (a previous I/O error), or the log was closed/deleted.
    #[error("log is offline: {0}")]
    Offline(String),
    /// Only the partition's leader appends, and another broker leads it.
    #[error("{0}")]
    NotLeader(String),
    /// The disk failed us.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl LogError {
    /// The Kafka protocol error code for this error.
    pub fn kafka_error_code(&self) -> i16 {
        self.error_code().code()
    }

    /// The Kafka error this is.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            LogError::CorruptRecord(_) => ErrorCode::CorruptMessage,
            LogError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            LogError::RecordTooLarge { .. } => ErrorCode::MessageTooLarge,
            LogError::RecordListTooLarge { .. } => ErrorCode::RecordListTooLarge,
            LogError::InvalidTimestamp(_) => ErrorCode::InvalidTimestamp,
            LogError::Config(_) => ErrorCode::InvalidConfig,
            LogError::OutOfOrderSequence(_) => ErrorCode::OutOfOrderSequenceNumber,
            LogError::SequenceAhead(_) => ErrorCode::NotEnoughReplicas,
            LogError::InvalidProducerEpoch(_) => ErrorCode::InvalidProducerEpoch,
            LogError::InvalidTxnState(_) => ErrorCode::InvalidTxnState,
            LogError::TransactionCoordinatorFenced(_) => ErrorCode::TransactionCoordinatorFenced,
            LogError::Offline(_) | LogError::Io(_) => ErrorCode::KafkaStorageError,
            LogError::NotLeader(_) => ErrorCode::NotLeaderOrFollower,
            LogError::UnknownProducerId(_) => ErrorCode::UnknownProducerId,
            LogError::UnsupportedCompression(_) => ErrorCode::UnsupportedCompressionType,
            LogError::InvalidRecord(_) => ErrorCode::InvalidRecord,
            // As in Kafka: a bad timestamp among them makes it INVALID_TIMESTAMP.
            LogError::RejectedRecords { records } => {
                if records
                    .iter()
                    .any(|r| r.code == ErrorCode::InvalidTimestamp)
                {
                    ErrorCode::InvalidTimestamp
                } else {
                    ErrorCode::InvalidRecord
                }
            }
        }
    }
}

/// One record a batch was refused for: its index in the batch, why, and the Kafka error
/// that reason is (INVALID_RECORD or INVALID_TIMESTAMP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRecord {
    pub index: i32,
    pub code: ErrorCode,
    pub message: String,
}

/// How many records of a batch were refused, and why the first few were.
fn rejected_summary(records: &[RejectedRecord]) -> String {
    const SHOWN: usize = 3;
    let first: Vec<String> = records
        .iter()
        .take(SHOWN)
        .map(|r| format!("record {}: {}", r.index, r.message))
        .collect();
    let more = records.len().saturating_sub(SHOWN);
    format!(
        "{} record(s) of the batch were refused, so none of it was written; {}{}",
        records.len(),
        first.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    )
}

impl From<LogError> for ApiError {
    fn from(e: LogError) -> Self {
        ApiError::new(e.error_code(), e.to_string())
    }
}

impl From<RecordError> for LogError {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::TooLarge { size, limit } => LogError::RecordTooLarge {
                size: size as usize,
                limit: limit as usize,
            },
            RecordError::InvalidRecord(m) => LogError::InvalidRecord(m.to_string()),
            other => LogError::CorruptRecord(other.to_string()),
        }
    }
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;
