//! The consumer's settings under Kafka's names with Kafka's (3.x) defaults, parsed from
//! key=value pairs: an unknown key or a bad value is an error naming the key, and the rules
//! Kafka's `ConsumerConfig` enforces (auto-commit needs a group, the heartbeat must beat
//! faster than the session expires) are enforced here too.

use std::time::Duration;

use crate::cluster::ClusterConfig;
use crate::error::{ClientError, Result};
use crate::props::{bad, Props};

/// `auto.offset.reset`: where to start when a partition has no committed offset, or the
/// position is out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    Earliest,
    Latest,
    /// No reset: `poll` fails and the application must `seek`.
    None,
}

impl AutoOffsetReset {
    pub fn name(self) -> &'static str {
        match self {
            AutoOffsetReset::Earliest => "earliest",
            AutoOffsetReset::Latest => "latest",
            AutoOffsetReset::None => "none",
        }
    }
}

/// `isolation.level`, passed to the broker in Fetch and ListOffsets. With `read_committed`
/// the consumer also drops the records of aborted transactions (by the response's aborted
/// transaction list, as Kafka's consumer does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationLevel {
    ReadUncommitted,
    ReadCommitted,
}

impl IsolationLevel {
    /// The wire value.
    pub fn wire(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// A partition assignment strategy of `partition.assignment.strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentStrategy {
    /// Kafka's `RangeAssignor`.
    Range,
    /// Kafka's `RoundRobinAssignor`.
    RoundRobin,
    /// Kafka's `CooperativeStickyAssignor`.
    CooperativeSticky,
}

impl AssignmentStrategy {
    /// The protocol name sent in JoinGroup (the same as Kafka's assignors').
    pub fn name(self) -> &'static str {
        match self {
            AssignmentStrategy::Range => "range",
            AssignmentStrategy::RoundRobin => "roundrobin",
            AssignmentStrategy::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Parses a Kafka assignor name or class name.
    pub fn parse(s: &str) -> Result<Self> {
        let short = s
            .trim()
            .strip_prefix("org.apache.kafka.clients.consumer.")
            .unwrap_or(s.trim());
        match short {
            "range" | "RangeAssignor" => Ok(AssignmentStrategy::Range),
            "roundrobin" | "RoundRobinAssignor" => Ok(AssignmentStrategy::RoundRobin),
            "cooperative-sticky" | "CooperativeStickyAssignor" => {
                Ok(AssignmentStrategy::CooperativeSticky)
            }
            "sticky" | "StickyAssignor" => Err(bad(
                "partition.assignment.strategy",
                s,
                "the eager StickyAssignor is not supported; use cooperative-sticky",
            )),
            _ => Err(bad(
                "partition.assignment.strategy",
                s,
                "unknown assignor (supported: range, roundrobin, cooperative-sticky, or their \
                 org.apache.kafka.clients.consumer class names)",
            )),
        }
    }

    /// Whether the assignor works with incremental cooperative rebalancing (KIP-429).
    pub fn supports_cooperative(self) -> bool {
        matches!(self, AssignmentStrategy::CooperativeSticky)
    }
}

/// How a member gives up partitions in a rebalance (Kafka's `RebalanceProtocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceProtocol {
    /// Every member revokes everything before rejoining.
    Eager,
    /// Members keep their partitions and revoke only those that move (KIP-429).
    Cooperative,
}

/// `group.protocol`: how the consumer takes part in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup rounds; a member of the group runs the assignor.
    Classic,
    /// KIP-848: ConsumerGroupHeartbeat; the coordinator assigns (`group.remote.assignor`).
    Consumer,
}

/// The settings the coordinator owns under the consumer protocol (as the broker's
/// `group.consumer.*`): Kafka 4's client refuses them with `group.protocol=consumer`.
const CLASSIC_ONLY: &[&str] = &[
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
];

/// The consumer's settings.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    pub cluster: ClusterConfig,
    pub group_id: Option<String>,
    pub group_instance_id: Option<String>,
    pub enable_auto_commit: bool,
    pub auto_commit_interval: Duration,
    pub auto_offset_reset: AutoOffsetReset,
    pub session_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// Also the rebalance timeout sent in JoinGroup, as in Kafka.
    pub max_poll_interval: Duration,
    pub max_poll_records: usize,
    pub fetch_min_bytes: i32,
    pub fetch_max_bytes: i32,
    pub fetch_max_wait: Duration,
    pub max_partition_fetch_bytes: i32,
    /// In order of preference.
    pub assignment_strategies: Vec<AssignmentStrategy>,
    pub isolation_level: IsolationLevel,
    pub check_crcs: bool,
    pub allow_auto_create_topics: bool,
    /// The bound of blocking calls that take no timeout (`commit_sync`, `committed`,
    /// `position`, `offsets_for_times`, ...).
    pub default_api_timeout: Duration,
    pub metadata_max_age: Duration,
    pub client_rack: Option<String>,
    /// The cap of the backoff between failed attempts to join the group.
    pub retry_backoff_max: Duration,
    pub group_protocol: GroupProtocol,
    /// The server-side assignor asked for under the consumer protocol (the broker's first
    /// `group.consumer.assignors` when unset).
    pub group_remote_assignor: Option<String>,
}

/// Java-client keys with no meaning for this client (deserializers are the application's
/// business: records come out as bytes).
const CONSUMER_IGNORED: &[&str] = &[
    "key.deserializer",
    "value.deserializer",
    "interceptor.classes",
    "metric.reporters",
    "metrics.num.samples",
    "metrics.sample.window.ms",
    "metrics.recording.level",
    "auto.include.jmx.reporter",
    "enable.metrics.push",
    "exclude.internal.topics",
    "client.dns.lookup",
    "connections.max.idle.ms",
    "receive.buffer.bytes",
    "send.buffer.bytes",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "socket.connection.setup.timeout.max.ms",
];

impl ConsumerConfig {
    /// Parses Kafka's consumer settings (`bootstrap.servers` at least).
    pub fn from_properties<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        let mut p = Props::new(pairs);
        let cluster = p.cluster("weir-consumer")?;
        let group_id_set = p.is_set("group.id");
        let group_id = p.string("group.id", "");
        let group_id =
            match (group_id_set, group_id.trim().is_empty()) {
                (false, _) => None,
                (true, true) => return Err(ClientError::Config(
                    "group.id must not be empty (leave it unset for a consumer without a group)"
                        .into(),
                )),
                (true, false) => Some(group_id),
            };
        let instance = p.string("group.instance.id", "");
        let group_instance_id = (!instance.trim().is_empty()).then_some(instance);
        let auto_commit_set = p.is_set("enable.auto.commit");
        let mut enable_auto_commit = p.bool("enable.auto.commit", true)?;
        if group_id.is_none() {
            // Kafka: auto-commit defaults to off without a group, and asking for it is an error.
            if auto_commit_set && enable_auto_commit {
                return Err(ClientError::Config(
                    "enable.auto.commit=true needs a group.id (offsets are committed to a group)"
                        .into(),
                ));
            }
            enable_auto_commit = false;
            if group_instance_id.is_some() {
                return Err(ClientError::Config(
                    "group.instance.id needs a group.id".into(),
                ));
            }
        }
        let reset = p.string("auto.offset.reset", "latest");
        let auto_offset_reset = match reset.trim().to_ascii_lowercase().as_str() {
            "earliest" => AutoOffsetReset::Earliest,
            "latest" => AutoOffsetReset::Latest,
            "none" => AutoOffsetReset::None,
            _ => {
                return Err(bad(
                    "auto.offset.reset",
                    &reset,
                    "must be earliest, latest or none",
                ))
            }
        };
        let isolation = p.string("isolation.level", "read_uncommitted");
        let isolation_level = match isolation.trim().to_ascii_lowercase().as_str() {
            "read_uncommitted" => IsolationLevel::ReadUncommitted,
            "read_committed" => IsolationLevel::ReadCommitted,
            _ => {
                return Err(bad(
                    "isolation.level",
                    &isolation,
                    "must be read_uncommitted or read_committed",
                ))
            }
        };
        let strategies = p.string("partition.assignment.strategy", "range,cooperative-sticky");
        let mut assignment_strategies = Vec::new();
        for name in strategies.split(',').filter(|s| !s.trim().is_empty()) {
            let s = AssignmentStrategy::parse(name)?;
            if !assignment_strategies.contains(&s) {
                assignment_strategies.push(s);
            }
        }
        if assignment_strategies.is_empty() {
            return Err(bad(
                "partition.assignment.strategy",
                &strategies,
                "names no assignor",
            ));
        }
        let protocol = p.string("group.protocol", "classic");
        let group_protocol = match protocol.trim().to_ascii_lowercase().as_str() {
            "classic" => GroupProtocol::Classic,
            "consumer" => GroupProtocol::Consumer,
            _ => {
                return Err(bad(
                    "group.protocol",
                    &protocol,
                    "must be classic or consumer",
                ))
            }
        };
        let remote_assignor = p.string("group.remote.assignor", "");
        let group_remote_assignor =
            (!remote_assignor.trim().is_empty()).then(|| remote_assignor.trim().to_string());
        if group_protocol == GroupProtocol::Consumer {
            if let Some(key) = CLASSIC_ONLY.iter().find(|k| p.is_set(k)) {
                return Err(ClientError::Config(format!(
                    "{key} cannot be set with group.protocol=consumer: the group coordinator \
                     decides it (the broker's group.consumer.* settings; the assignor is \
                     group.remote.assignor)"
                )));
            }
        } else if group_remote_assignor.is_some() {
            return Err(ClientError::Config(
                "group.remote.assignor needs group.protocol=consumer (the classic protocol \
                 assigns with partition.assignment.strategy)"
                    .into(),
            ));
        }
        let rack = p.string("client.rack", "");
        let ms = |v: u64| Duration::from_millis(v);
        let cfg = ConsumerConfig {
            cluster,
            group_id,
            group_instance_id,
            enable_auto_commit,
            auto_commit_interval: ms(p.int("auto.commit.interval.ms", 5_000u64, 0)?),
            auto_offset_reset,
            session_timeout: ms(p.int("session.timeout.ms", 45_000u64, 1)?),
            heartbeat_interval: ms(p.int("heartbeat.interval.ms", 3_000u64, 1)?),
            max_poll_interval: ms(p.int("max.poll.interval.ms", 300_000u64, 1)?),
            max_poll_records: p.int("max.poll.records", 500usize, 1)?,
            fetch_min_bytes: p.int("fetch.min.bytes", 1i32, 0)?,
            fetch_max_bytes: p.int("fetch.max.bytes", 52_428_800i32, 0)?,
            fetch_max_wait: ms(p.int("fetch.max.wait.ms", 500u64, 0)?),
            max_partition_fetch_bytes: p.int("max.partition.fetch.bytes", 1_048_576i32, 0)?,
            assignment_strategies,
            isolation_level,
            check_crcs: p.bool("check.crcs", true)?,
            allow_auto_create_topics: p.bool("allow.auto.create.topics", true)?,
            default_api_timeout: ms(p.int("default.api.timeout.ms", 60_000u64, 0)?),
            metadata_max_age: ms(p.int("metadata.max.age.ms", 300_000u64, 0)?),
            client_rack: (!rack.trim().is_empty()).then_some(rack),
            retry_backoff_max: ms(p.int("retry.backoff.max.ms", 1_000u64, 0)?),
            group_protocol,
            group_remote_assignor,
        };
        p.finish(CONSUMER_IGNORED)?;
        if cfg.group_id.is_some() && cfg.heartbeat_interval >= cfg.session_timeout {
            return Err(ClientError::Config(format!(
                "heartbeat.interval.ms ({}) must be lower than session.timeout.ms ({})",
                cfg.heartbeat_interval.as_millis(),
                cfg.session_timeout.as_millis()
            )));
        }
        for (key, d) in [
            ("session.timeout.ms", cfg.session_timeout),
            ("max.poll.interval.ms", cfg.max_poll_interval),
            ("request.timeout.ms", cfg.cluster.request_timeout),
            ("fetch.max.wait.ms", cfg.fetch_max_wait),
        ] {
            if d.as_millis() > i32::MAX as u128 {
                return Err(bad(
                    key,
                    &d.as_millis().to_string(),
                    "must fit in 32 bits (at most 2147483647)",
                ));
            }
        }
        Ok(cfg)
    }

    /// The rebalance protocol: cooperative only if every configured assignor supports it
    /// (Kafka's rule; the default "range,cooperative-sticky" is therefore eager).
    pub fn rebalance_protocol(&self) -> RebalanceProtocol {
        if self
            .assignment_strategies
            .iter()
            .all(|s| s.supports_cooperative())
        {
            RebalanceProtocol::Cooperative
        } else {
            RebalanceProtocol::Eager
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<ConsumerConfig> {
        let mut all = vec![("bootstrap.servers", "localhost:9092")];
        all.extend_from_slice(pairs);
        ConsumerConfig::from_properties(all)
    }

    #[test]
    fn kafka_defaults() {
        let c = cfg(&[("group.id", "g")]).unwrap();
        assert!(c.enable_auto_commit);
        assert_eq!(c.auto_commit_interval, Duration::from_secs(5));
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Latest);
        assert_eq!(c.session_timeout, Duration::from_secs(45));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(3));
        assert_eq!(c.max_poll_interval, Duration::from_secs(300));
        assert_eq!(c.max_poll_records, 500);
        assert_eq!(c.fetch_min_bytes, 1);
        assert_eq!(c.fetch_max_bytes, 52_428_800);
        assert_eq!(c.fetch_max_wait, Duration::from_millis(500));
        assert_eq!(c.max_partition_fetch_bytes, 1_048_576);
        assert_eq!(
            c.assignment_strategies,
            vec![
                AssignmentStrategy::Range,
                AssignmentStrategy::CooperativeSticky
            ]
        );
        assert_eq!(c.rebalance_protocol(), RebalanceProtocol::Eager);
        assert_eq!(c.isolation_level, IsolationLevel::ReadUncommitted);
        assert!(c.check_crcs);
        assert!(c.allow_auto_create_topics);
        assert_eq!(c.cluster.request_timeout, Duration::from_secs(30));
    }

    #[test]
    fn auto_commit_follows_the_group() {
        assert!(!cfg(&[]).unwrap().enable_auto_commit);
        assert!(cfg(&[("enable.auto.commit", "true")]).is_err());
        assert!(cfg(&[("group.id", "")]).is_err());
    }

    #[test]
    fn strategies_by_name_or_class() {
        let c = cfg(&[(
            "partition.assignment.strategy",
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        )])
        .unwrap();
        assert_eq!(
            c.assignment_strategies,
            vec![AssignmentStrategy::CooperativeSticky]
        );
        assert_eq!(c.rebalance_protocol(), RebalanceProtocol::Cooperative);
        let c = cfg(&[("partition.assignment.strategy", "roundrobin, range")]).unwrap();
        assert_eq!(
            c.assignment_strategies,
            vec![AssignmentStrategy::RoundRobin, AssignmentStrategy::Range]
        );
        let e = cfg(&[("partition.assignment.strategy", "sticky")]).unwrap_err();
        assert!(e.to_string().contains("cooperative-sticky"), "{e}");
    }

    #[test]
    fn mistakes_are_named() {
        for (k, v) in [
            ("auto.offset.reset", "smallest"),
            ("isolation.level", "serializable"),
            ("max.poll.records", "0"),
            ("fetch.max.wait.ms", "soon"),
            ("group.protocol", "cooperative"),
            ("fetch.min.byte", "1"),
        ] {
            let e = cfg(&[("group.id", "g"), (k, v)]).unwrap_err();
            assert!(e.to_string().contains(k), "{k}: {e}");
        }
        for k in CLASSIC_ONLY {
            let e = cfg(&[
                ("group.id", "g"),
                ("group.protocol", "consumer"),
                (k, "range"),
            ])
            .unwrap_err();
            assert!(e.to_string().contains(k), "{k}: {e}");
        }
        let e = cfg(&[("group.id", "g"), ("group.remote.assignor", "range")]).unwrap_err();
        assert!(e.to_string().contains("group.protocol"), "{e}");
        let c = cfg(&[
            ("group.id", "g"),
            ("group.protocol", "Consumer"),
            ("group.remote.assignor", "range"),
        ])
        .unwrap();
        assert_eq!(c.group_protocol, GroupProtocol::Consumer);
        assert_eq!(c.group_remote_assignor.as_deref(), Some("range"));
        let e = cfg(&[("group.id", "g"), ("heartbeat.interval.ms", "50000")]).unwrap_err();
        assert!(e.to_string().contains("heartbeat.interval.ms"), "{e}");
        assert!(cfg(&[(
            "key.deserializer",
            "org.apache.kafka.common.serialization.ByteArrayDeserializer"
        )])
        .is_ok());
    }
}
