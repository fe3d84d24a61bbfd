//! The broker's settings: Kafka's broker keys read from a `server.properties` file and
//! `--override KEY=VALUE` pairs, checked at start-up. Every key is either used, or known
//! and deliberately ignored (with the reason kept here), or an error: a typo in a config
//! must not be silently dropped. Log settings (`log.*` and friends) are handed to
//! weir-log's `LogConfig`. Nothing here touches the network or the disk beyond reading the
//! properties file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weir_log::{LogConfig, LogManagerConfig};

use weir_group::GroupConfig;
use weir_security::acl::AuthorizerConfig;
use weir_security::sasl::SaslListener;
use weir_security::{principal, quota, tls};

/// A listener: a name (`PLAINTEXT`, or any name mapped in `listener.security.protocol.map`),
/// where to bind, and what to tell clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Listener {
    pub fn bind_addr(&self) -> String {
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        if host.contains(':') {
            format!("[{host}]:{}", self.port)
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Everything the broker needs to start.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub listeners: Vec<Listener>,
    /// Same names as `listeners`; what Metadata tells clients to connect to.
    pub advertised_listeners: Vec<Listener>,
    /// The TLS setup of each `SSL` and `SASL_SSL` listener, by name, as server.properties
    /// makes it (the broker's dynamic configs may replace it: Broker::dynamic).
    pub tls: crate::dynamic_config::Tls,
    /// How each `SSL` listener names client-certificate principals
    /// (`ssl.principal.mapping.rules`), by name.
    pub ssl_principals: BTreeMap<String, Arc<principal::PrincipalMapper>>,
    /// The SASL setup of each `SASL_PLAINTEXT` or `SASL_SSL` listener, by name.
    pub sasl: BTreeMap<String, SaslListener>,
    /// `authorizer.class.name` set: ACLs are checked on every request.
    pub authorizer: Option<AuthorizerConfig>,
    /// `quota.window.num` and `quota.window.size.seconds`: how client byte rates are
    /// measured.
    pub quota_windows: quota::Windows,
    pub log_dirs: Vec<PathBuf>,
    /// Topic defaults from the broker's log settings.
    pub log_defaults: Arc<LogConfig>,
    /// The broker keys that were set (DescribeConfigs shows them as STATIC_BROKER_CONFIG).
    pub set_keys: Vec<String>,
    pub log_manager: LogManagerConfig,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub socket_request_max_bytes: usize,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// `max.connections.per.ip.overrides`: hosts (names or addresses, resolved when the
    /// broker starts) with their own limit instead of `max.connections.per.ip`.
    pub max_connections_per_ip_overrides: Vec<(String, usize)>,
    /// `socket.listen.backlog.size`: connections the kernel queues before Weir accepts
    /// them (the kernel caps it at `net.core.somaxconn`).
    pub socket_listen_backlog_size: u32,
    /// `sasl.server.max.receive.size`: the largest frame a client may send on a SASL
    /// listener before it has authenticated.
    pub sasl_server_max_receive_size: usize,
    /// The most partitions this broker holds: the smaller of KIP-578's
    /// `max.broker.partitions` and `max.partitions` (one node is the whole cluster). The
    /// descriptor budget may allow fewer (see `descriptors`).
    pub max_broker_partitions: usize,
    /// `max.topic.partitions` (Weir's): the most partitions one topic may have.
    pub max_topic_partitions: usize,
    /// `controller.mutation.rate` (Weir's): the default of Kafka's `controller_mutation_rate`
    /// quota (KIP-599), partitions created or deleted per second, per principal.
    pub controller_mutation_rate: f64,
    /// `controller.quota.window.num` and `controller.quota.window.size.seconds`: the
    /// mutation quota's burst is its rate times their product, as in Kafka.
    pub controller_quota_windows: quota::Windows,
    pub connections_max_idle_ms: u64,
    /// Bytes of requests being read or handled at once, over all connections.
    pub queued_max_request_bytes: usize,
    pub group: GroupConfig,
    pub offsets_topic_segment_bytes: u64,
    pub offsets_retention_check_interval_ms: u64,
    /// `offsets.commit.timeout.ms`: how long a commit waits for the offsets partition's
    /// in-sync replicas.
    pub offsets_commit_timeout_ms: u64,
    pub producer_id_expiration_ms: i64,
    pub producer_id_expiration_check_interval_ms: u64,
    /// The transaction coordinator's settings (`transaction.*`, `transactional.id.*`).
    pub txn: weir_txn::TxnConfig,
    /// `transaction.state.log.segment.bytes`.
    pub txn_state_segment_bytes: u64,
    /// Every key=value as given, for DescribeConfigs of the broker.
    pub properties: BTreeMap<String, String>,
    /// `broker.rack`: where the broker stands, for rack-aware replica assignment.
    pub rack: Option<String>,
    /// Each listener's security protocol, by name (`listener.security.protocol.map`).
    pub security_protocols: BTreeMap<String, String>,
    /// Set with `etcd.connect`: this broker is a member of a cluster whose metadata is in
    /// etcd. Unset, it is a cluster of one that keeps its metadata in its data directory.
    pub cluster: Option<ClusterSettings>,
}

/// What a member of a cluster needs beyond one broker's settings.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// `etcd.connect`: etcd's endpoints, then an optional key prefix.
    pub connect: weir_cluster::EtcdConnect,
    /// `etcd.session.timeout.ms`: how long a broker that stops renewing its lease (it
    /// crashed, or lost its network) stays registered, and so how long a failover takes
    /// (Kafka's `zookeeper.session.timeout.ms`, 18 s).
    pub session_timeout_ms: u64,
    /// `etcd.connection.timeout.ms`: how long start-up waits for etcd.
    pub connection_timeout_ms: u64,
    /// `controlled.shutdown.enable`: on SIGTERM, hand leadership to other in-sync
    /// replicas before stopping.
    pub controlled_shutdown_enable: bool,
    /// `controlled.shutdown.max.retries` × `controlled.shutdown.retry.backoff.ms`: how long
    /// a controlled shutdown waits for leadership to move.
    pub controlled_shutdown_timeout_ms: u64,
    /// `auto.leader.rebalance.enable`: the controller moves leadership back to preferred
    /// replicas every `leader.imbalance.check.interval.seconds`, where a broker leads
    /// fewer than `leader.imbalance.per.broker.percentage` of what it prefers.
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_ms: u64,
    pub leader_imbalance_per_broker_percentage: u32,
    pub replication: ReplicationSettings,
}

/// How this broker follows the leaders of the partitions it holds replicas of (Kafka's
/// `replica.*` settings).
#[derive(Debug, Clone)]
pub struct ReplicationSettings {
    /// `inter.broker.listener.name`: the listener followers fetch from (default: the
    /// first one).
    pub listener: String,
    /// `num.replica.fetchers`: fetch connections per leader broker.
    pub fetchers: usize,
    /// `replica.fetch.max.bytes`: per partition, per fetch.
    pub fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: per fetch.
    pub fetch_response_max_bytes: i32,
    pub fetch_wait_max_ms: i32,
    pub fetch_min_bytes: i32,
    /// `replica.fetch.backoff.ms`: the pause after a failed fetch.
    pub fetch_backoff_ms: u64,
    /// `replica.lag.time.max.ms`: a follower that has not caught up for this long leaves
    /// the ISR.
    pub lag_time_max_ms: i64,
    /// `replica.socket.timeout.ms`: how long a fetch's answer may take.
    pub socket_timeout_ms: u64,
    /// `offsets.topic.replication.factor`, at most the live brokers when the topic is made.
    pub offsets_topic_replication_factor: usize,
    /// `transaction.state.log.replication.factor`, likewise.
    pub txn_state_replication_factor: usize,
    /// `transaction.state.log.min.isr`: `__transaction_state`'s `min.insync.replicas`.
    pub txn_state_min_isr: i32,
}

/// Keys Weir accepts from a Kafka `server.properties` but does not act on, with why.
const IGNORED: &[(&str, &str)] = &[
    ("process.roles", "Weir is always a single combined node"),
    ("controller.quorum.voters", "no controller quorum: one node"),
    (
        "controller.quorum.bootstrap.servers",
        "no controller quorum: one node",
    ),
    ("controller.listener.names", "no controller listener"),
    (
        "security.inter.broker.protocol",
        "followers fetch over inter.broker.listener.name, a PLAINTEXT listener",
    ),
    (
        "zookeeper.connect",
        "a Weir cluster keeps its metadata in etcd: set etcd.connect",
    ),
    (
        "zookeeper.connection.timeout.ms",
        "see etcd.connection.timeout.ms",
    ),
    (
        "zookeeper.session.timeout.ms",
        "see etcd.session.timeout.ms",
    ),
    (
        "num.network.threads",
        "one tokio runtime serves every connection",
    ),
    (
        "num.io.threads",
        "one tokio runtime serves every connection",
    ),
    ("background.threads", "background work has its own threads"),
    ("socket.send.buffer.bytes", "the kernel's defaults are used"),
    (
        "socket.receive.buffer.bytes",
        "the kernel's defaults are used",
    ),
    (
        "queued.max.requests",
        "bounded by queued.max.request.bytes instead",
    ),
    (
        "transaction.state.log.replication.factor",
        "no transactions, one node",
    ),
    ("transaction.state.log.min.isr", "no transactions, one node"),
    ("transaction.state.log.num.partitions", "no transactions"),
    ("transaction.max.timeout.ms", "no transactions"),
    (
        "metadata.log.dir",
        "no metadata log: topics are kept in weir-topics.json and weir-topics.journal",
    ),
    ("confluent.support.metrics.enable", "Confluent-only"),
    ("confluent.support.customer.id", "Confluent-only"),
    (
        "log.message.format.version",
        "removed in Kafka 4; Weir writes v2 batches",
    ),
    (
        "log.message.downconversion.enable",
        "removed in Kafka 4, with the Fetch versions that needed it",
    ),
    (
        "log.message.timestamp.difference.max.ms",
        "removed in Kafka 4: set log.message.timestamp.before.max.ms and .after.max.ms",
    ),
    (
        "inter.broker.protocol.version",
        "Weir brokers of one release speak one protocol",
    ),
];

/// Broker keys Weir uses (beyond the log keys `LogConfig` takes).
const USED: &[&str] = &[
    "node.id",
    "broker.id",
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "log.dirs",
    "log.dir",
    "num.partitions",
    "default.replication.factor",
    "auto.create.topics.enable",
    "delete.topic.enable",
    "socket.request.max.bytes",
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "socket.listen.backlog.size",
    "max.broker.partitions",
    "max.partitions",
    "max.topic.partitions",
    "controller.mutation.rate",
    "controller.quota.window.num",
    "controller.quota.window.size.seconds",
    "connections.max.idle.ms",
    "queued.max.request.bytes",
    "num.recovery.threads.per.data.dir",
    "log.retention.check.interval.ms",
    "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms",
    "log.flush.start.offset.checkpoint.interval.ms",
    "log.cleaner.enable",
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.backoff.ms",
    "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.io.buffer.load.factor",
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "group.coordinator.rebalance.protocols",
    "group.consumer.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.max.size",
    "group.consumer.assignors",
    "offsets.topic.num.partitions",
    "offsets.topic.segment.bytes",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "offset.metadata.max.bytes",
    "producer.id.expiration.ms",
    "producer.id.expiration.check.interval.ms",
    "transactional.id.expiration.ms",
    "transaction.max.timeout.ms",
    "transaction.state.log.num.partitions",
    "transaction.state.log.segment.bytes",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
    "authorizer.class.name",
    "super.users",
    "allow.everyone.if.no.acl.found",
    "connections.max.reauth.ms",
    "quota.window.num",
    "quota.window.size.seconds",
    "broker.rack",
    "etcd.connect",
    "etcd.session.timeout.ms",
    "etcd.connection.timeout.ms",
    "controlled.shutdown.enable",
    "controlled.shutdown.max.retries",
    "controlled.shutdown.retry.backoff.ms",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "leader.imbalance.per.broker.percentage",
    "inter.broker.listener.name",
    "num.replica.fetchers",
    "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.wait.max.ms",
    "replica.fetch.min.bytes",
    "replica.fetch.backoff.ms",
    "replica.lag.time.max.ms",
    "replica.socket.timeout.ms",
    "offsets.topic.replication.factor",
    "offsets.commit.timeout.ms",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
];

/// `group.coordinator.rebalance.protocols`: `classic` must be listed (Weir, like Kafka,
/// always serves it); whether `consumer` (KIP-848) is. Kafka's default lists both.
fn rebalance_protocols(value: Option<&String>) -> Result<bool, String> {
    let Some(value) = value else {
        return Ok(true);
    };
    let mut consumer = false;
    let mut classic = false;
    for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.to_ascii_lowercase().as_str() {
            "classic" => classic = true,
            "consumer" => consumer = true,
            other => {
                return Err(format!(
                    "group.coordinator.rebalance.protocols: unknown protocol `{other}` \
                     (the protocols are classic and consumer)"
                ))
            }
        }
    }
    if !classic {
        return Err("group.coordinator.rebalance.protocols must list classic".into());
    }
    Ok(consumer)
}

/// `group.consumer.assignors`: names of the server-side assignors (Weir has `uniform` and
/// `range`; class names are not loaded), the first being the default.
fn consumer_assignors(value: Option<&String>) -> Result<Vec<String>, String> {
    let known = weir_group::CONSUMER_ASSIGNORS;
    let Some(value) = value else {
        return Ok(known.iter().map(|s| (*s).to_owned()).collect());
    };
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        // Kafka's own class names stand for the same assignors.
        let short = match name {
            "org.apache.kafka.coordinator.group.assignor.UniformAssignor" => "uniform",
            "org.apache.kafka.coordinator.group.assignor.RangeAssignor" => "range",
            n => n,
        };
        if !known.contains(&short) {
            return Err(format!(
                "group.consumer.assignors: unknown assignor `{name}` (Weir has {})",
                known.join(", ")
            ));
        }
        out.push(short.to_owned());
    }
    if out.is_empty() {
        return Err("group.consumer.assignors must name at least one assignor".into());
    }
    Ok(out)
}

fn parse<T: std::str::FromStr>(
    props: &BTreeMap<String, String>,
    key: &str,
    default: T,
) -> Result<T, String> {
    match props.get(key) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{key}: '{v}' is not a valid {}", std::any::type_name::<T>())),
    }
}

fn parse_bool(props: &BTreeMap<String, String>, key: &str, default: bool) -> Result<bool, String> {
    match props.get(key).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(default),
        Some(v) if v == "true" => Ok(true),
        Some(v) if v == "false" => Ok(false),
        Some(v) => Err(format!("{key}: '{v}' is not true or false")),
    }
}

/// Parses `NAME://host:port,...` (Kafka's listener syntax).
fn parse_listeners(key: &str, value: &str) -> Result<Vec<Listener>, String> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, rest) = item
            .split_once("://")
            .ok_or_else(|| format!("{key}: '{item}' is not NAME://host:port"))?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{key}: '{item}' has no port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{key}: '{item}' has an invalid port"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if name.is_empty() {
            return Err(format!("{key}: '{item}' has no listener name"));
        }
        if out
            .iter()
            .any(|l: &Listener| l.name == name.to_ascii_uppercase())
        {
            return Err(format!("{key}: listener {name} is given twice"));
        }
        out.push(Listener {
            name: name.to_ascii_uppercase(),
            host,
            port,
        });
    }
    if out.is_empty() {
        return Err(format!("{key}: no listener given"));
    }
    Ok(out)
}

/// Reads a Java-style properties file (`key=value` or `key: value`, `#`/`!` comments,
/// trailing-backslash continuations).
pub fn read_properties_file(path: &Path) -> Result<Vec<(String, String)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    let mut pending = String::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with('!'))
        {
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            continue;
        }
        pending.push_str(line);
        let entry = std::mem::take(&mut pending);
        let split = entry.find(['=', ':']).ok_or_else(|| {
            format!(
                "{}: line {}: expected key=value, got '{entry}'",
                path.display(),
                i + 1
            )
        })?;
        out.push((
            entry[..split].trim().to_string(),
            entry[split + 1..].trim().to_string(),
        ));
    }
    Ok(out)
}

impl BrokerConfig {
    /// Builds the configuration from, in increasing precedence: Weir's defaults (listen on
    /// 127.0.0.1:9092, data in ./weir-data), the properties file, the `--listen` and
    /// `--data-dir` flags, and `--override` pairs.
    pub fn from_sources(
        file: Option<&Path>,
        listen: Option<&str>,
        data_dir: Option<&Path>,
        overrides: &[(String, String)],
    ) -> Result<BrokerConfig, String> {
        let mut props = BTreeMap::new();
        if let Some(f) = file {
            for (k, v) in read_properties_file(f)? {
                props.insert(k, v);
            }
        }
        if let Some(addr) = listen {
            let parsed: SocketAddr = addr.parse().map_err(|_| {
                format!("--listen: '{addr}' is not HOST:PORT (an IP address and a port)")
            })?;
            props.insert("listeners".into(), format!("PLAINTEXT://{parsed}"));
        }
        if let Some(d) = data_dir {
            props.insert("log.dirs".into(), d.display().to_string());
        }
        for (k, v) in overrides {
            props.insert(k.clone(), v.clone());
        }
        Self::from_properties(props)
    }

    /// Builds the configuration from a full set of broker properties.
    pub fn from_properties(props: BTreeMap<String, String>) -> Result<BrokerConfig, String> {
        let (log_defaults, log_keys) =
            LogConfig::from_broker_properties(props.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| e.to_string())?;
        for key in props.keys() {
            let known = USED.contains(&key.as_str())
                || log_keys.iter().any(|k| k == key)
                || key.starts_with("listener.name.")
                || key.starts_with("ssl.")
                || key.starts_with("sasl.");
            if let Some((_, why)) = IGNORED.iter().find(|(k, _)| k == key) {
                tracing::info!("ignoring {key}: {why}");
                continue;
            }
            if !known {
                return Err(format!(
                    "unknown broker setting '{key}' (a typo? Kafka's broker keys are listed at \
                     https://kafka.apache.org/documentation/#brokerconfigs)"
                ));
            }
            // `ssl.*`, or `listener.name.<listener>.ssl.*`: TLS (tls.rs); `sasl.*`, also
            // per listener and per mechanism (`listener.name.<l>.plain.sasl.jaas.config`).
            let setting = match key.strip_prefix("listener.name.") {
                Some(rest) => rest.split_once('.').map_or("", |(_, k)| k),
                None => key.as_str(),
            };
            let setting = ["plain.", "scram-sha-256.", "scram-sha-512."]
                .iter()
                .find_map(|m| setting.strip_prefix(m))
                .unwrap_or(setting);
            if setting.starts_with("ssl.") {
                if tls::HONOURED.contains(&setting) {
                    continue;
                }
                if let Some((_, why)) = tls::IGNORED.iter().find(|(k, _)| *k == setting) {
                    tracing::info!("ignoring {key}: {why}");
                    continue;
                }
                return Err(format!("unknown TLS setting '{key}' (a typo?)"));
            }
            if setting.starts_with("sasl.") {
                if ["sasl.enabled.mechanisms", "sasl.jaas.config"].contains(&setting)
                    || key == "sasl.server.max.receive.size"
                {
                    continue;
                }
                if setting == "sasl.mechanism.inter.broker.protocol" {
                    tracing::info!(
                        "ignoring {key}: followers fetch over a PLAINTEXT inter.broker.listener.name"
                    );
                    continue;
                }
                return Err(format!(
                    "{key}: not supported (Weir's SASL takes sasl.enabled.mechanisms and \
                     PlainLoginModule users in sasl.jaas.config)"
                ));
            }
            if key.starts_with("listener.name.") {
                return Err(format!("unknown listener setting '{key}'"));
            }
        }
        let node_id = match (props.get("node.id"), props.get("broker.id")) {
            (Some(a), Some(b)) if a.trim() != b.trim() => {
                return Err(format!("node.id={a} and broker.id={b} disagree"));
            }
            _ => parse(&props, "node.id", parse(&props, "broker.id", 1i32)?)?,
        };
        if node_id < 0 {
            return Err(format!("node.id must not be negative, got {node_id}"));
        }
        let listeners = parse_listeners(
            "listeners",
            props
                .get("listeners")
                .map_or("PLAINTEXT://127.0.0.1:9092", |s| s.as_str()),
        )?;
        let protocol_map = parse_protocol_map(props.get("listener.security.protocol.map"))?;
        let mut tls = BTreeMap::new();
        let mut ssl_principals = BTreeMap::new();
        let mut sasl = BTreeMap::new();
        for l in &listeners {
            match protocol_map.get(&l.name).map(String::as_str) {
                Some("PLAINTEXT") => {}
                Some("SSL") => {
                    tls.insert(l.name.clone(), Arc::new(tls::listener_tls(&l.name, &props).map_err(|e| e.to_string())?));
                    ssl_principals.insert(
                        l.name.clone(),
                        Arc::new(tls::principal_mapper(&l.name, &props)?),
                    );
                }
                Some("SASL_PLAINTEXT") => {
                    sasl.insert(l.name.clone(), SaslListener::from_properties(&l.name, &props)?);
                }
                Some("SASL_SSL") => {
                    tls.insert(l.name.clone(), Arc::new(tls::listener_tls(&l.name, &props).map_err(|e| e.to_string())?));
                    sasl.insert(l.name.clone(), SaslListener::from_properties(&l.name, &props)?);
                }
                Some(p) => return Err(format!("listener {}: unknown security protocol {p}", l.name)),
                None => {
                    return Err(format!(
                        "listener {} has no security protocol: add it to listener.security.protocol.map",
                        l.name
                    ))
                }
            }
        }
        let advertised_listeners = match props.get("advertised.listeners") {
            None => listeners
                .iter()
                .map(|l| Listener {
                    host: if l.host.is_empty() || l.host == "0.0.0.0" || l.host == "::" {
                        "localhost".to_string()
                    } else {
                        l.host.clone()
                    },
                    ..l.clone()
                })
                .collect(),
            Some(v) => {
                let adv = parse_listeners("advertised.listeners", v)?;
                for a in &adv {
                    if !listeners.iter().any(|l| l.name == a.name) {
                        return Err(format!(
                            "advertised.listeners names {}, which is not in listeners",
                            a.name
                        ));
                    }
                    if a.host.is_empty() || a.host == "0.0.0.0" || a.host == "::" {
                        return Err(format!(
                            "advertised.listeners: {} must name a host clients can reach, not '{}'",
                            a.name, a.host
                        ));
                    }
                }
                // Listeners not advertised explicitly are advertised as they bind.
                let mut all = adv.clone();
                for l in &listeners {
                    if !adv.iter().any(|a| a.name == l.name) {
                        all.push(l.clone());
                    }
                }
                all
            }
        };
        let log_dirs: Vec<PathBuf> = props
            .get("log.dirs")
            .or_else(|| props.get("log.dir"))
            .map_or("./weir-data", |s| s.as_str())
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
        if log_dirs.is_empty() {
            return Err("log.dirs names no directory".into());
        }
        let log_defaults = Arc::new(log_defaults);
        let mut log_manager = LogManagerConfig::new(log_dirs[0].clone());
        log_manager.log_dirs = log_dirs.clone();
        log_manager.node_id = node_id;
        log_manager.default_config = log_defaults.clone();
        log_manager.recovery_threads_per_data_dir =
            parse(&props, "num.recovery.threads.per.data.dir", 2usize)?.max(1);
        log_manager.retention_check_interval_ms =
            parse(&props, "log.retention.check.interval.ms", 300_000i64)?;
        log_manager.checkpoint_interval_ms =
            parse(&props, "log.flush.offset.checkpoint.interval.ms", 60_000i64)?;
        log_manager.cleaner_enable = parse_bool(&props, "log.cleaner.enable", true)?;
        log_manager.cleaner_dedupe_buffer_size =
            parse(&props, "log.cleaner.dedupe.buffer.size", 134_217_728usize)?;
        log_manager.cleaner_backoff_ms = parse(&props, "log.cleaner.backoff.ms", 15_000i64)?;
        if log_manager.retention_check_interval_ms < 1 {
            return Err("log.retention.check.interval.ms must be at least 1".into());
        }
        let default_replication_factor: i16 = parse(&props, "default.replication.factor", 1)?;
        let security_protocols: BTreeMap<String, String> = listeners
            .iter()
            .filter_map(|l| Some((l.name.clone(), protocol_map.get(&l.name)?.clone())))
            .collect();
        let cluster = cluster_settings(&props, &listeners, &security_protocols)?;
        if default_replication_factor < 1 || (cluster.is_none() && default_replication_factor != 1)
        {
            return Err(format!(
                "default.replication.factor={default_replication_factor}: a broker without \
                 etcd.connect holds the only replica of each partition, so it must be 1 \
                 (in a cluster, at least 1)"
            ));
        }
        let rack = props
            .get("broker.rack")
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty());
        let num_partitions: i32 = parse(&props, "num.partitions", 1)?;
        if num_partitions < 1 {
            return Err(format!(
                "num.partitions must be at least 1, got {num_partitions}"
            ));
        }
        let socket_request_max_bytes: usize =
            parse(&props, "socket.request.max.bytes", 104_857_600usize)?;
        if socket_request_max_bytes < 64 {
            return Err("socket.request.max.bytes must be at least 64".into());
        }
        let queued: i64 = parse(&props, "queued.max.request.bytes", -1i64)?;
        let group = GroupConfig {
            initial_rebalance_delay_ms: parse(&props, "group.initial.rebalance.delay.ms", 3000u64)?,
            min_session_timeout_ms: parse(&props, "group.min.session.timeout.ms", 6000i32)?,
            max_session_timeout_ms: parse(&props, "group.max.session.timeout.ms", 1_800_000i32)?,
            max_size: parse(&props, "group.max.size", i32::MAX as usize)?,
            offsets_retention_ms: parse(&props, "offsets.retention.minutes", 10_080i64)? * 60_000,
            offsets_topic_partitions: parse(&props, "offsets.topic.num.partitions", 50i32)?,
            offset_metadata_max_bytes: parse(&props, "offset.metadata.max.bytes", 4096usize)?,
            consumer_protocol: rebalance_protocols(
                props.get("group.coordinator.rebalance.protocols"),
            )?,
            consumer_session_timeout_ms: parse(
                &props,
                "group.consumer.session.timeout.ms",
                45_000i32,
            )?,
            consumer_heartbeat_interval_ms: parse(
                &props,
                "group.consumer.heartbeat.interval.ms",
                5_000i32,
            )?,
            consumer_max_size: parse(&props, "group.consumer.max.size", i32::MAX as usize)?,
            consumer_assignors: consumer_assignors(props.get("group.consumer.assignors"))?,
        };
        let quota_windows = quota::Windows {
            samples: parse(&props, "quota.window.num", 11i64)?,
            window_ms: parse(&props, "quota.window.size.seconds", 1i64)?.saturating_mul(1000),
        };
        if quota_windows.samples < 2 || quota_windows.window_ms < 1000 {
            return Err(
                "quota.window.num must be at least 2 and quota.window.size.seconds at least 1"
                    .into(),
            );
        }
        let controller_quota_windows = quota::Windows {
            samples: parse(&props, "controller.quota.window.num", 11i64)?,
            window_ms: parse(&props, "controller.quota.window.size.seconds", 1i64)?
                .saturating_mul(1000),
        };
        if controller_quota_windows.samples < 1 || controller_quota_windows.window_ms < 1000 {
            return Err(
                "controller.quota.window.num and controller.quota.window.size.seconds \
                        must be at least 1"
                    .into(),
            );
        }
        // Kafka sets no controller mutation quota unless one is configured for a client;
        // Weir sets one for every principal, so that an unauthenticated client cannot
        // create thousands of topics in a burst: 100 partitions a second, 1,100 at once.
        let controller_mutation_rate: f64 = parse(&props, "controller.mutation.rate", 100.0)?;
        if !(controller_mutation_rate.is_finite() && controller_mutation_rate > 0.0) {
            return Err(format!(
                "controller.mutation.rate must be a positive number of partitions per second, \
                 got {controller_mutation_rate}"
            ));
        }
        // KIP-578's limits (Kafka has not taken them up; Weir honours their names).
        // Unbounded unless set: the descriptor budget bounds the partitions anyway.
        let max_broker_partitions = parse(&props, "max.broker.partitions", i32::MAX as usize)?
            .min(parse(&props, "max.partitions", i32::MAX as usize)?);
        // Weir's: a topic as large as Kafka lets one request create
        // (weir_kafka::limits::MAX_PARTITIONS_PER_REQUEST), which also keeps one topic's
        // entry in a Metadata response under about half a megabyte.
        let max_topic_partitions = parse(
            &props,
            "max.topic.partitions",
            weir_kafka::limits::MAX_PARTITIONS_PER_REQUEST,
        )?;
        if max_broker_partitions < 1 || max_topic_partitions < 1 {
            return Err(
                "max.broker.partitions, max.partitions and max.topic.partitions must \
                        be at least 1"
                    .into(),
            );
        }
        // Kafka's default is 50; Weir's is Linux's default `net.core.somaxconn` (4096
        // since Linux 5.4), so that a burst of clients connecting at once (a fleet
        // restarting) waits in the kernel's queue instead of having its SYNs dropped and
        // retried a second or more later. Each queued connection costs the kernel a few
        // hundred bytes.
        let socket_listen_backlog_size: u32 = parse(&props, "socket.listen.backlog.size", 4096)?;
        if socket_listen_backlog_size < 1 {
            return Err("socket.listen.backlog.size must be at least 1".into());
        }
        let sasl_server_max_receive_size: usize =
            parse(&props, "sasl.server.max.receive.size", 524_288usize)?;
        if sasl_server_max_receive_size < 64 {
            return Err("sasl.server.max.receive.size must be at least 64".into());
        }
        let max_connections_per_ip_overrides =
            parse_ip_overrides(props.get("max.connections.per.ip.overrides"))?;
        if group.offsets_topic_partitions < 1 {
            return Err("offsets.topic.num.partitions must be at least 1".into());
        }
        let txn = weir_txn::TxnConfig {
            log_partitions: parse(&props, "transaction.state.log.num.partitions", 50i32)?,
            max_timeout_ms: parse(&props, "transaction.max.timeout.ms", 900_000i32)?,
            id_expiration_ms: parse(&props, "transactional.id.expiration.ms", 604_800_000i64)?,
            abort_timed_out_interval_ms: parse(
                &props,
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                10_000u64,
            )?,
            remove_expired_interval_ms: parse(
                &props,
                "transaction.remove.expired.transaction.cleanup.interval.ms",
                3_600_000u64,
            )?,
        };
        if txn.log_partitions < 1 {
            return Err("transaction.state.log.num.partitions must be at least 1".into());
        }
        if txn.max_timeout_ms < 1 || txn.id_expiration_ms < 1 {
            return Err(
                "transaction.max.timeout.ms and transactional.id.expiration.ms must be at \
                 least 1"
                    .into(),
            );
        }
        if group.consumer_heartbeat_interval_ms < 1
            || group.consumer_heartbeat_interval_ms >= group.consumer_session_timeout_ms
        {
            return Err(
                "group.consumer.heartbeat.interval.ms must be at least 1 and below \
                        group.consumer.session.timeout.ms"
                    .into(),
            );
        }
        if group.min_session_timeout_ms > group.max_session_timeout_ms {
            return Err(
                "group.min.session.timeout.ms is above group.max.session.timeout.ms".into(),
            );
        }
        Ok(BrokerConfig {
            node_id,
            listeners,
            advertised_listeners,
            tls,
            ssl_principals,
            sasl,
            authorizer: AuthorizerConfig::from_properties(&props)?,
            quota_windows,
            log_dirs,
            log_defaults,
            set_keys: props.keys().cloned().collect(),
            rack,
            security_protocols,
            cluster,
            log_manager,
            num_partitions,
            default_replication_factor,
            auto_create_topics_enable: parse_bool(&props, "auto.create.topics.enable", true)?,
            delete_topic_enable: parse_bool(&props, "delete.topic.enable", true)?,
            socket_request_max_bytes,
            max_connections: parse(&props, "max.connections", i32::MAX as usize)?,
            max_connections_per_ip: parse(&props, "max.connections.per.ip", i32::MAX as usize)?,
            max_connections_per_ip_overrides,
            socket_listen_backlog_size,
            sasl_server_max_receive_size,
            max_broker_partitions,
            max_topic_partitions,
            controller_mutation_rate,
            controller_quota_windows,
            connections_max_idle_ms: parse(&props, "connections.max.idle.ms", 600_000u64)?,
            // Kafka's default (-1) sets no bound; Weir keeps one (see RELIABILITY.md).
            queued_max_request_bytes: if queued <= 0 {
                512 << 20
            } else {
                queued as usize
            },
            group,
            offsets_topic_segment_bytes: parse(
                &props,
                "offsets.topic.segment.bytes",
                104_857_600u64,
            )?,
            offsets_commit_timeout_ms: parse(&props, "offsets.commit.timeout.ms", 5_000u64)?,
            offsets_retention_check_interval_ms: parse(
                &props,
                "offsets.retention.check.interval.ms",
                600_000u64,
            )?,
            producer_id_expiration_ms: parse(&props, "producer.id.expiration.ms", 86_400_000i64)?,
            producer_id_expiration_check_interval_ms: parse(
                &props,
                "producer.id.expiration.check.interval.ms",
                600_000u64,
            )?,
            txn,
            txn_state_segment_bytes: parse(
                &props,
                "transaction.state.log.segment.bytes",
                104_857_600u64,
            )?,
            properties: props,
        })
    }

    /// The advertised address of the listener named `name`.
    pub fn advertised(&self, name: &str) -> &Listener {
        self.advertised_listeners
            .iter()
            .find(|l| l.name == name)
            .unwrap_or(&self.advertised_listeners[0])
    }
}

/// The cluster settings, if `etcd.connect` is set.
fn cluster_settings(
    props: &BTreeMap<String, String>,
    listeners: &[Listener],
    protocols: &BTreeMap<String, String>,
) -> Result<Option<ClusterSettings>, String> {
    let Some(connect) = props.get("etcd.connect") else {
        for k in ["etcd.session.timeout.ms", "etcd.connection.timeout.ms"] {
            if props.contains_key(k) {
                return Err(format!("{k} is set but etcd.connect is not"));
            }
        }
        return Ok(None);
    };
    let connect = weir_cluster::EtcdConnect::parse(connect)?;
    let session_timeout_ms: u64 = parse(props, "etcd.session.timeout.ms", 18_000u64)?;
    // etcd grants leases in whole seconds, and refuses ones shorter than its own
    // election timeout allows; two seconds is the least it grants with its defaults.
    if session_timeout_ms < 2_000 {
        return Err(format!(
            "etcd.session.timeout.ms must be at least 2000 (etcd's shortest lease), got \
             {session_timeout_ms}"
        ));
    }
    let retries: u64 = parse(props, "controlled.shutdown.max.retries", 3u64)?;
    let backoff: u64 = parse(props, "controlled.shutdown.retry.backoff.ms", 5_000u64)?;
    let percentage: u32 = parse(props, "leader.imbalance.per.broker.percentage", 10u32)?;
    if percentage > 100 {
        return Err(format!(
            "leader.imbalance.per.broker.percentage must be 0 to 100, got {percentage}"
        ));
    }
    let interval_s: u64 = parse(props, "leader.imbalance.check.interval.seconds", 300u64)?;
    if interval_s < 1 {
        return Err("leader.imbalance.check.interval.seconds must be at least 1".into());
    }
    let replication = replication_settings(props, listeners, protocols)?;
    Ok(Some(ClusterSettings {
        replication,
        connect,
        session_timeout_ms,
        connection_timeout_ms: parse(props, "etcd.connection.timeout.ms", 18_000u64)?,
        controlled_shutdown_enable: parse_bool(props, "controlled.shutdown.enable", true)?,
        controlled_shutdown_timeout_ms: retries.max(1).saturating_mul(backoff),
        auto_leader_rebalance_enable: parse_bool(props, "auto.leader.rebalance.enable", true)?,
        leader_imbalance_check_interval_ms: interval_s.saturating_mul(1000),
        leader_imbalance_per_broker_percentage: percentage,
    }))
}

fn replication_settings(
    props: &BTreeMap<String, String>,
    listeners: &[Listener],
    protocols: &BTreeMap<String, String>,
) -> Result<ReplicationSettings, String> {
    let listener = match props.get("inter.broker.listener.name") {
        Some(n) => n.trim().to_string(),
        None => listeners
            .first()
            .map(|l| l.name.clone())
            .ok_or("no listeners")?,
    };
    if !listeners.iter().any(|l| l.name == listener) {
        return Err(format!(
            "inter.broker.listener.name={listener} names none of the listeners"
        ));
    }
    // Followers connect without TLS or SASL: an inter-broker listener that needs them is
    // refused here rather than failing every fetch later.
    match protocols.get(&listener).map(String::as_str) {
        Some("PLAINTEXT") | None => {}
        Some(other) => {
            return Err(format!(
                "inter.broker.listener.name={listener} is a {other} listener; Weir's \
                 followers fetch over PLAINTEXT only so far: add a PLAINTEXT listener for \
                 the brokers (on a private address) and name it there"
            ))
        }
    }
    let at_least = |key: &str, v: i64, min: i64| {
        if v < min {
            Err(format!("{key} must be at least {min}, got {v}"))
        } else {
            Ok(())
        }
    };
    let r = ReplicationSettings {
        listener,
        fetchers: parse(props, "num.replica.fetchers", 1usize)?,
        fetch_max_bytes: parse(props, "replica.fetch.max.bytes", 1_048_576i32)?,
        fetch_response_max_bytes: parse(props, "replica.fetch.response.max.bytes", 10_485_760i32)?,
        fetch_wait_max_ms: parse(props, "replica.fetch.wait.max.ms", 500i32)?,
        fetch_min_bytes: parse(props, "replica.fetch.min.bytes", 1i32)?,
        fetch_backoff_ms: parse(props, "replica.fetch.backoff.ms", 1_000u64)?,
        lag_time_max_ms: parse(props, "replica.lag.time.max.ms", 30_000i64)?,
        socket_timeout_ms: parse(props, "replica.socket.timeout.ms", 30_000u64)?,
        offsets_topic_replication_factor: parse(props, "offsets.topic.replication.factor", 3usize)?,
        txn_state_replication_factor: parse(
            props,
            "transaction.state.log.replication.factor",
            3usize,
        )?,
        txn_state_min_isr: parse(props, "transaction.state.log.min.isr", 2i32)?,
    };
    at_least("num.replica.fetchers", r.fetchers as i64, 1)?;
    at_least("replica.fetch.max.bytes", r.fetch_max_bytes.into(), 1)?;
    at_least(
        "replica.fetch.response.max.bytes",
        r.fetch_response_max_bytes.into(),
        1,
    )?;
    at_least("replica.fetch.wait.max.ms", r.fetch_wait_max_ms.into(), 0)?;
    at_least("replica.fetch.min.bytes", r.fetch_min_bytes.into(), 0)?;
    at_least("replica.lag.time.max.ms", r.lag_time_max_ms, 1)?;
    at_least(
        "offsets.topic.replication.factor",
        r.offsets_topic_replication_factor as i64,
        1,
    )?;
    // A fetch must be answered (after waiting up to its max wait) before the socket
    // gives up on it, as Kafka requires.
    if r.socket_timeout_ms < r.fetch_wait_max_ms as u64 {
        return Err(format!(
            "replica.socket.timeout.ms ({}) must be at least replica.fetch.wait.max.ms ({})",
            r.socket_timeout_ms, r.fetch_wait_max_ms
        ));
    }
    Ok(r)
}

/// Parses `max.connections.per.ip.overrides`: `host:count` pairs, comma-separated, where
/// the host is a name or an address (an IPv6 address's last `:` starts its count).
fn parse_ip_overrides(value: Option<&String>) -> Result<Vec<(String, usize)>, String> {
    let mut out = Vec::new();
    for item in value
        .map_or("", |v| v.as_str())
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let (host, count) = item.rsplit_once(':').ok_or_else(|| {
            format!("max.connections.per.ip.overrides: '{item}' is not HOST:COUNT")
        })?;
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        let count: usize = count.trim().parse().map_err(|_| {
            format!(
                "max.connections.per.ip.overrides: '{item}': the count must be a whole number, \
                 at least 0"
            )
        })?;
        if host.is_empty() {
            return Err(format!(
                "max.connections.per.ip.overrides: '{item}' names no host"
            ));
        }
        out.push((host.to_string(), count));
    }
    Ok(out)
}

fn parse_protocol_map(value: Option<&String>) -> Result<BTreeMap<String, String>, String> {
    let mut map: BTreeMap<String, String> = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
        .iter()
        .map(|p| (p.to_string(), p.to_string()))
        .collect();
    if let Some(v) = value {
        map.clear();
        for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, proto) = item.split_once(':').ok_or_else(|| {
                format!("listener.security.protocol.map: '{item}' is not NAME:PROTOCOL")
            })?;
            let proto = proto.trim().to_ascii_uppercase();
            if !["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"].contains(&proto.as_str()) {
                return Err(format!(
                    "listener.security.protocol.map: unknown security protocol '{proto}'"
                ));
            }
            map.insert(name.trim().to_ascii_uppercase(), proto);
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<BrokerConfig, String> {
        BrokerConfig::from_properties(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn defaults_listen_locally_and_keep_data_in_weir_data() {
        let c = cfg(&[]).unwrap();
        assert_eq!(
            c.listeners,
            vec![Listener {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092
            }]
        );
        assert_eq!(c.advertised_listeners, c.listeners);
        assert_eq!(c.log_dirs, vec![PathBuf::from("./weir-data")]);
        assert_eq!(c.num_partitions, 1);
        assert!(c.auto_create_topics_enable);
        // Kafka's defaults, and Weir's where a note in from_properties says why.
        assert_eq!(c.sasl_server_max_receive_size, 524_288);
        assert_eq!(c.socket_listen_backlog_size, 4096);
        assert_eq!(c.max_topic_partitions, 10_000);
        assert_eq!(c.max_broker_partitions, i32::MAX as usize);
        assert_eq!(c.controller_mutation_rate, 100.0);
        assert!(c.max_connections_per_ip_overrides.is_empty());
    }

    #[test]
    fn connection_and_partition_limits_parse_as_kafka_writes_them() {
        let c = cfg(&[
            (
                "max.connections.per.ip.overrides",
                "broker1:10, 10.0.0.7:0,[::1]:3",
            ),
            ("max.broker.partitions", "5000"),
            ("max.partitions", "4000"),
            ("sasl.server.max.receive.size", "65536"),
        ])
        .unwrap();
        assert_eq!(
            c.max_connections_per_ip_overrides,
            vec![
                ("broker1".to_string(), 10),
                ("10.0.0.7".to_string(), 0),
                ("::1".to_string(), 3)
            ]
        );
        assert_eq!(c.max_broker_partitions, 4000, "the smaller of the two");
        assert_eq!(c.sasl_server_max_receive_size, 65536);
        let e = cfg(&[("max.connections.per.ip.overrides", "broker1")]).unwrap_err();
        assert!(e.contains("HOST:COUNT"), "{e}");
        let e = cfg(&[("max.connections.per.ip.overrides", "broker1:-1")]).unwrap_err();
        assert!(e.contains("whole number"), "{e}");
        let e = cfg(&[("controller.mutation.rate", "0")]).unwrap_err();
        assert!(e.contains("positive"), "{e}");
        let e = cfg(&[("socket.listen.backlog.size", "0")]).unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
        let e = cfg(&[("max.topic.partitions", "0")]).unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
    }

    #[test]
    fn kafkas_sample_server_properties_loads() {
        let c = cfg(&[
            ("process.roles", "broker,controller"),
            ("node.id", "1"),
            ("controller.quorum.voters", "1@localhost:9093"),
            ("listeners", "PLAINTEXT://:9092"),
            ("advertised.listeners", "PLAINTEXT://broker.example:9092"),
            ("num.network.threads", "3"),
            ("log.dirs", "/tmp/a,/tmp/b"),
            ("num.partitions", "3"),
            ("offsets.topic.replication.factor", "1"),
            ("log.retention.hours", "168"),
            ("log.segment.bytes", "1073741824"),
            ("log.retention.check.interval.ms", "300000"),
        ])
        .unwrap();
        assert_eq!(c.log_dirs.len(), 2);
        assert_eq!(c.advertised("PLAINTEXT").host, "broker.example");
        assert_eq!(c.listeners[0].bind_addr(), "0.0.0.0:9092");
        assert_eq!(c.log_defaults.retention_ms, 168 * 3_600_000);
    }

    #[test]
    fn mistakes_are_errors_that_say_what_to_fix() {
        let e = cfg(&[("log.retention.hourz", "5")]).unwrap_err();
        assert!(
            e.contains("unknown broker setting 'log.retention.hourz'"),
            "{e}"
        );
        let e = cfg(&[("num.partitions", "zero")]).unwrap_err();
        assert!(e.contains("num.partitions"), "{e}");
        let e = cfg(&[("log.segment.bytes", "5")]).unwrap_err();
        assert!(e.contains("segment.bytes"), "{e}");
        let e = cfg(&[("listeners", "SSL://:9093")]).unwrap_err();
        assert!(e.contains("set ssl.keystore.location"), "{e}");
        let e = cfg(&[
            ("listeners", "SSL://:9093"),
            ("ssl.keystore.type", "JKS"),
            ("ssl.keystore.location", "/x.jks"),
        ])
        .unwrap_err();
        assert!(
            e.contains("PEM keystores only") && e.contains("keytool"),
            "{e}"
        );
        let e = cfg(&[
            ("listeners", "SASL_PLAINTEXT://:9093"),
            ("sasl.enabled.mechanisms", "GSSAPI"),
        ])
        .unwrap_err();
        assert!(e.contains("GSSAPI is not offered"), "{e}");
        let e = cfg(&[("authorizer.class.name", "com.example.MyAuthorizer")]).unwrap_err();
        assert!(e.contains("StandardAuthorizer"), "{e}");
        let e = cfg(&[("super.users", "User:admin")]).unwrap_err();
        assert!(e.contains("set authorizer.class.name"), "{e}");
        let e = cfg(&[
            (
                "authorizer.class.name",
                weir_security::acl::AUTHORIZER_CLASSES[0],
            ),
            ("super.users", "admin"),
        ])
        .unwrap_err();
        assert!(e.contains("TYPE:NAME"), "{e}");
        let ok = cfg(&[
            (
                "authorizer.class.name",
                "kafka.security.authorizer.AclAuthorizer",
            ),
            ("super.users", "User:admin;User:ops"),
            ("allow.everyone.if.no.acl.found", "true"),
        ])
        .unwrap();
        let a = ok.authorizer.unwrap();
        assert_eq!(a.super_users.len(), 2);
        assert!(a.allow_everyone_if_no_acl_found);
        let e = cfg(&[("ssl.keystore.locaton", "/x.pem")]).unwrap_err();
        assert!(e.contains("unknown TLS setting"), "{e}");
        let e = cfg(&[("sasl.server.callback.handler.class", "x")]).unwrap_err();
        assert!(e.contains("not supported"), "{e}");
        let e = cfg(&[("advertised.listeners", "PLAINTEXT://0.0.0.0:9092")]).unwrap_err();
        assert!(e.contains("must name a host"), "{e}");
        let e = cfg(&[("default.replication.factor", "3")]).unwrap_err();
        assert!(e.contains("the only replica"), "{e}");
        let e = cfg(&[("etcd.connect", "http://e:2379")]).unwrap_err();
        assert!(e.contains("without a scheme"), "{e}");
        let e = cfg(&[("etcd.session.timeout.ms", "5000")]).unwrap_err();
        assert!(e.contains("etcd.connect is not"), "{e}");
        let e = cfg(&[
            ("etcd.connect", "e:2379"),
            ("etcd.session.timeout.ms", "500"),
        ])
        .unwrap_err();
        assert!(e.contains("at least 2000"), "{e}");
    }

    #[test]
    fn etcd_connect_makes_a_cluster_member() {
        assert!(cfg(&[]).unwrap().cluster.is_none());
        let c = cfg(&[
            ("etcd.connect", "e1:2379,e2/weir"),
            ("broker.rack", "r1"),
            ("controlled.shutdown.max.retries", "2"),
        ])
        .unwrap();
        let s = c.cluster.unwrap();
        assert_eq!(s.connect.endpoints, ["e1:2379", "e2:2379"]);
        assert_eq!(s.connect.prefix, "/weir");
        assert_eq!(s.session_timeout_ms, 18_000);
        assert_eq!(s.controlled_shutdown_timeout_ms, 10_000);
        assert!(s.auto_leader_rebalance_enable);
        assert_eq!(c.rack.as_deref(), Some("r1"));
    }

    #[test]
    fn properties_files_follow_java_syntax() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("server.properties");
        std::fs::write(&p, "# comment\n! also\nnum.partitions = 4\nlog.dirs: /tmp/x\nlisteners=PLAINTEXT://127.0.0.1:19092,\\\n  OTHER://127.0.0.1:19093\nlistener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT\n").unwrap();
        let c = BrokerConfig::from_sources(
            Some(&p),
            None,
            None,
            &[("num.partitions".into(), "6".into())],
        )
        .unwrap();
        assert_eq!(c.num_partitions, 6, "--override wins over the file");
        assert_eq!(c.log_dirs, vec![PathBuf::from("/tmp/x")]);
        assert_eq!(c.listeners.len(), 2);
    }
}
