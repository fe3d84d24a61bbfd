//! Kafka's config vocabulary as DescribeConfigs, AlterConfigs and IncrementalAlterConfigs
//! carry it: which resource a config belongs to, where a value comes from, its type, one
//! described entry with its synonyms, and the operations of an incremental change. The
//! broker answers with these; the admin client reads them back.

/// Kafka's `ConfigResource.Type`: what a config belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigResourceType {
    Topic,
    Broker,
    BrokerLogger,
    ClientMetrics,
    Group,
}

impl ConfigResourceType {
    pub const fn code(self) -> i8 {
        match self {
            ConfigResourceType::Topic => 2,
            ConfigResourceType::Broker => 4,
            ConfigResourceType::BrokerLogger => 8,
            ConfigResourceType::ClientMetrics => 16,
            ConfigResourceType::Group => 32,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        Some(match code {
            2 => ConfigResourceType::Topic,
            4 => ConfigResourceType::Broker,
            8 => ConfigResourceType::BrokerLogger,
            16 => ConfigResourceType::ClientMetrics,
            32 => ConfigResourceType::Group,
            _ => return None,
        })
    }
}

/// A resource whose configs are described or altered.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigResource {
    Topic(String),
    Broker(i32),
    /// Every broker's dynamic default (Kafka's `--entity-default` of `--entity-type
    /// brokers`): a broker resource with an empty name.
    BrokerDefaults,
    /// A group's own configs (KIP-848's `--entity-type groups`).
    Group(String),
}

impl ConfigResource {
    /// The resource's type code and name, as requests carry them.
    pub fn wire(&self) -> (i8, String) {
        match self {
            ConfigResource::Topic(t) => (ConfigResourceType::Topic.code(), t.clone()),
            ConfigResource::Broker(b) => (ConfigResourceType::Broker.code(), b.to_string()),
            ConfigResource::BrokerDefaults => (ConfigResourceType::Broker.code(), String::new()),
            ConfigResource::Group(g) => (ConfigResourceType::Group.code(), g.clone()),
        }
    }
}

/// Where a config value comes from (Kafka's `ConfigEntry.ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigSource {
    /// A code this version does not know (Kafka's `UNKNOWN` is 0).
    Unknown,
    /// Set on the topic.
    DynamicTopic,
    /// Set on this broker while it runs.
    DynamicBroker,
    /// Set as the cluster-wide default for brokers while they run.
    DynamicDefaultBroker,
    /// Set in the broker's `server.properties` (or on its command line).
    StaticBroker,
    /// Kafka's default.
    Default,
    DynamicBrokerLogger,
    /// Set on the group (a GROUP config resource, KIP-848).
    DynamicGroup,
}

impl ConfigSource {
    /// The code DescribeConfigs v1+ carries.
    pub const fn code(self) -> i8 {
        match self {
            ConfigSource::Unknown => 0,
            ConfigSource::DynamicTopic => 1,
            ConfigSource::DynamicBroker => 2,
            ConfigSource::DynamicDefaultBroker => 3,
            ConfigSource::StaticBroker => 4,
            ConfigSource::Default => 5,
            ConfigSource::DynamicBrokerLogger => 6,
            ConfigSource::DynamicGroup => 8,
        }
    }

    /// From the wire; a code this version does not know is `Unknown`.
    pub fn from_code(code: i8) -> Self {
        match code {
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            6 => ConfigSource::DynamicBrokerLogger,
            8 => ConfigSource::DynamicGroup,
            _ => ConfigSource::Unknown,
        }
    }

    /// Kafka's name, as `kafka-configs.sh` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ConfigSource::Unknown => "UNKNOWN",
            ConfigSource::DynamicTopic => "DYNAMIC_TOPIC_CONFIG",
            ConfigSource::DynamicBroker => "DYNAMIC_BROKER_CONFIG",
            ConfigSource::DynamicDefaultBroker => "DYNAMIC_DEFAULT_BROKER_CONFIG",
            ConfigSource::StaticBroker => "STATIC_BROKER_CONFIG",
            ConfigSource::Default => "DEFAULT_CONFIG",
            ConfigSource::DynamicBrokerLogger => "DYNAMIC_BROKER_LOGGER_CONFIG",
            ConfigSource::DynamicGroup => "DYNAMIC_GROUP_CONFIG",
        }
    }
}

/// A config value's type, as DescribeConfigs v3+ reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigType {
    Unknown,
    Boolean,
    String,
    Int,
    Short,
    Long,
    Double,
    List,
    Class,
    Password,
}

impl ConfigType {
    pub const fn code(self) -> i8 {
        match self {
            ConfigType::Unknown => 0,
            ConfigType::Boolean => 1,
            ConfigType::String => 2,
            ConfigType::Int => 3,
            ConfigType::Short => 4,
            ConfigType::Long => 5,
            ConfigType::Double => 6,
            ConfigType::List => 7,
            ConfigType::Class => 8,
            ConfigType::Password => 9,
        }
    }

    pub fn from_code(code: i8) -> Self {
        match code {
            1 => ConfigType::Boolean,
            2 => ConfigType::String,
            3 => ConfigType::Int,
            4 => ConfigType::Short,
            5 => ConfigType::Long,
            6 => ConfigType::Double,
            7 => ConfigType::List,
            8 => ConfigType::Class,
            9 => ConfigType::Password,
            _ => ConfigType::Unknown,
        }
    }
}

/// Another setting that also sets this one (a broker key behind a topic key), in order of
/// precedence, as DescribeConfigs lists them with `include_synonyms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
}

/// One config of a resource, as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// The value as Kafka prints it; `None` for a sensitive value, or one not set.
    pub value: Option<String>,
    pub source: ConfigSource,
    pub read_only: bool,
    pub sensitive: bool,
    pub config_type: ConfigType,
    pub documentation: Option<String>,
    pub synonyms: Vec<ConfigSynonym>,
}

impl ConfigEntry {
    pub fn is_default(&self) -> bool {
        self.source == ConfigSource::Default
    }
}

/// An IncrementalAlterConfigs operation (Kafka's `AlterConfigOp.OpType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlterConfigOpType {
    Set,
    /// Back to the default.
    Delete,
    /// Add to a list-valued config.
    Append,
    /// Remove from a list-valued config.
    Subtract,
}

impl AlterConfigOpType {
    pub const fn code(self) -> i8 {
        match self {
            AlterConfigOpType::Set => 0,
            AlterConfigOpType::Delete => 1,
            AlterConfigOpType::Append => 2,
            AlterConfigOpType::Subtract => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        Some(match code {
            0 => AlterConfigOpType::Set,
            1 => AlterConfigOpType::Delete,
            2 => AlterConfigOpType::Append,
            3 => AlterConfigOpType::Subtract,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for c in -1..40 {
            let s = ConfigSource::from_code(c);
            if s != ConfigSource::Unknown {
                assert_eq!(s.code(), c);
            }
            let t = ConfigType::from_code(c);
            if t != ConfigType::Unknown {
                assert_eq!(t.code(), c);
            }
            if let Some(r) = ConfigResourceType::from_code(c) {
                assert_eq!(r.code(), c);
            }
            if let Some(o) = AlterConfigOpType::from_code(c) {
                assert_eq!(o.code(), c);
            }
        }
        assert_eq!(ConfigSource::from_code(4).name(), "STATIC_BROKER_CONFIG");
        assert_eq!(ConfigResource::Broker(3).wire(), (4, "3".to_string()));
    }
}
