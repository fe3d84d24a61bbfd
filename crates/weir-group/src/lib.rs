//! # weir-group
//!
//! The consumer group coordinator: Kafka's classic group protocol, the KIP-848 consumer
//! protocol, and committed offsets.
//! Owns membership, rebalances and the offsets cache; must not touch sockets or logs itself —
//! every byte it persists goes through [`GroupStore`].
//!
//! The shape follows Kafka's `GroupCoordinator` (request handling, rebalance timers) and
//! `GroupMetadataManager` (offsets cache, persistence, loading, expiry):
//!
//! - `metadata`: one group's state and the pure rules of its state machine
//!   (Empty → PreparingRebalance → CompletingRebalance → Stable, and Dead).
//! - `coordinator`: the membership APIs, the timers (sessions, rebalance timeouts, the
//!   initial rebalance delay) and the background task [`GroupCoordinator::run`].
//! - `offsets`: OffsetCommit/OffsetFetch/OffsetDelete, the admin APIs (List, Describe,
//!   DeleteGroups), start-up loading and offset expiry.
//! - `consumer`: the KIP-848 protocol (ConsumerGroupHeartbeat, ConsumerGroupDescribe): the
//!   group epoch, target assignments and each member's reconciliation towards its target;
//!   `assignor`: its server-side `uniform` and `range` assignors.
//! - `records`: the bytes of Kafka's OffsetCommitKey/Value and GroupMetadataKey/Value.
//!
//! Locking: a map of groups behind one `std::sync::Mutex`, and one `Mutex` per group. The map
//! lock is only ever held alone (never while a group's lock is held or taken); a group's lock
//! may be held while the store appends and while the timer wake-up slot is updated. No lock is
//! held across an `.await`.
//! Parked JoinGroup/SyncGroup calls wait on `oneshot` channels owned by the member.

mod assignor;
mod consumer;
mod coordinator;
mod metadata;
mod offsets;
mod records;
mod txn_offsets;

#[cfg(test)]
mod tests;

pub use consumer::{TopicCatalog, TopicInfo};
pub use coordinator::{join_group_error, GroupCoordinator};

/// The server-side assignors of the consumer protocol (`group.consumer.assignors`).
pub const CONSUMER_ASSIGNORS: &[&str] = assignor::ASSIGNORS;

/// Broker settings the coordinator follows, with Kafka's names and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.initial.rebalance.delay.ms`: how long the first rebalance of an empty group
    /// waits for more members (extended by each new member, up to the rebalance timeout).
    pub initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
    /// `group.max.size`.
    pub max_size: usize,
    /// `offsets.retention.minutes` × 60 000: how long committed offsets outlive an empty group.
    pub offsets_retention_ms: i64,
    /// `offsets.topic.num.partitions`.
    pub offsets_topic_partitions: i32,
    /// `offset.metadata.max.bytes` (counted, as Kafka does, in UTF-16 code units).
    pub offset_metadata_max_bytes: usize,
    /// Whether `group.coordinator.rebalance.protocols` lists `consumer` (KIP-848).
    pub consumer_protocol: bool,
    /// `group.consumer.session.timeout.ms`.
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`.
    pub consumer_heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`.
    pub consumer_max_size: usize,
    /// `group.consumer.assignors`: the first is the default.
    pub consumer_assignors: Vec<String>,
}

/// One group's own values of the consumer protocol's settings (Kafka's group configs,
/// `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`): `None` takes the
/// broker's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerGroupSettings {
    pub session_timeout_ms: Option<i32>,
    pub heartbeat_interval_ms: Option<i32>,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 3_000,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            max_size: i32::MAX as usize,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            offsets_topic_partitions: 50,
            offset_metadata_max_bytes: 4096,
            consumer_protocol: true,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_max_size: i32::MAX as usize,
            consumer_assignors: CONSUMER_ASSIGNORS.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

/// Persistence of group metadata and committed offsets: the broker appends these records to
/// the compacted `__consumer_offsets` topic on its own log. Synchronous: an append is a write
/// to the page cache. Returns a Kafka error code on failure.
///
/// The coordinator calls `append` while it holds a group's lock, so an implementation must
/// not call back into the coordinator.
pub trait GroupStore: Send + Sync + 'static {
    fn append(
        &self,
        partition: i32,
        records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        now_ms: i64,
    ) -> Result<(), i16>;

    /// `append` as one transactional batch of `producer` (id, epoch): TxnOffsetCommit's
    /// records, which count only once the producer's COMMIT marker follows them.
    fn append_transactional(
        &self,
        partition: i32,
        producer: (i64, i16),
        records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        now_ms: i64,
    ) -> Result<(), i16>;
}

/// One thing a `__consumer_offsets` partition holds, in offset order, as a load reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// A record (value `None`: a tombstone); `txn_producer` is the producer id of a
    /// transactional batch.
    Record {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        txn_producer: Option<i64>,
    },
    /// A COMMIT or ABORT marker of a producer's transaction.
    Marker { producer_id: i64, commit: bool },
}

/// Kafka error codes the coordinator answers with (weir-kafka's), and its translations of a
/// failed append.
pub(crate) mod codes {
    pub use weir_kafka::error::codes::*;

    /// Kafka's translation of a failed `__consumer_offsets` append for a group metadata write
    /// (`GroupMetadataManager.storeGroup`).
    pub fn for_group_store(code: i16) -> i16 {
        match code {
            UNKNOWN_TOPIC_OR_PARTITION | NOT_ENOUGH_REPLICAS | NOT_ENOUGH_REPLICAS_AFTER_APPEND => {
                COORDINATOR_NOT_AVAILABLE
            }
            NOT_LEADER_OR_FOLLOWER | KAFKA_STORAGE_ERROR => NOT_COORDINATOR,
            REQUEST_TIMED_OUT => REBALANCE_IN_PROGRESS,
            MESSAGE_TOO_LARGE | RECORD_LIST_TOO_LARGE | INVALID_FETCH_SIZE => UNKNOWN_SERVER_ERROR,
            other => other,
        }
    }

    /// Kafka's translation of a failed append for an offset commit (`storeOffsets`).
    pub fn for_offset_store(code: i16) -> i16 {
        match code {
            UNKNOWN_TOPIC_OR_PARTITION | NOT_ENOUGH_REPLICAS | NOT_ENOUGH_REPLICAS_AFTER_APPEND => {
                COORDINATOR_NOT_AVAILABLE
            }
            NOT_LEADER_OR_FOLLOWER | KAFKA_STORAGE_ERROR => NOT_COORDINATOR,
            MESSAGE_TOO_LARGE | RECORD_LIST_TOO_LARGE | INVALID_FETCH_SIZE => {
                INVALID_COMMIT_OFFSET_SIZE
            }
            other => other,
        }
    }
}
