//! The broker's shared state, one per process: the log manager, the topics and their
//! partitions, the group coordinator and producer ids, and the operations that change
//! them (create, delete and alter topics). Request handlers read through it; nothing here
//! knows the wire format.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use kafka_protocol::ResponseError as E;
use tokio::sync::{watch, Semaphore};
use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;
use weir_kafka::topic::OFFSETS_TOPIC;
use weir_kafka::{ApiError, TopicPartition};
use weir_log::{AppendOrigin, LogConfig, LogManager};
use weir_record::{BatchBuilder, Compression, LogEntries};

use weir_kafka::acl::{Operation, ResourceType};

use crate::config::BrokerConfig;
use crate::memory::RequestMemory;
use crate::partition::Partition;
use crate::request::RequestContext;
use crate::topics::{self, StoredTopic, Topic};
use weir_group::{GroupCoordinator, GroupStore};
use weir_security::acl::Authorizer;

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
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serialises changes to the set of topics and their persisted form.
    topic_changes: Mutex<()>,
    pub groups: Arc<GroupCoordinator>,
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
        let broker = self
            .broker
            .get()
            .and_then(|w| w.upgrade())
            .ok_or(E::CoordinatorNotAvailable.code())?;
        let topic = broker.ensure_offsets_topic().map_err(|e| e.code)?;
        let p = topic
            .partitions
            .get(partition as usize)
            .ok_or(E::CoordinatorNotAvailable.code())?;
        let mut b = BatchBuilder::new(Compression::None, 0, usize::MAX);
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
    pub fn start(config: BrokerConfig) -> Result<Arc<Broker>, String> {
        for d in &config.log_dirs {
            std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        }
        let mut stored = topics::load(&config.log_dirs)?;
        let mut topic_configs = HashMap::new();
        for (name, t) in &stored {
            let cfg = config
                .log_defaults
                .with_overrides(t.configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| format!("topic {name}: {e}"))?;
            topic_configs.insert(name.clone(), Arc::new(cfg));
        }
        let offsets_config = Arc::new(offsets_topic_config(&config));
        topic_configs
            .entry(OFFSETS_TOPIC.to_string())
            .or_insert_with(|| offsets_config.clone());
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
        let on_disk = logs.logs();
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
                let partition =
                    Partition::open(&logs, tp, id, cfg.clone()).map_err(|e| e.to_string())?;
                partitions.push(Arc::new(partition));
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
        topics::store(&config.log_dirs, &stored).map_err(|e| format!("saving topics: {e}"))?;

        let store = Arc::new(OffsetsTopicStore {
            broker: std::sync::OnceLock::new(),
        });
        let groups = GroupCoordinator::new(config.group.clone(), store.clone());
        let producer_ids = reserve_producer_ids(&config.log_dirs[0], 0)?;
        let users = weir_security::sasl::Users::load(&config.log_dirs[0])?;
        let authorizer = match &config.authorizer {
            Some(a) => Some(Authorizer::load(
                &config.log_dirs[0],
                a.super_users.clone(),
                a.allow_everyone_if_no_acl_found,
            )?),
            None => None,
        };
        let quotas = weir_security::quota::Quotas::load(&config.log_dirs[0], config.quota_windows)?;
        let (shutdown, _) = watch::channel(false);
        let request_memory = RequestMemory::new(config.queued_max_request_bytes);
        let broker = Arc::new(Broker {
            config,
            logs,
            topics: RwLock::new(topic_map),
            topic_changes: Mutex::new(()),
            groups,
            producer_ids: Mutex::new(producer_ids),
            shutdown,
            request_memory,
            users,
            authorizer,
            quotas,
            inflate_slots: Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            ),
        });
        let _ = store.broker.set(Arc::downgrade(&broker));
        broker.load_groups()?;
        broker.logs.start();
        tokio::spawn(broker.groups.clone().run(broker.shutdown.subscribe()));
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
        let mut records = Vec::new();
        for p in &topic.partitions {
            let log = p.lock_log().map_err(|e| e.to_string())?;
            let mut offset = log.log_start_offset();
            while offset < log.log_end_offset() {
                let data = log
                    .read(offset, 8 << 20, i64::MAX, true)
                    .map_err(|e| e.to_string())?;
                let Some(slice) = data.slice else { break };
                let bytes = slice.read_to_vec().map_err(|e| e.to_string())?;
                let mut next = offset;
                for item in LogEntries::new(&bytes) {
                    let Ok((_, entry)) = item else { break };
                    next = next.max(entry.last_offset() + 1);
                    // Transaction markers (in a topic Kafka wrote) are not group records.
                    if matches!(&entry, weir_record::LogEntry::V2(b) if b.is_control()) {
                        continue;
                    }
                    let Ok(recs) = entry.records(MAX_DECOMPRESSED_BATCH_BYTES) else {
                        continue;
                    };
                    for r in recs.iter().flatten() {
                        if r.offset >= offset {
                            if let Some(k) = r.key {
                                records.push((k.to_vec(), r.value.map(|v| v.to_vec())));
                            }
                        }
                    }
                }
                if next <= offset {
                    break;
                }
                offset = next;
            }
        }
        let n = records.len();
        self.groups.load(records);
        tracing::info!(records = n, "consumer groups loaded from {OFFSETS_TOPIC}");
        Ok(())
    }

    pub fn cluster_id(&self) -> &str {
        self.logs.cluster_id()
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

    pub fn partition(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let t = self.topic(topic)?;
        usize::try_from(partition)
            .ok()
            .and_then(|p| t.partitions.get(p).cloned())
    }

    fn persist(&self, topics: &BTreeMap<String, Arc<Topic>>) -> Result<(), ApiError> {
        let stored = topics
            .iter()
            .map(|(n, t)| (n.clone(), topics::stored(t)))
            .collect();
        // Every directory online keeps a copy; one that fails with a disk error goes offline
        // and the others carry on.
        let mut saved = false;
        let mut last_error = None;
        let offline = self.logs.offline_dirs();
        for dir in &self.config.log_dirs {
            if offline.contains(dir) {
                continue;
            }
            match topics::store(std::slice::from_ref(dir), &stored) {
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

    /// Creates a topic (or checks that it could be, with `validate_only`).
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        overrides: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Arc<Topic>, ApiError> {
        weir_kafka::topic::validate_topic_name(name)
            .map_err(|m| ApiError::new(E::InvalidTopicException, m))?;
        if partitions < 1 {
            return Err(ApiError::new(
                E::InvalidPartitions,
                format!("number of partitions must be at least 1, got {partitions}"),
            ));
        }
        if partitions > 1_000_000 {
            return Err(ApiError::new(
                E::InvalidPartitions,
                format!("{partitions} partitions is more than one broker can hold"),
            ));
        }
        let config = Arc::new(
            self.config
                .log_defaults
                .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| ApiError::new(E::InvalidConfig, e.to_string()))?,
        );
        let _guard = self
            .topic_changes
            .lock()
            .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
        {
            let topics = self
                .topics
                .read()
                .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
            if topics.contains_key(name) {
                return Err(ApiError::new(
                    E::TopicAlreadyExists,
                    format!("topic '{name}' already exists"),
                ));
            }
            // Kafka refuses names that differ only by '.' versus '_' (metric names collide).
            let norm = name.replace('.', "_");
            if let Some(other) = topics.keys().find(|t| t.replace('.', "_") == norm) {
                return Err(ApiError::new(
                    E::InvalidTopicException,
                    format!("topic '{name}' collides with existing topic '{other}' ('.' and '_' count as the same)"),
                ));
            }
        }
        if validate_only {
            return Ok(Arc::new(Topic {
                name: name.to_string(),
                id: uuid::Uuid::nil(),
                overrides,
                config,
                partitions: Vec::new(),
            }));
        }
        let id = uuid::Uuid::new_v4();
        let mut parts = Vec::with_capacity(partitions as usize);
        for p in 0..partitions {
            let tp = TopicPartition::new(name, p);
            parts.push(Arc::new(Partition::open(
                &self.logs,
                tp,
                id,
                config.clone(),
            )?));
        }
        let topic = Arc::new(Topic {
            name: name.to_string(),
            id,
            overrides,
            config,
            partitions: parts,
        });
        let mut topics = self
            .topics
            .write()
            .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
        topics.insert(name.to_string(), topic.clone());
        self.persist(&topics)?;
        tracing::info!(topic = name, partitions, "created topic");
        Ok(topic)
    }

    /// Deletes a topic and its data.
    pub fn delete_topic(&self, name: &str) -> Result<uuid::Uuid, ApiError> {
        if !self.config.delete_topic_enable {
            return Err(ApiError::new(
                E::TopicDeletionDisabled,
                "delete.topic.enable is false",
            ));
        }
        let guard = self
            .topic_changes
            .lock()
            .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
        let topic = {
            let mut topics = self
                .topics
                .write()
                .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
            let topic = topics.remove(name).ok_or_else(|| {
                ApiError::new(
                    E::UnknownTopicOrPartition,
                    format!("topic '{name}' does not exist"),
                )
            })?;
            self.persist(&topics)?;
            topic
        };
        for p in &topic.partitions {
            self.logs.delete_log(&p.tp)?;
            p.appended.notify_waiters();
        }
        drop(guard); // the coordinator may write to __consumer_offsets
        self.groups.on_topic_deleted(name);
        tracing::info!(topic = name, "deleted topic");
        Ok(topic.id)
    }

    /// Raises a topic's partition count.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let _guard = self
            .topic_changes
            .lock()
            .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
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
        if count > 1_000_000 {
            return Err(ApiError::new(
                E::InvalidPartitions,
                format!("{count} partitions is more than one broker can hold"),
            ));
        }
        if validate_only {
            return Ok(());
        }
        let mut parts = topic.partitions.clone();
        for p in current..count {
            let tp = TopicPartition::new(name, p);
            parts.push(Arc::new(Partition::open(
                &self.logs,
                tp,
                topic.id,
                topic.config.clone(),
            )?));
        }
        self.replace_topic(Topic {
            name: topic.name.clone(),
            id: topic.id,
            overrides: topic.overrides.clone(),
            config: topic.config.clone(),
            partitions: parts,
        })
    }

    /// Replaces a topic's config overrides (the whole set).
    pub fn set_topic_overrides(
        &self,
        name: &str,
        overrides: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let _guard = self
            .topic_changes
            .lock()
            .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
        let topic = self.topic(name).ok_or_else(|| {
            ApiError::new(
                E::UnknownTopicOrPartition,
                format!("topic '{name}' does not exist"),
            )
        })?;
        let config = Arc::new(
            self.config
                .log_defaults
                .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| ApiError::new(E::InvalidConfig, e.to_string()))?,
        );
        if validate_only {
            return Ok(());
        }
        self.logs.update_topic_config(name, config.clone());
        self.replace_topic(Topic {
            name: topic.name.clone(),
            id: topic.id,
            overrides,
            config,
            partitions: topic.partitions.clone(),
        })
    }

    fn replace_topic(&self, topic: Topic) -> Result<(), ApiError> {
        let mut topics = self
            .topics
            .write()
            .map_err(|_| ApiError::new(E::UnknownServerError, "poisoned"))?;
        topics.insert(topic.name.clone(), Arc::new(topic));
        self.persist(&topics)
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
        match self.create_topic(
            OFFSETS_TOPIC,
            self.config.group.offsets_topic_partitions,
            overrides,
            false,
        ) {
            Ok(t) => Ok(t),
            Err(e) if e.code == E::TopicAlreadyExists.code() => self.topic(OFFSETS_TOPIC).ok_or(
                ApiError::new(E::CoordinatorNotAvailable, "offsets topic vanished"),
            ),
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
            *ids = reserve_producer_ids(&self.config.log_dirs[0], ids.block_end)
                .map_err(|e| ApiError::new(E::KafkaStorageError, e))?;
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
