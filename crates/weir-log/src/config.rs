//! Partition-log configuration: Kafka's topic-level keys with their defaults and value rules,
//! their server.properties synonyms, and the DescribeConfigs view of them. Pure parsing and
//! validation: it must do no I/O, read no clock or environment, and never panic on any input.

use std::fmt;

use weir_kafka::config::{ConfigEntry, ConfigSource, ConfigType};
use weir_record::{Compression, CompressionConfig, TimestampType};

/// A rejected key or value. `message` says what was given and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
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
/// Kafka's default for the deprecated `message.format.version` (ignored since 3.0).
pub const DEFAULT_MESSAGE_FORMAT_VERSION: &str = "3.0-IV1";

const GZIP_DEFAULT_LEVEL: i32 = -1;
const LZ4_DEFAULT_LEVEL: i32 = 9;
const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// A partition log's configuration: Kafka's topic-level settings, with Kafka's defaults.
///
/// The key set and every default, range and precedence rule are Kafka 3.9's (`LogConfig`,
/// `ServerLogConfigs`, `ServerTopicConfigSynonyms`, `KafkaConfig`, `ConfigDef`); where Weir
/// differs, the field's doc says so.
///
/// Build the broker defaults with [`LogConfig::default`] or
/// [`LogConfig::from_broker_properties`], and a topic's config with
/// [`LogConfig::with_overrides`] on those defaults. To alter a topic, apply its whole override
/// set to the broker defaults again (as Kafka does), rather than stacking overrides: the
/// deprecated `message.timestamp.difference.max.ms` fallback depends on it.
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
    /// Default `i64::MAX`, at least 0. Holds the *effective* value: when the configured value
    /// is `i64::MAX`, Kafka 3.x uses `message.timestamp.difference.max.ms` instead, and so does
    /// this field. (DescribeConfigs then prints the effective value where Kafka prints
    /// `i64::MAX`.) Acts on it: the produce path.
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms` (`log.message.timestamp.after.max.ms`): likewise for
    /// timestamps ahead of the broker's clock. Default `i64::MAX` (Kafka 3.x; Kafka 4.0's
    /// default is one hour), at least 0, effective value as above. Acts on it: the produce path.
    pub message_timestamp_after_max_ms: i64,
    /// `message.timestamp.difference.max.ms` (`log.message.timestamp.difference.max.ms`):
    /// deprecated in 3.6, removed in 4.0. Only a fallback for the two fields above, already
    /// applied to them; nothing else reads it. Default `i64::MAX`, at least 0.
    pub message_timestamp_difference_max_ms: i64,
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
    /// `message.downconversion.enable` (`log.message.downconversion.enable`): whether Fetch
    /// requests too old for v2 batches (Fetch v0–v3) are served by converting to v0/v1.
    /// Default true; removed in Kafka 4.0. Acts on it: the fetch path, not weir-log.
    pub message_downconversion_enable: bool,
    /// `message.format.version` (`log.message.format.version`): deprecated; any Kafka 3.x
    /// broker ignores it (every batch is v2). Accepted if it names a Kafka version Kafka 3.9
    /// knows (e.g. `2.8`, `3.0-IV1`), kept as given for DescribeConfigs, no effect.
    /// Default `3.0-IV1`.
    pub message_format_version: String,
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
            message_timestamp_after_max_ms: i64::MAX,
            message_timestamp_difference_max_ms: i64::MAX,
            compression: TopicCompression::Producer,
            compression_gzip_level: GZIP_DEFAULT_LEVEL,
            compression_lz4_level: LZ4_DEFAULT_LEVEL,
            compression_zstd_level: ZSTD_DEFAULT_LEVEL,
            min_insync_replicas: 1,
            preallocate: false,
            unclean_leader_election_enable: false,
            message_downconversion_enable: true,
            message_format_version: DEFAULT_MESSAGE_FORMAT_VERSION.to_string(),
            leader_replication_throttled_replicas: Vec::new(),
            follower_replication_throttled_replicas: Vec::new(),
            remote_storage_enable: false,
            local_retention_ms: -2,
            local_retention_bytes: -2,
            remote_log_copy_disable: false,
            remote_log_delete_on_disable: false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The key table.

struct KeyDef {
    name: &'static str,
    config_type: ConfigType,
    /// Broker keys that set this default, highest priority first (Kafka's
    /// `ServerTopicConfigSynonyms`).
    broker_synonyms: &'static [&'static str],
    doc: &'static str,
}

/// Every topic-level key Kafka 3.9 accepts, sorted (the order Kafka's `configNames()` uses).
const TOPIC_KEYS: &[&str] = &[
    "cleanup.policy",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "delete.retention.ms",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.log.copy.disable",
    "remote.log.delete.on.disable",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.jitter.ms",
    "segment.ms",
    "unclean.leader.election.enable",
];

/// Same keys, same order as `TOPIC_KEYS` (a test checks it).
const KEY_DEFS: &[KeyDef] = &[
    KeyDef {
        name: "cleanup.policy",
        config_type: ConfigType::List,
        broker_synonyms: &["log.cleanup.policy"],
        doc: "What happens to old log segments: \"delete\" removes them once retention.ms or \
              retention.bytes is exceeded; \"compact\" keeps only the latest record of each key; \
              \"compact,delete\" does both.",
    },
    KeyDef {
        name: "compression.gzip.level",
        config_type: ConfigType::Int,
        broker_synonyms: &["compression.gzip.level"],
        doc: "Level used when compression.type is gzip: 1 to 9, or -1 for the codec's default.",
    },
    KeyDef {
        name: "compression.lz4.level",
        config_type: ConfigType::Int,
        broker_synonyms: &["compression.lz4.level"],
        doc: "Level used when compression.type is lz4: 1 to 17 in Kafka. Weir's encoder \
              supports only the default, 9.",
    },
    KeyDef {
        name: "compression.type",
        config_type: ConfigType::String,
        broker_synonyms: &["compression.type"],
        doc: "Codec batches are stored with: gzip, snappy, lz4 or zstd; \"uncompressed\" for \
              none; \"producer\" to keep the codec each producer chose.",
    },
    KeyDef {
        name: "compression.zstd.level",
        config_type: ConfigType::Int,
        broker_synonyms: &["compression.zstd.level"],
        doc: "Level used when compression.type is zstd: -131072 to 22.",
    },
    KeyDef {
        name: "delete.retention.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.cleaner.delete.retention.ms"],
        doc: "How long tombstones stay in a compacted log, which bounds how long a consumer \
              reading from the start may take and still see every deletion.",
    },
    KeyDef {
        name: "file.delete.delay.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.segment.delete.delay.ms"],
        doc: "How long a segment file marked for deletion waits before it is removed from disk.",
    },
    KeyDef {
        name: "flush.messages",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.flush.interval.messages"],
        doc: "Force an fsync after this many messages. By default the log relies on the \
              operating system to write data out.",
    },
    KeyDef {
        name: "flush.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
        doc: "Force an fsync once this many milliseconds have passed since the last one. By \
              default the log relies on the operating system to write data out.",
    },
    KeyDef {
        name: "follower.replication.throttled.replicas",
        config_type: ConfigType::List,
        broker_synonyms: &[],
        doc: "Replicas, as partition:broker pairs or \"*\", whose replication is throttled on \
              the follower side. Weir has no follower replicas: accepted, no effect.",
    },
    KeyDef {
        name: "index.interval.bytes",
        config_type: ConfigType::Int,
        broker_synonyms: &["log.index.interval.bytes"],
        doc: "Bytes of log written between two offset index entries. Smaller values make \
              lookups land closer to their target and the index larger.",
    },
    KeyDef {
        name: "leader.replication.throttled.replicas",
        config_type: ConfigType::List,
        broker_synonyms: &[],
        doc: "Replicas, as partition:broker pairs or \"*\", whose replication is throttled on \
              the leader side. Weir has no follower replicas: accepted, no effect.",
    },
    KeyDef {
        name: "local.retention.bytes",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.local.retention.bytes"],
        doc: "Local size limit under tiered storage; -2 means use retention.bytes. Weir has no \
              tiered storage: accepted, no effect.",
    },
    KeyDef {
        name: "local.retention.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.local.retention.ms"],
        doc: "Local time limit under tiered storage; -2 means use retention.ms. Weir has no \
              tiered storage: accepted, no effect.",
    },
    KeyDef {
        name: "max.compaction.lag.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.cleaner.max.compaction.lag.ms"],
        doc: "Longest a record may stay uncompacted: past it the log is cleaned whatever its \
              dirty ratio, and segments roll at least this often.",
    },
    KeyDef {
        name: "max.message.bytes",
        config_type: ConfigType::Int,
        broker_synonyms: &["message.max.bytes"],
        doc: "Largest record batch accepted, measured after compression.",
    },
    KeyDef {
        name: "message.downconversion.enable",
        config_type: ConfigType::Boolean,
        broker_synonyms: &["log.message.downconversion.enable"],
        doc: "Whether consumers too old to read v2 batches are served by converting batches to \
              the older formats; if false they get UNSUPPORTED_VERSION.",
    },
    KeyDef {
        name: "message.format.version",
        config_type: ConfigType::String,
        broker_synonyms: &["log.message.format.version"],
        doc: "Deprecated: ignored since Kafka 3.0, every batch is written in format v2. \
              Accepted if it names a Kafka version.",
    },
    KeyDef {
        name: "message.timestamp.after.max.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.message.timestamp.after.max.ms"],
        doc: "With CreateTime, reject records whose timestamp is more than this far ahead of \
              the broker's clock.",
    },
    KeyDef {
        name: "message.timestamp.before.max.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.message.timestamp.before.max.ms"],
        doc: "With CreateTime, reject records whose timestamp is more than this far behind the \
              broker's clock.",
    },
    KeyDef {
        name: "message.timestamp.difference.max.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.message.timestamp.difference.max.ms"],
        doc: "Deprecated: used for the before/after limits that are left at their maximum.",
    },
    KeyDef {
        name: "message.timestamp.type",
        config_type: ConfigType::String,
        broker_synonyms: &["log.message.timestamp.type"],
        doc: "Record timestamps are the producer's (CreateTime) or the broker's time of append \
              (LogAppendTime).",
    },
    KeyDef {
        name: "min.cleanable.dirty.ratio",
        config_type: ConfigType::Double,
        broker_synonyms: &["log.cleaner.min.cleanable.ratio"],
        doc: "Share of a compacted log that must be uncleaned before the cleaner picks it: \
              higher means rarer, cheaper cleaning and more duplicate records kept.",
    },
    KeyDef {
        name: "min.compaction.lag.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.cleaner.min.compaction.lag.ms"],
        doc: "Shortest time a record stays uncompacted.",
    },
    KeyDef {
        name: "min.insync.replicas",
        config_type: ConfigType::Int,
        broker_synonyms: &["min.insync.replicas"],
        doc: "With acks=all, writes fail with NOT_ENOUGH_REPLICAS when fewer replicas than this \
              are in sync.",
    },
    KeyDef {
        name: "preallocate",
        config_type: ConfigType::Boolean,
        broker_synonyms: &["log.preallocate"],
        doc: "Whether a new segment file is created at its full size on disk.",
    },
    KeyDef {
        name: "remote.log.copy.disable",
        config_type: ConfigType::Boolean,
        broker_synonyms: &[],
        doc: "Tiered storage: stop copying segments to remote storage. Weir has no tiered \
              storage: accepted, no effect.",
    },
    KeyDef {
        name: "remote.log.delete.on.disable",
        config_type: ConfigType::Boolean,
        broker_synonyms: &[],
        doc: "Tiered storage: delete remote data when tiering is turned off. Weir has no tiered \
              storage: accepted, no effect.",
    },
    KeyDef {
        name: "remote.storage.enable",
        config_type: ConfigType::Boolean,
        broker_synonyms: &[],
        doc: "Tiered storage for this topic. Weir has no tiered storage: only false is accepted.",
    },
    KeyDef {
        name: "retention.bytes",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.retention.bytes"],
        doc: "Largest size a partition may reach before its oldest segments are deleted (delete \
              policy); -1 means no limit. It applies per partition.",
    },
    KeyDef {
        name: "retention.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
        doc: "How long records are kept before their segment is deleted (delete policy); -1 \
              means no time limit.",
    },
    KeyDef {
        name: "segment.bytes",
        config_type: ConfigType::Int,
        broker_synonyms: &["log.segment.bytes"],
        doc: "Size at which a log segment is closed and a new one started. Retention and \
              compaction work a whole segment at a time.",
    },
    KeyDef {
        name: "segment.index.bytes",
        config_type: ConfigType::Int,
        broker_synonyms: &["log.index.size.max.bytes"],
        doc: "Size each segment's offset and time indexes are preallocated to; a full index \
              starts a new segment.",
    },
    KeyDef {
        name: "segment.jitter.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.roll.jitter.ms", "log.roll.jitter.hours"],
        doc: "Largest random amount taken off segment.ms per segment, so that many logs do not \
              roll at once.",
    },
    KeyDef {
        name: "segment.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.roll.ms", "log.roll.hours"],
        doc: "Time after which a segment is closed even if not full, so retention and \
              compaction can reach its data.",
    },
    KeyDef {
        name: "unclean.leader.election.enable",
        config_type: ConfigType::Boolean,
        broker_synonyms: &["unclean.leader.election.enable"],
        doc: "Whether a replica outside the ISR may become leader, at the cost of losing data. \
              Weir has no follower replicas: accepted, no effect.",
    },
];

/// Broker keys read by [`LogConfig::from_broker_properties`].
const BROKER_KEYS: &[&str] = &[
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleanup.policy",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "log.flush.scheduler.interval.ms",
    "log.index.interval.bytes",
    "log.index.size.max.bytes",
    "log.local.retention.bytes",
    "log.local.retention.ms",
    "log.message.downconversion.enable",
    "log.message.format.version",
    "log.message.timestamp.after.max.ms",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.difference.max.ms",
    "log.message.timestamp.type",
    "log.preallocate",
    "log.retention.bytes",
    "log.retention.hours",
    "log.retention.minutes",
    "log.retention.ms",
    "log.roll.hours",
    "log.roll.jitter.hours",
    "log.roll.jitter.ms",
    "log.roll.ms",
    "log.segment.bytes",
    "log.segment.delete.delay.ms",
    "message.max.bytes",
    "min.insync.replicas",
    "unclean.leader.election.enable",
];

/// Broker keys that map one-to-one onto a topic key with the same value rules.
const BROKER_SIMPLE: &[(&str, &str)] = &[
    ("log.segment.bytes", "segment.bytes"),
    ("log.index.size.max.bytes", "segment.index.bytes"),
    ("log.index.interval.bytes", "index.interval.bytes"),
    ("log.flush.interval.messages", "flush.messages"),
    ("log.retention.bytes", "retention.bytes"),
    ("log.cleanup.policy", "cleanup.policy"),
    (
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
    ),
    ("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    ("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"),
    ("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    ("log.segment.delete.delay.ms", "file.delete.delay.ms"),
    ("message.max.bytes", "max.message.bytes"),
    ("log.message.timestamp.type", "message.timestamp.type"),
    (
        "log.message.timestamp.difference.max.ms",
        "message.timestamp.difference.max.ms",
    ),
    (
        "log.message.timestamp.before.max.ms",
        "message.timestamp.before.max.ms",
    ),
    (
        "log.message.timestamp.after.max.ms",
        "message.timestamp.after.max.ms",
    ),
    ("log.message.format.version", "message.format.version"),
    ("compression.type", "compression.type"),
    ("compression.gzip.level", "compression.gzip.level"),
    ("compression.lz4.level", "compression.lz4.level"),
    ("compression.zstd.level", "compression.zstd.level"),
    ("min.insync.replicas", "min.insync.replicas"),
    ("log.preallocate", "preallocate"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
    ),
    (
        "log.message.downconversion.enable",
        "message.downconversion.enable",
    ),
    ("log.local.retention.ms", "local.retention.ms"),
    ("log.local.retention.bytes", "local.retention.bytes"),
];

fn key_def(key: &str) -> Option<&'static KeyDef> {
    KEY_DEFS.iter().find(|d| d.name == key)
}

// ---------------------------------------------------------------------------------------------
// The public API.

impl LogConfig {
    /// The topic-level key names, sorted.
    pub fn topic_keys() -> &'static [&'static str] {
        TOPIC_KEYS
    }

    /// Is this a topic-level key Kafka knows? Exact, case-sensitive match, as in Kafka.
    pub fn is_topic_key(key: &str) -> bool {
        TOPIC_KEYS.contains(&key)
    }

    /// The broker keys that set this topic key's default, highest priority first (for the
    /// synonyms list of DescribeConfigs); empty for an unknown key or one with no broker key.
    pub fn broker_synonyms(key: &str) -> &'static [&'static str] {
        key_def(key).map_or(&[], |d| d.broker_synonyms)
    }

    /// The broker keys [`LogConfig::from_broker_properties`] reads, sorted.
    pub fn broker_keys() -> &'static [&'static str] {
        BROKER_KEYS
    }

    /// Applies topic-level overrides (Kafka's topic config names) on top of `self` (the broker
    /// defaults). An unknown key or a bad value is an error naming the key. A key given twice
    /// takes its last value. After all keys, the cross-key rules run:
    /// `min.compaction.lag.ms <= max.compaction.lag.ms`, the deprecated
    /// `message.timestamp.difference.max.ms` fallback, and building `compression` from
    /// `compression.type` and its level.
    pub fn with_overrides<'a>(
        &self,
        overrides: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<LogConfig, ConfigError> {
        let mut draft = Draft::new(self);
        for (key, value) in overrides {
            draft.apply(key, value)?;
        }
        draft.finish(|topic_key| topic_key)
    }

    /// Checks one topic-level key=value without applying it (against Kafka's defaults for the
    /// cross-key rules).
    pub fn validate(key: &str, value: &str) -> Result<(), ConfigError> {
        LogConfig::default()
            .with_overrides([(key, value)])
            .map(|_| ())
    }

    /// Broker defaults from a broker's properties (server.properties names). Keys this module
    /// does not know are ignored (the broker checks them); a known key with a bad value is an
    /// error naming the broker key. Returns the config and the known keys present, each once,
    /// in first-seen order (including keys that lost on precedence, e.g. `log.retention.hours`
    /// next to `log.retention.ms`: Kafka still validates them).
    ///
    /// Precedence, as Kafka's `KafkaConfig`: `log.roll.ms` over `log.roll.hours`;
    /// `log.roll.jitter.ms` over `log.roll.jitter.hours`; `log.flush.interval.ms` over
    /// `log.flush.scheduler.interval.ms`; `log.retention.ms` over `log.retention.minutes` over
    /// `log.retention.hours`, where any negative result means -1 (forever) and 0 is refused.
    pub fn from_broker_properties<'a>(
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(LogConfig, Vec<String>), ConfigError> {
        let mut seen: Vec<(&'a str, &'a str)> = Vec::new();
        for (key, value) in props {
            if !BROKER_KEYS.contains(&key) {
                continue;
            }
            match seen.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => seen.push((key, value)),
            }
        }
        let get = |key: &str| seen.iter().find(|(k, _)| *k == key).map(|&(_, v)| v);

        let mut draft = Draft::new(&LogConfig::default());
        for &(broker_key, topic_key) in BROKER_SIMPLE {
            if let Some(value) = get(broker_key) {
                draft
                    .apply(topic_key, value)
                    .map_err(|e| err(broker_key, e.message))?;
            }
        }

        // segment.ms: log.roll.ms, else log.roll.hours (at least 1); the result at least 1.
        let roll_ms = get("log.roll.ms")
            .map(|v| parse_long("log.roll.ms", v, "a 64-bit integer of at least 1"))
            .transpose()?;
        let roll_hours = get("log.roll.hours")
            .map(|v| int_at_least("log.roll.hours", v, 1))
            .transpose()?;
        if let Some(ms) = roll_ms {
            draft.cfg.segment_ms = check_at_least("log.roll.ms", ms, 1)?;
        } else if let Some(hours) = roll_hours {
            draft.cfg.segment_ms = i64::from(hours) * HOUR_MS;
        }

        // segment.jitter.ms: log.roll.jitter.ms, else log.roll.jitter.hours; at least 0.
        let jitter_ms = get("log.roll.jitter.ms")
            .map(|v| parse_long("log.roll.jitter.ms", v, "a 64-bit integer of at least 0"))
            .transpose()?;
        let jitter_hours = get("log.roll.jitter.hours")
            .map(|v| int_at_least("log.roll.jitter.hours", v, 0))
            .transpose()?;
        if let Some(ms) = jitter_ms {
            draft.cfg.segment_jitter_ms = check_at_least("log.roll.jitter.ms", ms, 0)?;
        } else if let Some(hours) = jitter_hours {
            draft.cfg.segment_jitter_ms = i64::from(hours) * HOUR_MS;
        }

        // flush.ms: log.flush.interval.ms, else log.flush.scheduler.interval.ms; at least 0.
        const FLUSH_ALLOWED: &str = "a 64-bit integer of at least 0";
        let flush_ms = get("log.flush.interval.ms")
            .map(|v| parse_long("log.flush.interval.ms", v, FLUSH_ALLOWED))
            .transpose()?;
        let flush_scheduler_ms = get("log.flush.scheduler.interval.ms")
            .map(|v| parse_long("log.flush.scheduler.interval.ms", v, FLUSH_ALLOWED))
            .transpose()?;
        if let Some(ms) = flush_ms {
            draft.cfg.flush_ms = check_at_least("log.flush.interval.ms", ms, 0)?;
        } else if let Some(ms) = flush_scheduler_ms {
            draft.cfg.flush_ms = check_at_least("log.flush.scheduler.interval.ms", ms, 0)?;
        }

        // retention.ms: log.retention.ms, else .minutes, else .hours; negative means -1.
        const RETENTION_ALLOWED: &str = "-1 (keep forever) or at least 1";
        let retention_ms = get("log.retention.ms")
            .map(|v| parse_long("log.retention.ms", v, RETENTION_ALLOWED))
            .transpose()?;
        let retention_minutes = get("log.retention.minutes")
            .map(|v| parse_int("log.retention.minutes", v, RETENTION_ALLOWED))
            .transpose()?;
        let retention_hours = get("log.retention.hours")
            .map(|v| parse_int("log.retention.hours", v, RETENTION_ALLOWED))
            .transpose()?;
        let retention = if let Some(ms) = retention_ms {
            Some(("log.retention.ms", ms))
        } else if let Some(minutes) = retention_minutes {
            Some(("log.retention.minutes", i64::from(minutes) * 60_000))
        } else {
            retention_hours.map(|hours| ("log.retention.hours", i64::from(hours) * HOUR_MS))
        };
        if let Some((key, ms)) = retention {
            draft.cfg.retention_ms = if ms < 0 {
                -1
            } else if ms == 0 {
                return Err(err(
                    key,
                    "must be -1 (or any negative value: keep forever) or at least 1 ms, got 0",
                ));
            } else {
                ms
            };
        }

        let config = draft.finish(broker_key_for)?;
        Ok((config, seen.iter().map(|(k, _)| k.to_string()).collect()))
    }

    /// Every topic-level entry with its current value as Kafka prints it, for DescribeConfigs,
    /// in [`LogConfig::topic_keys`] order. An entry's source is `DynamicTopic` if its key is in
    /// `topic_overrides`, else `StaticBroker` if any of its broker synonyms is in `broker_set`
    /// (e.g. `log.retention.hours` for `retention.ms`), else `Default`.
    pub fn describe(&self, topic_overrides: &[&str], broker_set: &[&str]) -> Vec<ConfigEntry> {
        KEY_DEFS
            .iter()
            .map(|def| {
                let source = if topic_overrides.contains(&def.name) {
                    ConfigSource::DynamicTopic
                } else if def.broker_synonyms.iter().any(|s| broker_set.contains(s)) {
                    ConfigSource::StaticBroker
                } else {
                    ConfigSource::Default
                };
                ConfigEntry {
                    name: def.name.to_string(),
                    value: Some(self.value_of(def.name).unwrap_or_default()),
                    source,
                    // Every topic-level key can be altered, and none is a password.
                    read_only: false,
                    sensitive: false,
                    config_type: def.config_type,
                    documentation: Some(def.doc.to_string()),
                    synonyms: Vec::new(),
                }
            })
            .collect()
    }

    /// One topic-level key's current value as Kafka prints it; `None` for an unknown key.
    pub fn value_of(&self, key: &str) -> Option<String> {
        let value = match key {
            "cleanup.policy" => self.cleanup_policy.as_str().to_string(),
            "compression.gzip.level" => self.compression_gzip_level.to_string(),
            "compression.lz4.level" => self.compression_lz4_level.to_string(),
            "compression.type" => self.compression.name().to_string(),
            "compression.zstd.level" => self.compression_zstd_level.to_string(),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "file.delete.delay.ms" => self.file_delete_delay_ms.to_string(),
            "flush.messages" => self.flush_messages.to_string(),
            "flush.ms" => self.flush_ms.to_string(),
            "follower.replication.throttled.replicas" => {
                self.follower_replication_throttled_replicas.join(",")
            }
            "index.interval.bytes" => self.index_interval_bytes.to_string(),
            "leader.replication.throttled.replicas" => {
                self.leader_replication_throttled_replicas.join(",")
            }
            "local.retention.bytes" => self.local_retention_bytes.to_string(),
            "local.retention.ms" => self.local_retention_ms.to_string(),
            "max.compaction.lag.ms" => self.max_compaction_lag_ms.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "message.downconversion.enable" => self.message_downconversion_enable.to_string(),
            "message.format.version" => self.message_format_version.clone(),
            "message.timestamp.after.max.ms" => self.message_timestamp_after_max_ms.to_string(),
            "message.timestamp.before.max.ms" => self.message_timestamp_before_max_ms.to_string(),
            "message.timestamp.difference.max.ms" => {
                self.message_timestamp_difference_max_ms.to_string()
            }
            "message.timestamp.type" => self.message_timestamp_type.name().to_string(),
            "min.cleanable.dirty.ratio" => java_double_to_string(self.min_cleanable_dirty_ratio),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "min.insync.replicas" => self.min_insync_replicas.to_string(),
            "preallocate" => self.preallocate.to_string(),
            "remote.log.copy.disable" => self.remote_log_copy_disable.to_string(),
            "remote.log.delete.on.disable" => self.remote_log_delete_on_disable.to_string(),
            "remote.storage.enable" => self.remote_storage_enable.to_string(),
            "retention.bytes" => self.retention_bytes.to_string(),
            "retention.ms" => self.retention_ms.to_string(),
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.index.bytes" => self.segment_index_bytes.to_string(),
            "segment.jitter.ms" => self.segment_jitter_ms.to_string(),
            "segment.ms" => self.segment_ms.to_string(),
            "unclean.leader.election.enable" => self.unclean_leader_election_enable.to_string(),
            _ => return None,
        };
        Some(value)
    }

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

/// The highest-priority broker key for a topic key, for errors raised in cross-key checks
/// while reading broker properties.
fn broker_key_for(topic_key: &'static str) -> &'static str {
    LogConfig::broker_synonyms(topic_key)
        .first()
        .copied()
        .unwrap_or(topic_key)
}

// ---------------------------------------------------------------------------------------------
// Applying keys.

/// `compression.type` before its level is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CompressionKind {
    Producer,
    Uncompressed,
    Codec(Compression),
}

const COMPRESSION_TYPES: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];

/// A config being built: the compression type is kept apart until its level is known.
struct Draft {
    cfg: LogConfig,
    compression: CompressionKind,
}

impl Draft {
    fn new(base: &LogConfig) -> Draft {
        let compression = match base.compression {
            TopicCompression::Producer => CompressionKind::Producer,
            TopicCompression::Uncompressed => CompressionKind::Uncompressed,
            TopicCompression::Codec(c) if c.codec == Compression::None => {
                CompressionKind::Uncompressed
            }
            TopicCompression::Codec(c) => CompressionKind::Codec(c.codec),
        };
        Draft {
            cfg: base.clone(),
            compression,
        }
    }

    fn apply(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let c = &mut self.cfg;
        match key {
            "cleanup.policy" => c.cleanup_policy = parse_cleanup_policy(key, value)?,
            "compression.gzip.level" => {
                c.compression_gzip_level = int_level(key, value, 1, 9, Some(GZIP_DEFAULT_LEVEL))?
            }
            "compression.lz4.level" => {
                c.compression_lz4_level = int_level(key, value, 1, 17, None)?
            }
            "compression.type" => self.compression = parse_compression_type(key, value)?,
            "compression.zstd.level" => {
                c.compression_zstd_level = int_level(key, value, -131_072, 22, None)?
            }
            "delete.retention.ms" => c.delete_retention_ms = long_at_least(key, value, 0)?,
            "file.delete.delay.ms" => c.file_delete_delay_ms = long_at_least(key, value, 0)?,
            "flush.messages" => c.flush_messages = long_at_least(key, value, 1)?,
            "flush.ms" => c.flush_ms = long_at_least(key, value, 0)?,
            "follower.replication.throttled.replicas" => {
                c.follower_replication_throttled_replicas = parse_throttled_replicas(key, value)?
            }
            "index.interval.bytes" => c.index_interval_bytes = int_at_least(key, value, 0)? as u32,
            "leader.replication.throttled.replicas" => {
                c.leader_replication_throttled_replicas = parse_throttled_replicas(key, value)?
            }
            "local.retention.bytes" => c.local_retention_bytes = local_retention(key, value)?,
            "local.retention.ms" => c.local_retention_ms = local_retention(key, value)?,
            "max.compaction.lag.ms" => c.max_compaction_lag_ms = long_at_least(key, value, 1)?,
            "max.message.bytes" => c.max_message_bytes = int_at_least(key, value, 0)? as u32,
            "message.downconversion.enable" => {
                c.message_downconversion_enable = parse_bool(key, value)?
            }
            "message.format.version" => {
                c.message_format_version = parse_format_version(key, value)?
            }
            "message.timestamp.after.max.ms" => {
                c.message_timestamp_after_max_ms = long_at_least(key, value, 0)?
            }
            "message.timestamp.before.max.ms" => {
                c.message_timestamp_before_max_ms = long_at_least(key, value, 0)?
            }
            "message.timestamp.difference.max.ms" => {
                c.message_timestamp_difference_max_ms = long_at_least(key, value, 0)?
            }
            "message.timestamp.type" => {
                c.message_timestamp_type = parse_timestamp_type(key, value)?
            }
            "min.cleanable.dirty.ratio" => c.min_cleanable_dirty_ratio = parse_ratio(key, value)?,
            "min.compaction.lag.ms" => c.min_compaction_lag_ms = long_at_least(key, value, 0)?,
            "min.insync.replicas" => c.min_insync_replicas = int_at_least(key, value, 1)?,
            "preallocate" => c.preallocate = parse_bool(key, value)?,
            "remote.log.copy.disable" => c.remote_log_copy_disable = parse_bool(key, value)?,
            "remote.log.delete.on.disable" => {
                c.remote_log_delete_on_disable = parse_bool(key, value)?
            }
            "remote.storage.enable" => {
                if parse_bool(key, value)? {
                    return Err(err(
                        key,
                        "Weir has no tiered storage, so only false is allowed, got true \
                         (a Kafka broker answers the same while \
                         remote.log.storage.system.enable is false)",
                    ));
                }
                c.remote_storage_enable = false;
            }
            "retention.bytes" => c.retention_bytes = parse_long(key, value, "a 64-bit integer")?,
            "retention.ms" => {
                let v = parse_long(
                    key,
                    value,
                    "-1 (keep forever) or a 64-bit integer of at least 0",
                )?;
                if v < -1 {
                    return Err(err(key, format!("must be -1 or at least 0, got {v}")));
                }
                c.retention_ms = v;
            }
            "segment.bytes" => {
                c.segment_bytes = int_at_least(key, value, MIN_SEGMENT_BYTES as i32)? as u64
            }
            "segment.index.bytes" => c.segment_index_bytes = int_at_least(key, value, 4)? as u32,
            "segment.jitter.ms" => c.segment_jitter_ms = long_at_least(key, value, 0)?,
            "segment.ms" => c.segment_ms = long_at_least(key, value, 1)?,
            "unclean.leader.election.enable" => {
                c.unclean_leader_election_enable = parse_bool(key, value)?
            }
            _ => return Err(unknown_key(key)),
        }
        Ok(())
    }

    /// Runs the cross-key rules. `name` maps a topic key to the key the user wrote (itself, or
    /// its broker synonym), for errors.
    fn finish(
        mut self,
        name: impl Fn(&'static str) -> &'static str,
    ) -> Result<LogConfig, ConfigError> {
        let c = &mut self.cfg;
        if c.min_compaction_lag_ms > c.max_compaction_lag_ms {
            return Err(err(
                name("min.compaction.lag.ms"),
                format!(
                    "must not be greater than {} ({}), got {}",
                    name("max.compaction.lag.ms"),
                    c.max_compaction_lag_ms,
                    c.min_compaction_lag_ms
                ),
            ));
        }
        // Kafka 3.x: a before/after limit left at its maximum falls back to the deprecated
        // difference limit.
        if c.message_timestamp_before_max_ms == i64::MAX {
            c.message_timestamp_before_max_ms = c.message_timestamp_difference_max_ms;
        }
        if c.message_timestamp_after_max_ms == i64::MAX {
            c.message_timestamp_after_max_ms = c.message_timestamp_difference_max_ms;
        }
        c.compression = match self.compression {
            CompressionKind::Producer => TopicCompression::Producer,
            CompressionKind::Uncompressed => TopicCompression::Uncompressed,
            CompressionKind::Codec(codec) => {
                let (key, level, default) = match codec {
                    Compression::Gzip => (
                        "compression.gzip.level",
                        c.compression_gzip_level,
                        GZIP_DEFAULT_LEVEL,
                    ),
                    Compression::Lz4 => (
                        "compression.lz4.level",
                        c.compression_lz4_level,
                        LZ4_DEFAULT_LEVEL,
                    ),
                    Compression::Zstd => (
                        "compression.zstd.level",
                        c.compression_zstd_level,
                        ZSTD_DEFAULT_LEVEL,
                    ),
                    Compression::None | Compression::Snappy => ("", 0, 0),
                };
                if key.is_empty() || level == default {
                    TopicCompression::Codec(CompressionConfig::new(codec))
                } else {
                    let config = CompressionConfig::with_level(codec, level).map_err(|e| {
                        err(
                            name(key),
                            format!(
                                "{e} (it applies because {} is {codec})",
                                name("compression.type")
                            ),
                        )
                    })?;
                    TopicCompression::Codec(config)
                }
            }
        };
        Ok(self.cfg)
    }
}

fn unknown_key(key: &str) -> ConfigError {
    // A broker key used where a topic key belongs is a common slip: name the topic key.
    let hint = KEY_DEFS
        .iter()
        .find(|d| d.broker_synonyms.contains(&key) && d.name != key)
        .map(|d| format!("; that is a broker key, the topic-level key is {}", d.name))
        .unwrap_or_default();
    err(
        key,
        format!("unknown topic config (topic-level keys are Kafka's, e.g. retention.ms){hint}"),
    )
}

// ---------------------------------------------------------------------------------------------
// Value parsing, by Kafka's ConfigDef rules: values are trimmed of leading and trailing
// characters up to U+0020 (Java's `String.trim`), integers are decimal with an optional sign,
// booleans are true/false in any case, lists split on commas with whitespace around them.

fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= '\u{20}')
}

/// The `\s` of Java regexes, which Kafka's list splitting uses.
fn is_java_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

fn parse_long(key: &str, value: &str, allowed: &str) -> Result<i64, ConfigError> {
    java_trim(value)
        .parse::<i64>()
        .map_err(|_| err(key, format!("must be {allowed}, got {value:?}")))
}

fn parse_int(key: &str, value: &str, allowed: &str) -> Result<i32, ConfigError> {
    java_trim(value)
        .parse::<i32>()
        .map_err(|_| err(key, format!("must be {allowed}, got {value:?}")))
}

fn check_at_least(key: &str, v: i64, min: i64) -> Result<i64, ConfigError> {
    if v < min {
        return Err(err(key, format!("must be at least {min}, got {v}")));
    }
    Ok(v)
}

fn long_at_least(key: &str, value: &str, min: i64) -> Result<i64, ConfigError> {
    let v = parse_long(key, value, &format!("a 64-bit integer of at least {min}"))?;
    check_at_least(key, v, min)
}

fn int_at_least(key: &str, value: &str, min: i32) -> Result<i32, ConfigError> {
    let v = parse_int(key, value, &format!("a 32-bit integer of at least {min}"))?;
    if v < min {
        return Err(err(key, format!("must be at least {min}, got {v}")));
    }
    Ok(v)
}

/// A compression level: `min..=max`, or `also` (gzip's -1).
fn int_level(
    key: &str,
    value: &str,
    min: i32,
    max: i32,
    also: Option<i32>,
) -> Result<i32, ConfigError> {
    let allowed = match also {
        Some(a) => format!("an integer from {min} to {max}, or {a} for the codec's default"),
        None => format!("an integer from {min} to {max}"),
    };
    let v = parse_int(key, value, &allowed)?;
    if (min..=max).contains(&v) || Some(v) == also {
        Ok(v)
    } else {
        Err(err(key, format!("must be {allowed}, got {v}")))
    }
}

fn local_retention(key: &str, value: &str) -> Result<i64, ConfigError> {
    const ALLOWED: &str = "-2 (use the topic-wide retention), -1 (keep forever) or at least 0";
    let v = parse_long(key, value, ALLOWED)?;
    if v < -2 {
        return Err(err(key, format!("must be {ALLOWED}, got {v}")));
    }
    Ok(v)
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    let t = java_trim(value);
    if t.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if t.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(err(key, format!("must be true or false, got {value:?}")))
    }
}

/// A double in [0, 1]. Java's `Double.parseDouble` also takes a trailing d/f suffix; hex
/// floats are not accepted here. NaN, which Kafka's range check lets through, is refused.
fn parse_ratio(key: &str, value: &str) -> Result<f64, ConfigError> {
    const ALLOWED: &str = "a number from 0 to 1";
    let t = java_trim(value);
    let digits = t
        .strip_suffix(['d', 'D', 'f', 'F'])
        .filter(|rest| rest.ends_with(|c: char| c.is_ascii_digit() || c == '.'))
        .unwrap_or(t);
    // Rust also accepts "inf"/"nan" spellings Java does not; they fail the range check anyway.
    let v: f64 = digits
        .parse()
        .map_err(|_| err(key, format!("must be {ALLOWED}, got {value:?}")))?;
    if v.is_nan() || !(0.0..=1.0).contains(&v) {
        return Err(err(key, format!("must be {ALLOWED}, got {value:?}")));
    }
    Ok(v)
}

/// Kafka's list parsing: a blank value is the empty list; otherwise the trimmed value split on
/// commas with any whitespace around them, keeping empty elements.
fn parse_list(value: &str) -> Vec<String> {
    let t = java_trim(value);
    if t.is_empty() {
        return Vec::new();
    }
    t.split(',')
        .map(|s| s.trim_matches(is_java_space).to_string())
        .collect()
}

fn parse_cleanup_policy(key: &str, value: &str) -> Result<CleanupPolicy, ConfigError> {
    let items = parse_list(value);
    let (mut compact, mut delete) = (false, false);
    for item in &items {
        match item.as_str() {
            "compact" => compact = true,
            "delete" => delete = true,
            other => {
                let case_hint =
                    if matches!(other.to_ascii_lowercase().as_str(), "compact" | "delete") {
                        " (values are case-sensitive, as in Kafka)"
                    } else {
                        ""
                    };
                return Err(err(
                    key,
                    format!(
                        "must be a comma-separated list of compact and delete, got {value:?}: \
                         {other:?} is neither{case_hint}"
                    ),
                ));
            }
        }
    }
    match (compact, delete) {
        (true, true) => Ok(CleanupPolicy::CompactDelete),
        (true, false) => Ok(CleanupPolicy::Compact),
        (false, true) => Ok(CleanupPolicy::Delete),
        (false, false) => Err(err(
            key,
            format!(
                "must name compact, delete or both, got {value:?} (Kafka 3.x accepts an empty \
                 list, meaning neither; Weir does not: to keep everything, use delete with \
                 retention.ms=-1 and retention.bytes=-1)"
            ),
        )),
    }
}

fn parse_compression_type(key: &str, value: &str) -> Result<CompressionKind, ConfigError> {
    let t = java_trim(value);
    Ok(match t {
        "producer" => CompressionKind::Producer,
        "uncompressed" => CompressionKind::Uncompressed,
        "gzip" => CompressionKind::Codec(Compression::Gzip),
        "snappy" => CompressionKind::Codec(Compression::Snappy),
        "lz4" => CompressionKind::Codec(Compression::Lz4),
        "zstd" => CompressionKind::Codec(Compression::Zstd),
        _ => {
            let lower = t.to_ascii_lowercase();
            let hint = if COMPRESSION_TYPES.contains(&lower.as_str()) {
                " (values are case-sensitive, as in Kafka)"
            } else if lower == "none" {
                " (the topic-level name for no compression is uncompressed)"
            } else {
                ""
            };
            return Err(err(
                key,
                format!(
                    "must be one of {}, got {value:?}{hint}",
                    COMPRESSION_TYPES.join(", ")
                ),
            ));
        }
    })
}

fn parse_timestamp_type(key: &str, value: &str) -> Result<TimestampType, ConfigError> {
    match java_trim(value) {
        "CreateTime" => Ok(TimestampType::CreateTime),
        "LogAppendTime" => Ok(TimestampType::LogAppendTime),
        _ => Err(err(
            key,
            format!("must be CreateTime or LogAppendTime (case-sensitive), got {value:?}"),
        )),
    }
}

/// Kafka's `ThrottledReplicaListValidator`: the single element `*`, or elements each empty or
/// `<digits>:<digits>`.
fn parse_throttled_replicas(key: &str, value: &str) -> Result<Vec<String>, ConfigError> {
    let items = parse_list(value);
    let is_pair = |s: &str| {
        s.is_empty()
            || s.split_once(':').is_some_and(|(p, b)| {
                !p.is_empty()
                    && !b.is_empty()
                    && p.bytes().all(|c| c.is_ascii_digit())
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
    };
    if items.iter().all(|s| is_pair(s)) || items.concat() == "*" {
        Ok(items)
    } else {
        Err(err(
            key,
            format!("must be * or a comma-separated list of partitionId:brokerId, got {value:?}"),
        ))
    }
}

/// Kafka 3.9's metadata versions: release, then its sub-versions ("" for none). Releases up to
/// 3.9 are production versions, so the bare release names one too.
const METADATA_VERSIONS: &[(&str, &[&str])] = &[
    ("0.8.0", &[""]),
    ("0.8.1", &[""]),
    ("0.8.2", &[""]),
    ("0.9.0", &[""]),
    ("0.10.0", &["IV0", "IV1"]),
    ("0.10.1", &["IV0", "IV1", "IV2"]),
    ("0.10.2", &["IV0"]),
    ("0.11.0", &["IV0", "IV1", "IV2"]),
    ("1.0", &["IV0"]),
    ("1.1", &["IV0"]),
    ("2.0", &["IV0", "IV1"]),
    ("2.1", &["IV0", "IV1", "IV2"]),
    ("2.2", &["IV0", "IV1"]),
    ("2.3", &["IV0", "IV1"]),
    ("2.4", &["IV0", "IV1"]),
    ("2.5", &["IV0"]),
    ("2.6", &["IV0"]),
    ("2.7", &["IV0", "IV1", "IV2"]),
    ("2.8", &["IV0", "IV1"]),
    ("3.0", &["IV0", "IV1"]),
    ("3.1", &["IV0"]),
    ("3.2", &["IV0"]),
    ("3.3", &["IV0", "IV1", "IV2", "IV3"]),
    ("3.4", &["IV0"]),
    ("3.5", &["IV0", "IV1", "IV2"]),
    ("3.6", &["IV0", "IV1", "IV2"]),
    ("3.7", &["IV0", "IV1", "IV2", "IV3", "IV4"]),
    ("3.8", &["IV0"]),
    ("3.9", &["IV0"]),
    ("4.0", &["IV0", "IV1"]),
];

/// Kafka's `MetadataVersion.fromVersionString`: keep the first three dot-separated parts of a
/// `0.x` version, or the first two otherwise (so `2.8.1` means `2.8`), then look the result up
/// as `release` (production releases only) or `release-IVn`.
fn parse_format_version(key: &str, value: &str) -> Result<String, ConfigError> {
    let t = java_trim(value);
    let mut parts: Vec<&str> = t.split('.').collect();
    // Java's String.split drops trailing empty strings.
    while parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    let keep = if t.starts_with("0.") { 3 } else { 2 };
    let lookup = if keep >= parts.len() {
        t.to_string()
    } else {
        parts[..keep].join(".")
    };
    let known = METADATA_VERSIONS.iter().any(|(release, subs)| {
        (lookup == *release && *release != "4.0")
            || subs.iter().any(|s| {
                !s.is_empty()
                    && lookup
                        .strip_prefix(release)
                        .and_then(|r| r.strip_prefix('-'))
                        == Some(*s)
            })
    });
    if known {
        Ok(t.to_string())
    } else {
        Err(err(
            key,
            format!(
                "must be a Kafka version such as 2.8 or 3.0-IV1 (deprecated and ignored, but still \
                 checked), got {value:?}"
            ),
        ))
    }
}

/// Java's `Double.toString`, which Kafka uses to print DOUBLE configs: plain decimal for
/// magnitudes in [1e-3, 1e7), else `d.dddE±n`; always at least one fractional digit.
fn java_double_to_string(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.to_string();
    }
    if (1e-3..1e7).contains(&v.abs()) {
        // Debug prints the shortest round-tripping decimal, with ".0" for whole numbers.
        return format!("{v:?}");
    }
    let s = format!("{v:e}");
    match s.split_once('e') {
        Some((mantissa, exponent)) if mantissa.contains('.') => format!("{mantissa}E{exponent}"),
        Some((mantissa, exponent)) => format!("{mantissa}.0E{exponent}"),
        None => s,
    }
}

// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(overrides: &[(&str, &str)]) -> Result<LogConfig, ConfigError> {
        LogConfig::default().with_overrides(overrides.iter().copied())
    }

    fn broker(props: &[(&str, &str)]) -> Result<LogConfig, ConfigError> {
        LogConfig::from_broker_properties(props.iter().copied()).map(|(c, _)| c)
    }

    fn err_of(r: Result<LogConfig, ConfigError>) -> ConfigError {
        match r {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn defaults_are_kafkas() {
        let c = LogConfig::default();
        assert_eq!(c.segment_bytes, 1_073_741_824);
        assert_eq!(c.segment_ms, 604_800_000);
        assert_eq!(c.segment_jitter_ms, 0);
        assert_eq!(c.segment_index_bytes, 10_485_760);
        assert_eq!(c.index_interval_bytes, 4096);
        assert_eq!(c.flush_messages, i64::MAX);
        assert_eq!(c.flush_ms, i64::MAX);
        assert_eq!(c.retention_bytes, -1);
        assert_eq!(c.retention_ms, 604_800_000);
        assert_eq!(c.cleanup_policy, CleanupPolicy::Delete);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.5);
        assert_eq!(c.min_compaction_lag_ms, 0);
        assert_eq!(c.max_compaction_lag_ms, i64::MAX);
        assert_eq!(c.delete_retention_ms, 86_400_000);
        assert_eq!(c.file_delete_delay_ms, 60_000);
        assert_eq!(c.max_message_bytes, 1_048_588);
        assert_eq!(c.message_timestamp_type, TimestampType::CreateTime);
        assert_eq!(c.message_timestamp_before_max_ms, i64::MAX);
        assert_eq!(c.message_timestamp_after_max_ms, i64::MAX);
        assert_eq!(c.message_timestamp_difference_max_ms, i64::MAX);
        assert_eq!(c.compression, TopicCompression::Producer);
        assert_eq!(c.compression_gzip_level, -1);
        assert_eq!(c.compression_lz4_level, 9);
        assert_eq!(c.compression_zstd_level, 3);
        assert_eq!(c.min_insync_replicas, 1);
        assert!(!c.preallocate);
        assert!(!c.unclean_leader_election_enable);
        assert!(c.message_downconversion_enable);
        assert_eq!(c.message_format_version, "3.0-IV1");
        assert!(c.leader_replication_throttled_replicas.is_empty());
        assert!(c.follower_replication_throttled_replicas.is_empty());
        assert!(!c.remote_storage_enable);
        assert_eq!(c.local_retention_ms, -2);
        assert_eq!(c.local_retention_bytes, -2);
        assert!(!c.remote_log_copy_disable);
        assert!(!c.remote_log_delete_on_disable);
        // No overrides and no broker properties change nothing.
        assert_eq!(topic(&[]).unwrap(), c);
        assert_eq!(broker(&[]).unwrap(), c);
    }

    #[test]
    fn key_table_is_consistent() {
        assert_eq!(TOPIC_KEYS.len(), KEY_DEFS.len());
        for (name, def) in TOPIC_KEYS.iter().zip(KEY_DEFS) {
            assert_eq!(*name, def.name);
            assert!(!def.doc.is_empty());
        }
        let mut sorted = TOPIC_KEYS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, TOPIC_KEYS, "topic keys must be sorted and unique");
        let mut sorted = BROKER_KEYS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, BROKER_KEYS, "broker keys must be sorted and unique");
        // Every broker synonym in the table is a key from_broker_properties reads, and back.
        let mut synonyms: Vec<&str> = KEY_DEFS
            .iter()
            .flat_map(|d| d.broker_synonyms.iter().copied())
            .collect();
        synonyms.sort_unstable();
        assert_eq!(synonyms, BROKER_KEYS);
        for (broker_key, topic_key) in BROKER_SIMPLE {
            assert!(LogConfig::broker_synonyms(topic_key).contains(broker_key));
        }
        // Every key has a value, and the default value of every key parses.
        for key in LogConfig::topic_keys() {
            assert!(LogConfig::is_topic_key(key));
            let value = LogConfig::default().value_of(key).unwrap();
            LogConfig::validate(key, &value).unwrap();
        }
        assert_eq!(LogConfig::topic_keys().len(), 36);
        assert!(!LogConfig::is_topic_key("log.retention.ms"));
        assert!(!LogConfig::is_topic_key("Retention.ms"));
        assert_eq!(LogConfig::default().value_of("nope"), None);
        assert_eq!(
            LogConfig::broker_synonyms("retention.ms"),
            [
                "log.retention.ms",
                "log.retention.minutes",
                "log.retention.hours"
            ]
        );
        assert!(LogConfig::broker_synonyms("remote.storage.enable").is_empty());
        assert!(LogConfig::broker_synonyms("bogus").is_empty());
    }

    #[test]
    fn each_override_is_applied() {
        type Check = fn(&LogConfig) -> bool;
        let cases: &[(&str, &str, Check)] = &[
            ("segment.bytes", "14", |c| c.segment_bytes == 14),
            ("segment.bytes", "2147483647", |c| {
                c.segment_bytes == 2_147_483_647
            }),
            ("segment.ms", "1", |c| c.segment_ms == 1),
            ("segment.jitter.ms", "500", |c| c.segment_jitter_ms == 500),
            ("segment.index.bytes", "4", |c| c.segment_index_bytes == 4),
            ("index.interval.bytes", "0", |c| c.index_interval_bytes == 0),
            ("flush.messages", "1", |c| c.flush_messages == 1),
            ("flush.ms", "0", |c| c.flush_ms == 0),
            ("retention.bytes", "-5", |c| c.retention_bytes == -5),
            ("retention.bytes", "1073741824", |c| {
                c.retention_bytes == 1 << 30
            }),
            ("retention.ms", "-1", |c| c.retention_ms == -1),
            ("retention.ms", "0", |c| c.retention_ms == 0),
            ("cleanup.policy", "compact", |c| {
                c.cleanup_policy == CleanupPolicy::Compact
            }),
            ("min.cleanable.dirty.ratio", "0.01", |c| {
                c.min_cleanable_dirty_ratio == 0.01
            }),
            ("min.cleanable.dirty.ratio", "1", |c| {
                c.min_cleanable_dirty_ratio == 1.0
            }),
            ("min.compaction.lag.ms", "1000", |c| {
                c.min_compaction_lag_ms == 1000
            }),
            ("max.compaction.lag.ms", "1", |c| {
                c.max_compaction_lag_ms == 1
            }),
            ("delete.retention.ms", "0", |c| c.delete_retention_ms == 0),
            ("file.delete.delay.ms", "0", |c| c.file_delete_delay_ms == 0),
            ("max.message.bytes", "0", |c| c.max_message_bytes == 0),
            ("max.message.bytes", "10485760", |c| {
                c.max_message_bytes == 10_485_760
            }),
            ("message.timestamp.type", "LogAppendTime", |c| {
                c.message_timestamp_type == TimestampType::LogAppendTime
            }),
            ("message.timestamp.before.max.ms", "3600000", |c| {
                c.message_timestamp_before_max_ms == 3_600_000
                    && c.message_timestamp_after_max_ms == i64::MAX
            }),
            ("message.timestamp.after.max.ms", "0", |c| {
                c.message_timestamp_after_max_ms == 0
                    && c.message_timestamp_before_max_ms == i64::MAX
            }),
            ("message.timestamp.difference.max.ms", "5000", |c| {
                c.message_timestamp_difference_max_ms == 5000
            }),
            ("compression.type", "zstd", |c| {
                c.compression == TopicCompression::Codec(CompressionConfig::new(Compression::Zstd))
            }),
            ("compression.gzip.level", "9", |c| {
                c.compression_gzip_level == 9
            }),
            ("compression.lz4.level", "17", |c| {
                c.compression_lz4_level == 17
            }),
            ("compression.zstd.level", "-131072", |c| {
                c.compression_zstd_level == -131_072
            }),
            ("min.insync.replicas", "2", |c| c.min_insync_replicas == 2),
            ("preallocate", "true", |c| c.preallocate),
            ("unclean.leader.election.enable", "TRUE", |c| {
                c.unclean_leader_election_enable
            }),
            ("message.downconversion.enable", "False", |c| {
                !c.message_downconversion_enable
            }),
            ("message.format.version", "2.8", |c| {
                c.message_format_version == "2.8"
            }),
            ("leader.replication.throttled.replicas", "0:1, 1:2", |c| {
                c.leader_replication_throttled_replicas == ["0:1", "1:2"]
            }),
            ("follower.replication.throttled.replicas", "*", |c| {
                c.follower_replication_throttled_replicas == ["*"]
            }),
            ("remote.storage.enable", "false", |c| {
                !c.remote_storage_enable
            }),
            ("local.retention.ms", "-1", |c| c.local_retention_ms == -1),
            ("local.retention.bytes", "1000", |c| {
                c.local_retention_bytes == 1000
            }),
            ("remote.log.copy.disable", "true", |c| {
                c.remote_log_copy_disable
            }),
            ("remote.log.delete.on.disable", "true", |c| {
                c.remote_log_delete_on_disable
            }),
        ];
        let mut covered: Vec<&str> = Vec::new();
        for (key, value, check) in cases {
            let c = topic(&[(key, value)]).unwrap_or_else(|e| panic!("{key}={value}: {e}"));
            assert!(check(&c), "{key}={value} not applied: {c:?}");
            // Nothing else moved, apart from the derived compression.
            let expected = LogConfig {
                compression: c.compression,
                ..LogConfig::default()
            };
            assert_eq!(
                c.describe(&[], &[])
                    .iter()
                    .filter(|e| e.value != expected.value_of(&e.name))
                    .map(|e| e.name.as_str())
                    .filter(|n| *n != *key && *n != "compression.type")
                    .filter(|n| {
                        // The deprecated difference limit also sets the two it falls back for.
                        *key != "message.timestamp.difference.max.ms"
                            || !n.starts_with("message.timestamp.")
                    })
                    .collect::<Vec<_>>(),
                Vec::<&str>::new(),
                "{key}={value} changed other keys"
            );
            covered.push(key);
        }
        covered.sort_unstable();
        covered.dedup();
        assert_eq!(covered, TOPIC_KEYS, "every topic key has an override case");
    }

    #[test]
    fn values_are_trimmed_like_java() {
        let c = topic(&[
            ("retention.ms", "  1000\t"),
            ("preallocate", "\n true "),
            ("cleanup.policy", " compact , delete "),
            ("compression.type", " gzip "),
            ("message.timestamp.type", " LogAppendTime\r\n"),
            ("min.cleanable.dirty.ratio", " 0.25 "),
            ("segment.bytes", "+1024"),
        ])
        .unwrap();
        assert_eq!(c.retention_ms, 1000);
        assert!(c.preallocate);
        assert_eq!(c.cleanup_policy, CleanupPolicy::CompactDelete);
        assert_eq!(c.compression.name(), "gzip");
        assert_eq!(c.message_timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.25);
        assert_eq!(c.segment_bytes, 1024);
    }

    #[test]
    fn bad_values_are_rejected_naming_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "retention.ms",
                "-5",
                "retention.ms: must be -1 or at least 0, got -5",
            ),
            (
                "retention.ms",
                "7d",
                "must be -1 (keep forever) or a 64-bit integer",
            ),
            ("retention.ms", "", "got \"\""),
            ("retention.ms", "1e3", "got \"1e3\""),
            ("retention.ms", "9223372036854775808", "64-bit"),
            (
                "retention.bytes",
                "1.5",
                "must be a 64-bit integer, got \"1.5\"",
            ),
            (
                "segment.bytes",
                "13",
                "segment.bytes: must be at least 14, got 13",
            ),
            (
                "segment.bytes",
                "2147483648",
                "must be a 32-bit integer of at least 14",
            ),
            ("segment.bytes", "-1", "at least 14, got -1"),
            ("segment.ms", "0", "segment.ms: must be at least 1, got 0"),
            ("segment.jitter.ms", "-1", "at least 0, got -1"),
            ("segment.index.bytes", "3", "at least 4, got 3"),
            ("index.interval.bytes", "-1", "at least 0, got -1"),
            ("flush.messages", "0", "at least 1, got 0"),
            ("flush.ms", "-1", "at least 0, got -1"),
            (
                "min.cleanable.dirty.ratio",
                "1.5",
                "must be a number from 0 to 1, got \"1.5\"",
            ),
            ("min.cleanable.dirty.ratio", "-0.1", "from 0 to 1"),
            (
                "min.cleanable.dirty.ratio",
                "NaN",
                "from 0 to 1, got \"NaN\"",
            ),
            ("min.cleanable.dirty.ratio", "half", "got \"half\""),
            ("min.compaction.lag.ms", "-1", "at least 0"),
            ("max.compaction.lag.ms", "0", "at least 1, got 0"),
            ("delete.retention.ms", "-1", "at least 0"),
            ("file.delete.delay.ms", "-1", "at least 0"),
            ("max.message.bytes", "-1", "at least 0, got -1"),
            (
                "message.timestamp.type",
                "createtime",
                "must be CreateTime or LogAppendTime",
            ),
            ("message.timestamp.before.max.ms", "-1", "at least 0"),
            ("message.timestamp.after.max.ms", "-1", "at least 0"),
            ("message.timestamp.difference.max.ms", "-1", "at least 0"),
            ("compression.type", "GZIP", "case-sensitive"),
            ("compression.type", "none", "uncompressed"),
            (
                "compression.type",
                "brotli",
                "must be one of uncompressed, zstd, lz4, snappy, gzip, producer, got \"brotli\"",
            ),
            (
                "compression.gzip.level",
                "0",
                "from 1 to 9, or -1 for the codec's default, got 0",
            ),
            ("compression.gzip.level", "10", "got 10"),
            ("compression.lz4.level", "18", "from 1 to 17, got 18"),
            ("compression.lz4.level", "0", "got 0"),
            ("compression.zstd.level", "23", "from -131072 to 22, got 23"),
            ("compression.zstd.level", "-131073", "got -131073"),
            ("min.insync.replicas", "0", "at least 1, got 0"),
            ("preallocate", "yes", "must be true or false, got \"yes\""),
            ("preallocate", "1", "true or false"),
            ("unclean.leader.election.enable", "", "true or false"),
            ("message.downconversion.enable", "t", "true or false"),
            ("message.format.version", "5.0", "Kafka version"),
            ("message.format.version", "4.0", "Kafka version"),
            ("message.format.version", "3.0-IV9", "Kafka version"),
            ("message.format.version", "", "Kafka version"),
            (
                "leader.replication.throttled.replicas",
                "0-1",
                "partitionId:brokerId, got \"0-1\"",
            ),
            (
                "follower.replication.throttled.replicas",
                "*,0:1",
                "partitionId:brokerId",
            ),
            (
                "follower.replication.throttled.replicas",
                "a:1",
                "partitionId:brokerId",
            ),
            ("remote.storage.enable", "true", "no tiered storage"),
            ("remote.storage.enable", "maybe", "true or false"),
            ("local.retention.ms", "-3", "got -3"),
            ("local.retention.bytes", "x", "got \"x\""),
            ("remote.log.copy.disable", "on", "true or false"),
            ("remote.log.delete.on.disable", "off", "true or false"),
            ("cleanup.policy", "Compact", "case-sensitive"),
            ("cleanup.policy", "", "must name compact, delete or both"),
            ("cleanup.policy", "compact,", "\"\" is neither"),
            ("cleanup.policy", "retain", "\"retain\" is neither"),
        ];
        for (key, value, want) in cases {
            let e = err_of(topic(&[(key, value)]));
            assert_eq!(e.key, *key, "{key}={value}: {e}");
            let text = e.to_string();
            assert!(text.starts_with(&format!("{key}: ")), "{text}");
            assert!(
                text.contains(want),
                "{key}={value}: {text:?} lacks {want:?}"
            );
            assert_eq!(LogConfig::validate(key, value), Err(e));
        }
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = err_of(topic(&[("retention.days", "7")]));
        assert_eq!(e.key, "retention.days");
        assert!(e.message.contains("unknown topic config"), "{e}");
        // A broker key names its topic-level key.
        let e = err_of(topic(&[("log.retention.hours", "1")]));
        assert_eq!(e.key, "log.retention.hours");
        assert!(e.message.contains("topic-level key is retention.ms"), "{e}");
        let e = err_of(topic(&[("message.max.bytes", "1")]));
        assert!(e.message.contains("max.message.bytes"), "{e}");
        // Keys are case-sensitive, as in Kafka.
        assert_eq!(err_of(topic(&[("Retention.ms", "1")])).key, "Retention.ms");
        // The first bad entry is reported, even after good ones.
        let e = err_of(topic(&[
            ("retention.ms", "1"),
            ("bogus", "1"),
            ("segment.ms", "0"),
        ]));
        assert_eq!(e.key, "bogus");
        assert_eq!(LogConfig::validate("bogus", "1").unwrap_err().key, "bogus");
        assert_eq!(LogConfig::validate("retention.ms", "100"), Ok(()));
    }

    #[test]
    fn later_duplicates_win_and_overrides_stack_on_broker_defaults() {
        let c = topic(&[("retention.ms", "1"), ("retention.ms", "2")]).unwrap();
        assert_eq!(c.retention_ms, 2);
        let base = broker(&[
            ("log.retention.hours", "1"),
            ("log.segment.bytes", "1048576"),
        ])
        .unwrap();
        let c = base.with_overrides([("segment.bytes", "2048")]).unwrap();
        assert_eq!(c.segment_bytes, 2048);
        assert_eq!(c.retention_ms, 3_600_000, "broker default kept");
    }

    #[test]
    fn cleanup_policy_variants() {
        let cases = [
            ("delete", CleanupPolicy::Delete),
            ("compact", CleanupPolicy::Compact),
            ("compact,delete", CleanupPolicy::CompactDelete),
            ("delete,compact", CleanupPolicy::CompactDelete),
            ("delete , compact", CleanupPolicy::CompactDelete),
            (" compact\t,\tdelete ", CleanupPolicy::CompactDelete),
            ("delete,delete", CleanupPolicy::Delete),
            ("compact,compact,delete", CleanupPolicy::CompactDelete),
        ];
        for (value, want) in cases {
            let c = topic(&[("cleanup.policy", value)]).unwrap();
            assert_eq!(c.cleanup_policy, want, "{value:?}");
        }
        for p in [
            CleanupPolicy::Delete,
            CleanupPolicy::Compact,
            CleanupPolicy::CompactDelete,
        ] {
            let c = topic(&[("cleanup.policy", p.as_str())]).unwrap();
            assert_eq!(c.cleanup_policy, p);
            assert_eq!(p.to_string(), p.as_str());
        }
        assert!(CleanupPolicy::Delete.deletes() && !CleanupPolicy::Delete.compacts());
        assert!(!CleanupPolicy::Compact.deletes() && CleanupPolicy::Compact.compacts());
        assert!(CleanupPolicy::CompactDelete.deletes() && CleanupPolicy::CompactDelete.compacts());
        for bad in [
            "COMPACT",
            "Delete",
            "compact;delete",
            "compact,,delete",
            ",",
            " ",
            "delete,",
        ] {
            let e = err_of(topic(&[("cleanup.policy", bad)]));
            assert_eq!(e.key, "cleanup.policy", "{bad:?}");
            assert!(e.message.contains(&format!("{bad:?}")), "{bad:?}: {e}");
        }
    }

    #[test]
    fn compression_types_and_levels() {
        let codec = |c, l| TopicCompression::Codec(CompressionConfig::with_level(c, l).unwrap());
        let plain = |c| TopicCompression::Codec(CompressionConfig::new(c));
        let cases: &[(&[(&str, &str)], TopicCompression)] = &[
            (&[], TopicCompression::Producer),
            (
                &[("compression.type", "producer")],
                TopicCompression::Producer,
            ),
            (
                &[("compression.type", "uncompressed")],
                TopicCompression::Uncompressed,
            ),
            (
                &[("compression.type", "snappy")],
                plain(Compression::Snappy),
            ),
            (&[("compression.type", "gzip")], plain(Compression::Gzip)),
            (&[("compression.type", "lz4")], plain(Compression::Lz4)),
            (&[("compression.type", "zstd")], plain(Compression::Zstd)),
            (
                &[
                    ("compression.type", "gzip"),
                    ("compression.gzip.level", "9"),
                ],
                codec(Compression::Gzip, 9),
            ),
            (
                &[
                    ("compression.type", "gzip"),
                    ("compression.gzip.level", "-1"),
                ],
                plain(Compression::Gzip),
            ),
            (
                &[
                    ("compression.type", "gzip"),
                    ("compression.gzip.level", "1"),
                ],
                codec(Compression::Gzip, 1),
            ),
            // Default levels are held as plain codecs.
            (
                &[
                    ("compression.type", "zstd"),
                    ("compression.zstd.level", "3"),
                ],
                plain(Compression::Zstd),
            ),
            (
                &[("compression.type", "lz4"), ("compression.lz4.level", "9")],
                plain(Compression::Lz4),
            ),
            (
                &[
                    ("compression.type", "zstd"),
                    ("compression.zstd.level", "22"),
                ],
                codec(Compression::Zstd, 22),
            ),
            (
                &[
                    ("compression.type", "zstd"),
                    ("compression.zstd.level", "-5"),
                ],
                codec(Compression::Zstd, -5),
            ),
            // The level may come before the type.
            (
                &[
                    ("compression.zstd.level", "7"),
                    ("compression.type", "zstd"),
                ],
                codec(Compression::Zstd, 7),
            ),
            // A level for another codec is kept but unused (Kafka validates it alone).
            (
                &[
                    ("compression.type", "snappy"),
                    ("compression.lz4.level", "5"),
                ],
                plain(Compression::Snappy),
            ),
            (
                &[("compression.lz4.level", "5")],
                TopicCompression::Producer,
            ),
        ];
        for (overrides, want) in cases {
            let c = topic(overrides).unwrap_or_else(|e| panic!("{overrides:?}: {e}"));
            assert_eq!(c.compression, *want, "{overrides:?}");
            assert_eq!(c.value_of("compression.type").unwrap(), want.name());
        }
        // Levels stay visible in DescribeConfigs.
        let c = topic(&[("compression.lz4.level", "5")]).unwrap();
        assert_eq!(c.value_of("compression.lz4.level").unwrap(), "5");
        // Weir's LZ4 encoder has only level 9: refused once lz4 is the topic's codec.
        let e = err_of(topic(&[
            ("compression.type", "lz4"),
            ("compression.lz4.level", "5"),
        ]));
        assert_eq!(e.key, "compression.lz4.level");
        assert!(e.message.contains("compression.type is lz4"), "{e}");
        // Switching the type of a topic whose stored level is unusable names the level key.
        let base = topic(&[("compression.lz4.level", "5")]).unwrap();
        let e = base
            .with_overrides([("compression.type", "lz4")])
            .unwrap_err();
        assert_eq!(e.key, "compression.lz4.level");
        // A config already using a codec keeps it and picks up a new level.
        let zstd = topic(&[("compression.type", "zstd")]).unwrap();
        let c = zstd
            .with_overrides([("compression.zstd.level", "10")])
            .unwrap();
        assert_eq!(c.compression, codec(Compression::Zstd, 10));
        // target(): the codec a batch ends up with.
        assert_eq!(
            TopicCompression::Producer.target(Compression::Snappy),
            CompressionConfig::new(Compression::Snappy)
        );
        assert_eq!(
            TopicCompression::Uncompressed.target(Compression::Gzip),
            CompressionConfig::new(Compression::None)
        );
        assert_eq!(
            codec(Compression::Zstd, 10)
                .target(Compression::Gzip)
                .level(),
            10
        );
        // A hand-built Codec(none) reads as uncompressed.
        let hand = LogConfig {
            compression: plain(Compression::None),
            ..LogConfig::default()
        };
        assert_eq!(hand.value_of("compression.type").unwrap(), "uncompressed");
        let c = hand.with_overrides([]).unwrap();
        assert_eq!(c.compression, TopicCompression::Uncompressed);
    }

    #[test]
    fn deprecated_timestamp_difference_falls_back_as_in_kafka() {
        // Alone, it sets both limits.
        let c = topic(&[("message.timestamp.difference.max.ms", "1000")]).unwrap();
        assert_eq!(c.message_timestamp_before_max_ms, 1000);
        assert_eq!(c.message_timestamp_after_max_ms, 1000);
        // An explicit before/after wins over it.
        let c = topic(&[
            ("message.timestamp.difference.max.ms", "1000"),
            ("message.timestamp.before.max.ms", "50"),
        ])
        .unwrap();
        assert_eq!(c.message_timestamp_before_max_ms, 50);
        assert_eq!(c.message_timestamp_after_max_ms, 1000);
        // Setting before/after to the maximum means "unset": the difference applies.
        let c = topic(&[
            ("message.timestamp.after.max.ms", "9223372036854775807"),
            ("message.timestamp.difference.max.ms", "7"),
        ])
        .unwrap();
        assert_eq!(c.message_timestamp_after_max_ms, 7);
        // At the broker, the same rule; a topic's own difference does not undo the broker's
        // resolved before/after (Kafka passes the broker's resolved values down).
        let b = broker(&[("log.message.timestamp.difference.max.ms", "1000")]).unwrap();
        assert_eq!(b.message_timestamp_before_max_ms, 1000);
        assert_eq!(b.message_timestamp_after_max_ms, 1000);
        let t = b
            .with_overrides([("message.timestamp.difference.max.ms", "500")])
            .unwrap();
        assert_eq!(t.message_timestamp_before_max_ms, 1000);
        assert_eq!(t.message_timestamp_difference_max_ms, 500);
        let b = broker(&[
            ("log.message.timestamp.after.max.ms", "3600000"),
            ("log.message.timestamp.difference.max.ms", "1000"),
        ])
        .unwrap();
        assert_eq!(b.message_timestamp_after_max_ms, 3_600_000);
        assert_eq!(b.message_timestamp_before_max_ms, 1000);
    }

    #[test]
    fn compaction_lags_must_be_ordered() {
        let e = err_of(topic(&[
            ("min.compaction.lag.ms", "200"),
            ("max.compaction.lag.ms", "100"),
        ]));
        assert_eq!(e.key, "min.compaction.lag.ms");
        assert!(
            e.message.contains("max.compaction.lag.ms (100), got 200"),
            "{e}"
        );
        assert!(topic(&[
            ("min.compaction.lag.ms", "100"),
            ("max.compaction.lag.ms", "100")
        ])
        .is_ok());
        let e = err_of(broker(&[
            ("log.cleaner.min.compaction.lag.ms", "200"),
            ("log.cleaner.max.compaction.lag.ms", "100"),
        ]));
        assert_eq!(e.key, "log.cleaner.min.compaction.lag.ms");
        assert!(
            e.message.contains("log.cleaner.max.compaction.lag.ms"),
            "{e}"
        );
    }

    #[test]
    fn broker_retention_precedence() {
        let ms = |props: &[(&str, &str)]| broker(props).unwrap().retention_ms;
        assert_eq!(ms(&[]), 7 * DAY_MS);
        assert_eq!(ms(&[("log.retention.hours", "24")]), DAY_MS);
        assert_eq!(ms(&[("log.retention.minutes", "5")]), 300_000);
        assert_eq!(ms(&[("log.retention.ms", "1234")]), 1234);
        assert_eq!(
            ms(&[
                ("log.retention.hours", "24"),
                ("log.retention.minutes", "5")
            ]),
            300_000
        );
        assert_eq!(
            ms(&[
                ("log.retention.hours", "24"),
                ("log.retention.minutes", "5"),
                ("log.retention.ms", "1234")
            ]),
            1234
        );
        assert_eq!(
            ms(&[("log.retention.minutes", "5"), ("log.retention.ms", "-1")]),
            -1
        );
        // Any negative value means forever.
        assert_eq!(ms(&[("log.retention.ms", "-100")]), -1);
        assert_eq!(ms(&[("log.retention.hours", "-1")]), -1);
        assert_eq!(ms(&[("log.retention.minutes", "-3")]), -1);
        // Large hour counts do not overflow.
        assert_eq!(
            ms(&[("log.retention.hours", "2147483647")]),
            2_147_483_647 * HOUR_MS
        );
        // 0 is refused, naming the key that supplied it.
        let e = err_of(broker(&[
            ("log.retention.minutes", "0"),
            ("log.retention.hours", "1"),
        ]));
        assert_eq!(e.key, "log.retention.minutes");
        assert!(e.message.contains("got 0"), "{e}");
        // A losing key is still validated, as Kafka parses every key.
        let e = err_of(broker(&[
            ("log.retention.ms", "1000"),
            ("log.retention.hours", "x"),
        ]));
        assert_eq!(e.key, "log.retention.hours");
        let e = err_of(broker(&[("log.retention.minutes", "3000000000")]));
        assert_eq!(e.key, "log.retention.minutes");
    }

    #[test]
    fn broker_roll_jitter_and_flush_precedence() {
        let c = broker(&[("log.roll.hours", "2")]).unwrap();
        assert_eq!(c.segment_ms, 2 * HOUR_MS);
        let c = broker(&[("log.roll.hours", "2"), ("log.roll.ms", "1000")]).unwrap();
        assert_eq!(c.segment_ms, 1000);
        let e = err_of(broker(&[("log.roll.hours", "0")]));
        assert_eq!(e.key, "log.roll.hours");
        let e = err_of(broker(&[("log.roll.ms", "0"), ("log.roll.hours", "1")]));
        assert_eq!(e.key, "log.roll.ms");
        assert_eq!(e.to_string(), "log.roll.ms: must be at least 1, got 0");
        let e = err_of(broker(&[("log.roll.ms", "100"), ("log.roll.hours", "0")]));
        assert_eq!(e.key, "log.roll.hours", "a losing key is still validated");

        let c = broker(&[("log.roll.jitter.hours", "1")]).unwrap();
        assert_eq!(c.segment_jitter_ms, HOUR_MS);
        let c = broker(&[("log.roll.jitter.hours", "1"), ("log.roll.jitter.ms", "10")]).unwrap();
        assert_eq!(c.segment_jitter_ms, 10);
        assert_eq!(
            err_of(broker(&[("log.roll.jitter.ms", "-1")])).key,
            "log.roll.jitter.ms"
        );
        assert_eq!(
            err_of(broker(&[("log.roll.jitter.hours", "-1")])).key,
            "log.roll.jitter.hours"
        );

        let c = broker(&[("log.flush.scheduler.interval.ms", "3000")]).unwrap();
        assert_eq!(c.flush_ms, 3000);
        let c = broker(&[
            ("log.flush.scheduler.interval.ms", "3000"),
            ("log.flush.interval.ms", "1000"),
        ])
        .unwrap();
        assert_eq!(c.flush_ms, 1000);
        assert_eq!(
            err_of(broker(&[("log.flush.interval.ms", "-1")])).key,
            "log.flush.interval.ms"
        );
        assert_eq!(
            err_of(broker(&[("log.flush.scheduler.interval.ms", "-1")])).key,
            "log.flush.scheduler.interval.ms"
        );
    }

    #[test]
    fn broker_properties_map_to_topic_settings() {
        let props = [
            ("log.dirs", "/var/lib/weir"),
            ("broker.id", "0"),
            ("retention.ms", "5"), // a topic key in server.properties is not a broker key
            ("log.segment.bytes", "1048576"),
            ("log.index.size.max.bytes", "4096"),
            ("log.index.interval.bytes", "100"),
            ("log.flush.interval.messages", "10"),
            ("log.retention.bytes", "5000000"),
            ("log.cleanup.policy", "compact,delete"),
            ("log.cleaner.min.cleanable.ratio", "0.1"),
            ("log.cleaner.min.compaction.lag.ms", "10"),
            ("log.cleaner.max.compaction.lag.ms", "20000"),
            ("log.cleaner.delete.retention.ms", "30"),
            ("log.segment.delete.delay.ms", "40"),
            ("message.max.bytes", "2000000"),
            ("log.message.timestamp.type", "LogAppendTime"),
            ("log.message.timestamp.before.max.ms", "50"),
            ("log.message.timestamp.after.max.ms", "60"),
            ("log.message.format.version", "2.8"),
            ("compression.type", "gzip"),
            ("compression.gzip.level", "4"),
            ("min.insync.replicas", "2"),
            ("log.preallocate", "true"),
            ("unclean.leader.election.enable", "true"),
            ("log.message.downconversion.enable", "false"),
            ("log.local.retention.ms", "70"),
            ("log.local.retention.bytes", "80"),
            ("log.segment.bytes", "2097152"), // the last value wins
        ];
        let (c, consumed) = LogConfig::from_broker_properties(props).unwrap();
        assert_eq!(c.segment_bytes, 2_097_152);
        assert_eq!(c.segment_index_bytes, 4096);
        assert_eq!(c.index_interval_bytes, 100);
        assert_eq!(c.flush_messages, 10);
        assert_eq!(c.retention_bytes, 5_000_000);
        assert_eq!(c.retention_ms, 7 * DAY_MS);
        assert_eq!(c.cleanup_policy, CleanupPolicy::CompactDelete);
        assert_eq!(c.min_cleanable_dirty_ratio, 0.1);
        assert_eq!(c.min_compaction_lag_ms, 10);
        assert_eq!(c.max_compaction_lag_ms, 20_000);
        assert_eq!(c.delete_retention_ms, 30);
        assert_eq!(c.file_delete_delay_ms, 40);
        assert_eq!(c.max_message_bytes, 2_000_000);
        assert_eq!(c.message_timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(c.message_timestamp_before_max_ms, 50);
        assert_eq!(c.message_timestamp_after_max_ms, 60);
        assert_eq!(c.message_format_version, "2.8");
        assert_eq!(
            c.compression,
            TopicCompression::Codec(CompressionConfig::with_level(Compression::Gzip, 4).unwrap())
        );
        assert_eq!(c.compression_gzip_level, 4);
        assert_eq!(c.min_insync_replicas, 2);
        assert!(c.preallocate);
        assert!(c.unclean_leader_election_enable);
        assert!(!c.message_downconversion_enable);
        assert_eq!(c.local_retention_ms, 70);
        assert_eq!(c.local_retention_bytes, 80);
        let mut want: Vec<&str> = props
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| !["log.dirs", "broker.id", "retention.ms"].contains(k))
            .collect();
        want.pop(); // the repeated log.segment.bytes is listed once, where first seen
        assert_eq!(consumed, want);
    }

    #[test]
    fn broker_errors_name_the_broker_key() {
        let cases: &[(&str, &str)] = &[
            ("log.segment.bytes", "13"),
            ("log.index.size.max.bytes", "2"),
            ("log.index.interval.bytes", "-1"),
            ("log.flush.interval.messages", "0"),
            ("log.retention.bytes", "lots"),
            ("log.cleanup.policy", "Compact"),
            ("log.cleaner.min.cleanable.ratio", "2"),
            ("log.cleaner.min.compaction.lag.ms", "-1"),
            ("log.cleaner.max.compaction.lag.ms", "0"),
            ("log.cleaner.delete.retention.ms", "-1"),
            ("log.segment.delete.delay.ms", "-1"),
            ("message.max.bytes", "-1"),
            ("log.message.timestamp.type", "Now"),
            ("log.message.timestamp.difference.max.ms", "-1"),
            ("log.message.timestamp.before.max.ms", "-1"),
            ("log.message.timestamp.after.max.ms", "-1"),
            ("log.message.format.version", "9.9"),
            ("compression.type", "none"),
            ("compression.gzip.level", "0"),
            ("compression.lz4.level", "0"),
            ("compression.zstd.level", "99"),
            ("min.insync.replicas", "0"),
            ("log.preallocate", "sure"),
            ("unclean.leader.election.enable", "sure"),
            ("log.message.downconversion.enable", "sure"),
            ("log.local.retention.ms", "-3"),
            ("log.local.retention.bytes", "-3"),
            ("log.roll.ms", "x"),
            ("log.roll.hours", "x"),
            ("log.roll.jitter.ms", "x"),
            ("log.roll.jitter.hours", "x"),
            ("log.flush.interval.ms", "x"),
            ("log.flush.scheduler.interval.ms", "x"),
            ("log.retention.ms", "x"),
            ("log.retention.minutes", "x"),
            ("log.retention.hours", "x"),
        ];
        let mut covered: Vec<&str> = Vec::new();
        for (key, value) in cases {
            let e = err_of(broker(&[(key, value)]));
            assert_eq!(e.key, *key, "{key}={value}: {e}");
            assert!(e.message.contains(value), "{key}={value}: {e}");
            covered.push(key);
        }
        covered.sort_unstable();
        assert_eq!(covered, BROKER_KEYS, "every broker key has an error case");
        // Weir's LZ4 limit, at the broker.
        let e = err_of(broker(&[
            ("compression.type", "lz4"),
            ("compression.lz4.level", "3"),
        ]));
        assert_eq!(e.key, "compression.lz4.level");
    }

    #[test]
    fn describe_defaults_print_as_kafka() {
        let want: &[(&str, &str)] = &[
            ("cleanup.policy", "delete"),
            ("compression.gzip.level", "-1"),
            ("compression.lz4.level", "9"),
            ("compression.type", "producer"),
            ("compression.zstd.level", "3"),
            ("delete.retention.ms", "86400000"),
            ("file.delete.delay.ms", "60000"),
            ("flush.messages", "9223372036854775807"),
            ("flush.ms", "9223372036854775807"),
            ("follower.replication.throttled.replicas", ""),
            ("index.interval.bytes", "4096"),
            ("leader.replication.throttled.replicas", ""),
            ("local.retention.bytes", "-2"),
            ("local.retention.ms", "-2"),
            ("max.compaction.lag.ms", "9223372036854775807"),
            ("max.message.bytes", "1048588"),
            ("message.downconversion.enable", "true"),
            ("message.format.version", "3.0-IV1"),
            ("message.timestamp.after.max.ms", "9223372036854775807"),
            ("message.timestamp.before.max.ms", "9223372036854775807"),
            ("message.timestamp.difference.max.ms", "9223372036854775807"),
            ("message.timestamp.type", "CreateTime"),
            ("min.cleanable.dirty.ratio", "0.5"),
            ("min.compaction.lag.ms", "0"),
            ("min.insync.replicas", "1"),
            ("preallocate", "false"),
            ("remote.log.copy.disable", "false"),
            ("remote.log.delete.on.disable", "false"),
            ("remote.storage.enable", "false"),
            ("retention.bytes", "-1"),
            ("retention.ms", "604800000"),
            ("segment.bytes", "1073741824"),
            ("segment.index.bytes", "10485760"),
            ("segment.jitter.ms", "0"),
            ("segment.ms", "604800000"),
            ("unclean.leader.election.enable", "false"),
        ];
        let entries = LogConfig::default().describe(&[], &[]);
        let got: Vec<(&str, &str)> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref().unwrap()))
            .collect();
        assert_eq!(got, want);
        for e in &entries {
            assert_eq!(e.source, ConfigSource::Default, "{}", e.name);
            assert!(!e.read_only && !e.sensitive);
            assert!(e.documentation.as_ref().is_some_and(|d| !d.is_empty()));
        }
        let by_name = |n: &str| entries.iter().find(|e| e.name == n).unwrap().clone();
        assert_eq!(
            LogConfig::broker_synonyms("retention.ms").first().copied(),
            Some("log.retention.ms")
        );
        assert_eq!(by_name("retention.ms").config_type, ConfigType::Long);
        assert_eq!(by_name("segment.bytes").config_type, ConfigType::Int);
        assert_eq!(
            LogConfig::broker_synonyms("segment.bytes").first().copied(),
            Some("log.segment.bytes")
        );
        assert_eq!(
            LogConfig::broker_synonyms("max.message.bytes")
                .first()
                .copied(),
            Some("message.max.bytes")
        );
        assert_eq!(by_name("cleanup.policy").config_type, ConfigType::List);
        assert_eq!(
            by_name("min.cleanable.dirty.ratio").config_type,
            ConfigType::Double
        );
        assert_eq!(by_name("preallocate").config_type, ConfigType::Boolean);
        assert_eq!(by_name("compression.type").config_type, ConfigType::String);
        assert_eq!(
            LogConfig::broker_synonyms("remote.storage.enable")
                .first()
                .copied(),
            None
        );
        assert_eq!(
            LogConfig::broker_synonyms("leader.replication.throttled.replicas")
                .first()
                .copied(),
            None
        );
    }

    #[test]
    fn describe_sources_and_values() {
        let (base, consumed) = LogConfig::from_broker_properties([
            ("log.retention.hours", "24"),
            ("log.roll.hours", "1"),
            ("log.flush.scheduler.interval.ms", "1000"),
            ("compression.type", "zstd"),
        ])
        .unwrap();
        let overrides = [
            ("retention.ms", "1000"),
            ("cleanup.policy", "delete,compact"),
            ("min.cleanable.dirty.ratio", "0.0001"),
            ("leader.replication.throttled.replicas", "0:1,1:2"),
            ("message.timestamp.type", "LogAppendTime"),
        ];
        let c = base.with_overrides(overrides).unwrap();
        let names: Vec<&str> = overrides.iter().map(|(k, _)| *k).collect();
        let broker_set: Vec<&str> = consumed.iter().map(String::as_str).collect();
        let entries = c.describe(&names, &broker_set);
        let get = |n: &str| entries.iter().find(|e| e.name == n).unwrap();
        assert_eq!(get("retention.ms").source, ConfigSource::DynamicTopic);
        assert_eq!(get("retention.ms").value.as_deref(), Some("1000"));
        assert_eq!(get("segment.ms").source, ConfigSource::StaticBroker);
        assert_eq!(get("segment.ms").value.as_deref(), Some("3600000"));
        assert_eq!(get("flush.ms").source, ConfigSource::StaticBroker);
        assert_eq!(get("flush.ms").value.as_deref(), Some("1000"));
        assert_eq!(get("compression.type").source, ConfigSource::StaticBroker);
        assert_eq!(get("compression.type").value.as_deref(), Some("zstd"));
        assert_eq!(
            get("cleanup.policy").value.as_deref(),
            Some("compact,delete")
        );
        assert_eq!(
            get("min.cleanable.dirty.ratio").value.as_deref(),
            Some("1.0E-4")
        );
        assert_eq!(
            get("leader.replication.throttled.replicas")
                .value
                .as_deref(),
            Some("0:1,1:2")
        );
        assert_eq!(
            get("message.timestamp.type").value.as_deref(),
            Some("LogAppendTime")
        );
        assert_eq!(get("segment.bytes").source, ConfigSource::Default);
        // Without the topic override, the broker's hours are the source.
        let entries = base.describe(&[], &broker_set);
        let get = |n: &str| entries.iter().find(|e| e.name == n).unwrap();
        assert_eq!(get("retention.ms").source, ConfigSource::StaticBroker);
        assert_eq!(get("retention.ms").value.as_deref(), Some("86400000"));
        // The topic wins over the broker even when both are set.
        let entries = c.describe(&["segment.ms"], &broker_set);
        assert_eq!(
            entries
                .iter()
                .find(|e| e.name == "segment.ms")
                .unwrap()
                .source,
            ConfigSource::DynamicTopic
        );
    }

    #[test]
    fn describe_round_trips_through_with_overrides() {
        let configs = [
            LogConfig::default(),
            topic(&[
                ("cleanup.policy", "compact"),
                ("min.cleanable.dirty.ratio", "0.0001"),
                ("compression.type", "zstd"),
                ("compression.zstd.level", "-7"),
                ("compression.lz4.level", "12"),
                ("message.timestamp.difference.max.ms", "1000"),
                ("message.format.version", "0.10.2-IV0"),
                ("follower.replication.throttled.replicas", "0:1,,2:3"),
                ("segment.bytes", "14"),
                ("retention.ms", "-1"),
            ])
            .unwrap(),
            broker(&[
                ("log.retention.minutes", "90"),
                ("log.cleaner.min.cleanable.ratio", "1"),
            ])
            .unwrap(),
        ];
        for c in configs {
            let entries = c.describe(&[], &[]);
            let back = LogConfig::default()
                .with_overrides(
                    entries
                        .iter()
                        .map(|e| (e.name.as_str(), e.value.as_deref().unwrap())),
                )
                .unwrap();
            assert_eq!(back, c);
        }
    }

    #[test]
    fn effective_segment_ms_and_jitter() {
        let c = topic(&[("segment.ms", "1000"), ("max.compaction.lag.ms", "500")]).unwrap();
        assert_eq!(
            c.effective_segment_ms(),
            1000,
            "delete policy ignores the compaction lag"
        );
        let c = c.with_overrides([("cleanup.policy", "compact")]).unwrap();
        assert_eq!(c.effective_segment_ms(), 500);
        let c = c
            .with_overrides([("cleanup.policy", "delete,compact")])
            .unwrap();
        assert_eq!(c.effective_segment_ms(), 500);
        let c = c
            .with_overrides([("max.compaction.lag.ms", "5000")])
            .unwrap();
        assert_eq!(c.effective_segment_ms(), 1000);
        assert_eq!(LogConfig::default().effective_segment_ms(), 7 * DAY_MS);

        assert_eq!(LogConfig::default().segment_jitter_bound_ms(), 0);
        let c = topic(&[("segment.jitter.ms", "100")]).unwrap();
        assert_eq!(c.segment_jitter_bound_ms(), 100);
        let c = topic(&[("segment.jitter.ms", "5000"), ("segment.ms", "1000")]).unwrap();
        assert_eq!(c.segment_jitter_bound_ms(), 1000);
    }

    #[test]
    fn message_format_versions() {
        for ok in [
            "0.8.0",
            "0.8.2",
            "0.9.0",
            "0.10.0",
            "0.10.0-IV1",
            "0.10.2.1",
            "0.11.0",
            "1.0",
            "1.1-IV0",
            "2.0-IV1",
            "2.8",
            "2.8.1",
            "3.0",
            "3.0-IV1",
            "3.3-IV3",
            "3.7-IV4",
            "3.9",
            "3.9-IV0",
            "4.0-IV0",
            "4.0-IV1",
            " 2.8 ",
        ] {
            let c =
                topic(&[("message.format.version", ok)]).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!(c.message_format_version, ok.trim());
        }
        for bad in [
            "",
            "0.8",
            "0.7.0",
            "2.9",
            "3.10",
            "4.0",
            "4.1",
            "3.0-IV2",
            "3.0-iv1",
            "3",
            "3.0.",
            "v3.0",
            "0.10.0-IV2",
            "0.8.0-IV0",
            "3.0-",
            "-IV0",
            ".",
            "..",
        ] {
            let e = err_of(topic(&[("message.format.version", bad)]));
            assert_eq!(e.key, "message.format.version", "{bad:?}");
        }
    }

    #[test]
    fn throttled_replica_lists() {
        for (value, want) in [
            ("", vec![]),
            ("  ", vec![]),
            ("*", vec!["*"]),
            (" * ", vec!["*"]),
            ("0:1", vec!["0:1"]),
            ("0:1 , 12:345", vec!["0:1", "12:345"]),
            ("0:1,", vec!["0:1", ""]),
        ] {
            let c = topic(&[("leader.replication.throttled.replicas", value)]).unwrap();
            assert_eq!(c.leader_replication_throttled_replicas, want, "{value:?}");
        }
        for bad in ["*,*", "0:", ":1", "0:1:2", "x", "0 :1", "-1:2"] {
            assert!(
                topic(&[("follower.replication.throttled.replicas", bad)]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn doubles_print_as_java_does() {
        for (v, s) in [
            (0.5, "0.5"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (0.001, "0.001"),
            (0.0001, "1.0E-4"),
            (0.000123, "1.23E-4"),
            (1e7, "1.0E7"),
            (1234567.0, "1234567.0"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(java_double_to_string(v), s, "{v}");
        }
        // Java's suffixes and exponents parse.
        for (text, v) in [
            ("0.5d", 0.5),
            ("1F", 1.0),
            ("5e-1", 0.5),
            (".25", 0.25),
            ("1.", 1.0),
        ] {
            let c = topic(&[("min.cleanable.dirty.ratio", text)]).unwrap();
            assert_eq!(c.min_cleanable_dirty_ratio, v, "{text}");
        }
        for bad in ["d", "0.5dd", "inf", "Infinity", "-0.5", "0x1p-1", "1,5"] {
            assert!(
                topic(&[("min.cleanable.dirty.ratio", bad)]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn kafka_ids() {
        let types = [
            ConfigType::Boolean,
            ConfigType::String,
            ConfigType::Int,
            ConfigType::Short,
            ConfigType::Long,
            ConfigType::Double,
            ConfigType::List,
            ConfigType::Class,
            ConfigType::Password,
        ];
        let ids: Vec<i8> = types.iter().map(|t| t.code()).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(ConfigSource::DynamicTopic.code(), 1);
        assert_eq!(ConfigSource::StaticBroker.code(), 4);
        assert_eq!(ConfigSource::Default.code(), 5);
    }

    #[test]
    fn no_input_panics() {
        let values = [
            "",
            " ",
            "\0",
            "-",
            "+",
            "--1",
            "0",
            "-0",
            "1",
            "-1",
            "-2",
            "14",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "99999999999999999999999",
            "2147483648",
            "-2147483649",
            "1.5",
            "NaN",
            "inf",
            "-inf",
            "1e309",
            "true",
            "FALSE",
            "*",
            ",",
            ",,",
            "compact",
            "delete,compact",
            "zstd",
            "lz4",
            "CreateTime",
            "3.0-IV1",
            "0.",
            "0..",
            "é",
            "\u{FEFF}1",
            "１",
            "0:1",
            "💥",
            "\u{85}1\u{85}",
            "0x10",
            "1_000",
            " 1 2 ",
        ];
        for key in LogConfig::topic_keys()
            .iter()
            .copied()
            .chain(["", "x", "log.retention.ms"])
        {
            for value in values {
                let _ = LogConfig::validate(key, value);
                let _ = topic(&[(key, value)]).map(|c| c.describe(&[key], &[]));
            }
        }
        for key in LogConfig::broker_keys() {
            for value in values {
                let _ = LogConfig::from_broker_properties([(*key, value)]);
            }
        }
    }
}
