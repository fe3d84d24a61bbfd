//! Kafka's broker configuration keys, as a Kafka 4.4 broker describes them: every key with its
//! type, how Kafka lets it change while the broker runs, and Kafka's default. The table is
//! facts generated from Kafka's own definitions (`kafka_broker_configs.tsv`, made by
//! scripts/kafka-config-facts.sh); this module only reads it, and says which keys Weir acts on.

use std::sync::OnceLock;

use weir_kafka::config::ConfigType;

/// How Kafka lets a key change while the broker runs (DynamicBrokerConfig's update modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateMode {
    ReadOnly,
    PerBroker,
    ClusterWide,
}

/// One key of Kafka's broker configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaKey {
    pub name: &'static str,
    pub config_type: ConfigType,
    pub mode: UpdateMode,
    /// Kafka's default as Kafka prints it; `None` where Kafka has none.
    pub default: Option<&'static str>,
}

const TABLE: &str = include_str!("kafka_broker_configs.tsv");

/// Every key of the table, sorted by name.
pub fn keys() -> &'static [KafkaKey] {
    static KEYS: OnceLock<Vec<KafkaKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let keys: Vec<KafkaKey> = TABLE
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|line| {
                let f: Vec<&'static str> = line.split('\t').collect();
                // The table is generated: a malformed row is a defect of this build.
                assert!(
                    f.len() == 4,
                    "kafka_broker_configs.tsv: malformed row '{line}'"
                );
                KafkaKey {
                    name: f[0],
                    config_type: config_type(f[1]),
                    mode: match f[2] {
                        "read-only" => UpdateMode::ReadOnly,
                        "per-broker" => UpdateMode::PerBroker,
                        "cluster-wide" => UpdateMode::ClusterWide,
                        m => panic!("kafka_broker_configs.tsv: unknown update mode '{m}'"),
                    },
                    default: (f[3] != "<null>").then_some(f[3]),
                }
            })
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0].name < w[1].name),
            "kafka_broker_configs.tsv: rows out of order"
        );
        keys
    })
}

/// The key named `name`, if Kafka has it.
pub fn key(name: &str) -> Option<&'static KafkaKey> {
    let keys = keys();
    keys.binary_search_by(|k| k.name.cmp(name))
        .ok()
        .map(|i| &keys[i])
}

fn config_type(name: &str) -> ConfigType {
    match name {
        "BOOLEAN" => ConfigType::Boolean,
        "STRING" => ConfigType::String,
        "INT" => ConfigType::Int,
        "SHORT" => ConfigType::Short,
        "LONG" => ConfigType::Long,
        "DOUBLE" => ConfigType::Double,
        "LIST" => ConfigType::List,
        "CLASS" => ConfigType::Class,
        "PASSWORD" => ConfigType::Password,
        t => panic!("kafka_broker_configs.tsv: unknown type '{t}'"),
    }
}

/// The broker keys Weir acts on (beyond the `log.*` defaults of topics, which
/// `LogConfig::broker_keys` names): read at start, or at once when changed.
const HONOURED: &[&str] = &[
    "advertised.listeners",
    "authorizer.class.name",
    "auto.create.topics.enable",
    "broker.id",
    "broker.rack",
    "connections.max.idle.ms",
    "default.replication.factor",
    "delete.topic.enable",
    "group.consumer.assignors",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.max.size",
    "group.consumer.session.timeout.ms",
    "group.coordinator.rebalance.protocols",
    "group.initial.rebalance.delay.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "group.min.session.timeout.ms",
    "inter.broker.listener.name",
    "listener.security.protocol.map",
    "listeners",
    "log.dir",
    "log.dirs",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "message.max.bytes",
    "min.insync.replicas",
    "node.id",
    "num.partitions",
    "num.recovery.threads.per.data.dir",
    "offset.metadata.max.bytes",
    "offsets.commit.timeout.ms",
    "offsets.retention.check.interval.ms",
    "offsets.retention.minutes",
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "offsets.topic.segment.bytes",
    "producer.id.expiration.ms",
    "quota.window.num",
    "quota.window.size.seconds",
    "replica.fetch.backoff.ms",
    "replica.fetch.max.bytes",
    "replica.fetch.min.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.wait.max.ms",
    "replica.lag.time.max.ms",
    "replica.socket.timeout.ms",
    "sasl.enabled.mechanisms",
    "sasl.jaas.config",
    "sasl.server.max.receive.size",
    "socket.listen.backlog.size",
    "socket.request.max.bytes",
    "ssl.client.auth",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.principal.mapping.rules",
    "ssl.truststore.certificates",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.max.timeout.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
    "transaction.state.log.min.isr",
    "transaction.state.log.num.partitions",
    "transaction.state.log.replication.factor",
    "transaction.state.log.segment.bytes",
    "transactional.id.expiration.ms",
    "unclean.leader.election.enable",
];

/// Whether Weir acts on broker key `name`.
pub fn honoured(name: &str) -> bool {
    HONOURED.contains(&name) || weir_log::LogConfig::broker_keys().contains(&name)
}

/// DescribeConfigs' documentation of broker key `name`, in Weir's words: what Kafka's key
/// is for is Kafka's documentation; this says whether Weir acts on it.
pub fn documentation(name: &str) -> String {
    if honoured(name) {
        format!("Kafka's {name}: Weir honours it as Kafka does.")
    } else {
        format!(
            "Kafka's {name}: Weir accepts it and does not act on it (see Kafka's \
             documentation for what it does there)."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_every_key_weir_honours_is_kafkas() {
        assert!(keys().len() > 300, "{} keys", keys().len());
        let retention = key("log.retention.hours").unwrap();
        assert_eq!(retention.config_type, ConfigType::Int);
        assert_eq!(retention.default, Some("168"));
        assert_eq!(key("log.retention.ms").unwrap().default, None);
        assert_eq!(
            key("log.cleaner.threads").unwrap().mode,
            UpdateMode::ClusterWide
        );
        assert!(
            key("log.message.format.version").is_none(),
            "removed in Kafka 4"
        );
        for name in HONOURED {
            assert!(key(name).is_some(), "{name} is not a Kafka 4.4 broker key");
        }
    }
}
