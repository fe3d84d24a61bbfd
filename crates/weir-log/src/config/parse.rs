//! Reading values into a [`LogConfig`]: topic-level overrides and a broker's
//! server.properties, by Kafka's ConfigDef value rules and KafkaConfig precedence, then the
//! cross-key rules. It must do no I/O and answer any key or value with an error, never a panic.

use weir_record::{Compression, CompressionConfig, TimestampType};

use super::keys::{BROKER_KEYS, BROKER_SIMPLE, KEY_DEFS};
use super::{
    CleanupPolicy, ConfigError, LogConfig, TopicCompression, GZIP_DEFAULT_LEVEL, HOUR_MS,
    LZ4_DEFAULT_LEVEL, MAX_DECOMPRESSED_MESSAGE_BYTES, MIN_SEGMENT_BYTES, ZSTD_DEFAULT_LEVEL,
};

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

impl LogConfig {
    /// Applies topic-level overrides (Kafka's topic config names) on top of `self` (the broker
    /// defaults). An unknown key or a bad value is an error naming the key. A key given twice
    /// takes its last value. After all keys, the cross-key rules run:
    /// `min.compaction.lag.ms <= max.compaction.lag.ms` and building `compression` from
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
            "errors.deadletterqueue.group.enable" => {
                c.errors_deadletterqueue_group_enable = parse_bool(key, value)?
            }
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
            "max.decompressed.message.bytes" => {
                let v = int_at_least(key, value, 1)?;
                if v > MAX_DECOMPRESSED_MESSAGE_BYTES {
                    return Err(err(
                        key,
                        format!("must be at most {MAX_DECOMPRESSED_MESSAGE_BYTES}, got {v}"),
                    ));
                }
                c.max_decompressed_message_bytes = v;
            }
            "max.message.bytes" => c.max_message_bytes = int_at_least(key, value, 0)? as u32,
            "message.timestamp.after.max.ms" => {
                c.message_timestamp_after_max_ms = long_at_least(key, value, 0)?
            }
            "message.timestamp.before.max.ms" => {
                c.message_timestamp_before_max_ms = long_at_least(key, value, 0)?
            }
            "message.timestamp.type" => {
                c.message_timestamp_type = parse_timestamp_type(key, value)?
            }
            "min.cleanable.dirty.ratio" => c.min_cleanable_dirty_ratio = parse_ratio(key, value)?,
            "min.compaction.lag.ms" => c.min_compaction_lag_ms = long_at_least(key, value, 0)?,
            "min.insync.replicas" => c.min_insync_replicas = int_at_least(key, value, 1)?,
            "preallocate" => c.preallocate = parse_bool(key, value)?,
            "remote.copy.lag.bytes" => c.remote_copy_lag_bytes = long_at_least(key, value, -1)?,
            "remote.copy.lag.ms" => c.remote_copy_lag_ms = long_at_least(key, value, -1)?,
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
