//! The DescribeConfigs view of a [`LogConfig`]: every topic-level key with its value printed
//! as Kafka prints it, its source and its documentation. Read-only: it must not change a
//! config or judge a value.

use weir_kafka::config::{ConfigEntry, ConfigSource};

use super::keys::KEY_DEFS;
use super::LogConfig;

impl LogConfig {
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
            "errors.deadletterqueue.group.enable" => {
                self.errors_deadletterqueue_group_enable.to_string()
            }
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
            "max.decompressed.message.bytes" => self.max_decompressed_message_bytes.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "message.timestamp.after.max.ms" => self.message_timestamp_after_max_ms.to_string(),
            "message.timestamp.before.max.ms" => self.message_timestamp_before_max_ms.to_string(),
            "message.timestamp.type" => self.message_timestamp_type.name().to_string(),
            "min.cleanable.dirty.ratio" => java_double_to_string(self.min_cleanable_dirty_ratio),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "min.insync.replicas" => self.min_insync_replicas.to_string(),
            "preallocate" => self.preallocate.to_string(),
            "remote.copy.lag.bytes" => self.remote_copy_lag_bytes.to_string(),
            "remote.copy.lag.ms" => self.remote_copy_lag_ms.to_string(),
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
}

/// Java's `Double.toString`, which Kafka uses to print DOUBLE configs: plain decimal for
/// magnitudes in [1e-3, 1e7), else `d.dddE±n`; always at least one fractional digit.
pub(super) fn java_double_to_string(v: f64) -> String {
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
