//! The config module's behaviour, as a user of it sees it: Kafka's defaults and key table,
//! the value rules of every key, broker-property precedence and the DescribeConfigs output.
//! Tests only: nothing here is compiled into the library.

use weir_kafka::config::{ConfigSource, ConfigType};

use super::describe::java_double_to_string;
use super::keys::{BROKER_KEYS, BROKER_SIMPLE, KEY_DEFS, TOPIC_KEYS};
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
    assert_eq!(c.message_timestamp_after_max_ms, 3_600_000);
    assert_eq!(c.compression, TopicCompression::Producer);
    assert_eq!(c.compression_gzip_level, -1);
    assert_eq!(c.compression_lz4_level, 9);
    assert_eq!(c.compression_zstd_level, 3);
    assert_eq!(c.min_insync_replicas, 1);
    assert!(!c.preallocate);
    assert!(!c.unclean_leader_election_enable);
    assert!(c.leader_replication_throttled_replicas.is_empty());
    assert!(c.follower_replication_throttled_replicas.is_empty());
    assert!(!c.remote_storage_enable);
    assert_eq!(c.local_retention_ms, -2);
    assert_eq!(c.local_retention_bytes, -2);
    assert!(!c.remote_log_copy_disable);
    assert!(!c.remote_log_delete_on_disable);
    assert_eq!(c.remote_copy_lag_ms, 0);
    assert_eq!(c.remote_copy_lag_bytes, -1);
    assert!(!c.errors_deadletterqueue_group_enable);
    assert_eq!(c.max_decompressed_message_bytes, 2_147_483_639);
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
    assert_eq!(LogConfig::topic_keys().len(), 37);
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
                && c.message_timestamp_after_max_ms == 3_600_000
        }),
        ("message.timestamp.after.max.ms", "0", |c| {
            c.message_timestamp_after_max_ms == 0 && c.message_timestamp_before_max_ms == i64::MAX
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
        ("remote.copy.lag.ms", "-1", |c| c.remote_copy_lag_ms == -1),
        ("remote.copy.lag.bytes", "4096", |c| {
            c.remote_copy_lag_bytes == 4096
        }),
        ("errors.deadletterqueue.group.enable", "true", |c| {
            c.errors_deadletterqueue_group_enable
        }),
        ("max.decompressed.message.bytes", "1000", |c| {
            c.max_decompressed_message_bytes == 1000
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
        ("remote.copy.lag.ms", "-2", "at least -1, got -2"),
        ("remote.copy.lag.bytes", "-2", "at least -1, got -2"),
        ("errors.deadletterqueue.group.enable", "1", "true or false"),
        ("max.decompressed.message.bytes", "0", "at least 1, got 0"),
        (
            "max.decompressed.message.bytes",
            "2147483640",
            "at most 2147483639",
        ),
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
fn keys_kafka_4_removed_are_unknown() {
    for key in [
        "message.format.version",
        "message.downconversion.enable",
        "message.timestamp.difference.max.ms",
    ] {
        assert!(LogConfig::is_removed_topic_key(key), "{key}");
        assert!(!LogConfig::is_topic_key(key), "{key}");
        let e = err_of(topic(&[(key, "1")]));
        assert_eq!(e.key, key);
    }
    // At the broker they are ignored like any key this module does not know.
    let (c, consumed) = LogConfig::from_broker_properties([
        ("log.message.format.version", "2.8"),
        ("log.message.timestamp.difference.max.ms", "1000"),
    ])
    .unwrap();
    assert_eq!(c, LogConfig::default());
    assert!(consumed.is_empty());
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
        ("log.remote.copy.lag.ms", "90"),
        ("compression.type", "gzip"),
        ("compression.gzip.level", "4"),
        ("min.insync.replicas", "2"),
        ("log.preallocate", "true"),
        ("unclean.leader.election.enable", "true"),
        ("max.decompressed.message.bytes", "100000"),
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
    assert_eq!(c.remote_copy_lag_ms, 90);
    assert_eq!(
        c.compression,
        TopicCompression::Codec(CompressionConfig::with_level(Compression::Gzip, 4).unwrap())
    );
    assert_eq!(c.compression_gzip_level, 4);
    assert_eq!(c.min_insync_replicas, 2);
    assert!(c.preallocate);
    assert!(c.unclean_leader_election_enable);
    assert_eq!(c.max_decompressed_message_bytes, 100_000);
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
        ("log.message.timestamp.before.max.ms", "-1"),
        ("log.message.timestamp.after.max.ms", "-1"),
        ("log.remote.copy.lag.ms", "-2"),
        ("log.remote.copy.lag.bytes", "x"),
        ("max.decompressed.message.bytes", "0"),
        ("compression.type", "none"),
        ("compression.gzip.level", "0"),
        ("compression.lz4.level", "0"),
        ("compression.zstd.level", "99"),
        ("min.insync.replicas", "0"),
        ("log.preallocate", "sure"),
        ("unclean.leader.election.enable", "sure"),
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
        ("errors.deadletterqueue.group.enable", "false"),
        ("file.delete.delay.ms", "60000"),
        ("flush.messages", "9223372036854775807"),
        ("flush.ms", "9223372036854775807"),
        ("follower.replication.throttled.replicas", ""),
        ("index.interval.bytes", "4096"),
        ("leader.replication.throttled.replicas", ""),
        ("local.retention.bytes", "-2"),
        ("local.retention.ms", "-2"),
        ("max.compaction.lag.ms", "9223372036854775807"),
        ("max.decompressed.message.bytes", "2147483639"),
        ("max.message.bytes", "1048588"),
        ("message.timestamp.after.max.ms", "3600000"),
        ("message.timestamp.before.max.ms", "9223372036854775807"),
        ("message.timestamp.type", "CreateTime"),
        ("min.cleanable.dirty.ratio", "0.5"),
        ("min.compaction.lag.ms", "0"),
        ("min.insync.replicas", "1"),
        ("preallocate", "false"),
        ("remote.copy.lag.bytes", "-1"),
        ("remote.copy.lag.ms", "0"),
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
            ("message.timestamp.after.max.ms", "1000"),
            ("remote.copy.lag.bytes", "0"),
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
