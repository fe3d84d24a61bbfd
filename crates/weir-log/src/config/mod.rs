//! Partition-log configuration: Kafka's topic-level keys with their defaults and value rules,
//! their server.properties synonyms, and the DescribeConfigs view of them. Pure parsing and
//! validation: it must do no I/O, read no clock or environment, and never panic on any input.
//!
//! Here: [`LogConfig`] with Kafka's defaults, and the types of its values. The key table lives
//! in `keys`, the reading of topic overrides and broker properties in `parse`, and the
//! DescribeConfigs view in `describe`; each adds its own `impl LogConfig`.

mod describe;
mod keys;
mod parse;
#[cfg(test)]
mod tests;

use std::fmt;

use weir_record::{Compression, CompressionConfig, TimestampType};

/// A rejected key or value. `message` says what was given and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

/// `cleanup.policy`: what happens to old segments.
///
/// Kafka parses it as a list: elements separated by commas with any whitespace around them,
/// in either order, duplicates allowed. Each element must be exactly `compact` or `delete`:
/// Kafka's validator compares case-sensitively, so `Compact` is rejected there and here.
/// Kafka 3.x also accepts an empty list (neither deletion nor compaction); Weir rejects it,
/// since `retention.ms=-1` with `retention.bytes=-1` says "keep everything" explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupPolicy {
    /// `delete`: segments past `retention.ms` / `retention.bytes` are deleted.
    Delete,
    /// `compact`: the cleaner keeps the latest record of each key.
    Compact,
    /// `compact,delete` (either order): compacted, and also deleted by retention.
    CompactDelete,
}

impl CleanupPolicy {
    /// Does time/size retention delete segments?
    pub fn deletes(self) -> bool {
        matches!(self, CleanupPolicy::Delete | CleanupPolicy::CompactDelete)
    }

    /// Does the cleaner compact this log?
    pub fn compacts(self) -> bool {
        matches!(self, CleanupPolicy::Compact | CleanupPolicy::CompactDelete)
    }

    /// The value as DescribeConfigs prints it. Both policies print as `compact,delete`, whatever
    /// order the user wrote (Kafka echoes the user's order).
    pub fn as_str(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        }
    }
}

impl fmt::Display for CleanupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A topic's `compression.type`, with the level taken from `compression.<codec>.level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    /// `producer` (the default): keep whatever codec the producer used.
    Producer,
    /// `uncompressed`: store batches uncompressed, recompressing if needed.
    Uncompressed,
    /// `gzip`, `snappy`, `lz4` or `zstd`: store batches with this codec. A level equal to
    /// Kafka's default for the codec is held as `CompressionConfig::new(codec)`.
    Codec(CompressionConfig),
}

impl TopicCompression {
    /// The `compression.type` value: `producer`, `uncompressed`, `gzip`, `snappy`, `lz4`, `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            TopicCompression::Producer => "producer",
            TopicCompression::Uncompressed => "uncompressed",
            TopicCompression::Codec(c) if c.codec == Compression::None => "uncompressed",
            TopicCompression::Codec(c) => c.codec.name(),
        }
    }

    /// The codec a batch is stored with, given the codec it arrived with (Kafka's
    /// `BrokerCompressionType.targetCompression`): the topic's codec, or for `producer` the
    /// producer's codec at its default level.
    pub fn target(self, producer: Compression) -> CompressionConfig {
        match self {
            TopicCompression::Producer => CompressionConfig::new(producer),
            TopicCompression::Uncompressed => CompressionConfig::new(Compression::None),
            TopicCompression::Codec(c) => c,
        }
    }
}

const KIB: i64 = 1024;
const MIB: i64 = 1024 * KIB;
const HOUR_MS: i64 = 60 * 60 * 1000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// Kafka 3.x's lower bound for `segment.bytes` (`LegacyRecord.RECORD_OVERHEAD_V0`).
pub const MIN_SEGMENT_BYTES: u64 = 14;
/// Kafka's default `max.message.bytes`: 1 MiB plus the 12-byte log overhead.
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 1024 * 1024 + 12;
/// Kafka's default and ceiling for `max.decompressed.message.bytes`: the largest array a JVM
/// allocates.
pub const MAX_DECOMPRESSED_MESSAGE_BYTES: i32 = i32::MAX - 8;

const GZIP_DEFAULT_LEVEL: i32 = -1;
const LZ4_DEFAULT_LEVEL: i32 = 9;
const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// A partition log's configuration: Kafka's topic-level settings, with Kafka's defaults.
///
/// The key set and every default, range and precedence rule are Kafka 4.4's (`LogConfig`,
/// `ServerLogConfigs`, `ServerTopicConfigSynonyms`, `KafkaConfig`, `ConfigDef`); where Weir
/// differs, the field's doc says so.
///
/// Build the broker defaults with [`LogConfig::default`] or
/// [`LogConfig::from_broker_properties`], and a topic's config with
/// [`LogConfig::with_overrides`] on those defaults. To alter a topic, apply its whole override
/// set to the broker defaults again (as Kafka does), rather than stacking overrides: the
/// cross-key rules (compression and its level) depend on it.
///
/// "Acts on it" below names who must honour a key; weir-log is the storage engine.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes` (broker `log.segment.bytes`): roll once the active segment would grow
    /// past this; an append larger than this is rejected (RecordBatchTooLarge). Default 1 GiB,
    /// at least 14 (Kafka 3.x; Kafka 4.0 raised the minimum to 1 MiB, Weir keeps 14 so tests
    /// can use tiny segments), at most `i32::MAX`. Acts on it: weir-log.
    pub segment_bytes: u64,
    /// `segment.ms` (`log.roll.ms`, else `log.roll.hours`): roll a non-empty segment once the
    /// incoming batch's max timestamp is this far past the segment's first batch's (or, when
    /// that has no timestamp, once the segment is this old by the clock). Default 7 days, at
    /// least 1. For compacted logs see [`LogConfig::effective_segment_ms`]. Acts on it: weir-log.
    pub segment_ms: i64,
    /// `segment.jitter.ms` (`log.roll.jitter.ms`, else `log.roll.jitter.hours`): a random
    /// amount below [`LogConfig::segment_jitter_bound_ms`], drawn per segment, subtracted from
    /// the roll time. Default 0, at least 0. Acts on it: weir-log.
    pub segment_jitter_ms: i64,
    /// `segment.index.bytes` (`log.index.size.max.bytes`): size each new `.index` and
    /// `.timeindex` is preallocated to, rounded down to whole entries (8 and 12 bytes); a full
    /// index forces a roll. Default 10 MiB, at least 4, at most `i32::MAX`. Acts on it: weir-log.
    pub segment_index_bytes: u32,
    /// `index.interval.bytes` (`log.index.interval.bytes`): bytes appended between index
    /// entries. Default 4096, at least 0. Acts on it: weir-log.
    pub index_interval_bytes: u32,
    /// `flush.messages` (`log.flush.interval.messages`): fsync once this many messages are
    /// unflushed. Default `i64::MAX` (never; the OS flushes), at least 1. Acts on it: weir-log.
    pub flush_messages: i64,
    /// `flush.ms` (`log.flush.interval.ms`, else `log.flush.scheduler.interval.ms`): fsync once
    /// this long has passed since the last flush. Default `i64::MAX` (never), at least 0.
    /// Acts on it: weir-log's flusher.
    pub flush_ms: i64,
    /// `retention.bytes` (`log.retention.bytes`): per-partition size limit for the `delete`
    /// policy; negative means no limit. Default -1, any value. Acts on it: weir-log retention.
    pub retention_bytes: i64,
    /// `retention.ms` (`log.retention.ms`, else `.minutes`, else `.hours`): delete segments
    /// whose newest record is older than this, under the `delete` policy; -1 keeps data
    /// forever. Default 7 days; at least -1 per topic (0 allowed), and -1 or at least 1 at the
    /// broker level (any negative broker value means -1). Acts on it: weir-log retention.
    pub retention_ms: i64,
    /// `cleanup.policy` (`log.cleanup.policy`). Default `delete`. Acts on it: weir-log
    /// retention and cleaner.
    pub cleanup_policy: CleanupPolicy,
    /// `min.cleanable.dirty.ratio` (`log.cleaner.min.cleanable.ratio`): the dirty/total ratio
    /// above which the cleaner picks a log. Default 0.5, in [0, 1]. Kafka also lets NaN
    /// through its range check; Weir rejects it. Acts on it: weir-log cleaner.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms` (`log.cleaner.min.compaction.lag.ms`): records younger than
    /// this are never compacted. Default 0, at least 0, at most `max_compaction_lag_ms`.
    /// Acts on it: weir-log cleaner.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms` (`log.cleaner.max.compaction.lag.ms`): a log holding a record
    /// left uncompacted for longer than this is cleaned whatever its dirty ratio, and its
    /// segments roll at least this often. Default `i64::MAX`, at least 1. Acts on it: weir-log
    /// cleaner and roll.
    pub max_compaction_lag_ms: i64,
    /// `delete.retention.ms` (`log.cleaner.delete.retention.ms`): how long a tombstone stays
    /// once the cleaner has first seen it (v2: its batch's delete horizon). Default 1 day, at
    /// least 0. Acts on it: weir-log cleaner.
    pub delete_retention_ms: i64,
    /// `file.delete.delay.ms` (`log.segment.delete.delay.ms`): how long a `.deleted` file
    /// waits before removal. Default 60000, at least 0. Acts on it: weir-log.
    pub file_delete_delay_ms: i64,
    /// `max.message.bytes` (broker `message.max.bytes`): largest record batch accepted,
    /// checked as received and again after any recompression (RecordTooLarge). Default 1048588,
    /// at least 0, at most `i32::MAX`. Acts on it: the produce path.
    pub max_message_bytes: u32,
    /// `message.timestamp.type` (`log.message.timestamp.type`): `CreateTime` (default) or
    /// `LogAppendTime`, case-sensitive. Acts on it: the produce path.
    pub message_timestamp_type: TimestampType,
    /// `message.timestamp.before.max.ms` (`log.message.timestamp.before.max.ms`): under
    /// CreateTime, reject a record whose timestamp is more than this before the broker's clock.
    /// Default `i64::MAX`, at least 0. Acts on it: the produce path.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms` (`log.message.timestamp.after.max.ms`): likewise for
    /// timestamps ahead of the broker's clock. Default one hour (Kafka 4.0's; Kafka 3.x had
    /// no limit), at least 0. Acts on it: the produce path.
    pub message_timestamp_after_max_ms: i64,
    /// `compression.type` (same broker key) with the matching level key applied. Default
    /// `producer`. Acts on it: the produce path.
    pub compression: TopicCompression,
    /// `compression.gzip.level` (same broker key): 1..=9, or -1 (default) for zlib's default.
    /// Used only when `compression.type` is gzip; already applied to `compression`.
    pub compression_gzip_level: i32,
    /// `compression.lz4.level` (same broker key): 1..=17, default 9. Used only when
    /// `compression.type` is lz4; Weir's LZ4 encoder has only level 9, so another level is an
    /// error once `compression.type=lz4` (see `CompressionConfig::with_level`).
    pub compression_lz4_level: i32,
    /// `compression.zstd.level` (same broker key): -131072..=22, default 3. Used only when
    /// `compression.type` is zstd; already applied to `compression`.
    pub compression_zstd_level: i32,
    /// `min.insync.replicas` (same broker key): with acks=all, fail the produce
    /// (NOT_ENOUGH_REPLICAS) when fewer replicas are in sync. Default 1, at least 1.
    /// Acts on it: the produce path, not weir-log.
    pub min_insync_replicas: i32,
    /// `preallocate` (`log.preallocate`): Kafka creates each new `.log` file at
    /// `segment.bytes` (a Windows-oriented setting). Default false. Accepted and shown in
    /// DescribeConfigs, but Weir does not act on it: on Linux file systems allocating on
    /// write costs nothing, and a preallocated file's zero tail would have to be told
    /// apart from a torn write at every recovery.
    pub preallocate: bool,
    /// `unclean.leader.election.enable` (same broker key). Default false. Weir has no follower
    /// replicas: accepted and reported, no effect.
    pub unclean_leader_election_enable: bool,
    /// `leader.replication.throttled.replicas` (no broker key): `*` or a list of
    /// `partition:broker`. Default empty. Weir has no follower replicas: accepted and
    /// reported, no effect.
    pub leader_replication_throttled_replicas: Vec<String>,
    /// `follower.replication.throttled.replicas` (no broker key): as above. Accepted and
    /// reported, no effect.
    pub follower_replication_throttled_replicas: Vec<String>,
    /// `remote.storage.enable` (no broker key): tiered storage. Weir has none, so only
    /// `false` (the default) is accepted; Kafka gives the same refusal when
    /// `remote.log.storage.system.enable` is off, its default.
    pub remote_storage_enable: bool,
    /// `local.retention.ms` (`log.local.retention.ms`): retention of local segments under
    /// tiered storage; -2 (default) means "use retention.ms", at least -2. Without tiered
    /// storage it has no effect, in Kafka or Weir: accepted and reported.
    pub local_retention_ms: i64,
    /// `local.retention.bytes` (`log.local.retention.bytes`): as above, for
    /// `retention.bytes`. Accepted and reported, no effect.
    pub local_retention_bytes: i64,
    /// `remote.log.copy.disable` (no broker key, Kafka 3.9): tiered storage only. Default
    /// false. Accepted and reported, no effect.
    pub remote_log_copy_disable: bool,
    /// `remote.log.delete.on.disable` (no broker key, Kafka 3.9): tiered storage only.
    /// Default false. Accepted and reported, no effect.
    pub remote_log_delete_on_disable: bool,
    /// `remote.copy.lag.ms` (`log.remote.copy.lag.ms`, Kafka 4.4): how old a closed segment's
    /// newest record must be before tiered storage uploads it; -1 means the local retention
    /// time, 0 (default) at once, at least -1. Accepted and reported, no effect.
    pub remote_copy_lag_ms: i64,
    /// `remote.copy.lag.bytes` (`log.remote.copy.lag.bytes`, Kafka 4.4): likewise by the bytes
    /// that follow the segment; -1 (default) means the local retention size, at least -1.
    /// Accepted and reported, no effect.
    pub remote_copy_lag_bytes: i64,
    /// `errors.deadletterqueue.group.enable` (no broker key, Kafka 4.4): whether share groups
    /// may use this topic as their dead-letter queue. Default false. Weir has no share groups:
    /// accepted and reported, no effect.
    pub errors_deadletterqueue_group_enable: bool,
    /// `max.decompressed.message.bytes` (same broker key, Kafka 4.4): the largest single
    /// record, decompressed, Kafka accepts where it decompresses. Default and maximum
    /// 2147483639, at least 1. Accepted and reported; Weir does not enforce it.
    pub max_decompressed_message_bytes: i32,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * DAY_MS,
            segment_jitter_ms: 0,
            segment_index_bytes: (10 * MIB) as u32,
            index_interval_bytes: (4 * KIB) as u32,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            retention_bytes: -1,
            retention_ms: 7 * DAY_MS,
            cleanup_policy: CleanupPolicy::Delete,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            delete_retention_ms: DAY_MS,
            file_delete_delay_ms: 60_000,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            message_timestamp_type: TimestampType::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: HOUR_MS,
            compression: TopicCompression::Producer,
            compression_gzip_level: GZIP_DEFAULT_LEVEL,
            compression_lz4_level: LZ4_DEFAULT_LEVEL,
            compression_zstd_level: ZSTD_DEFAULT_LEVEL,
            min_insync_replicas: 1,
            preallocate: false,
            unclean_leader_election_enable: false,
            leader_replication_throttled_replicas: Vec::new(),
            follower_replication_throttled_replicas: Vec::new(),
            remote_storage_enable: false,
            local_retention_ms: -2,
            local_retention_bytes: -2,
            remote_log_copy_disable: false,
            remote_log_delete_on_disable: false,
            remote_copy_lag_ms: 0,
            remote_copy_lag_bytes: -1,
            errors_deadletterqueue_group_enable: false,
            max_decompressed_message_bytes: MAX_DECOMPRESSED_MESSAGE_BYTES,
        }
    }
}

impl LogConfig {
    /// The roll time a segment is held to (Kafka's `maxSegmentMs`): for a compacted log,
    /// `min(segment.ms, max.compaction.lag.ms)`, so that dirty records become cleanable in
    /// time; otherwise `segment.ms`. The per-segment jitter is subtracted from this.
    pub fn effective_segment_ms(&self) -> i64 {
        if self.cleanup_policy.compacts() && self.max_compaction_lag_ms > 0 {
            self.segment_ms.min(self.max_compaction_lag_ms)
        } else {
            self.segment_ms
        }
    }

    /// The exclusive upper bound of the per-segment roll jitter: 0 when `segment.jitter.ms` is
    /// 0, else `min(segment.jitter.ms, segment.ms)` (note: `segment.ms`, not the effective roll
    /// time). Kafka draws the jitter once per segment as a non-negative 31-bit random number
    /// modulo this bound.
    pub fn segment_jitter_bound_ms(&self) -> i64 {
        if self.segment_jitter_ms <= 0 {
            0
        } else {
            self.segment_jitter_ms.min(self.segment_ms)
        }
    }
}
