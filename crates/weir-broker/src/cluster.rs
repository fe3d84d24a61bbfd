//! This broker as a member of a cluster whose metadata is in etcd (`etcd.connect`): what
//! joining takes, how each new metadata image becomes this broker's state (the replicas
//! it holds made or removed, each one's role, topic and broker configs, the security
//! documents, the consumer groups it coordinates), and the topic changes clients ask for,
//! written to etcd and waited for until this broker serves them. The session with etcd
//! and the controller are weir-cluster's; nothing here knows the wire format.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use kafka_protocol::ResponseError as E;
use weir_cluster::assign::{self, Candidate};
use weir_cluster::keys::DEFAULT_BROKER_ENTITY;
use weir_cluster::records::{TopicRecord, RECORD_VERSION};
use weir_cluster::session::{ClusterConfig, ControllerConfig, Replaced};
use weir_cluster::{Cluster, Document, Endpoint, MetadataImage, OpError, TopicImage};
use weir_kafka::topic::{uuid_to_base64, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC};
use weir_kafka::{ApiError, TopicPartition};
use weir_log::LogConfig;
use weir_security::state_file::{Saved, Store};

use crate::broker::{check_request_total, Broker, NewTopic};
use crate::config::{BrokerConfig, ClusterSettings};
use crate::dynamic_config::{DynamicConfigs, Scope, Sets};
use crate::partition::{Partition, Role};
use crate::replica_fetcher::ReplicaFetchers;
use crate::replica_set::StateStamp;
use crate::topics::{PartitionView, Topic};

/// How long a topic change waits, at most, for this broker to serve what it changed when
/// the request gives no timeout of its own.
pub const DEFAULT_CHANGE_WAIT: Duration = Duration::from_secs(30);

/// The cluster side of a broker.
pub struct Membership {
    pub session: Cluster,
    /// The revision of the last image applied to the broker's state, and its waiters.
    applied: (Mutex<i64>, Condvar),
    /// The offsets partitions this broker coordinates the groups of: `false` while it
    /// loads them.
    coordinated: RwLock<BTreeMap<i32, bool>>,
    /// The image applied last.
    last: Mutex<Arc<MetadataImage>>,
    /// The fetchers of the replicas this broker follows with.
    pub fetchers: ReplicaFetchers,
}

fn unavailable(e: OpError) -> ApiError {
    match e {
        OpError::Unavailable(m) => ApiError::new(E::RequestTimedOut, m),
        OpError::Conflict(m) => ApiError::new(E::InvalidRequest, m),
        OpError::Failed(m) => ApiError::new(E::UnknownServerError, m),
    }
}

/// A document of the cluster's metadata, as the security state's store.
struct DocumentStore {
    session: Cluster,
    doc: Document,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("cluster_id", &self.session.cluster_id())
            .finish()
    }
}

impl Store for DocumentStore {
    fn save(&self, bytes: Vec<u8>, revision: i64) -> Result<Saved, String> {
        let session = self.session.clone();
        let doc = self.doc;
        let r = crate::apis::off_worker(|| {
            self.session
                .block_on(async move { session.replace_document(doc, bytes, revision).await })
        });
        match r.map_err(|e| e.to_string())? {
            Replaced::Done(rev) => Ok(Saved::Done(rev)),
            Replaced::Conflict(current) => Ok(Saved::Moved(
                current.map(|d| (d.bytes.to_vec(), d.mod_revision)),
            )),
        }
    }
}

impl std::fmt::Debug for DocumentStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the cluster's {} document", self.doc.name())
    }
}

/// Joins the cluster `settings` names, before the broker opens its logs: reaches etcd,
/// checks that the data directories may join (they hold no single broker's topics, and
/// belong to this cluster or to none) and that no other live broker has this id, and
/// makes the log manager expect the cluster's id. Blocking.
pub fn join(config: &mut BrokerConfig, settings: &ClusterSettings) -> Result<Membership, String> {
    let single = crate::topics::load(&config.log_dirs)?;
    if !single.topics.is_empty() {
        return Err(format!(
            "the data directory {} holds the topics of a single Weir broker ({} of them, in \
             {}): a broker joining a cluster starts on an empty data directory, or on one of \
             its own cluster",
            config.log_dirs[0].display(),
            single.topics.len(),
            crate::topics::TOPICS_FILE
        ));
    }
    let stored = weir_log::manager::stored_cluster_id(&config.log_dirs, config.node_id)
        .map_err(|e| e.to_string())?;
    let endpoints = config
        .advertised_listeners
        .iter()
        .map(|l| Endpoint {
            listener: l.name.clone(),
            security_protocol: config
                .security_protocols
                .get(&l.name)
                .cloned()
                .unwrap_or_else(|| "PLAINTEXT".into()),
            host: l.host.clone(),
            port: l.port,
        })
        .collect::<Vec<_>>();
    let session = Cluster::connect(
        ClusterConfig {
            connect: settings.connect.clone(),
            node_id: config.node_id,
            rack: config.rack.clone(),
            endpoints: endpoints.clone(),
            partition_capacity: config.max_broker_partitions,
            session_timeout: Duration::from_millis(settings.session_timeout_ms),
            connection_timeout: Duration::from_millis(settings.connection_timeout_ms),
            controller: ControllerConfig {
                auto_leader_rebalance: settings.auto_leader_rebalance_enable,
                imbalance_check_interval: Duration::from_millis(
                    settings.leader_imbalance_check_interval_ms,
                ),
                imbalance_percentage: settings.leader_imbalance_per_broker_percentage,
                unclean_default: config.log_defaults.unclean_leader_election_enable,
            },
        },
        stored.clone(),
    )?;
    if let Some(have) = &stored {
        if have != session.cluster_id() {
            return Err(format!(
                "the data directory {} belongs to cluster {have}, but the etcd at {} holds \
                 cluster {}: start this broker on an empty data directory, or point \
                 etcd.connect at its own cluster",
                config.log_dirs[0].display(),
                settings.connect,
                session.cluster_id()
            ));
        }
    }
    // Refused before the logs are recovered, which can take long; registering refuses
    // again, atomically.
    let image = session.image();
    if let Some(other) = image.broker(config.node_id) {
        if other.endpoints != endpoints {
            return Err(format!(
                "node.id {} is taken: a live broker registered with it (listeners {}); give \
                 this broker another node.id, or stop the other one",
                config.node_id,
                other
                    .endpoints
                    .iter()
                    .map(|e| format!("{}://{}:{}", e.listener, e.host, e.port))
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
    }
    adopt_local_documents(config, &session);
    config.log_manager.cluster_id = Some(session.cluster_id().to_string());
    tracing::info!(
        cluster_id = session.cluster_id(),
        brokers = image.brokers.len(),
        topics = image.topics.len(),
        "joining the cluster in etcd at {}",
        settings.connect
    );
    Ok(Membership {
        session,
        applied: (Mutex::new(0), Condvar::new()),
        coordinated: RwLock::new(BTreeMap::new()),
        last: Mutex::new(Arc::new(MetadataImage::default())),
        fetchers: ReplicaFetchers::new(config.node_id, settings.replication.clone()),
    })
}

/// The SCRAM users, ACLs and quotas of a joining broker's data directory (`weir users
/// add` and `weir acls add --data-dir` write them there, for the first administrator)
/// become the cluster's where the cluster has none yet; where it has its own, the local
/// file is left unused, and the log says so.
fn adopt_local_documents(config: &BrokerConfig, session: &Cluster) {
    let files = [
        (Document::Users, weir_security::sasl::USERS_FILE),
        (Document::Acls, weir_security::acl::ACLS_FILE),
        (Document::Quotas, weir_security::quota::QUOTAS_FILE),
    ];
    for (doc, file) in files {
        let path = config.log_dirs[0].join(file);
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let s = session.clone();
        let adopted = session.block_on(async move { s.replace_document(doc, bytes, 0).await });
        match adopted {
            Ok(Replaced::Done(_)) => tracing::info!(
                "{} became the cluster's {}: the cluster had none",
                path.display(),
                doc.name()
            ),
            Ok(Replaced::Conflict(_)) => tracing::warn!(
                "{} is not used: the cluster keeps its {} in etcd (change them with Kafka's \
                 admin APIs, or weir's --bootstrap commands)",
                path.display(),
                doc.name()
            ),
            Err(e) => tracing::warn!("{}: not adopted into the cluster: {e}", path.display()),
        }
    }
    if config.log_dirs[0]
        .join(crate::dynamic_config::FILE)
        .exists()
    {
        tracing::warn!(
            "{} is not used: a cluster keeps its dynamic broker configs in etcd",
            config.log_dirs[0]
                .join(crate::dynamic_config::FILE)
                .display()
        );
    }
}

impl Membership {
    pub fn image(&self) -> Arc<MetadataImage> {
        self.session.image()
    }

    /// The dynamic broker configs as the cluster holds them, saved back there.
    pub fn dynamic_configs(
        &self,
        static_props: &BTreeMap<String, String>,
        tls: &crate::dynamic_config::Tls,
    ) -> Result<DynamicConfigs, String> {
        let session = self.session.clone();
        let node = self.session.node_id().to_string();
        DynamicConfigs::in_cluster(
            static_props,
            broker_sets(&self.image(), &node),
            tls,
            Box::new(move |scope, set| {
                let entity = match scope {
                    Scope::Broker => node.clone(),
                    Scope::ClusterDefault => DEFAULT_BROKER_ENTITY.to_string(),
                };
                let s = session.clone();
                let set = set.clone();
                crate::apis::off_worker(|| {
                    session.block_on(async move { s.set_broker_config(&entity, set).await })
                })
                .map(|_| ())
                .map_err(unavailable)
            }),
        )
    }

    /// The store of a security document.
    pub fn store(&self, doc: Document) -> Box<dyn Store> {
        Box::new(DocumentStore {
            session: self.session.clone(),
            doc,
        })
    }

    /// A document as the cluster holds it now.
    pub fn document(&self, doc: Document) -> Option<(Vec<u8>, i64)> {
        self.image()
            .documents
            .get(&doc)
            .map(|d| (d.bytes.to_vec(), d.mod_revision))
    }

    /// The topic configs the image holds, resolved over `defaults` (for opening the logs).
    pub fn topic_configs(&self, defaults: &Arc<LogConfig>) -> HashMap<String, Arc<LogConfig>> {
        let image = self.image();
        image
            .topics
            .keys()
            .map(|name| (name.clone(), resolve_config(&image, name, defaults)))
            .collect()
    }

    /// Whether this broker coordinates the groups of offsets partition `p`: `Ok`, or the
    /// error a group request gets.
    pub fn coordinates(&self, partition: i32) -> Result<(), i16> {
        match self
            .coordinated
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&partition)
        {
            Some(true) => Ok(()),
            Some(false) => Err(E::CoordinatorLoadInProgress.code()),
            None => Err(E::NotCoordinator.code()),
        }
    }

    /// Waits (blocking) until `done` holds of the broker's state, rechecking each time an
    /// image is applied, or `timeout` passes; whether it held.
    pub fn wait_until(&self, timeout: Duration, done: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &self.applied;
        let mut applied = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if done() {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            applied = cv
                .wait_timeout(applied, left.min(Duration::from_millis(200)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Runs an operation of the session from sync code, off the runtime's workers.
    fn call<T: Send + 'static>(
        &self,
        f: impl std::future::Future<Output = Result<T, OpError>> + Send + 'static,
    ) -> Result<T, OpError> {
        crate::apis::off_worker(|| self.session.block_on(f))
    }
}

/// The dynamic broker config sets of broker `node` in `image`.
fn broker_sets(image: &MetadataImage, node: &str) -> Sets {
    let get = |entity: &str| {
        image
            .broker_configs
            .get(entity)
            .map(|c| c.value.clone())
            .unwrap_or_default()
    };
    Sets {
        broker: get(node),
        cluster_default: get(DEFAULT_BROKER_ENTITY),
    }
}

/// A topic's overrides in the image, less the keys Kafka 4 removed, as Kafka 4 ignores them
/// (an older Weir may have written them; the next AlterConfigs of the topic leaves them out).
/// Silently: this runs at every metadata change.
fn topic_overrides(image: &MetadataImage, name: &str) -> BTreeMap<String, String> {
    let mut overrides = image.topic_config(name);
    overrides.retain(|key, _| !LogConfig::is_removed_topic_key(key));
    overrides
}

/// A topic's config: its overrides in the image over `defaults`. Overrides that do not
/// resolve (written by a newer Weir, say) are logged and the defaults used.
fn resolve_config(image: &MetadataImage, name: &str, defaults: &Arc<LogConfig>) -> Arc<LogConfig> {
    let overrides = topic_overrides(image, name);
    match defaults.with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            tracing::error!(
                "topic {name}: its config in etcd does not apply ({e}); using the defaults"
            );
            defaults.clone()
        }
    }
}

/// At start-up, before the broker registers: removes the logs the metadata gives this
/// broker no replica of (topics deleted while it was down, or created again with another
/// id), applies the image, and loads the groups of the offsets partitions it leads. Then
/// registers, and applies every new image as it comes.
pub fn start(broker: &Arc<Broker>) -> Result<(), String> {
    let Some(m) = &broker.cluster else {
        return Ok(());
    };
    let image = m.image();
    let me = broker.config.node_id;
    for (tp, log) in broker.logs.logs() {
        let id = log.lock().ok().and_then(|l| l.topic_id());
        let kept = image
            .topic(&tp.topic)
            .is_some_and(|t| Some(t.id) == id && t.replicas(tp.partition).contains(&me));
        if !kept {
            tracing::info!(
                "removing {tp}: the cluster's metadata holds no replica of it on this broker \
                 (its topic was deleted, or created again, while this broker was away)"
            );
            broker.logs.delete_log(&tp).map_err(|e| e.to_string())?;
        }
    }
    m.fetchers
        .start(tokio::runtime::Handle::current(), Arc::downgrade(broker));
    apply(broker, image);
    tokio::spawn(shrink_isrs(Arc::downgrade(broker)));
    m.session.start()?;
    let weak = Arc::downgrade(broker);
    let session = m.session.clone();
    m.session.spawn(follow(weak, session));
    Ok(())
}

/// Applies every new image until the broker is gone or stops.
async fn follow(broker: Weak<Broker>, session: Cluster) {
    let mut images = session.subscribe();
    let mut shutdown = match broker.upgrade() {
        Some(b) => b.shutdown.subscribe(),
        None => return,
    };
    loop {
        tokio::select! {
            changed = images.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
        let image = images.borrow_and_update().clone();
        let Some(b) = broker.upgrade() else { return };
        // Making and removing logs blocks: off the session's own worker.
        let applied = tokio::task::spawn_blocking(move || apply(&b, image)).await;
        if let Err(e) = applied {
            tracing::error!("applying the cluster's metadata: {e}");
        }
    }
}

/// Makes the broker's state what `image` says.
fn apply(broker: &Arc<Broker>, image: Arc<MetadataImage>) {
    let Some(m) = &broker.cluster else { return };
    let previous = std::mem::replace(
        &mut *m.last.lock().unwrap_or_else(|e| e.into_inner()),
        image.clone(),
    );
    let defaults_changed = apply_broker_configs(broker, m, &image);
    apply_documents(broker, &previous, &image);
    apply_topics(broker, &previous, &image, defaults_changed);
    apply_coordination(broker, m);
    let (lock, cv) = &m.applied;
    *lock.lock().unwrap_or_else(|e| e.into_inner()) = image.revision;
    cv.notify_all();
}

/// Takes the dynamic broker configs of the image; whether the log defaults changed (then
/// every topic's config is resolved again).
fn apply_broker_configs(broker: &Broker, m: &Membership, image: &MetadataImage) -> bool {
    let sets = broker_sets(image, &m.session.node_id().to_string());
    match broker.dynamic.install(sets) {
        Ok(Some(_)) => {
            tracing::info!("dynamic broker configs changed in the cluster's metadata");
            true
        }
        Ok(None) => false,
        Err(e) => {
            tracing::error!(
                "dynamic broker configs in etcd do not apply ({}); keeping the ones before",
                e.message
            );
            false
        }
    }
}

fn apply_documents(broker: &Broker, previous: &MetadataImage, image: &MetadataImage) {
    for doc in Document::ALL {
        let now = image.documents.get(&doc);
        let before = previous.documents.get(&doc);
        if now.map(|d| d.mod_revision) == before.map(|d| d.mod_revision) {
            continue;
        }
        let bytes = now.map(|d| &d.bytes[..]);
        let revision = now.map_or(image.revision, |d| d.mod_revision);
        let installed = match doc {
            Document::Users => broker.users.install(bytes, revision),
            Document::Quotas => broker.quotas.install(bytes, revision),
            Document::GroupConfigs => {
                broker
                    .group_configs
                    .install(bytes, revision)
                    .inspect(|changed| {
                        if *changed {
                            broker.apply_group_configs();
                        }
                    })
            }
            Document::Acls => match &broker.authorizer {
                Some(a) => a.install(bytes, revision),
                None => Ok(false),
            },
        };
        match installed {
            Ok(true) => tracing::info!("the cluster's {} changed", doc.name()),
            Ok(false) => {}
            Err(e) => tracing::error!(
                "the cluster's {} document does not read ({e}); keeping the one before",
                doc.name()
            ),
        }
    }
}

/// Every topic of the image as this broker serves it; topics gone from it removed with
/// their replicas here.
fn apply_topics(
    broker: &Arc<Broker>,
    previous: &MetadataImage,
    image: &MetadataImage,
    defaults_changed: bool,
) {
    let me = broker.config.node_id;
    let defaults = broker.log_defaults();
    let current = broker.all_topics();
    let by_name: HashMap<&str, &Arc<Topic>> =
        current.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut next: Vec<Arc<Topic>> = Vec::new();
    let mut removed: Vec<Arc<Topic>> = Vec::new();
    for (name, ti) in &image.topics {
        let have = by_name
            .get(name.as_str())
            .copied()
            .filter(|t| t.id == ti.id);
        if let Some(t) = by_name.get(name.as_str()).filter(|t| t.id != ti.id) {
            removed.push((*t).clone());
        }
        let unchanged = have.is_some()
            && previous.topic(name).is_some_and(|p| Arc::ptr_eq(p, ti))
            && previous.topic_configs.get(name).map(|c| c.mod_revision)
                == image.topic_configs.get(name).map(|c| c.mod_revision)
            && !defaults_changed
            && liveness_unchanged(previous, image, ti);
        if unchanged {
            continue;
        }
        next.push(Arc::new(topic_view(broker, me, image, ti, have, &defaults)));
    }
    for t in &current {
        if !image.topics.contains_key(&t.name) {
            removed.push(t.clone());
        }
    }
    broker.replace_topics(next, &removed);
    for t in removed {
        for r in t.replicas() {
            if let Some(m) = &broker.cluster {
                m.fetchers.unfollow(&r.tp);
            }
            if let Err(e) = broker.logs.delete_log(&r.tp) {
                tracing::error!("removing {} of a deleted topic: {e}", r.tp);
            }
            r.appended.notify_waiters();
        }
        broker.groups.on_topic_deleted(&t.name);
        tracing::info!(topic = %t.name, "topic deleted from the cluster");
    }
}

/// Whether every broker a topic's partitions name is as live as before (a leader that
/// died changes what Metadata says even before the controller acts).
fn liveness_unchanged(previous: &MetadataImage, image: &MetadataImage, t: &TopicImage) -> bool {
    t.assignment
        .iter()
        .flatten()
        .chain(t.states.values().map(|s| &s.value.state.leader))
        .all(|b| previous.is_live(*b) == image.is_live(*b))
}

/// One topic of the image as this broker serves it: every partition's view, with this
/// broker's replica made where the metadata gives it one, and its role set.
fn topic_view(
    broker: &Broker,
    me: i32,
    image: &MetadataImage,
    ti: &TopicImage,
    have: Option<&Arc<Topic>>,
    defaults: &Arc<LogConfig>,
) -> Topic {
    let mut config = resolve_config(image, &ti.name, defaults);
    let overrides = topic_overrides(image, &ti.name);
    match have {
        Some(h) if *h.config == *config => config = h.config.clone(),
        Some(_) => broker.logs.update_topic_config(&ti.name, config.clone()),
        None => {}
    }
    let mut partitions = Vec::with_capacity(ti.partition_count());
    for (p, replicas) in ti.assignment.iter().enumerate() {
        let p = p as i32;
        let leadership = ti.state(p).cloned();
        let stamp = ti.states.get(&p).map(|s| StateStamp {
            leadership: s.value.state.clone(),
            mod_revision: s.mod_revision,
            topic_create_revision: ti.create_revision,
            controller_epoch: s.value.controller_epoch,
        });
        let role = Role {
            leader: leadership.as_ref().is_some_and(|l| l.leader == me),
            leader_epoch: leadership.as_ref().map_or(-1, |l| l.leader_epoch),
        };
        let existing = have
            .and_then(|h| h.partition(p))
            .and_then(|v| v.replica.clone());
        let replica = if replicas.contains(&me) {
            let mut became_leader = false;
            // Whether its replicas were given before its new role.
            let mut prepared = false;
            let replica = match existing {
                Some(r) => {
                    let current = r.role();
                    if role != current && role.leader_epoch >= current.leader_epoch {
                        became_leader = role.leader;
                        // Its replicas and ISR first: a leader answers acks=all with them
                        // from its first request on.
                        r.update_replicas(replicas, stamp.clone(), became_leader);
                        prepared = true;
                        if let Err(e) = r.set_role(role) {
                            tracing::error!("{}: taking on its new role: {e}", r.tp);
                        } else if role.leader != current.leader {
                            tracing::info!(
                                partition = %r.tp,
                                leader_epoch = role.leader_epoch,
                                "{}",
                                if role.leader { "leading" } else { "no longer leading" }
                            );
                        }
                    }
                    Some(r)
                }
                None => {
                    let tp = TopicPartition::new(ti.name.clone(), p);
                    became_leader = role.leader;
                    match Partition::open_replica(
                        &broker.logs,
                        tp.clone(),
                        ti.id,
                        config.clone(),
                        role,
                        Some((me, replicas)),
                    ) {
                        Ok(r) => Some(Arc::new(r)),
                        Err(e) => {
                            tracing::error!(
                                "making this broker's replica of {tp}: {e}; it stays \
                                 unavailable here"
                            );
                            None
                        }
                    }
                }
            };
            if let Some(r) = &replica {
                // Only a role this broker holds now: a stale image (an older epoch) leaves
                // the replica as it was. (A leader that just took on its role has its
                // replicas already; the high watermark they allow moves now.)
                let now = r.role();
                if now == role {
                    r.update_replicas(replicas, stamp, became_leader && !prepared);
                }
                if let Some(m) = &broker.cluster {
                    match leadership.as_ref() {
                        Some(l) if !now.leader && l.leader >= 0 && l.leader != me => {
                            m.fetchers.follow(r.clone(), l.leader, now.leader_epoch)
                        }
                        _ => m.fetchers.unfollow(&r.tp),
                    }
                }
            }
            replica
        } else {
            if let Some(r) = existing {
                if let Some(m) = &broker.cluster {
                    m.fetchers.unfollow(&r.tp);
                }
                // Moved elsewhere: this broker's copy goes.
                if let Err(e) = broker.logs.delete_log(&r.tp) {
                    tracing::error!("removing {}, no longer a replica here: {e}", r.tp);
                }
                r.appended.notify_waiters();
            }
            None
        };
        partitions.push(PartitionView {
            replicas: replicas.clone(),
            leadership,
            replica,
        });
    }
    Topic {
        name: ti.name.clone(),
        id: ti.id,
        overrides,
        config,
        partitions,
    }
}

/// A leader's change of its partition's ISR (`isr`: a follower caught up, or some fell
/// behind), written to etcd over the state the leader last saw. One change at a time per
/// partition; if the state moved meanwhile (the controller elected, or another change
/// landed) the write fails and the leader decides again from the state it then sees.
pub fn propose_isr(broker: &Broker, p: &Arc<Partition>, isr: Vec<i32>) {
    let Some(m) = &broker.cluster else { return };
    let Some(stamp) = p.begin_isr_change(&isr) else {
        return;
    };
    if stamp.leadership.leader != broker.config.node_id || stamp.leadership.isr == isr {
        p.end_isr_change();
        return;
    }
    let session = m.session.clone();
    let p = p.clone();
    let mut state = stamp.leadership.clone();
    let before = std::mem::replace(&mut state.isr, isr);
    state.partition_epoch += 1;
    m.session.spawn(async move {
        let written = session
            .alter_partition(
                &p.tp.topic,
                p.tp.partition,
                stamp.topic_create_revision,
                stamp.mod_revision,
                stamp.controller_epoch,
                state.clone(),
            )
            .await;
        match written {
            Ok(_) => tracing::info!(
                partition = %p.tp,
                leader_epoch = state.leader_epoch,
                "ISR {before:?} -> {:?}",
                state.isr
            ),
            Err(e) => {
                tracing::debug!(partition = %p.tp, "ISR change not made: {e}");
                p.end_isr_change();
            }
        }
    });
}

/// Every half of `replica.lag.time.max.ms`, the followers that have not caught up for
/// that long leave the ISR of each partition this broker leads (Kafka's
/// `maybeShrinkIsr`).
async fn shrink_isrs(broker: Weak<Broker>) {
    let (lag, mut shutdown) = match broker.upgrade() {
        Some(b) => match &b.cluster {
            Some(m) => (
                m.fetchers.settings().lag_time_max_ms,
                b.shutdown.subscribe(),
            ),
            None => return,
        },
        None => return,
    };
    let every = Duration::from_millis((lag as u64 / 2).max(1));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
        let Some(b) = broker.upgrade() else { return };
        for t in b.all_topics() {
            for r in t.replicas() {
                if let Some(isr) = r.lagging(lag) {
                    propose_isr(&b, r, isr);
                }
            }
        }
    }
}

/// Loads the groups of the offsets partitions this broker now leads, and unloads those of
/// the ones it no longer does; the same for the transactions of `__transaction_state`.
fn apply_coordination(broker: &Arc<Broker>, m: &Membership) {
    apply_txn_coordination(broker);
    apply_group_coordination(broker, m);
}

/// The transaction coordinator follows the leadership of `__transaction_state`: a
/// partition led at a new leader epoch (the coordinator epoch) is loaded again.
fn apply_txn_coordination(broker: &Arc<Broker>) {
    let leading: HashMap<i32, (i32, Arc<Partition>)> = broker
        .topic(TRANSACTION_STATE_TOPIC)
        .map(|t| {
            t.partitions
                .iter()
                .enumerate()
                .filter_map(|(p, v)| {
                    let r = v.replica.as_ref().filter(|r| r.is_leader())?;
                    Some((p as i32, (r.role().leader_epoch, r.clone())))
                })
                .collect()
        })
        .unwrap_or_default();
    let owned: HashMap<i32, i32> = broker.txns.owned_partitions().into_iter().collect();
    for (p, epoch) in &owned {
        if leading.get(p).is_none_or(|(e, _)| e != epoch) {
            broker.txns.unload_partition(*p);
            tracing::info!(
                partition = p,
                "no longer coordinating the transactions of {TRANSACTION_STATE_TOPIC}-{p}"
            );
        }
    }
    for (p, (epoch, replica)) in leading {
        if owned.get(&p) == Some(&epoch) {
            continue;
        }
        if let Err(e) = broker.load_txn_partition(p, &replica) {
            tracing::error!("loading {TRANSACTION_STATE_TOPIC}-{p}: {e}");
        }
    }
}

fn apply_group_coordination(broker: &Arc<Broker>, m: &Membership) {
    let leading: HashSet<i32> = broker
        .topic(OFFSETS_TOPIC)
        .map(|t| {
            t.partitions
                .iter()
                .enumerate()
                .filter(|(_, v)| v.replica.as_ref().is_some_and(|r| r.is_leader()))
                .map(|(p, _)| p as i32)
                .collect()
        })
        .unwrap_or_default();
    let held: Vec<i32> = m
        .coordinated
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .keys()
        .copied()
        .collect();
    for p in held.iter().filter(|p| !leading.contains(p)) {
        m.coordinated
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(p);
        broker.groups.unload_partition(*p);
    }
    for p in leading {
        if held.contains(&p) {
            continue;
        }
        m.coordinated
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p, false);
        let Some(replica) = broker.partition(OFFSETS_TOPIC, p) else {
            continue;
        };
        match broker.load_offsets_partition(&replica) {
            Ok(n) => {
                tracing::info!(
                    partition = p,
                    records = n,
                    "coordinating the groups of {OFFSETS_TOPIC}-{p}"
                );
                m.coordinated
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(p, true);
            }
            Err(e) => {
                tracing::error!("loading the groups of {OFFSETS_TOPIC}-{p}: {e}");
                m.coordinated
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&p);
            }
        }
    }
}

/// The brokers a new topic's replicas may go to: every live one that is not shutting
/// down, with its rack.
fn candidates(image: &MetadataImage) -> Vec<Candidate> {
    image
        .brokers
        .values()
        .filter(|b| !b.value.shutting_down)
        .map(|b| Candidate {
            id: b.value.id,
            rack: b.value.rack.clone(),
        })
        .collect()
}

/// Refuses an assignment that gives a broker more replicas than it can hold.
fn check_capacities(
    image: &MetadataImage,
    held: &mut BTreeMap<i32, usize>,
    assignment: &[Vec<i32>],
    what: &str,
) -> Result<(), ApiError> {
    for r in assignment.iter().flatten() {
        *held.entry(*r).or_insert(0) += 1;
    }
    for (b, n) in held.iter() {
        let Some(reg) = image.broker(*b) else {
            continue;
        };
        if *n > reg.partition_capacity {
            return Err(ApiError::new(
                E::PolicyViolation,
                format!(
                    "{what}: broker {b} would hold {n} partitions, more than the {} it can \
                     (max.broker.partitions, and its file descriptors and memory mappings)",
                    reg.partition_capacity
                ),
            ));
        }
    }
    Ok(())
}

/// The replicas of a new topic's partitions: as the request assigned them (checked), or
/// spread by Kafka's assignment.
fn assignment_for(image: &MetadataImage, ask: &NewTopic) -> Result<Vec<Vec<i32>>, ApiError> {
    if let Some(given) = &ask.assignment {
        for (p, replicas) in given.iter().enumerate() {
            let distinct: HashSet<i32> = replicas.iter().copied().collect();
            if replicas.is_empty() || distinct.len() != replicas.len() {
                return Err(ApiError::new(
                    E::InvalidReplicaAssignment,
                    format!("partition {p}: its replicas must be distinct brokers, at least one"),
                ));
            }
            if let Some(unknown) = replicas.iter().find(|b| !image.is_live(**b)) {
                return Err(ApiError::new(
                    E::InvalidReplicaAssignment,
                    format!(
                        "Unknown broker(s) in replica assignment: {unknown} is not a live broker"
                    ),
                ));
            }
        }
        return Ok(given.clone());
    }
    let rf = ask.replication_factor;
    let brokers = candidates(image);
    assign::assign(
        &brokers,
        ask.partitions as usize,
        rf,
        0,
        assign::Start::random(brokers.len()),
    )
    .map_err(|e| ApiError::new(E::InvalidReplicationFactor, e.to_string()))
}

/// Whether every partition of `name` is served by a live leader, as this broker sees it.
fn led(broker: &Broker, name: &str, id: uuid::Uuid, partitions: usize) -> bool {
    broker.topic(name).is_some_and(|t| {
        t.id == id
            && t.partitions.len() == partitions
            && t.partitions
                .iter()
                .all(|v| v.leader().is_some_and(|l| broker.is_live(l)))
    })
}

/// CreateTopics in a cluster: each topic checked, assigned, and written to etcd; then
/// waited for (up to `wait`) until this broker serves every partition's leader. A topic
/// not served within the wait is still created, and answered as created.
pub fn create_topics(
    broker: &Broker,
    m: &Membership,
    asks: Vec<NewTopic>,
    validate_only: bool,
    wait: Duration,
    gate: &mut dyn FnMut(&str, usize) -> Result<(), ApiError>,
) -> Vec<Result<Arc<Topic>, ApiError>> {
    if let Err(e) = check_request_total(asks.iter().map(|a| a.partitions)) {
        return asks.iter().map(|_| Err(e.clone())).collect();
    }
    let image = m.image();
    let normalized: HashMap<String, &str> = image
        .topics
        .keys()
        .map(|n| (n.replace('.', "_"), n.as_str()))
        .collect();
    let mut held = image.replicas_per_broker();
    let mut in_request: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(asks.len());
    let mut written: Vec<(usize, String, uuid::Uuid, usize)> = Vec::new();
    for ask in asks {
        let r = (|| {
            let config = broker.check_new_topic(&ask)?;
            if image.topic(&ask.name).is_some() {
                return Err(ApiError::new(
                    E::TopicAlreadyExists,
                    format!("topic '{}' already exists", ask.name),
                ));
            }
            let norm = ask.name.replace('.', "_");
            if let Some(other) = normalized.get(&norm) {
                return Err(ApiError::new(
                    E::InvalidTopicException,
                    format!(
                        "topic '{}' collides with existing topic '{other}' ('.' and '_' count \
                         as the same)",
                        ask.name
                    ),
                ));
            }
            if !in_request.insert(norm) {
                return Err(ApiError::new(
                    E::InvalidTopicException,
                    format!(
                        "topic '{}' collides with another topic of the request ('.' and '_' \
                         count as the same)",
                        ask.name
                    ),
                ));
            }
            let assignment = assignment_for(&image, &ask)?;
            check_capacities(
                &image,
                &mut held,
                &assignment,
                &format!("creating topic '{}'", ask.name),
            )?;
            let id = uuid::Uuid::new_v4();
            let provisional = Arc::new(Topic {
                name: ask.name.clone(),
                id,
                overrides: ask.overrides.clone(),
                config,
                partitions: assignment
                    .iter()
                    .map(|r| PartitionView {
                        replicas: r.clone(),
                        leadership: None,
                        replica: None,
                    })
                    .collect(),
            });
            if validate_only {
                return Ok(provisional);
            }
            gate(&ask.name, ask.partitions as usize)?;
            let record = TopicRecord {
                version: RECORD_VERSION,
                topic_id: uuid_to_base64(id),
                partitions: assignment,
                reassigning: Default::default(),
            };
            let session = m.session.clone();
            let (name, overrides) = (ask.name.clone(), ask.overrides.clone());
            m.call(async move { session.create_topic(&name, record, overrides).await })
                .map_err(|e| match e {
                    OpError::Conflict(msg) => ApiError::new(E::TopicAlreadyExists, msg),
                    e => unavailable(e),
                })?;
            tracing::info!(topic = %ask.name, partitions = ask.partitions, "created topic in the cluster");
            Ok(provisional)
        })();
        if let Ok(t) = &r {
            if !validate_only {
                written.push((out.len(), t.name.clone(), t.id, t.partitions.len()));
            }
        }
        out.push(r);
    }
    if !written.is_empty() && !wait.is_zero() {
        m.wait_until(wait, || {
            written
                .iter()
                .all(|(_, name, id, n)| led(broker, name, *id, *n))
        });
        for (i, name, id, _) in written {
            if let Some(t) = broker.topic(&name).filter(|t| t.id == id) {
                out[i] = Ok(t);
            }
        }
    }
    out
}

/// DeleteTopics in a cluster: removed from etcd, then waited for (up to `wait`) until this
/// broker no longer serves it. Every broker removes its replicas as it sees the change; one
/// that is down does when it comes back.
pub fn delete_topic(
    broker: &Broker,
    m: &Membership,
    name: &str,
    wait: Duration,
    gate: &mut dyn FnMut(&str, usize) -> Result<(), ApiError>,
) -> Result<uuid::Uuid, ApiError> {
    let image = m.image();
    let t = image.topic(name).ok_or_else(|| {
        ApiError::new(
            E::UnknownTopicOrPartition,
            format!("topic '{name}' does not exist"),
        )
    })?;
    gate(name, t.partition_count())?;
    let (session, n, created, id) = (m.session.clone(), name.to_string(), t.create_revision, t.id);
    m.call(async move { session.delete_topic(&n, created).await })
        .map_err(|e| match e {
            OpError::Conflict(msg) => ApiError::new(E::UnknownTopicOrPartition, msg),
            e => unavailable(e),
        })?;
    m.wait_until(wait, || broker.topic(name).is_none_or(|t| t.id != id));
    tracing::info!(topic = name, "deleted topic from the cluster");
    Ok(id)
}

/// CreatePartitions in a cluster: the new partitions continue the topic's assignment.
pub fn create_partitions(
    broker: &Broker,
    m: &Membership,
    name: &str,
    count: i32,
    validate_only: bool,
    wait: Duration,
    gate: &mut dyn FnMut(&str, usize) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let image = m.image();
    let t = image.topic(name).ok_or_else(|| {
        ApiError::new(
            E::UnknownTopicOrPartition,
            format!("topic '{name}' does not exist"),
        )
    })?;
    let current = t.partition_count() as i32;
    if count <= current {
        return Err(ApiError::new(
            E::InvalidPartitions,
            format!(
                "topic '{name}' has {current} partitions; the new count must be larger, got \
                 {count}"
            ),
        ));
    }
    check_request_total([count - current])?;
    let max = broker.config.max_topic_partitions;
    if count as usize > max {
        return Err(ApiError::new(
            E::PolicyViolation,
            format!(
                "topic '{name}' would have {count} partitions; max.topic.partitions allows {max}"
            ),
        ));
    }
    let rf = t.assignment.first().map_or(1, Vec::len);
    let brokers = candidates(&image);
    let added = assign::assign(
        &brokers,
        (count - current) as usize,
        rf,
        current as usize,
        assign::start_of(&brokers, &t.assignment),
    )
    .map_err(|e| ApiError::new(E::InvalidReplicationFactor, e.to_string()))?;
    let mut held = image.replicas_per_broker();
    check_capacities(
        &image,
        &mut held,
        &added,
        &format!("growing topic '{name}' to {count}"),
    )?;
    if validate_only {
        return Ok(());
    }
    gate(name, (count - current) as usize)?;
    let mut assignment = t.assignment.clone();
    assignment.extend(added);
    let record = TopicRecord {
        version: RECORD_VERSION,
        topic_id: uuid_to_base64(t.id),
        partitions: assignment,
        reassigning: t.reassigning.clone(),
    };
    let (session, n, rev, id) = (m.session.clone(), name.to_string(), t.mod_revision, t.id);
    m.call(async move { session.set_topic(&n, rev, record).await })
        .map_err(|e| match e {
            OpError::Conflict(msg) => ApiError::new(E::InvalidRequest, msg),
            e => unavailable(e),
        })?;
    m.wait_until(wait, || led(broker, name, id, count as usize));
    tracing::info!(
        topic = name,
        from = current,
        to = count,
        "added partitions in the cluster"
    );
    Ok(())
}

/// One partition's move asked for: its target replicas, or `None` to cancel the move under
/// way.
pub type MoveAsk = (i32, Option<Vec<i32>>);

/// Whether one partition's move was started (or cancelled), by partition.
pub type MoveAnswer = (i32, Result<(), ApiError>);

/// A move under way: its topic and partition, and its replicas in all, adding, removing.
pub struct Moving {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// AlterPartitionReassignments for one topic in a cluster (KIP-455): each partition's
/// target checked, then the topic's record written at once with every move started (its
/// replicas the target and then those it leaves) or cancelled (its original replicas
/// back). The leader adds the new replicas to the ISR as they catch up; the controller
/// moves leadership into the target and writes the move as done. An error for the whole
/// topic, or one per partition.
pub fn reassign(
    m: &Membership,
    topic: &str,
    asks: &[MoveAsk],
    allow_replication_factor_change: bool,
) -> Result<Vec<MoveAnswer>, ApiError> {
    let image = m.image();
    let t = image.topic(topic).ok_or_else(|| {
        ApiError::new(
            E::UnknownTopicOrPartition,
            format!("topic '{topic}' does not exist"),
        )
    })?;
    let mut assignment = t.assignment.clone();
    let mut reassigning = t.reassigning.clone();
    let mut out = Vec::with_capacity(asks.len());
    let mut changed = false;
    for (p, target) in asks {
        let Some(current) = usize::try_from(*p).ok().and_then(|i| t.assignment.get(i)) else {
            out.push((
                *p,
                Err(ApiError::new(
                    E::UnknownTopicOrPartition,
                    format!("topic '{topic}' has no partition {p}"),
                )),
            ));
            continue;
        };
        let checked = match target {
            None => match reassigning.remove(p) {
                Some(moving) => {
                    assignment[*p as usize] = moving.original;
                    Ok(())
                }
                None => Err(ApiError::new(
                    E::NoReassignmentInProgress,
                    format!("{topic}-{p} is not being moved"),
                )),
            },
            Some(target) => {
                let original = reassigning
                    .get(p)
                    .map_or_else(|| current.clone(), |m| m.original.clone());
                let distinct: HashSet<i32> = target.iter().copied().collect();
                if target.is_empty() || distinct.len() != target.len() {
                    Err(ApiError::new(
                        E::InvalidReplicaAssignment,
                        format!("{topic}-{p}: the replicas must be distinct brokers, at least one"),
                    ))
                } else if let Some(b) = target.iter().find(|b| image.broker(**b).is_none()) {
                    Err(ApiError::new(
                        E::InvalidReplicaAssignment,
                        format!("{topic}-{p}: broker {b} is not a live broker of the cluster"),
                    ))
                } else if !allow_replication_factor_change && target.len() != original.len() {
                    Err(ApiError::new(
                        E::InvalidReplicationFactor,
                        format!(
                            "{topic}-{p}: {} replicas instead of {} changes its replication \
                             factor, which this request does not allow",
                            target.len(),
                            original.len()
                        ),
                    ))
                } else if *target == original {
                    // Back where it was: no move (an ongoing one is cancelled).
                    reassigning.remove(p);
                    assignment[*p as usize] = original;
                    Ok(())
                } else {
                    let moving = weir_cluster::records::Reassigning {
                        target: target.clone(),
                        original,
                    };
                    assignment[*p as usize] = moving.full_set();
                    reassigning.insert(*p, moving);
                    Ok(())
                }
            }
        };
        changed |= checked.is_ok();
        out.push((*p, checked));
    }
    if changed {
        let mut held = image.replicas_per_broker();
        for (p, a) in t.assignment.iter().enumerate() {
            if assignment[p] != *a {
                for r in a {
                    if let Some(n) = held.get_mut(r) {
                        *n = n.saturating_sub(1);
                    }
                }
            }
        }
        let grown: Vec<Vec<i32>> = assignment
            .iter()
            .zip(&t.assignment)
            .filter(|(new, old)| new != old)
            .map(|(new, _)| new.clone())
            .collect();
        check_capacities(
            &image,
            &mut held,
            &grown,
            &format!("moving partitions of '{topic}'"),
        )?;
        let record = TopicRecord {
            version: RECORD_VERSION,
            topic_id: uuid_to_base64(t.id),
            partitions: assignment,
            reassigning,
        };
        let (session, n, rev) = (m.session.clone(), topic.to_string(), t.mod_revision);
        m.call(async move { session.set_topic(&n, rev, record).await })
            .map_err(|e| match e {
                OpError::Conflict(msg) => ApiError::new(E::ReassignmentInProgress, msg),
                e => unavailable(e),
            })?;
        tracing::info!(topic, "partition moves started or cancelled");
    }
    Ok(out)
}

/// The moves under way, of `only` the topics and partitions named, or of every one.
pub fn reassignments(m: &Membership, only: Option<&[(String, Vec<i32>)]>) -> Vec<Moving> {
    let image = m.image();
    let mut out = Vec::new();
    for t in image.topics.values() {
        for (p, moving) in &t.reassigning {
            let wanted =
                only.is_none_or(|o| o.iter().any(|(name, ps)| *name == t.name && ps.contains(p)));
            if wanted {
                out.push(Moving {
                    topic: t.name.clone(),
                    partition: *p,
                    replicas: t.replicas(*p).to_vec(),
                    adding: moving.adding(),
                    removing: moving.removing(),
                });
            }
        }
    }
    out
}

/// AlterConfigs of a topic in a cluster: the whole set of overrides, checked here first.
pub fn set_topic_overrides(
    broker: &Broker,
    m: &Membership,
    name: &str,
    overrides: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), ApiError> {
    let image = m.image();
    let t = image.topic(name).ok_or_else(|| {
        ApiError::new(
            E::UnknownTopicOrPartition,
            format!("topic '{name}' does not exist"),
        )
    })?;
    broker
        .log_defaults()
        .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| ApiError::new(E::InvalidConfig, e.to_string()))?;
    if validate_only {
        return Ok(());
    }
    let (session, n, created) = (m.session.clone(), name.to_string(), t.create_revision);
    let want = overrides.clone();
    m.call(async move { session.set_topic_config(&n, created, overrides).await })
        .map_err(|e| match e {
            OpError::Conflict(msg) => ApiError::new(E::UnknownTopicOrPartition, msg),
            e => unavailable(e),
        })?;
    m.wait_until(DEFAULT_CHANGE_WAIT, || {
        broker.topic(name).is_none_or(|t| t.overrides == want)
    });
    Ok(())
}

/// A block of producer ids no other broker of the cluster hands out.
pub fn producer_id_block(m: &Membership, size: i64) -> Result<(i64, i64), ApiError> {
    let session = m.session.clone();
    m.call(async move { session.producer_id_block(size).await })
        .map_err(unavailable)
}

/// Controlled shutdown (SIGTERM): says this broker is leaving, so the controller hands
/// what it leads to other in-sync replicas, and waits (up to `timeout`) until it leads
/// nothing another replica could take over. Then the broker stops, and `leave` removes it.
pub async fn shut_down_controlled(broker: &Broker, m: &Membership, timeout: Duration) {
    if let Err(e) = m.session.announce_shutdown().await {
        tracing::warn!("controlled shutdown: {e}; stopping without handing over leadership");
        return;
    }
    let me = broker.config.node_id;
    let movable = |image: &MetadataImage| {
        image.topics.values().any(|t| {
            t.states.values().any(|s| {
                let s = &s.value.state;
                s.leader == me && s.isr.iter().any(|b| *b != me && image.may_lead(*b))
            })
        })
    };
    let done = m.session.wait_for(timeout, |img| !movable(img)).await;
    if done {
        tracing::info!("controlled shutdown: leadership handed over");
    } else {
        tracing::warn!(
            "controlled shutdown: leadership not handed over within {timeout:?} \
             (controlled.shutdown.max.retries × controlled.shutdown.retry.backoff.ms)"
        );
    }
}

/// Leaves the cluster: the lease is revoked, so the registration goes at once and the
/// controller elects new leaders without waiting for the session to lapse.
pub async fn leave(m: &Membership) {
    m.session.resign().await;
}
