//! The broker's shared state, one per process: the log manager, the topics and their
//! partitions, the group coordinator and producer ids, and the operations that change
//! them (create, delete and alter topics). Request handlers read through it; nothing here
//! knows the wire format.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use kafka_protocol::ResponseError as E;
use tokio::sync::{watch, Semaphore};
use weir_kafka::limits::MAX_PARTITIONS_PER_REQUEST;
use weir_kafka::topic::OFFSETS_TOPIC;
use weir_kafka::{ApiError, TopicPartition};
use weir_log::{AppendOrigin, LogConfig, LogManager};
use weir_record::{BatchBuilder, Compression};

use weir_kafka::acl::{Operation, ResourceType};

use crate::config::BrokerConfig;
use crate::descriptors::{self, Budget, MAPPINGS_PER_PARTITION};
use crate::dynamic_config::{DynamicConfigs, Scope};
use crate::group_configs::GroupConfigs;
use crate::memory::RequestMemory;
use crate::mutation_quota::MutationQuota;
use crate::partition::{Partition, Role};
use crate::request::RequestContext;
use crate::topics::{self, Change, PartitionView, StoredTopic, Topic, TopicStore};
use weir_group::{GroupCoordinator, GroupStore};
use weir_kafka::topic::TRANSACTION_STATE_TOPIC;
use weir_security::acl::Authorizer;
use weir_txn::TxnCoordinator;

/// Producer ids are handed out from blocks reserved in `producer-id-block`, so a restart
/// never reuses one.
struct ProducerIds {
    next: i64,
    block_end: i64,
}

const PRODUCER_ID_BLOCK: i64 = 1000;
const PRODUCER_ID_FILE: &str = "producer-id-block";

/// Everything a request handler needs.
pub struct Broker {
    pub config: BrokerConfig,
    pub logs: Arc<LogManager>,
    /// The topics served. Its lock is held only to read, or to put in or take out a
    /// topic already made: never while files are made or synced.
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// One broker: serialises changes to the set of topics, and holds what they need (in
    /// a cluster the metadata in etcd does, and this is `None`).
    topic_changes: Option<Mutex<Changes>>,
    /// A member of a cluster (`etcd.connect`): its session and what it applied.
    pub cluster: Option<crate::cluster::Membership>,
    /// The file descriptors: what connections may hold, and what the logs may.
    pub descriptors: Budget,
    /// Kafka's controller mutation quota (KIP-599): partitions created and deleted, per
    /// principal.
    pub mutations: MutationQuota,
    pub groups: Arc<GroupCoordinator>,
    /// The transaction coordinator of the `__transaction_state` partitions this broker
    /// leads, and what it runs on.
    pub txns: Arc<TxnCoordinator>,
    pub(crate) txn_host: Arc<crate::transactions::BrokerTxnHost>,
    producer_ids: Mutex<ProducerIds>,
    pub shutdown: watch::Sender<bool>,
    /// `queued.max.request.bytes`: request bytes in memory, over every connection.
    pub request_memory: RequestMemory,
    /// Appends of compressed batches running at once (one per core), each inflating its
    /// batch up to `weir_log::MAX_DECOMPRESSED_BYTES` to validate it.
    pub inflate_slots: Semaphore,
    /// SCRAM credentials (`weir-users.json` in the first data directory).
    pub users: weir_security::sasl::Users,
    /// The ACLs and their checks, when `authorizer.class.name` is set.
    pub authorizer: Option<Authorizer>,
    /// Client byte-rate quotas (`weir-quotas.json` in the first data directory).
    pub quotas: weir_security::quota::Quotas,
    /// Dynamic broker configs, and the log defaults they make (`weir-broker-configs.json`
    /// in the first data directory).
    pub dynamic: DynamicConfigs,
    /// Group configs (`weir-group-configs.json` in the first data directory).
    pub group_configs: GroupConfigs,
}

/// What changing the topics needs, under one lock: their files, and two tallies kept as
/// the topics change, so that a change costs the same however many topics there are.
struct Changes {
    store: TopicStore,
    /// The partitions of every topic.
    held: usize,
    /// Every topic's name with '.' read as '_', to the name: Kafka refuses a new name that
    /// collides with another so (their metric names would be the same).
    normalized: HashMap<String, String>,
}

impl Changes {
    /// `partitions` were made.
    fn made(&mut self, partitions: usize) {
        self.held += partitions;
    }
}

fn normalized(name: &str) -> String {
    name.replace('.', "_")
}

/// Why this broker does not serve a partition's leader's requests: the Kafka error, what
/// to say, and the leader (id, epoch) where one is known.
#[derive(Debug, Clone)]
pub struct NotLeader {
    pub code: i16,
    pub message: String,
    pub leader: Option<(i32, i32)>,
}

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub overrides: BTreeMap<String, String>,
    /// Replicas per partition (one broker: always 1).
    pub replication_factor: usize,
    /// Each partition's replicas, when the request assigns them.
    pub assignment: Option<Vec<Vec<i32>>>,
}

impl NewTopic {
    /// `partitions` partitions of one replica each, wherever they go.
    pub fn new(
        name: impl Into<String>,
        partitions: i32,
        overrides: BTreeMap<String, String>,
    ) -> Self {
        NewTopic {
            name: name.into(),
            partitions,
            overrides,
            replication_factor: 1,
            assignment: None,
        }
    }
}

/// A broker as clients are told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
}

/// POLICY_VIOLATION when the partitions one request asks for, together, are more than
/// Kafka lets one request create.
pub fn check_request_total(partitions: impl IntoIterator<Item = i32>) -> Result<(), ApiError> {
    let total: usize = partitions
        .into_iter()
        .map(|p| usize::try_from(p).unwrap_or(0))
        .fold(0, usize::saturating_add);
    if total > MAX_PARTITIONS_PER_REQUEST {
        return Err(ApiError::new(
            E::PolicyViolation,
            format!(
                "Excessively large number of partitions per request: {total} asked for, at \
                 most {MAX_PARTITIONS_PER_REQUEST} may be created by one request; ask in \
                 several"
            ),
        ));
    }
    Ok(())
}

fn poisoned() -> ApiError {
    ApiError::new(E::UnknownServerError, "poisoned")
}

/// Persists group state into `__consumer_offsets`, created on first use.
struct OffsetsTopicStore {
    broker: std::sync::OnceLock<std::sync::Weak<Broker>>,
}

impl GroupStore for OffsetsTopicStore {
    fn append(
        &self,
        partition: i32,
        records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        now_ms: i64,
    ) -> Result<(), i16> {
        self.write(partition, None, records, now_ms)
    }

    fn append_transactional(
        &self,
        partition: i32,
        producer: (i64, i16),
        records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        now_ms: i64,
    ) -> Result<(), i16> {
        self.write(partition, Some(producer), records, now_ms)
    }
}

impl OffsetsTopicStore {
    fn write(
        &self,
        partition: i32,
        producer: Option<(i64, i16)>,
        records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        now_ms: i64,
    ) -> Result<(), i16> {
        let broker = self
            .broker
            .get()
            .and_then(|w| w.upgrade())
            .ok_or(E::CoordinatorNotAvailable.code())?;
        let topic = broker.ensure_offsets_topic().map_err(|e| e.code)?;
        // Only the partition's leader writes; elsewhere the group has moved on.
        let p = topic
            .partition(partition)
            .and_then(|v| v.replica.clone())
            .ok_or(E::NotCoordinator.code())?;
        let mut b = BatchBuilder::new(Compression::None, 0, usize::MAX);
        if let Some((id, epoch)) = producer {
            // Kafka writes TxnOffsetCommit's batch at sequence 0; a coordinator's batches
            // are not sequence-checked.
            b = b.producer(id, epoch, 0).transactional(true);
        }
        for (k, v) in &records {
            b.append(now_ms, Some(k), v.as_deref(), &[])
                .map_err(|_| E::UnknownServerError.code())?;
        }
        let bytes = b.build().map_err(|_| E::UnknownServerError.code())?.bytes;
        match p.append_bytes(bytes.into(), AppendOrigin::Coordinator, &topic.config) {
            Ok(_) => Ok(()),
            Err(e) => {
                tracing::error!("writing to {OFFSETS_TOPIC}-{partition}: {e}");
                Err(e.kafka_error_code())
            }
        }
    }
}

impl Broker {
    /// Opens the data directories (recovering after a crash), reconciles the topics, loads
    /// the consumer groups, and starts the background work.
    pub fn start(mut config: BrokerConfig) -> Result<Arc<Broker>, String> {
        for d in &config.log_dirs {
            std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        }
        let cluster = match config.cluster.clone() {
            Some(settings) => Some(crate::cluster::join(&mut config, &settings)?),
            None => None,
        };
        // The log defaults every topic starts from are server.properties' under the
        // dynamic broker configs.
        let dynamic = match &cluster {
            None => DynamicConfigs::load(&config.log_dirs[0], &config.properties, &config.tls)?,
            Some(m) => m.dynamic_configs(&config.properties, &config.tls)?,
        };
        config.log_defaults = dynamic.log_defaults();
        config.log_manager.default_config = config.log_defaults.clone();
        let budget = Budget::of_process(config.max_connections, config.log_dirs.len());
        descriptors::give_logs_their_share(&mut config.log_manager, budget.logs);
        tracing::info!(
            "file descriptors: {} open at most; {} for connections (max.connections {}), {} \
             for the logs ({} segment files open at once); memory mappings for {} partitions",
            budget.total,
            budget.connections,
            config.max_connections,
            budget.logs,
            config.log_manager.max_open_segment_files,
            budget.partitions()
        );
        let loaded = match &cluster {
            None => topics::load(&config.log_dirs)?,
            // The cluster's metadata is in etcd; `join` refused data directories with
            // topics files.
            Some(_) => topics::Loaded::default(),
        };
        // What a crash left of a creation it interrupted, or of a deletion.
        for path in topics::remove_leftovers(&config.log_dirs, &loaded.leftovers)? {
            tracing::info!(
                "removed {}: its topic's creation or deletion was interrupted",
                path.display()
            );
        }
        let mut stored = loaded.topics;
        // A first start on a Kafka 4 data directory: the topics' ids and configs are in
        // Kafka's metadata log, not beside the partitions.
        if cluster.is_none() {
            if let Some(from_kafka) = crate::kafka_import::topics_from_kafka(&config)? {
                stored.extend(from_kafka);
            }
        }
        let mut topic_configs = HashMap::new();
        for (name, t) in stored.iter_mut() {
            drop_removed_keys(name, &mut t.configs);
            let cfg = config
                .log_defaults
                .with_overrides(t.configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| format!("topic {name}: {e}"))?;
            topic_configs.insert(name.clone(), Arc::new(cfg));
        }
        if let Some(m) = &cluster {
            topic_configs = m.topic_configs(&config.log_defaults);
        }
        let offsets_config = Arc::new(offsets_topic_config(&config));
        topic_configs
            .entry(OFFSETS_TOPIC.to_string())
            .or_insert_with(|| offsets_config.clone());
        topic_configs
            .entry(TRANSACTION_STATE_TOPIC.to_string())
            .or_insert_with(|| Arc::new(crate::transactions::txn_state_topic_config(&config)));
        let (logs, report) = LogManager::open(config.log_manager.clone(), &topic_configs)
            .map_err(|e| e.to_string())?;
        tracing::info!(
            partitions = report.partitions,
            clean_shutdown = report.had_clean_shutdown,
            recovered_segments = report.recovered_segments,
            "data directories {:?} loaded in {:?}",
            config.log_dirs,
            report.elapsed
        );
        let logs = Arc::new(logs);

        // Partition directories the file does not know of (a Kafka data dir, or a crash).
        // In a cluster the metadata in etcd says which there are (see `cluster::start`).
        let on_disk = if cluster.is_some() {
            Vec::new()
        } else {
            logs.logs()
        };
        for (name, (id, n)) in topics::discover(&on_disk) {
            let e = stored.entry(name).or_insert_with(|| StoredTopic {
                id: weir_log::checkpoint::uuid_to_base64(id),
                partitions: n,
                configs: BTreeMap::new(),
            });
            e.partitions = e.partitions.max(n);
        }
        let mut topic_map = BTreeMap::new();
        for (name, s) in &stored {
            let id = topics::parse_id(name, s)?;
            let cfg = topic_configs
                .get(name)
                .cloned()
                .unwrap_or_else(|| config.log_defaults.clone());
            let mut partitions = Vec::new();
            for p in 0..s.partitions {
                let tp = TopicPartition::new(name.clone(), p);
                let partition = Partition::open(&logs, tp, id, cfg.clone(), Role::SINGLE_NODE)
                    .map_err(|e| e.to_string())?;
                partitions.push(PartitionView::single_node(
                    config.node_id,
                    Arc::new(partition),
                ));
            }
            topic_map.insert(
                name.clone(),
                Arc::new(Topic {
                    name: name.clone(),
                    id,
                    overrides: s.configs.clone(),
                    config: cfg,
                    partitions,
                }),
            );
        }
        let held: usize = topic_map.values().map(|t| t.partitions.len()).sum();
        let changes = match &cluster {
            Some(_) => None,
            None => Some(Mutex::new(Changes {
                store: TopicStore::open(&config.log_dirs, &stored)
                    .map_err(|e| format!("saving topics: {e}"))?,
                held,
                normalized: topic_map
                    .keys()
                    .map(|n| (normalized(n), n.clone()))
                    .collect(),
            })),
        };
        let capacity = config.max_broker_partitions.min(budget.partitions());
        if held > capacity {
            tracing::warn!(
                "this broker holds {held} partitions, more than the {capacity} its limits \
                 allow (max.broker.partitions, and its file descriptors): no topic or \
                 partition can be created until some are deleted or the limits raised"
            );
        }

        let offsets_store = Arc::new(OffsetsTopicStore {
            broker: std::sync::OnceLock::new(),
        });
        let groups = GroupCoordinator::new(config.group.clone(), offsets_store.clone());
        let txn_host = crate::transactions::BrokerTxnHost::new();
        let txns = TxnCoordinator::new(config.txn.clone(), txn_host.clone());
        let producer_ids = match &cluster {
            None => reserve_producer_ids(&config.log_dirs[0], 0)?,
            // Handed out in blocks from etcd, on first use.
            Some(_) => ProducerIds {
                next: 0,
                block_end: 0,
            },
        };
        let (users, authorizer, quotas) = match &cluster {
            None => (
                weir_security::sasl::Users::load(&config.log_dirs[0])?,
                match &config.authorizer {
                    Some(a) => Some(Authorizer::load(
                        &config.log_dirs[0],
                        a.super_users.clone(),
                        a.allow_everyone_if_no_acl_found,
                    )?),
                    None => None,
                },
                weir_security::quota::Quotas::load(&config.log_dirs[0], config.quota_windows)?,
            ),
            Some(m) => {
                let doc = |d| m.document(d);
                fn current(d: &Option<(Vec<u8>, i64)>) -> Option<(&[u8], i64)> {
                    d.as_ref().map(|(b, r)| (b.as_slice(), *r))
                }
                let (u, a, q) = (
                    doc(weir_cluster::Document::Users),
                    doc(weir_cluster::Document::Acls),
                    doc(weir_cluster::Document::Quotas),
                );
                (
                    weir_security::sasl::Users::from_document(
                        m.store(weir_cluster::Document::Users),
                        current(&u),
                    )
                    .map_err(|e| format!("SCRAM users in etcd: {e}"))?,
                    match &config.authorizer {
                        Some(cfg) => Some(
                            Authorizer::from_document(
                                m.store(weir_cluster::Document::Acls),
                                current(&a),
                                cfg.super_users.clone(),
                                cfg.allow_everyone_if_no_acl_found,
                            )
                            .map_err(|e| format!("ACLs in etcd: {e}"))?,
                        ),
                        None => None,
                    },
                    weir_security::quota::Quotas::from_document(
                        m.store(weir_cluster::Document::Quotas),
                        current(&q),
                        config.quota_windows,
                    )
                    .map_err(|e| format!("client quotas in etcd: {e}"))?,
                )
            }
        };
        let group_configs = match &cluster {
            None => GroupConfigs::load(&config.log_dirs[0])?,
            Some(m) => {
                let current = m.document(weir_cluster::Document::GroupConfigs);
                GroupConfigs::from_document(
                    m.store(weir_cluster::Document::GroupConfigs),
                    current.as_ref().map(|(b, r)| (b.as_slice(), *r)),
                )
                .map_err(|e| format!("group configs in etcd: {e}"))?
            }
        };
        let (shutdown, _) = watch::channel(false);
        let request_memory = RequestMemory::new(config.queued_max_request_bytes);
        let mutations = MutationQuota::new(
            config.controller_mutation_rate,
            config.controller_quota_windows,
        );
        let broker = Arc::new(Broker {
            config,
            logs,
            topics: RwLock::new(topic_map),
            topic_changes: changes,
            cluster,
            descriptors: budget,
            mutations,
            groups,
            txns,
            txn_host,
            producer_ids: Mutex::new(producer_ids),
            shutdown,
            request_memory,
            users,
            authorizer,
            quotas,
            dynamic,
            group_configs,
            inflate_slots: Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            ),
        });
        broker.apply_group_configs();
        let _ = offsets_store.broker.set(Arc::downgrade(&broker));
        let _ = broker.txn_host.broker.set(Arc::downgrade(&broker));
        if broker.cluster.is_some() {
            crate::cluster::start(&broker)?;
        } else {
            broker.load_groups()?;
            if let Some(t) = broker.topic(TRANSACTION_STATE_TOPIC) {
                broker.load_txn_state(&t);
            }
        }
        broker.logs.start();
        tokio::spawn(broker.groups.clone().run(broker.shutdown.subscribe()));
        tokio::spawn(broker.txns.clone().run(broker.shutdown.subscribe()));
        tokio::spawn(producer_expiry(broker.clone()));
        Ok(broker)
    }

    /// Whether the request's principal may do `op` to the resource; always, without an
    /// authorizer. A denial is logged at debug, as Kafka's authorizer logger does at info.
    pub fn allowed(
        &self,
        ctx: &RequestContext,
        op: Operation,
        rt: ResourceType,
        name: &str,
    ) -> bool {
        let Some(a) = &self.authorizer else {
            return true;
        };
        let ok = a.authorize(&ctx.principal, &ctx.host, op, rt, name);
        if !ok {
            tracing::debug!(
                principal = %ctx.principal,
                host = %ctx.host,
                "denied {} on {}:{name}",
                op.name(),
                rt.name()
            );
        }
        ok
    }

    /// `allowed` on the cluster resource.
    pub fn allowed_on_cluster(&self, ctx: &RequestContext, op: Operation) -> bool {
        self.allowed(
            ctx,
            op,
            ResourceType::Cluster,
            weir_kafka::acl::CLUSTER_NAME,
        )
    }

    /// Kafka's "authorized operations" bit field for a resource, as Metadata,
    /// DescribeGroups and DescribeCluster report it when asked.
    pub fn authorized_operations(&self, ctx: &RequestContext, rt: ResourceType, name: &str) -> i32 {
        match &self.authorizer {
            Some(a) => a.authorized_operations(&ctx.principal, &ctx.host, rt, name),
            None => rt
                .operations()
                .iter()
                .fold(0, |bits, op| bits | (1 << op.code())),
        }
    }

    /// Replays `__consumer_offsets` into the group coordinator.
    fn load_groups(&self) -> Result<(), String> {
        let Some(topic) = self.topic(OFFSETS_TOPIC) else {
            return Ok(());
        };
        let mut n = 0;
        for p in topic.replicas() {
            n += self.load_offsets_partition(p)?;
        }
        tracing::info!(records = n, "consumer groups loaded from {OFFSETS_TOPIC}");
        Ok(())
    }

    /// Replays one partition of `__consumer_offsets` into the group coordinator; returns
    /// how many records it held.
    pub(crate) fn load_offsets_partition(&self, p: &Partition) -> Result<usize, String> {
        use crate::coordinator_log::Logged;
        let mut stored = Vec::new();
        crate::coordinator_log::read(p, |e| {
            stored.push(match e {
                Logged::Record {
                    key,
                    value,
                    txn_producer,
                    ..
                } => weir_group::Stored::Record {
                    key: key.to_vec(),
                    value: value.map(<[u8]>::to_vec),
                    txn_producer,
                },
                Logged::Marker {
                    producer_id,
                    commit,
                } => weir_group::Stored::Marker {
                    producer_id,
                    commit,
                },
            })
        })?;
        let n = stored.len();
        self.groups.load_stored(stored);
        Ok(n)
    }

    pub fn cluster_id(&self) -> &str {
        self.logs.cluster_id()
    }

    /// This broker, as clients of `listener` reach it.
    pub fn this_node(&self, listener: &str) -> NodeInfo {
        let adv = self.config.advertised(listener);
        NodeInfo {
            id: self.config.node_id,
            host: adv.host.clone(),
            port: adv.port,
            rack: self.config.rack.clone(),
        }
    }

    /// The brokers clients of `listener` are told of: in a cluster every live one that has
    /// that listener, else this one.
    pub fn live_brokers(&self, listener: &str) -> Vec<NodeInfo> {
        let Some(m) = &self.cluster else {
            return vec![self.this_node(listener)];
        };
        m.image()
            .brokers
            .values()
            .filter_map(|b| {
                let e = b.value.endpoint(listener)?;
                Some(NodeInfo {
                    id: b.value.id,
                    host: e.host.clone(),
                    port: e.port,
                    rack: b.value.rack.clone(),
                })
            })
            .collect()
    }

    /// Whether broker `id` is live (one broker: only itself).
    pub fn is_live(&self, id: i32) -> bool {
        match &self.cluster {
            Some(m) => m.image().is_live(id),
            None => id == self.config.node_id,
        }
    }

    /// The controller's id, -1 while there is none (one broker: itself).
    pub fn controller_id(&self) -> i32 {
        match &self.cluster {
            Some(m) => m.image().controller_id().unwrap_or(-1),
            None => self.config.node_id,
        }
    }

    /// The coordinator of `group`: the leader of its `__consumer_offsets` partition, as
    /// clients of `listener` reach it; or the error FindCoordinator answers.
    pub fn group_coordinator_node(
        &self,
        group: &str,
        listener: &str,
    ) -> Result<NodeInfo, (i16, String)> {
        let Some(m) = &self.cluster else {
            return Ok(self.this_node(listener));
        };
        let p = self.groups.partition_for(group);
        let leader = self
            .topic(OFFSETS_TOPIC)
            .and_then(|t| t.partition(p).and_then(|v| v.leader()));
        let not_yet = |why: String| (E::CoordinatorNotAvailable.code(), why);
        let Some(leader) = leader else {
            return Err(not_yet(format!(
                "{OFFSETS_TOPIC}-{p} has no leader at the moment"
            )));
        };
        let image = m.image();
        let b = image.broker(leader).ok_or_else(|| {
            not_yet(format!(
                "broker {leader}, which leads {OFFSETS_TOPIC}-{p}, is not live"
            ))
        })?;
        let e = b.endpoint(listener).ok_or_else(|| {
            not_yet(format!(
                "broker {leader}, which leads {OFFSETS_TOPIC}-{p}, has no listener {listener}"
            ))
        })?;
        Ok(NodeInfo {
            id: leader,
            host: e.host.clone(),
            port: e.port,
            rack: b.rack.clone(),
        })
    }

    /// Whether this broker coordinates `group`: `Ok`, or the error its requests get
    /// (NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while it loads the group's
    /// partition). One broker coordinates every group.
    pub fn coordinates(&self, group: &str) -> Result<(), i16> {
        match &self.cluster {
            Some(m) => m.coordinates(self.groups.partition_for(group)),
            None => Ok(()),
        }
    }

    /// Whether this broker has loaded the groups of `__consumer_offsets` partition `p`:
    /// a marker there must wait until it has, or its offsets would be settled in groups
    /// not loaded yet (one broker loads them all before it serves).
    pub fn offsets_partition_loaded(&self, p: i32) -> Result<(), i16> {
        match &self.cluster {
            Some(m) => m
                .coordinates(p)
                .map_err(|_| E::CoordinatorLoadInProgress.code()),
            None => Ok(()),
        }
    }

    /// Puts `next` in the topics served (each replacing its namesake) and takes out
    /// `removed`: how a cluster member applies the metadata.
    pub(crate) fn replace_topics(&self, next: Vec<Arc<Topic>>, removed: &[Arc<Topic>]) {
        let mut map = self.topics.write().unwrap_or_else(|e| e.into_inner());
        for t in removed {
            if map.get(&t.name).is_some_and(|have| Arc::ptr_eq(have, t)) {
                map.remove(&t.name);
            }
        }
        for t in next {
            map.insert(t.name.clone(), t);
        }
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().ok()?.get(name).cloned()
    }

    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .ok()?
            .values()
            .find(|t| t.id == id)
            .cloned()
    }

    pub fn all_topics(&self) -> Vec<Arc<Topic>> {
        self.topics
            .read()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default()
    }

    /// This broker's replica of a partition, if it holds one.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.topic(topic)?.partition(partition)?.replica.clone()
    }

    /// Whether the partition exists, wherever its replicas are.
    pub fn partition_exists(&self, topic: &str, partition: i32) -> bool {
        self.topic(topic)
            .is_some_and(|t| t.partition(partition).is_some())
    }

    /// The replica this broker leads, for what only a partition's leader serves
    /// (produce, consumer fetches, offsets): UNKNOWN_TOPIC_OR_PARTITION for a partition
    /// that does not exist, NOT_LEADER_OR_FOLLOWER (naming the leader, where there is one)
    /// for one another broker leads or none does.
    pub fn leader_replica(
        &self,
        topic: &Topic,
        partition: i32,
    ) -> Result<Arc<Partition>, NotLeader> {
        let Some(view) = topic.partition(partition) else {
            return Err(NotLeader {
                code: E::UnknownTopicOrPartition.code(),
                message: format!("topic '{}' has no partition {partition}", topic.name),
                leader: None,
            });
        };
        if let Some(r) = view.replica.as_ref().filter(|r| r.is_leader()) {
            return Ok(r.clone());
        }
        let leader = view.leadership.as_ref().filter(|l| l.leader >= 0);
        Err(NotLeader {
            code: E::NotLeaderOrFollower.code(),
            message: match leader {
                Some(l) => format!(
                    "broker {} leads {}-{partition}, not this one ({})",
                    l.leader, topic.name, self.config.node_id
                ),
                None => format!("{}-{partition} has no leader at the moment", topic.name),
            },
            leader: leader.map(|l| (l.leader, l.leader_epoch)),
        })
    }

    /// Appends `changes` to the topics journal of every data directory online, and syncs
    /// it. One that fails with a disk error goes offline and the others carry on.
    fn record(&self, store: &mut TopicStore, changes: &[Change]) -> Result<(), ApiError> {
        let mut saved = false;
        let mut last_error = None;
        let offline = self.logs.offline_dirs();
        for dir in &self.config.log_dirs {
            if offline.contains(dir) {
                continue;
            }
            match store.append(dir, changes) {
                Ok(()) => saved = true,
                Err(e) => {
                    let e = weir_log::LogError::Io(e);
                    self.logs.observe_dir(dir, &e);
                    last_error = Some(e);
                }
            }
        }
        match (saved, last_error) {
            (true, None) => Ok(()),
            (true, Some(e)) if weir_log::is_disk_failure(&e) => Ok(()),
            (_, e) => Err(ApiError::new(
                E::KafkaStorageError,
                match e {
                    Some(e) => format!("saving topic metadata: {e}"),
                    None => "saving topic metadata: every data directory is offline".into(),
                },
            )),
        }
    }

    /// After `n` changes were recorded: folds the journals into the snapshots when they
    /// have grown as long as there are topics (a cost proportional to the topics, paid
    /// once per as many changes). The topics are read under the lock only to copy them.
    fn maybe_fold(&self, store: &mut TopicStore, n: usize) {
        let count = self.topics.read().map_or(0, |t| t.len());
        if !store.appended(n, count) {
            return;
        }
        let stored: BTreeMap<String, StoredTopic> = self
            .all_topics()
            .iter()
            .map(|t| (t.name.clone(), topics::stored(t)))
            .collect();
        let offline = self.logs.offline_dirs();
        for dir in &self.config.log_dirs {
            if offline.contains(dir) {
                continue;
            }
            if let Err(e) = store.snapshot(dir, &stored) {
                // The journal still holds every change: nothing is lost, only not folded.
                tracing::warn!("folding the topics journal of {}: {e}", dir.display());
                let e = weir_log::LogError::Io(e);
                self.logs.observe_dir(dir, &e);
                return;
            }
        }
        store.folded();
    }

    fn lock_changes(&self) -> Result<std::sync::MutexGuard<'_, Changes>, ApiError> {
        self.topic_changes
            .as_ref()
            .ok_or_else(|| {
                ApiError::new(
                    E::UnknownServerError,
                    "a cluster member changes topics through the cluster's metadata",
                )
            })?
            .lock()
            .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))
    }

    /// The most partitions this broker may hold: `max.broker.partitions` (and
    /// `max.partitions`), or what the process can map if less.
    pub fn partition_capacity(&self) -> usize {
        self.config
            .max_broker_partitions
            .min(self.descriptors.partitions())
    }

    /// Whether `more` partitions fit the broker's limits, given the `held` ones: the
    /// configured limit and what the process can map (the offsets topic's partitions are
    /// kept free until it exists).
    fn check_capacity(
        &self,
        held: usize,
        more: usize,
        what: &str,
        for_offsets: bool,
    ) -> Result<(), ApiError> {
        let capacity = self.partition_capacity();
        let kept = if !for_offsets && self.topic(OFFSETS_TOPIC).is_none() {
            self.config.group.offsets_topic_partitions.max(0) as usize
        } else {
            0
        };
        if held.saturating_add(kept).saturating_add(more) > capacity {
            let why = if capacity == self.config.max_broker_partitions {
                format!("max.broker.partitions is {capacity}")
            } else {
                format!(
                    "vm.max_map_count is {}, enough for the indexes of {capacity} \
                     partitions at {MAPPINGS_PER_PARTITION} mappings each (raise it with \
                     `sysctl vm.max_map_count`)",
                    descriptors::max_map_count()
                )
            };
            let kept = if kept > 0 {
                format!(" and keeps {kept} for the {OFFSETS_TOPIC} topic")
            } else {
                String::new()
            };
            return Err(ApiError::new(
                E::PolicyViolation,
                format!(
                    "{what} would add {more} partitions; this broker holds {held}{kept}, and \
                     can hold no more than {capacity}: {why}"
                ),
            ));
        }
        Ok(())
    }

    /// Makes partitions `range` of a topic. All or nothing: if one cannot be made, those
    /// made are deleted again, the directory of the one that failed too, and the error
    /// says why.
    fn make_partitions(
        &self,
        name: &str,
        id: uuid::Uuid,
        config: &Arc<LogConfig>,
        range: std::ops::Range<i32>,
    ) -> Result<Vec<Arc<Partition>>, ApiError> {
        let mut made = Vec::with_capacity(range.len());
        for p in range.clone() {
            let tp = TopicPartition::new(name, p);
            match Partition::open(
                &self.logs,
                tp.clone(),
                id,
                config.clone(),
                Role::SINGLE_NODE,
            ) {
                Ok(part) => made.push(Arc::new(part)),
                Err(e) => {
                    let kept = made.len();
                    self.unmake(made, Some(&tp));
                    return Err(ApiError {
                        code: e.kafka_error_code(),
                        message: format!(
                            "creating partition {tp} failed: {e}; the {kept} partitions of \
                             {name} made before it were removed again, and nothing of it \
                             is left"
                        ),
                    });
                }
            }
        }
        Ok(made)
    }

    /// Deletes partitions that were made for a change that did not happen, and the
    /// directory `failed` may have left half made.
    fn unmake(&self, made: Vec<Arc<Partition>>, failed: Option<&TopicPartition>) {
        for p in &made {
            if let Err(e) = self.logs.delete_log(&p.tp) {
                tracing::error!("removing the new partition {} again: {e}", p.tp);
            }
        }
        // Dropping them closes their files.
        drop(made);
        let Some(tp) = failed else { return };
        if self.logs.log(tp).is_some() {
            return;
        }
        for dir in &self.config.log_dirs {
            let path = dir.join(tp.dir_name());
            if path.is_dir() {
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    tracing::error!("removing {} again: {e}", path.display());
                }
            }
        }
    }

    /// Creates topics (or checks that they could be, with `validate_only`), each all or
    /// nothing, and answers for each in order. A topic is visible to other requests only
    /// once every partition exists and the metadata is saved. The request's partitions
    /// together are bounded by `MAX_PARTITIONS_PER_REQUEST`, each topic's by
    /// `max.topic.partitions`, and the broker's by its capacity; `gate` is asked last for
    /// each topic about to be created (the controller mutation quota), with its name and
    /// partition count. Blocking: it makes files and syncs them. In a cluster the topics
    /// go to the cluster's metadata, and this waits up to `wait` until this broker serves
    /// their leaders (see `cluster::create_topics`).
    pub fn create_topics(
        &self,
        asks: Vec<NewTopic>,
        validate_only: bool,
        wait: std::time::Duration,
        gate: &mut dyn FnMut(&str, usize) -> Result<(), ApiError>,
    ) -> Vec<Result<Arc<Topic>, ApiError>> {
        if let Some(m) = &self.cluster {
            return crate::cluster::create_topics(self, m, asks, validate_only, wait, gate);
        }
        if let Err(e) = check_request_total(asks.iter().map(|a| a.partitions)) {
            return asks.iter().map(|_| Err(e.clone())).collect();
        }
        // Each topic on its own first: its name, its partitions, its settings.
        let mut results: Vec<Result<(NewTopic, Arc<LogConfig>), ApiError>> = asks
            .into_iter()
            .map(|a| {
                let config = self.check_new_topic(&a)?;
                Ok((a, config))
            })
            .collect();
        let mut changes = match self.lock_changes() {
            Ok(c) => c,
            Err(e) => return results.into_iter().map(|_| Err(e.clone())).collect(),
        };
        // Then against what exists, and what the topics before it in the request take.
        let held = changes.held;
        // The names, and the normalized names, of the topics accepted before this one.
        let mut batch: HashSet<String> = HashSet::new();
        let mut batch_normalized: HashSet<String> = HashSet::new();
        let mut accepted_partitions = 0usize;
        for r in results.iter_mut() {
            let Ok((a, _)) = r else { continue };
            let norm = normalized(&a.name);
            let checked = (|| {
                if self.topic(&a.name).is_some() || batch.contains(&a.name) {
                    return Err(ApiError::new(
                        E::TopicAlreadyExists,
                        format!("topic '{}' already exists", a.name),
                    ));
                }
                if let Some(other) = changes.normalized.get(&norm) {
                    return Err(ApiError::new(
                        E::InvalidTopicException,
                        format!(
                            "topic '{}' collides with existing topic '{other}' ('.' and '_' \
                             count as the same)",
                            a.name
                        ),
                    ));
                }
                if batch_normalized.contains(&norm) {
                    return Err(ApiError::new(
                        E::InvalidTopicException,
                        format!(
                            "topic '{}' collides with another topic of the request ('.' and \
                             '_' count as the same)",
                            a.name
                        ),
                    ));
                }
                let n = a.partitions as usize;
                self.check_capacity(
                    held + accepted_partitions,
                    n,
                    &format!("creating topic '{}'", a.name),
                    a.name == OFFSETS_TOPIC,
                )?;
                if !validate_only {
                    gate(&a.name, n)?;
                }
                Ok(())
            })();
            match checked {
                Ok(()) => {
                    accepted_partitions += a.partitions as usize;
                    batch.insert(a.name.clone());
                    batch_normalized.insert(norm);
                }
                Err(e) => *r = Err(e),
            }
        }
        if validate_only {
            return results
                .into_iter()
                .map(|r| {
                    r.map(|(a, config)| {
                        Arc::new(Topic {
                            name: a.name,
                            id: uuid::Uuid::nil(),
                            overrides: a.overrides,
                            config,
                            partitions: Vec::new(),
                        })
                    })
                })
                .collect();
        }
        // Said before any file is made: a crash from here on leaves directories that
        // start-up recognises by this intent and removes.
        let ids: Vec<uuid::Uuid> = results.iter().map(|_| uuid::Uuid::new_v4()).collect();
        let intents: Vec<Change> = results
            .iter()
            .zip(&ids)
            .filter_map(|(r, id)| {
                let (a, _) = r.as_ref().ok()?;
                Some(Change::Intent {
                    topic: a.name.clone(),
                    id: weir_log::checkpoint::uuid_to_base64(*id),
                    from: 0,
                    to: a.partitions,
                })
            })
            .collect();
        if intents.is_empty() {
            // Every one was refused.
            return results
                .into_iter()
                .map(|r| r.and(Err(ApiError::new(E::UnknownServerError, "refused"))))
                .collect();
        }
        if let Err(e) = self.record(&mut changes.store, &intents) {
            return results.into_iter().map(|r| r.and(Err(e.clone()))).collect();
        }
        let mut made: Vec<Result<Arc<Topic>, ApiError>> = Vec::with_capacity(results.len());
        let mut outcome = Vec::new();
        for (r, id) in results.into_iter().zip(ids) {
            let topic = r.and_then(|(a, config)| {
                let parts = self.make_partitions(&a.name, id, &config, 0..a.partitions);
                let parts = match parts {
                    Ok(p) => p,
                    Err(e) => {
                        outcome.push(Change::Abort {
                            topic: a.name.clone(),
                        });
                        return Err(e);
                    }
                };
                let topic = Arc::new(Topic {
                    name: a.name,
                    id,
                    overrides: a.overrides,
                    config,
                    partitions: parts
                        .into_iter()
                        .map(|p| PartitionView::single_node(self.config.node_id, p))
                        .collect(),
                });
                outcome.push(topics::created(&topic));
                Ok(topic)
            });
            made.push(topic);
        }
        if let Err(e) = self.record(&mut changes.store, &outcome) {
            // Not saved: nothing of it may stay.
            for t in made.iter_mut() {
                if let Ok(topic) = t {
                    self.unmake(topic.replicas().cloned().collect(), None);
                    *t = Err(e.clone());
                }
            }
            return made;
        }
        {
            let Ok(mut map) = self.topics.write() else {
                return made.into_iter().map(|_| Err(poisoned())).collect();
            };
            for t in made.iter().flatten() {
                map.insert(t.name.clone(), t.clone());
            }
        }
        for t in made.iter().flatten() {
            changes.made(t.partitions.len());
            changes
                .normalized
                .insert(normalized(&t.name), t.name.clone());
        }
        for t in made.iter().flatten() {
            tracing::info!(topic = %t.name, partitions = t.partitions.len(), "created topic");
        }
        self.maybe_fold(&mut changes.store, intents.len() + outcome.len());
        made
    }

    /// A new topic's own checks: its name, its partition count, its settings.
    pub(crate) fn check_new_topic(&self, a: &NewTopic) -> Result<Arc<LogConfig>, ApiError> {
        weir_kafka::topic::validate_topic_name(&a.name)
            .map_err(|m| ApiError::new(E::InvalidTopicException, m))?;
        if a.partitions < 1 {
            return Err(ApiError::new(
                E::InvalidPartitions,
                format!(
                    "number of partitions must be at least 1, got {}",
                    a.partitions
                ),
            ));
        }
        let max = self.config.max_topic_partitions;
        if a.partitions as usize > max {
            return Err(ApiError::new(
                E::PolicyViolation,
                format!(
                    "topic '{}' asks for {} partitions; max.topic.partitions allows {max}",
                    a.name, a.partitions
                ),
            ));
        }
        Ok(Arc::new(
            self.log_defaults()
                .with_overrides(a.overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| ApiError::new(E::InvalidConfig, e.to_string()))?,
        ))
    }

    /// Creates one topic (or checks that it could be, with `validate_only`); see
    /// `create_topics`. Not counted against any quota: for the broker's own topics and
    /// for tests.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        overrides: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Arc<Topic>, ApiError> {
        let mut ask = NewTopic::new(name, partitions, overrides);
        // Auto-created topics get `default.replication.factor` replicas, as in Kafka.
        ask.replication_factor = self.config.default_replication_factor.max(1) as usize;
        self.create_topics(
            vec![ask],
            validate_only,
            crate::cluster::DEFAULT_CHANGE_WAIT,
            &mut |_, _| Ok(()),
        )
        .pop()
        .unwrap_or_else(|| Err(ApiError::new(E::UnknownServerError, "no answer")))
    }

    /// Deletes a topic and its data. `gate` is asked first with its partition count (the
    /// controller mutation quota). Blocking: it renames directories and syncs the journal.
    pub fn delete_topic(
        &self,
        name: &str,
        gate: &mut dyn FnMut(&str, usize) -> Result<(), ApiError>,
    ) -> Result<uuid::Uuid, ApiError> {
        if !self.config.delete_topic_enable {
            return Err(ApiError::new(
                E::TopicDeletionDisabled,
                "delete.topic.enable is false",
            ));
        }
        if let Some(m) = &self.cluster {
            return crate::cluster::delete_topic(
                self,
                m,
                name,
                crate::cluster::DEFAULT_CHANGE_WAIT,
                gate,
            );
        }
        let mut changes = self.lock_changes()?;
        let topic = self.topic(name).ok_or_else(|| {
            ApiError::new(
                E::UnknownTopicOrPartition,
                format!("topic '{name}' does not exist"),
            )
        })?;
        gate(name, topic.partitions.len())?;
        self.record(
            &mut changes.store,
            &[Change::Delete {
                topic: name.to_string(),
                id: weir_log::checkpoint::uuid_to_base64(topic.id),
            }],
        )?;
        self.topics.write().map_err(|_| poisoned())?.remove(name);
        debug_assert!(
            changes.held >= topic.partitions.len(),
            "the partition tally"
        );
        changes.held = changes.held.saturating_sub(topic.partitions.len());
        changes.normalized.remove(&normalized(name));
        for p in topic.replicas() {
            self.logs.delete_log(&p.tp)?;
            p.appended.notify_waiters();
        }
        self.maybe_fold(&mut changes.store, 1);
        drop(changes); // the coordinator may write to __consumer_offsets
        self.groups.on_topic_deleted(name);
        tracing::info!(topic = name, "deleted topic");
        Ok(topic.id)
    }

    /// Raises a topic's partition count, all or nothing; the new partitions are visible
    /// only once all exist and the count is saved. Bounded as `create_topics` bounds a new
    /// topic; `gate` is asked last with the number of new partitions. Blocking.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
        gate: &mut dyn FnMut(&str, usize) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        if let Some(m) = &self.cluster {
            return crate::cluster::create_partitions(
                self,
                m,
                name,
                count,
                validate_only,
                crate::cluster::DEFAULT_CHANGE_WAIT,
                gate,
            );
        }
        let mut changes = self.lock_changes()?;
        let topic = self.topic(name).ok_or_else(|| {
            ApiError::new(
                E::UnknownTopicOrPartition,
                format!("topic '{name}' does not exist"),
            )
        })?;
        let current = topic.partitions.len() as i32;
        if count <= current {
            return Err(ApiError::new(
                E::InvalidPartitions,
                format!("topic '{name}' has {current} partitions; the new count must be larger, got {count}"),
            ));
        }
        let more = (count - current) as usize;
        check_request_total([count - current])?;
        let max = self.config.max_topic_partitions;
        if count as usize > max {
            return Err(ApiError::new(
                E::PolicyViolation,
                format!(
                    "topic '{name}' would have {count} partitions; max.topic.partitions \
                     allows {max}"
                ),
            ));
        }
        self.check_capacity(
            changes.held,
            more,
            &format!("growing topic '{name}' to {count}"),
            false,
        )?;
        if validate_only {
            return Ok(());
        }
        gate(name, more)?;
        self.record(
            &mut changes.store,
            &[Change::Intent {
                topic: name.to_string(),
                id: weir_log::checkpoint::uuid_to_base64(topic.id),
                from: current,
                to: count,
            }],
        )?;
        let new = match self.make_partitions(name, topic.id, &topic.config, current..count) {
            Ok(new) => new,
            Err(e) => {
                let _ = self.record(
                    &mut changes.store,
                    &[Change::Abort {
                        topic: name.to_string(),
                    }],
                );
                return Err(e);
            }
        };
        let saved = self.record(
            &mut changes.store,
            &[Change::Partitions {
                topic: name.to_string(),
                partitions: count,
            }],
        );
        if let Err(e) = saved {
            self.unmake(new, None);
            return Err(e);
        }
        let mut parts = topic.partitions.clone();
        parts.extend(
            new.into_iter()
                .map(|p| PartitionView::single_node(self.config.node_id, p)),
        );
        self.topics.write().map_err(|_| poisoned())?.insert(
            name.to_string(),
            Arc::new(Topic {
                name: topic.name.clone(),
                id: topic.id,
                overrides: topic.overrides.clone(),
                config: topic.config.clone(),
                partitions: parts,
            }),
        );
        changes.made(more);
        tracing::info!(topic = name, from = current, to = count, "added partitions");
        self.maybe_fold(&mut changes.store, 3);
        Ok(())
    }

    /// The log defaults a topic's config starts from: server.properties' under the
    /// dynamic broker configs.
    pub fn log_defaults(&self) -> Arc<LogConfig> {
        self.dynamic.log_defaults()
    }

    /// Replaces `scope`'s dynamic broker configs (the whole set), and gives every topic the
    /// config the new log defaults make under its own overrides. A change a topic's
    /// overrides cannot take (an invalid combination) is refused whole.
    pub fn set_broker_configs(
        &self,
        scope: Scope,
        set: BTreeMap<String, String>,
        named: &[String],
        validate_only: bool,
    ) -> Result<(), ApiError> {
        // Under the topics' lock: no topic is made from the old defaults meanwhile. (In a
        // cluster, topics are made from the defaults as each broker applies the metadata.)
        let _changes = match &self.topic_changes {
            Some(_) => Some(self.lock_changes()?),
            None => None,
        };
        let resolve_all = |defaults: &Arc<LogConfig>| {
            let topics = self.topics.read().map_err(|_| poisoned())?;
            let mut configs = HashMap::new();
            for (name, t) in topics.iter() {
                let config = defaults
                    .with_overrides(t.overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .map_err(|e| {
                        ApiError::new(E::InvalidRequest, format!("topic '{name}': {e}"))
                    })?;
                configs.insert(name.clone(), Arc::new(config));
            }
            Ok(configs)
        };
        let Some(configs) = self
            .dynamic
            .replace(scope, set, named, validate_only, resolve_all)?
        else {
            return Ok(());
        };
        self.logs.update_topic_configs(&configs);
        let mut topics = self.topics.write().map_err(|_| poisoned())?;
        for (name, config) in configs {
            if let Some(t) = topics.get(&name) {
                let t = Arc::new(t.with_config(t.overrides.clone(), config));
                topics.insert(name, t);
            }
        }
        tracing::info!(?scope, "dynamic broker configs changed");
        Ok(())
    }

    /// A broker key's value as this broker has it, for the group configs that override it
    /// and are bounded by it.
    pub fn group_config_broker_value(&self, name: &str) -> String {
        crate::group_configs::broker_value(&self.config.properties, name)
    }

    /// Replaces group `group`'s configs (the whole set), checked as Kafka checks them; the
    /// coordinator applies them from the group's next heartbeat.
    pub fn set_group_configs(
        &self,
        group: &str,
        set: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let broker = |name: &str| self.group_config_broker_value(name);
        if self
            .group_configs
            .replace(group, set, &broker, validate_only)?
        {
            tracing::info!(group, "group configs changed");
            self.apply_group_configs();
        }
        Ok(())
    }

    /// Hands the group configs the coordinator acts on to it.
    pub fn apply_group_configs(&self) {
        use crate::group_configs::{CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS};
        let int = |set: &BTreeMap<String, String>, key: &str| {
            set.get(key).and_then(|v| v.trim().parse::<i32>().ok())
        };
        let settings = self
            .group_configs
            .all()
            .into_iter()
            .map(|(group, set)| {
                let s = weir_group::ConsumerGroupSettings {
                    session_timeout_ms: int(&set, CONSUMER_SESSION_TIMEOUT_MS),
                    heartbeat_interval_ms: int(&set, CONSUMER_HEARTBEAT_INTERVAL_MS),
                };
                (group, s)
            })
            .filter(|(_, s)| *s != weir_group::ConsumerGroupSettings::default())
            .collect();
        self.groups.set_group_settings(settings);
    }

    /// Replaces a topic's config overrides (the whole set).
    pub fn set_topic_overrides(
        &self,
        name: &str,
        overrides: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        if let Some(m) = &self.cluster {
            return crate::cluster::set_topic_overrides(self, m, name, overrides, validate_only);
        }
        let mut changes = self.lock_changes()?;
        let topic = self.topic(name).ok_or_else(|| {
            ApiError::new(
                E::UnknownTopicOrPartition,
                format!("topic '{name}' does not exist"),
            )
        })?;
        let config = Arc::new(
            self.log_defaults()
                .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| ApiError::new(E::InvalidConfig, e.to_string()))?,
        );
        if validate_only {
            return Ok(());
        }
        self.record(
            &mut changes.store,
            &[Change::Configs {
                topic: name.to_string(),
                configs: overrides.clone(),
            }],
        )?;
        self.logs.update_topic_config(name, config.clone());
        self.topics.write().map_err(|_| poisoned())?.insert(
            name.to_string(),
            Arc::new(topic.with_config(overrides, config)),
        );
        self.maybe_fold(&mut changes.store, 1);
        Ok(())
    }

    /// The `__consumer_offsets` topic, created with `offsets.topic.num.partitions` on first use.
    pub fn ensure_offsets_topic(&self) -> Result<Arc<Topic>, ApiError> {
        if let Some(t) = self.topic(OFFSETS_TOPIC) {
            return Ok(t);
        }
        let mut overrides = BTreeMap::new();
        overrides.insert("cleanup.policy".to_string(), "compact".to_string());
        overrides.insert(
            "segment.bytes".to_string(),
            self.config.offsets_topic_segment_bytes.to_string(),
        );
        overrides.insert("compression.type".to_string(), "producer".to_string());
        let mut ask = NewTopic::new(
            OFFSETS_TOPIC,
            self.config.group.offsets_topic_partitions,
            overrides,
        );
        // `offsets.topic.replication.factor`, at most the brokers there are now.
        if let Some(s) = self.config.cluster.as_ref() {
            let live = self.live_brokers(&self.config.listeners[0].name).len();
            ask.replication_factor = s
                .replication
                .offsets_topic_replication_factor
                .min(live)
                .max(1);
        }
        self.create_internal_topic(ask).map(|(t, _)| t)
    }

    /// Makes an internal topic (`__consumer_offsets`, `__transaction_state`) on first use:
    /// the topic, and whether this call made it (`false`: another call did meanwhile).
    pub(crate) fn create_internal_topic(
        &self,
        ask: NewTopic,
    ) -> Result<(Arc<Topic>, bool), ApiError> {
        let name = ask.name.clone();
        let created = self
            .create_topics(
                vec![ask],
                false,
                crate::cluster::DEFAULT_CHANGE_WAIT,
                &mut |_, _| Ok(()),
            )
            .pop()
            .unwrap_or_else(|| Err(ApiError::new(E::UnknownServerError, "no answer")));
        match created {
            Ok(t) => Ok((t, true)),
            Err(e) if e.code == E::TopicAlreadyExists.code() => {
                let t = self.topic(&name).ok_or(ApiError::new(
                    E::CoordinatorNotAvailable,
                    format!("{name} vanished as it was made"),
                ))?;
                Ok((t, false))
            }
            Err(e) => Err(e),
        }
    }

    /// A new producer id.
    pub fn allocate_producer_id(&self) -> Result<i64, ApiError> {
        let mut ids = self
            .producer_ids
            .lock()
            .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
        if ids.next >= ids.block_end {
            *ids = match &self.cluster {
                None => reserve_producer_ids(&self.config.log_dirs[0], ids.block_end)
                    .map_err(|e| ApiError::new(E::KafkaStorageError, e))?,
                Some(m) => {
                    let (next, block_end) =
                        crate::cluster::producer_id_block(m, PRODUCER_ID_BLOCK)?;
                    ProducerIds { next, block_end }
                }
            };
        }
        let id = ids.next;
        ids.next += 1;
        Ok(id)
    }

    /// Stops background work and closes every log cleanly (flushed, checkpointed, marked).
    pub fn shutdown(&self) -> Result<(), String> {
        let _ = self.shutdown.send(true);
        self.logs.shutdown().map_err(|e| e.to_string())
    }
}

/// Reserves the next block of producer ids, at or after `at_least`.
fn reserve_producer_ids(dir: &std::path::Path, at_least: i64) -> Result<ProducerIds, String> {
    let path = dir.join(PRODUCER_ID_FILE);
    let stored = match std::fs::read_to_string(&path) {
        Ok(s) => s
            .trim()
            .parse::<i64>()
            .map_err(|_| format!("{}: not a number", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let start = stored.max(at_least);
    let end = start + PRODUCER_ID_BLOCK;
    weir_log::checkpoint::write_atomically(&path, end.to_string().as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(ProducerIds {
        next: start,
        block_end: end,
    })
}

/// Drops the topic keys Kafka 4.0 removed (`message.format.version`, …) from a topic's stored
/// overrides, as Kafka 4 ignores them: a topic made by an older Weir still loads, and the keys
/// are gone from its file at the next write.
pub(crate) fn drop_removed_keys(topic: &str, overrides: &mut BTreeMap<String, String>) {
    overrides.retain(|key, value| {
        let removed = LogConfig::is_removed_topic_key(key);
        if removed {
            tracing::warn!(%topic, "dropping {key}={value}: Kafka 4 removed this topic config");
        }
        !removed
    });
}

/// `__consumer_offsets`' configuration: compacted, with its own segment size.
fn offsets_topic_config(config: &BrokerConfig) -> LogConfig {
    config
        .log_defaults
        .with_overrides([
            ("cleanup.policy", "compact"),
            (
                "segment.bytes",
                &config.offsets_topic_segment_bytes.to_string(),
            ),
            ("compression.type", "producer"),
        ])
        .unwrap_or_else(|_| (*config.log_defaults).clone())
}

/// Forgets idle producers every `producer.id.expiration.check.interval.ms`.
async fn producer_expiry(broker: Arc<Broker>) {
    let mut shutdown = broker.shutdown.subscribe();
    let every = std::time::Duration::from_millis(
        broker
            .config
            .producer_id_expiration_check_interval_ms
            .max(1000),
    );
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
        let now = weir_log::now_ms();
        for (_, log) in broker.logs.logs() {
            if let Ok(mut l) = log.lock() {
                l.remove_expired_producers(now, broker.config.producer_id_expiration_ms);
            }
        }
    }
}
