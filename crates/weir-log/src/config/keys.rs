//! The key table: every topic-level key Kafka 4.4 accepts, with its type, its broker synonyms
//! (Kafka's `ServerTopicConfigSynonyms`) and its documentation, and the broker keys that set
//! topic defaults. Data and lookups only: it must not parse values or touch a config's fields.

use weir_kafka::config::ConfigType;

use super::LogConfig;

pub(super) struct KeyDef {
    pub(super) name: &'static str,
    pub(super) config_type: ConfigType,
    /// Broker keys that set this default, highest priority first (Kafka's
    /// `ServerTopicConfigSynonyms`).
    pub(super) broker_synonyms: &'static [&'static str],
    pub(super) doc: &'static str,
}

/// Every topic-level key Kafka 4.4 accepts, sorted (the order Kafka's `configNames()` uses).
pub(super) const TOPIC_KEYS: &[&str] = &[
    "cleanup.policy",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.type",
    "compression.zstd.level",
    "delete.retention.ms",
    "errors.deadletterqueue.group.enable",
    "file.delete.delay.ms",
    "flush.messages",
    "flush.ms",
    "follower.replication.throttled.replicas",
    "index.interval.bytes",
    "leader.replication.throttled.replicas",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.decompressed.message.bytes",
    "max.message.bytes",
    "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "preallocate",
    "remote.copy.lag.bytes",
    "remote.copy.lag.ms",
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
pub(super) const KEY_DEFS: &[KeyDef] = &[
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
        name: "errors.deadletterqueue.group.enable",
        config_type: ConfigType::Boolean,
        broker_synonyms: &[],
        doc: "Whether share groups may write records they cannot deliver to this topic as \
              their dead-letter queue. Weir has no share groups yet: accepted, no effect.",
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
        name: "max.decompressed.message.bytes",
        config_type: ConfigType::Int,
        broker_synonyms: &["max.decompressed.message.bytes"],
        doc: "Largest single record, decompressed, that Kafka accepts where it decompresses \
              records. Weir does not enforce it yet: accepted and reported, no effect.",
    },
    KeyDef {
        name: "max.message.bytes",
        config_type: ConfigType::Int,
        broker_synonyms: &["message.max.bytes"],
        doc: "Largest record batch accepted, measured after compression.",
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
        name: "remote.copy.lag.bytes",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.remote.copy.lag.bytes"],
        doc: "Under tiered storage, a closed segment may be uploaded once this many bytes of \
              newer data follow it (-1: the local retention size, 0: at once). Weir has no \
              tiered storage yet: accepted and reported, no effect.",
    },
    KeyDef {
        name: "remote.copy.lag.ms",
        config_type: ConfigType::Long,
        broker_synonyms: &["log.remote.copy.lag.ms"],
        doc: "Under tiered storage, a closed segment may be uploaded once its newest record is \
              this old (-1: the local retention time, 0: at once). Weir has no tiered storage \
              yet: accepted and reported, no effect.",
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
pub(super) const BROKER_KEYS: &[&str] = &[
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
    "log.message.timestamp.after.max.ms",
    "log.message.timestamp.before.max.ms",
    "log.message.timestamp.type",
    "log.preallocate",
    "log.remote.copy.lag.bytes",
    "log.remote.copy.lag.ms",
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
    "max.decompressed.message.bytes",
    "message.max.bytes",
    "min.insync.replicas",
    "unclean.leader.election.enable",
];

/// Broker keys that map one-to-one onto a topic key with the same value rules.
pub(super) const BROKER_SIMPLE: &[(&str, &str)] = &[
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
        "log.message.timestamp.before.max.ms",
        "message.timestamp.before.max.ms",
    ),
    (
        "log.message.timestamp.after.max.ms",
        "message.timestamp.after.max.ms",
    ),
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
    ("log.local.retention.ms", "local.retention.ms"),
    ("log.local.retention.bytes", "local.retention.bytes"),
    ("log.remote.copy.lag.ms", "remote.copy.lag.ms"),
    ("log.remote.copy.lag.bytes", "remote.copy.lag.bytes"),
    (
        "max.decompressed.message.bytes",
        "max.decompressed.message.bytes",
    ),
];

/// Topic keys Kafka 4.0 removed (KIP-724 and the end of message format v0/v1 writes). A topic
/// created by an older Weir or Kafka may still carry them; they are dropped when its stored
/// overrides are read, as Kafka 4 ignores them, and refused as unknown when set.
pub(super) const REMOVED_TOPIC_KEYS: &[&str] = &[
    "message.downconversion.enable",
    "message.format.version",
    "message.timestamp.difference.max.ms",
];

fn key_def(key: &str) -> Option<&'static KeyDef> {
    KEY_DEFS.iter().find(|d| d.name == key)
}

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

    /// Is this a topic key Kafka 4.0 removed? Stored overrides drop such keys (with a warning)
    /// before they are applied; a request that sets one is refused as for any unknown key.
    pub fn is_removed_topic_key(key: &str) -> bool {
        REMOVED_TOPIC_KEYS.contains(&key)
    }

    /// The broker keys [`LogConfig::from_broker_properties`] reads, sorted.
    pub fn broker_keys() -> &'static [&'static str] {
        BROKER_KEYS
    }
}
