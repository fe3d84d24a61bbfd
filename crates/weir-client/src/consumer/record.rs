//! What the consumer hands out and takes in: `ConsumerRecord`, `OffsetAndMetadata` (a commit) and `OffsetAndTimestamp` (an answer of `offsets_for_times`).
//! Plain data: no I/O here.

use std::sync::Arc;

use bytes::Bytes;
use weir_kafka::TopicPartition;

/// How a record's timestamp was set: Kafka's `TimestampType`, as the record formats
/// define it.
pub use weir_record::TimestampType;

/// One record read from a partition. Key, value and header values share the memory of the
/// fetch response they came in (no copy for uncompressed batches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Shared by every record of the same fetch, so that handing out a record costs no
    /// string allocation.
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch, or -1 ([`TimestampType::NoTimestamp`]).
    pub timestamp: i64,
    pub timestamp_type: TimestampType,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header names are UTF-8 in every Kafka client; invalid bytes are replaced (U+FFFD).
    pub headers: Vec<(String, Option<Bytes>)>,
    /// The leader epoch of the batch the record came in (message format v2 only).
    pub leader_epoch: Option<i32>,
}

impl ConsumerRecord {
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(&*self.topic, self.partition)
    }

    /// The value of the last header named `name` (Kafka's `Headers.lastHeader`).
    pub fn header(&self, name: &str) -> Option<Option<&Bytes>> {
        self.headers
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_ref())
    }
}

/// An offset to commit: the offset of the *next* record to read, as in Kafka, with the
/// leader epoch of the last record read (if known) and free-form metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetAndMetadata {
    pub offset: i64,
    pub leader_epoch: Option<i32>,
    pub metadata: String,
}

impl OffsetAndMetadata {
    pub fn new(offset: i64) -> Self {
        OffsetAndMetadata {
            offset,
            leader_epoch: None,
            metadata: String::new(),
        }
    }

    pub fn with_metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = metadata.into();
        self
    }

    pub fn with_leader_epoch(mut self, epoch: Option<i32>) -> Self {
        self.leader_epoch = epoch;
        self
    }
}

impl From<i64> for OffsetAndMetadata {
    fn from(offset: i64) -> Self {
        OffsetAndMetadata::new(offset)
    }
}

/// The first offset whose record's timestamp is at or after a target time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndTimestamp {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: Option<i32>,
}
