//! Kafka's broker configuration keys, as a Kafka 4.4 broker describes them: every key with its
//! type, how Kafka lets it change while the broker runs, and Kafka's default; and the keys of
//! a group config resource (KIP-848's per-group settings), each with the broker key whose
//! value it overrides. The tables are facts generated from Kafka's own definitions
//! (`kafka_broker_configs.tsv` and `kafka_group_configs.tsv`, made by
//! scripts/kafka-config-facts.sh); this module only reads them, and says which keys Weir acts
//! on.

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
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaKey {
    pub name: &'static str,
    pub config_type: ConfigType,
    pub mode: UpdateMode,
    /// Kafka changes it dynamically only per listener (`listener.name.<l>.ssl.keystore...`):
    /// its TLS keys.
    pub listener_only: bool,
    /// What Kafka's ConfigDef lets the key be.
    pub validator: Validator,
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
                    f.len() == 6,
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
                    listener_only: f[3] == "yes",
                    validator: Validator::parse(f[4]),
                    default: (f[5] != "<null>").then_some(f[5]),
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

/// One key of Kafka's group config resource (`kafka-configs --entity-type groups`).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupKey {
    /// Its name, type, validator and default (`mode` and `listener_only` mean nothing here).
    pub key: KafkaKey,
    /// The broker key whose value applies to a group that does not set this one
    /// (`group.consumer.session.timeout.ms` for `consumer.session.timeout.ms`).
    pub broker_synonym: Option<&'static str>,
    /// Kafka's internal keys: taken, and described only where set.
    pub internal: bool,
}

const GROUP_TABLE: &str = include_str!("kafka_group_configs.tsv");

/// Every key of a group config resource, sorted by name.
pub fn group_keys() -> &'static [GroupKey] {
    static KEYS: OnceLock<Vec<GroupKey>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let keys: Vec<GroupKey> = GROUP_TABLE
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|line| {
                let f: Vec<&'static str> = line.split('\t').collect();
                assert!(
                    f.len() == 6,
                    "kafka_group_configs.tsv: malformed row '{line}'"
                );
                GroupKey {
                    key: KafkaKey {
                        name: f[0],
                        config_type: config_type(f[1]),
                        mode: UpdateMode::ReadOnly,
                        listener_only: false,
                        validator: Validator::parse(f[2]),
                        default: (f[3] != "<null>").then_some(f[3]),
                    },
                    broker_synonym: (f[4] != "<none>").then_some(f[4]),
                    internal: f[5] == "yes",
                }
            })
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0].key.name < w[1].key.name),
            "kafka_group_configs.tsv: rows out of order"
        );
        keys
    })
}

/// The group config key named `name`, if Kafka has it.
pub fn group_key(name: &str) -> Option<&'static GroupKey> {
    let keys = group_keys();
    keys.binary_search_by(|k| k.key.name.cmp(name))
        .ok()
        .map(|i| &keys[i])
}

/// A key's ConfigDef validator, read from how Kafka prints it. The forms Weir checks are the
/// ones Kafka's broker keys use: ranges (`[1,...]`, `[0,...,500]`, `[1,...,9] or -1`), fixed
/// choices (`[compact, delete]`, case-insensitively when Kafka says so) and non-empty values.
/// A validator in any other form is Kafka's own code (a class name's, say), which Weir leaves
/// unchecked.
#[derive(Debug, Clone, PartialEq)]
pub enum Validator {
    None,
    Range {
        min: Option<f64>,
        max: Option<f64>,
        /// A value allowed outside the range.
        or: Option<f64>,
    },
    OneOf {
        choices: Vec<&'static str>,
        case_insensitive: bool,
    },
    NonEmpty,
}

impl Validator {
    fn parse(text: &'static str) -> Validator {
        let (text, case_insensitive) = match text.strip_prefix("(case insensitive) ") {
            Some(rest) => (rest, true),
            None => (text, false),
        };
        if matches!(
            text,
            "non-empty string" | "non-empty list" | "non-null string"
        ) {
            return Validator::NonEmpty;
        }
        let (text, or) = match text.split_once("] or ") {
            Some((range, or)) => (&text[..range.len() + 1], or.parse().ok()),
            None => (text, None),
        };
        let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
            return Validator::None;
        };
        let parts: Vec<&str> = inner.split(",...").collect();
        if parts.len() == 2 {
            let bound = |p: &str| p.trim_start_matches(',').parse::<f64>().ok();
            return Validator::Range {
                min: bound(parts[0]),
                max: bound(parts[1]),
                or,
            };
        }
        if inner.is_empty() {
            return Validator::None;
        }
        Validator::OneOf {
            choices: inner.split(", ").collect(),
            case_insensitive,
        }
    }
}

impl KafkaKey {
    /// Checks `value` as Kafka's ConfigDef parses and validates it for this key, with
    /// Kafka's wording of what is wrong.
    pub fn check(&self, value: &str) -> Result<(), String> {
        let bad = |why: &str| {
            format!(
                "Invalid value {value} for configuration {}: {why}",
                self.name
            )
        };
        let v = value.trim();
        let number: Option<f64> = match self.config_type {
            ConfigType::Int => Some(
                v.parse::<i32>()
                    .map_err(|_| bad("Not a number of type INT"))?
                    .into(),
            ),
            ConfigType::Short => Some(
                v.parse::<i16>()
                    .map_err(|_| bad("Not a number of type SHORT"))?
                    .into(),
            ),
            ConfigType::Long => Some(
                v.parse::<i64>()
                    .map_err(|_| bad("Not a number of type LONG"))? as f64,
            ),
            ConfigType::Double => Some(
                v.parse::<f64>()
                    .map_err(|_| bad("Not a number of type DOUBLE"))?,
            ),
            ConfigType::Boolean => {
                if !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false") {
                    return Err(bad("Expected value to be either true or false"));
                }
                None
            }
            _ => None,
        };
        match &self.validator {
            Validator::None => Ok(()),
            Validator::Range { min, max, or } => {
                let Some(n) = number else { return Ok(()) };
                if Some(n) == *or {
                    return Ok(());
                }
                if let (Some(lo), Some(hi), Some(or)) = (min, max, or) {
                    if n < *lo || n > *hi {
                        return Err(bad(&format!(
                            "Value must be between {lo} and {hi} or equal to {or}"
                        )));
                    }
                }
                if min.is_some_and(|m| n < m) {
                    return Err(bad(&format!(
                        "Value must be at least {}",
                        min.unwrap_or_default()
                    )));
                }
                if max.is_some_and(|m| n > m) {
                    return Err(bad(&format!(
                        "Value must be no more than {}",
                        max.unwrap_or_default()
                    )));
                }
                Ok(())
            }
            Validator::OneOf {
                choices,
                case_insensitive,
            } => {
                let allowed = |item: &str| {
                    choices.iter().any(|c| {
                        if *case_insensitive {
                            c.eq_ignore_ascii_case(item)
                        } else {
                            *c == item
                        }
                    })
                };
                let items: Vec<&str> = if self.config_type == ConfigType::List {
                    v.split(',')
                        .map(str::trim)
                        .filter(|i| !i.is_empty())
                        .collect()
                } else {
                    vec![v]
                };
                match items.iter().find(|i| !allowed(i)) {
                    Some(_) => Err(bad(&format!(
                        "String must be one of: {}",
                        choices.join(", ")
                    ))),
                    None => Ok(()),
                }
            }
            Validator::NonEmpty if v.is_empty() => Err(bad("must be non-empty")),
            Validator::NonEmpty => Ok(()),
        }
    }
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
    "ssl.allow.dn.changes",
    "ssl.allow.san.changes",
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
    if crate::dynamic_config::is_dynamic(name) {
        format!(
            "Kafka's {name}: Weir honours it as Kafka does, and applies a dynamic value at once."
        )
    } else if honoured(name) && key(name).is_some_and(|k| k.mode != UpdateMode::ReadOnly) {
        format!(
            "Kafka's {name}: Weir honours it as set at start (server.properties, --override); \
             a dynamic value is kept and described, and does not change what Weir does."
        )
    } else if honoured(name) {
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
        let cleaner = key("log.cleaner.threads").unwrap();
        assert!(cleaner.check("2").is_ok());
        assert!(cleaner.check("-1").unwrap_err().contains("at least 0"));
        assert!(cleaner.check("two").unwrap_err().contains("INT"));
        let level = key("compression.zstd.level").unwrap();
        assert!(level.check("-131072").is_ok() && level.check("23").is_err());
        let gzip = key("compression.gzip.level").unwrap();
        assert!(gzip.check("-1").is_ok() && gzip.check("9").is_ok() && gzip.check("0").is_err());
        let policy = key("log.cleanup.policy").unwrap();
        assert!(policy.check("compact,delete").is_ok() && policy.check("compact,keep").is_err());
        assert!(key("ssl.keystore.location").unwrap().listener_only);
        assert!(!key("sasl.kerberos.service.name").unwrap().listener_only);
        for name in HONOURED {
            assert!(key(name).is_some(), "{name} is not a Kafka 4.4 broker key");
        }
    }
}
