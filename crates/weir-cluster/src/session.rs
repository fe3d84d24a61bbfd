//! The broker's one session with etcd, on a runtime thread of its own (`weir-etcd`), so
//! that a broker busy with clients never starves its lease:
//!
//! - **Joining**: reach etcd (within `etcd.connection.timeout.ms`), read or create the
//!   cluster id, read the whole metadata once; then register under a lease of
//!   `etcd.session.timeout.ms`, refused if another live broker has this id.
//! - **Keeping current**: a watch of the prefix applies every change to the image and
//!   publishes the new one; a broken watch reads everything again and watches anew. While
//!   etcd is away the last image stands, and `is_connected` says so.
//! - **The controller**: every broker campaigns for the controller key (under its lease)
//!   when it is free; the one that creates it runs the controller's decisions, each a
//!   compare-and-set guarded by that key's creation, so once its lease lapses its writes
//!   fail.
//! - **Operations** brokers perform for clients: topics created, deleted and grown,
//!   configs set, documents replaced, producer ids handed out; each a compare-and-set.
//!
//! Sync callers use `block_on`, which runs the call on the session's runtime and waits.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::controller::{self, Asks};
use crate::etcd::{Cmp, Etcd, EtcdError, Op, Txn, Watched};
use crate::image::{DocumentImage, Kv, MetadataImage};
use crate::keys::{Document, Keys};
use crate::records::{
    decode, encode, BrokerRegistration, ClusterIdRecord, ConfigRecord, ControllerEpochRecord,
    ControllerRecord, Endpoint, PartitionName, PartitionStateRecord, PreferredElectionRecord,
    ProducerIdBlockRecord, TopicRecord, RECORD_VERSION,
};
use crate::EtcdConnect;

/// How long one etcd call may take before it counts as etcd being away.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a broken watch or keep-alive is tried again.
const RETRY_BACKOFF: Duration = Duration::from_millis(500);
/// How many controller writes are in flight at once.
const CONTROLLER_WRITES_IN_FLIGHT: usize = 32;

/// What the session needs to know about its broker and its cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub connect: EtcdConnect,
    pub node_id: i32,
    pub rack: Option<String>,
    /// The advertised listeners.
    pub endpoints: Vec<Endpoint>,
    /// The most partitions this broker can hold.
    pub partition_capacity: usize,
    /// The lease's time to live.
    pub session_timeout: Duration,
    /// How long joining waits for etcd.
    pub connection_timeout: Duration,
    pub controller: ControllerConfig,
}

/// The controller's settings.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub auto_leader_rebalance: bool,
    pub imbalance_check_interval: Duration,
    pub imbalance_percentage: u32,
    pub unclean_default: bool,
}

/// Why an operation did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpError {
    /// etcd could not be reached (a write that timed out may or may not have landed).
    Unavailable(String),
    /// The metadata is not as the operation expected (the topic exists, is gone, or
    /// changed meanwhile).
    Conflict(String),
    /// etcd refused the operation.
    Failed(String),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Unavailable(m) | OpError::Conflict(m) | OpError::Failed(m) => f.write_str(m),
        }
    }
}

impl From<EtcdError> for OpError {
    fn from(e: EtcdError) -> Self {
        match e {
            EtcdError::Unavailable(_) => OpError::Unavailable(format!(
                "{e}; the cluster's metadata cannot change until it is back"
            )),
            EtcdError::Failed(_) => OpError::Failed(e.to_string()),
        }
    }
}

/// A replaced document, or the one that stands if it moved on meanwhile.
#[derive(Debug, Clone)]
pub enum Replaced {
    /// Replaced; the document's new revision.
    Done(i64),
    /// Someone else replaced it first: this is it now (`None`: it was removed).
    Conflict(Option<DocumentImage>),
}

struct Inner {
    config: ClusterConfig,
    keys: Keys,
    etcd: Etcd,
    cluster_id: String,
    /// New each process start.
    incarnation: String,
    image: watch::Sender<Arc<MetadataImage>>,
    /// Whether etcd answered the last call of the watch or the keep-alive.
    connected: AtomicBool,
    /// The lease the registration is kept under, 0 before registering.
    lease: AtomicI64,
    shutting_down: AtomicBool,
    is_controller: AtomicBool,
    stop: watch::Sender<bool>,
    /// Written when the registration changes (shutting down), read by re-registration.
    registration: Mutex<BrokerRegistration>,
}

/// This broker's session with the cluster. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
    runtime: Arc<Runtime>,
}

/// The session's runtime, on its own thread; dropped without waiting.
struct Runtime(Option<tokio::runtime::Runtime>);

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Cluster {
    /// Reaches etcd (trying until the connection timeout), reads the cluster id (creating
    /// it from `propose`, or a new one, if the cluster has none yet), and reads the whole
    /// metadata. Blocking.
    pub fn connect(config: ClusterConfig, propose: Option<String>) -> Result<Cluster, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weir-etcd")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the etcd session's thread: {e}"))?;
        // The client's channels spawn on the runtime they are made in.
        let etcd = {
            let _in = rt.enter();
            Etcd::new(&config.connect.urls(), REQUEST_TIMEOUT)?
        };
        let keys = Keys::new(&config.connect.prefix);
        let (cluster_id, image) = rt.block_on(join(&etcd, &keys, &config, propose))?;
        let registration = BrokerRegistration {
            version: RECORD_VERSION,
            id: config.node_id,
            endpoints: config.endpoints.clone(),
            rack: config.rack.clone(),
            incarnation: weir_kafka::topic::uuid_to_base64(uuid::Uuid::new_v4()),
            timestamp: now_ms(),
            partition_capacity: config.partition_capacity,
            shutting_down: false,
        };
        let (image, _) = watch::channel(Arc::new(image));
        let (stop, _) = watch::channel(false);
        Ok(Cluster {
            inner: Arc::new(Inner {
                incarnation: registration.incarnation.clone(),
                registration: Mutex::new(registration),
                config,
                keys,
                etcd,
                cluster_id,
                image,
                connected: AtomicBool::new(true),
                lease: AtomicI64::new(0),
                shutting_down: AtomicBool::new(false),
                is_controller: AtomicBool::new(false),
                stop,
            }),
            runtime: Arc::new(Runtime(Some(rt))),
        })
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        // Set at construction and taken only on drop.
        self.runtime
            .0
            .as_ref()
            .expect("the session's runtime lives as long as the session")
            .handle()
    }

    /// Runs `f` on the session's runtime and waits for it, from sync code (on a tokio
    /// worker, wrap the call in `block_in_place`).
    pub fn block_on<F>(&self, f: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::channel();
        self.handle().spawn(async move {
            let _ = tx.send(f.await);
        });
        // The task sends before it ends; a runtime shut down mid-call drops it unsent.
        rx.recv()
            .unwrap_or_else(|_| panic!("the etcd session stopped while a call was waiting"))
    }

    /// Runs `f` on the session's runtime in the background.
    pub fn spawn<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.handle().spawn(f);
    }

    pub fn cluster_id(&self) -> &str {
        &self.inner.cluster_id
    }

    pub fn node_id(&self) -> i32 {
        self.inner.config.node_id
    }

    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The metadata as last seen.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.inner.image.borrow().clone()
    }

    /// Every new image as it is published.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.inner.image.subscribe()
    }

    /// Whether etcd answered the session's last call.
    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::Relaxed)
    }

    /// Whether this broker is the controller.
    pub fn is_controller(&self) -> bool {
        self.inner.is_controller.load(Ordering::Relaxed)
    }

    /// Registers this broker and starts keeping its lease, watching the metadata and
    /// campaigning for the controller. Refused if another live broker has this id. Blocking.
    pub fn start(&self) -> Result<(), String> {
        let inner = self.inner.clone();
        self.block_on(async move { register(&inner, true).await })?;
        let from = self.image().revision + 1;
        self.spawn(keep_lease(self.inner.clone()));
        self.spawn(watch_metadata(self.inner.clone(), from));
        self.spawn(campaign(self.inner.clone()));
        Ok(())
    }

    /// Waits until `pred` holds of the image, up to `timeout`; whether it did.
    pub async fn wait_for(&self, timeout: Duration, pred: impl Fn(&MetadataImage) -> bool) -> bool {
        let mut rx = self.subscribe();
        tokio::time::timeout(timeout, async {
            loop {
                if pred(&rx.borrow_and_update()) {
                    return true;
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        })
        .await
        .unwrap_or(false)
    }

    /// Says this broker is shutting down: the controller moves its leadership away.
    pub async fn announce_shutdown(&self) -> Result<(), OpError> {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        let reg = {
            let mut r = lock(&self.inner.registration);
            r.shutting_down = true;
            r.clone()
        };
        let lease = self.inner.lease.load(Ordering::SeqCst);
        self.inner
            .etcd
            .txn(Txn {
                when: vec![],
                then: vec![Op::Put {
                    key: self.inner.keys.broker(reg.id),
                    value: encode(&reg),
                    lease,
                }],
                otherwise: vec![],
            })
            .await?;
        Ok(())
    }

    /// Leaves the cluster: stops the session's work and revokes the lease, which removes
    /// the registration (and the controller key, if this broker holds it) at once.
    pub async fn resign(&self) {
        let _ = self.inner.stop.send(true);
        let lease = self.inner.lease.swap(0, Ordering::SeqCst);
        if lease != 0 {
            if let Err(e) = self.inner.etcd.revoke(lease).await {
                tracing::warn!("leaving the cluster: {e}; the registration lapses with its lease");
            }
        }
        self.inner.is_controller.store(false, Ordering::SeqCst);
    }

    /// Creates a topic: its record and, if any, its config overrides, unless a topic of
    /// that name exists. Returns the revision it was created at.
    pub async fn create_topic(
        &self,
        name: &str,
        record: TopicRecord,
        config: BTreeMap<String, String>,
    ) -> Result<i64, OpError> {
        let k = &self.inner.keys;
        let mut then = vec![Op::Put {
            key: k.topic(name),
            value: encode(&record),
            lease: 0,
        }];
        // Leftovers of an earlier topic of this name (a deletion cut short) go with it.
        then.push(Op::DeletePrefix(k.partition_states(name)));
        if config.is_empty() {
            then.push(Op::Delete(k.topic_config(name)));
        } else {
            then.push(Op::Put {
                key: k.topic_config(name),
                value: encode(&ConfigRecord {
                    version: RECORD_VERSION,
                    config,
                }),
                lease: 0,
            });
        }
        let out = self
            .inner
            .etcd
            .txn(Txn {
                when: vec![Cmp::Absent(k.topic(name))],
                then,
                otherwise: vec![],
            })
            .await?;
        if out.succeeded {
            Ok(out.revision)
        } else {
            Err(OpError::Conflict(format!("topic '{name}' already exists")))
        }
    }

    /// Deletes a topic (the incarnation created at `create_revision`): its record, its
    /// partition states and its config.
    pub async fn delete_topic(&self, name: &str, create_revision: i64) -> Result<i64, OpError> {
        let k = &self.inner.keys;
        let out = self
            .inner
            .etcd
            .txn(Txn {
                when: vec![Cmp::CreateRevision(k.topic(name), create_revision)],
                then: vec![
                    Op::Delete(k.topic(name)),
                    Op::DeletePrefix(k.partition_states(name)),
                    Op::Delete(k.topic_config(name)),
                ],
                otherwise: vec![],
            })
            .await?;
        if out.succeeded {
            Ok(out.revision)
        } else {
            Err(OpError::Conflict(format!(
                "topic '{name}' does not exist (or was created again meanwhile)"
            )))
        }
    }

    /// Replaces a topic's record (more partitions), if it has not changed since
    /// `mod_revision`.
    pub async fn set_topic(
        &self,
        name: &str,
        mod_revision: i64,
        record: TopicRecord,
    ) -> Result<i64, OpError> {
        let k = &self.inner.keys;
        let put = Op::Put {
            key: k.topic(name),
            value: encode(&record),
            lease: 0,
        };
        self.write_if(
            vec![Cmp::ModRevision(k.topic(name), mod_revision)],
            put,
            || format!("topic '{name}' changed meanwhile (or is gone): ask again"),
        )
        .await
    }

    /// Makes `op` if every one of `when` holds; the revision it was made at, or a
    /// conflict saying `why_not`.
    async fn write_if(
        &self,
        when: Vec<Cmp>,
        op: Op,
        why_not: impl FnOnce() -> String,
    ) -> Result<i64, OpError> {
        let out = self
            .inner
            .etcd
            .txn(Txn {
                when,
                then: vec![op],
                otherwise: vec![],
            })
            .await?;
        if out.succeeded {
            Ok(out.revision)
        } else {
            Err(OpError::Conflict(why_not()))
        }
    }

    /// Replaces a topic's config overrides (the whole set), while the topic created at
    /// `create_revision` exists.
    pub async fn set_topic_config(
        &self,
        name: &str,
        create_revision: i64,
        config: BTreeMap<String, String>,
    ) -> Result<i64, OpError> {
        let k = &self.inner.keys;
        let op = if config.is_empty() {
            Op::Delete(k.topic_config(name))
        } else {
            Op::Put {
                key: k.topic_config(name),
                value: encode(&ConfigRecord {
                    version: RECORD_VERSION,
                    config,
                }),
                lease: 0,
            }
        };
        self.write_if(
            vec![Cmp::CreateRevision(k.topic(name), create_revision)],
            op,
            || format!("topic '{name}' does not exist"),
        )
        .await
    }

    /// A leader's change of its partition's ISR (Kafka's AlterPartition, as leaders wrote
    /// the ISR to ZooKeeper before KIP-497): the state moves on to `state` only if it is
    /// still the one at `state_mod_revision` — the controller's elections and this write
    /// exclude each other — and the topic is the one created at `topic_create_revision`.
    pub async fn alter_partition(
        &self,
        topic: &str,
        partition: i32,
        topic_create_revision: i64,
        state_mod_revision: i64,
        controller_epoch: i32,
        state: crate::records::LeaderAndIsr,
    ) -> Result<i64, OpError> {
        let k = &self.inner.keys;
        let key = k.partition_state(topic, partition);
        let when = vec![
            Cmp::CreateRevision(k.topic(topic), topic_create_revision),
            Cmp::ModRevision(key.clone(), state_mod_revision),
        ];
        let put = Op::Put {
            key,
            value: encode(&PartitionStateRecord {
                version: RECORD_VERSION,
                controller_epoch,
                state,
            }),
            lease: 0,
        };
        self.write_if(when, put, || {
            format!("{topic}-{partition}: its state changed meanwhile")
        })
        .await
    }

    /// Replaces the dynamic broker configs of `entity` (a broker id or `<default>`).
    pub async fn set_broker_config(
        &self,
        entity: &str,
        config: BTreeMap<String, String>,
    ) -> Result<i64, OpError> {
        let key = self.inner.keys.broker_config(entity);
        let op = if config.is_empty() {
            Op::Delete(key)
        } else {
            Op::Put {
                key,
                value: encode(&ConfigRecord {
                    version: RECORD_VERSION,
                    config,
                }),
                lease: 0,
            }
        };
        let out = self
            .inner
            .etcd
            .txn(Txn {
                when: vec![],
                then: vec![op],
                otherwise: vec![],
            })
            .await?;
        Ok(out.revision)
    }

    /// Replaces a document, if it is still at `expected` (0: if there is none).
    pub async fn replace_document(
        &self,
        doc: Document,
        bytes: Vec<u8>,
        expected: i64,
    ) -> Result<Replaced, OpError> {
        let key = self.inner.keys.document(doc);
        let when = if expected == 0 {
            Cmp::Absent(key.clone())
        } else {
            Cmp::ModRevision(key.clone(), expected)
        };
        let out = self
            .inner
            .etcd
            .txn(Txn {
                when: vec![when],
                then: vec![Op::Put {
                    key: key.clone(),
                    value: bytes,
                    lease: 0,
                }],
                otherwise: vec![Op::Get(key)],
            })
            .await?;
        if out.succeeded {
            return Ok(Replaced::Done(out.revision));
        }
        let current = out
            .got
            .into_iter()
            .next()
            .flatten()
            .map(|kv| DocumentImage {
                bytes: kv.value,
                mod_revision: kv.mod_revision,
            });
        Ok(Replaced::Conflict(current))
    }

    /// The next `size` producer ids, unique in the cluster: `start..end`.
    pub async fn producer_id_block(&self, size: i64) -> Result<(i64, i64), OpError> {
        let key = self.inner.keys.producer_id_block();
        for _ in 0..16 {
            let current = self.inner.etcd.get(&key).await?;
            let (start, when) = match &current {
                None => (0, Cmp::Absent(key.clone())),
                Some(kv) => {
                    let r = decode::<ProducerIdBlockRecord>(&kv.value)
                        .map_err(|e| OpError::Failed(format!("{key}: {e}")))?;
                    (r.block_end, Cmp::ModRevision(key.clone(), kv.mod_revision))
                }
            };
            let end = start
                .checked_add(size)
                .ok_or_else(|| OpError::Failed("producer ids are exhausted".into()))?;
            let out = self
                .inner
                .etcd
                .txn(Txn {
                    when: vec![when],
                    then: vec![Op::Put {
                        key: key.clone(),
                        value: encode(&ProducerIdBlockRecord {
                            version: RECORD_VERSION,
                            broker: self.inner.config.node_id,
                            block_start: start,
                            block_end: end,
                        }),
                        lease: 0,
                    }],
                    otherwise: vec![],
                })
                .await?;
            if out.succeeded {
                return Ok((start, end));
            }
        }
        Err(OpError::Conflict(
            "other brokers kept taking producer id blocks first; ask again".into(),
        ))
    }

    /// Asks the controller to make the preferred replica of `preferred` lead again, and
    /// to elect any live replica of the leaderless `unclean` ones.
    pub async fn request_election(
        &self,
        preferred: Vec<PartitionName>,
        unclean: Vec<PartitionName>,
    ) -> Result<(), OpError> {
        let key = self.inner.keys.preferred_election();
        for _ in 0..16 {
            let current = self.inner.etcd.get(&key).await?;
            let (mut all, mut any, when) = match &current {
                None => (BTreeSet::new(), BTreeSet::new(), Cmp::Absent(key.clone())),
                Some(kv) => {
                    let r = decode::<PreferredElectionRecord>(&kv.value).ok();
                    (
                        r.as_ref()
                            .map(|r| r.partitions.iter().cloned().collect())
                            .unwrap_or_default(),
                        r.map(|r| r.unclean.into_iter().collect())
                            .unwrap_or_default(),
                        Cmp::ModRevision(key.clone(), kv.mod_revision),
                    )
                }
            };
            all.extend(preferred.iter().cloned());
            any.extend(unclean.iter().cloned());
            let out = self
                .inner
                .etcd
                .txn(Txn {
                    when: vec![when],
                    then: vec![Op::Put {
                        key: key.clone(),
                        value: encode(&PreferredElectionRecord {
                            version: RECORD_VERSION,
                            partitions: all.into_iter().collect(),
                            unclean: any.into_iter().collect(),
                        }),
                        lease: 0,
                    }],
                    otherwise: vec![],
                })
                .await?;
            if out.succeeded {
                return Ok(());
            }
        }
        Err(OpError::Conflict(
            "the election request kept changing; ask again".into(),
        ))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reaches etcd, reads or creates the cluster id, and reads the metadata.
async fn join(
    etcd: &Etcd,
    keys: &Keys,
    config: &ClusterConfig,
    propose: Option<String>,
) -> Result<(String, MetadataImage), String> {
    let deadline = Instant::now() + config.connection_timeout;
    let key = keys.cluster_id();
    let existing = loop {
        match etcd.get(&key).await {
            Ok(kv) => break kv,
            Err(e) if Instant::now() < deadline => {
                tracing::info!("waiting for etcd at {}: {e}", config.connect);
                tokio::time::sleep(RETRY_BACKOFF).await;
            }
            Err(e) => {
                return Err(format!(
                    "cannot reach etcd at {} within etcd.connection.timeout.ms ({} ms): {e}",
                    config.connect,
                    config.connection_timeout.as_millis()
                ))
            }
        }
    };
    let id = match existing {
        Some(kv) => {
            decode::<ClusterIdRecord>(&kv.value)
                .map_err(|e| format!("{key}: {e}"))?
                .id
        }
        None => {
            let id =
                propose.unwrap_or_else(|| weir_kafka::topic::uuid_to_base64(uuid::Uuid::new_v4()));
            let out = etcd
                .txn(Txn {
                    when: vec![Cmp::Absent(key.clone())],
                    then: vec![Op::Put {
                        key: key.clone(),
                        value: encode(&ClusterIdRecord {
                            version: RECORD_VERSION,
                            id: id.clone(),
                        }),
                        lease: 0,
                    }],
                    otherwise: vec![Op::Get(key.clone())],
                })
                .await
                .map_err(|e| e.to_string())?;
            if out.succeeded {
                tracing::info!(cluster_id = %id, "created the cluster in etcd at {}", config.connect);
                id
            } else {
                // Another broker created it first.
                let kv = out
                    .got
                    .into_iter()
                    .next()
                    .flatten()
                    .ok_or_else(|| format!("{key} vanished while it was created"))?;
                decode::<ClusterIdRecord>(&kv.value)
                    .map_err(|e| format!("{key}: {e}"))?
                    .id
            }
        }
    };
    let (revision, kvs) = etcd.list(&keys.root()).await.map_err(|e| e.to_string())?;
    Ok((id, MetadataImage::from_kvs(keys, revision, kvs)))
}

/// Grants a lease and puts the registration under it. At start-up (`starting`) the id's
/// key may be held by this broker's previous process (killed and restarted within its
/// lease): its registration names the listeners this process has just bound, so it is
/// gone, and its key and lease are taken over. Any other holder is a live broker with the
/// same id: refused.
async fn register(inner: &Inner, starting: bool) -> Result<(), String> {
    let reg = lock(&inner.registration).clone();
    let key = inner.keys.broker(reg.id);
    let lease = inner
        .etcd
        .grant(inner.config.session_timeout)
        .await
        .map_err(|e| e.to_string())?;
    let put = Op::Put {
        key: key.clone(),
        value: encode(&reg),
        lease,
    };
    let out = inner
        .etcd
        .txn(Txn {
            when: vec![Cmp::Absent(key.clone())],
            then: vec![put.clone()],
            otherwise: vec![Op::Get(key.clone())],
        })
        .await
        .map_err(|e| e.to_string())?;
    if !out.succeeded {
        let Some(held) = out.got.into_iter().next().flatten() else {
            let _ = inner.etcd.revoke(lease).await;
            return Err(format!("{key} changed while registering; start again"));
        };
        let other = decode::<BrokerRegistration>(&held.value).map_err(|e| format!("{key}: {e}"))?;
        let ours = other.incarnation == inner.incarnation
            || (starting && !reg.endpoints.is_empty() && other.endpoints == reg.endpoints);
        if !ours {
            let _ = inner.etcd.revoke(lease).await;
            let at: Vec<String> = other
                .endpoints
                .iter()
                .map(|e| format!("{}://{}:{}", e.listener, e.host, e.port))
                .collect();
            return Err(format!(
                "node.id {} is taken: a live broker registered with it (listeners {}); give \
                 this broker another node.id, or stop the other one",
                reg.id,
                at.join(",")
            ));
        }
        let taken = inner
            .etcd
            .txn(Txn {
                when: vec![Cmp::ModRevision(key.clone(), held.mod_revision)],
                then: vec![put],
                otherwise: vec![],
            })
            .await
            .map_err(|e| e.to_string())?;
        if !taken.succeeded {
            let _ = inner.etcd.revoke(lease).await;
            return Err(format!("{key} changed while registering; start again"));
        }
        if held.lease != 0 && held.lease != lease {
            tracing::warn!(
                "node.id {} was still registered by this broker's previous process (same \
                 listeners); took its registration over",
                reg.id
            );
            // Whatever else it held (the controller key) goes with it, at once.
            let _ = inner.etcd.revoke(held.lease).await;
        }
    }
    inner.lease.store(lease, Ordering::SeqCst);
    tracing::info!(
        node_id = reg.id,
        lease,
        "registered in the cluster ({} ms session)",
        inner.config.session_timeout.as_millis()
    );
    Ok(())
}

/// Keeps the lease alive (three keep-alives per time to live); when etcd says it expired
/// (etcd was away longer than the session), registers again under a new one.
async fn keep_lease(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let every = inner.config.session_timeout / 3;
    'keeper: loop {
        let mut keeper = inner.etcd.keeper();
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tick.tick() => {
                    let lease = inner.lease.load(Ordering::SeqCst);
                    if lease != 0 {
                        keeper.keep_alive(lease);
                    }
                }
                answer = keeper.next() => match answer {
                    Ok(Some(_)) => set_connected(&inner, true),
                    Ok(None) => {
                        tracing::error!(
                            "this broker's etcd lease expired (etcd was out of reach for \
                             longer than etcd.session.timeout.ms): registering again"
                        );
                        loop {
                            if *stop.borrow() {
                                return;
                            }
                            match register(&inner, false).await {
                                Ok(()) => break,
                                Err(e) => {
                                    tracing::error!("registering again: {e}");
                                    tokio::time::sleep(RETRY_BACKOFF * 4).await;
                                }
                            }
                        }
                        continue 'keeper;
                    }
                    Err(e) => {
                        set_connected(&inner, false);
                        tracing::warn!("etcd lease keep-alive: {e}; trying again");
                        tokio::time::sleep(RETRY_BACKOFF).await;
                        continue 'keeper;
                    }
                },
            }
        }
    }
}

fn set_connected(inner: &Inner, up: bool) {
    let was = inner.connected.swap(up, Ordering::Relaxed);
    if was != up {
        if up {
            tracing::info!("etcd at {} answers again", inner.config.connect);
        } else {
            tracing::error!(
                "etcd at {} is out of reach: serving with the last metadata seen; topic and \
                 config changes are refused until it is back",
                inner.config.connect
            );
        }
    }
}

/// Keeps the image current from `from` on.
async fn watch_metadata(inner: Arc<Inner>, mut from: i64) {
    let mut stop = inner.stop.subscribe();
    let root = inner.keys.root();
    loop {
        let mut watch = match inner.etcd.watch(&root, from) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!("watching the metadata: {e}");
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            }
        };
        loop {
            let batch = tokio::select! {
                _ = stop.changed() => return,
                b = watch.next() => b,
            };
            match batch {
                Watched::Events { revision, events } => {
                    set_connected(&inner, true);
                    if events.is_empty() {
                        continue;
                    }
                    let mut image = (**inner.image.borrow()).clone();
                    image.apply(&inner.keys, revision, events);
                    inner.image.send_replace(Arc::new(image));
                }
                Watched::Broken(why) => {
                    tracing::warn!("the metadata watch broke ({why}): reading it all again");
                    break;
                }
            }
        }
        // Read everything again, and watch from there.
        loop {
            if *stop.borrow() {
                return;
            }
            match inner.etcd.list(&root).await {
                Ok((revision, kvs)) => {
                    set_connected(&inner, true);
                    let image = MetadataImage::from_kvs(&inner.keys, revision, kvs);
                    from = revision + 1;
                    inner.image.send_replace(Arc::new(image));
                    break;
                }
                Err(e) => {
                    set_connected(&inner, false);
                    tracing::debug!("reading the metadata again: {e}");
                    tokio::time::sleep(RETRY_BACKOFF).await;
                }
            }
        }
    }
}

/// Campaigns for the controller key whenever it is free, and controls while holding it.
async fn campaign(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let mut images = inner.image.subscribe();
    loop {
        if *stop.borrow() {
            return;
        }
        let image = images.borrow_and_update().clone();
        let free = image.controller.is_none();
        if free && !inner.shutting_down.load(Ordering::SeqCst) {
            match try_to_lead(&inner, &image).await {
                Ok(Some((epoch, created))) => {
                    inner.is_controller.store(true, Ordering::SeqCst);
                    tracing::info!(epoch, "this broker is the controller");
                    control(&inner, epoch, created).await;
                    inner.is_controller.store(false, Ordering::SeqCst);
                    tracing::info!(epoch, "this broker is no longer the controller");
                    continue;
                }
                Ok(None) => {}
                Err(e) => tracing::debug!("campaigning for the controller: {e}"),
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            changed = images.changed() => if changed.is_err() { return },
            // A campaign that failed because etcd was away is tried again.
            _ = tokio::time::sleep(Duration::from_secs(1)), if free => {}
        }
    }
}

/// Creates the controller key under this broker's lease, with the next controller epoch;
/// `Some((epoch, the key's create revision))` if this broker won.
async fn try_to_lead(
    inner: &Inner,
    image: &MetadataImage,
) -> Result<Option<(i32, i64)>, EtcdError> {
    let lease = inner.lease.load(Ordering::SeqCst);
    if lease == 0 {
        return Ok(None);
    }
    let k = &inner.keys;
    let (epoch, epoch_cmp) = match &image.controller_epoch {
        Some(e) => (
            e.value + 1,
            Cmp::ModRevision(k.controller_epoch(), e.mod_revision),
        ),
        None => (1, Cmp::Absent(k.controller_epoch())),
    };
    let out = inner
        .etcd
        .txn(Txn {
            when: vec![Cmp::Absent(k.controller()), epoch_cmp],
            then: vec![
                Op::Put {
                    key: k.controller(),
                    value: encode(&ControllerRecord {
                        version: RECORD_VERSION,
                        broker_id: inner.config.node_id,
                        epoch,
                        timestamp: now_ms(),
                    }),
                    lease,
                },
                Op::Put {
                    key: k.controller_epoch(),
                    value: encode(&ControllerEpochRecord {
                        version: RECORD_VERSION,
                        epoch,
                    }),
                    lease: 0,
                },
            ],
            otherwise: vec![],
        })
        .await?;
    Ok(out.succeeded.then_some((epoch, out.revision)))
}

/// The controller's loop: plan over each new image, write the changes guarded by this
/// controller's key, until the key is no longer ours or the session stops.
async fn control(inner: &Inner, epoch: i32, created: i64) {
    let mut stop = inner.stop.subscribe();
    let mut images = inner.image.subscribe();
    let cfg = &inner.config.controller;
    let mut rebalance = tokio::time::interval(cfg.imbalance_check_interval);
    rebalance.tick().await; // the first tick is now: skip it
    let mut incarnations: BTreeMap<i32, String> = BTreeMap::new();
    let mut bounced: BTreeSet<i32> = BTreeSet::new();
    let mut preferred: BTreeSet<PartitionName> = BTreeSet::new();
    let mut unclean: BTreeSet<PartitionName> = BTreeSet::new();
    let mut first = true;
    loop {
        let image = images.borrow_and_update().clone();
        if image.revision >= created {
            match &image.controller {
                Some(c) if c.create_revision == created => {}
                _ => return, // deposed: the key lapsed with our lease
            }
        }
        for (id, b) in &image.brokers {
            let inc = &b.value.incarnation;
            match incarnations.insert(*id, inc.clone()) {
                Some(old) if &old != inc => {
                    tracing::info!(broker = id, "broker restarted: electing what it led again");
                    bounced.insert(*id);
                }
                _ => {}
            }
        }
        if first {
            bounced.clear();
            first = false;
        }
        let election = image.preferred_election.clone();
        if let Some(e) = &election {
            preferred.extend(e.value.partitions.iter().cloned());
            unclean.extend(e.value.unclean.iter().cloned());
        }
        let asks = Asks {
            preferred: std::mem::take(&mut preferred),
            unclean: std::mem::take(&mut unclean),
            unclean_default: cfg.unclean_default,
            bounced: bounced.clone(),
        };
        let changes = controller::plan(&image, &asks);
        let mut all_landed = true;
        let mut deposed = false;
        for chunk in changes.chunks(CONTROLLER_WRITES_IN_FLIGHT) {
            let writes = chunk.iter().map(|c| write_state(inner, epoch, created, c));
            for r in futures_util::future::join_all(writes).await {
                match r {
                    Ok(true) => {}
                    Ok(false) => all_landed = false,
                    Err(Deposed) => deposed = true,
                }
            }
            if deposed {
                return;
            }
        }
        for done in controller::moves_done(&image) {
            match write_moves(inner, created, &done).await {
                Ok(true) => tracing::info!(
                    topic = %done.topic,
                    partitions = ?done.partitions,
                    "controller: partitions moved to their new replicas"
                ),
                Ok(false) => all_landed = false,
                Err(Deposed) => return,
            }
        }
        for c in &changes {
            tracing::info!(
                topic = %c.topic,
                partition = c.partition,
                leader = c.state.leader,
                leader_epoch = c.state.leader_epoch,
                isr = ?c.state.isr,
                "controller: {:?}",
                c.why
            );
        }
        if all_landed {
            bounced.clear();
            if let Some(e) = election {
                let _ = inner
                    .etcd
                    .txn(Txn {
                        when: vec![
                            Cmp::CreateRevision(inner.keys.controller(), created),
                            Cmp::ModRevision(inner.keys.preferred_election(), e.mod_revision),
                        ],
                        then: vec![Op::Delete(inner.keys.preferred_election())],
                        otherwise: vec![],
                    })
                    .await;
            }
        } else {
            preferred.extend(asks.preferred);
            unclean.extend(asks.unclean);
        }
        tokio::select! {
            _ = stop.changed() => return,
            changed = images.changed() => if changed.is_err() { return },
            _ = rebalance.tick(), if cfg.auto_leader_rebalance => {
                let image = images.borrow().clone();
                preferred.extend(controller::imbalanced(&image, cfg.imbalance_percentage));
            }
            // Writes that failed because etcd was away are tried again.
            _ = tokio::time::sleep(Duration::from_secs(1)), if !all_landed => {}
        }
    }
}

/// This broker no longer holds the controller key.
struct Deposed;

/// Writes a topic whose moves are done, if it is still the one planned from and this
/// broker still controls; `Ok(false)` if the topic changed meanwhile or etcd was away.
async fn write_moves(
    inner: &Inner,
    created: i64,
    done: &controller::MovesDone,
) -> Result<bool, Deposed> {
    let k = &inner.keys;
    let put = Op::Put {
        key: k.topic(&done.topic),
        value: encode(&done.record),
        lease: 0,
    };
    let unless = Cmp::ModRevision(k.topic(&done.topic), done.mod_revision);
    controller_write(
        inner,
        created,
        vec![unless],
        put,
        &format!("topic {}", done.topic),
    )
    .await
}

/// Writes one planned change; `Ok(false)` if the metadata moved meanwhile (the next plan
/// decides again) or etcd was away.
async fn write_state(
    inner: &Inner,
    epoch: i32,
    created: i64,
    c: &controller::StateChange,
) -> Result<bool, Deposed> {
    let k = &inner.keys;
    let key = k.partition_state(&c.topic, c.partition);
    let state_cmp = match c.replaces {
        Some(r) => Cmp::ModRevision(key.clone(), r),
        None => Cmp::Absent(key.clone()),
    };
    let put = Op::Put {
        key,
        value: encode(&PartitionStateRecord {
            version: RECORD_VERSION,
            controller_epoch: epoch,
            state: c.state.clone(),
        }),
        lease: 0,
    };
    let when = vec![
        Cmp::CreateRevision(k.topic(&c.topic), c.topic_create_revision),
        state_cmp,
    ];
    controller_write(
        inner,
        created,
        when,
        put,
        &format!("{}-{}", c.topic, c.partition),
    )
    .await
}

/// One write of the controller's, made only while it holds the controller key it created
/// at `created` and `when` holds: `Ok(true)` if it landed, `Ok(false)` if `when` did not
/// hold or etcd was away (planned again from the next image), `Err(Deposed)` if this
/// broker no longer controls.
async fn controller_write(
    inner: &Inner,
    created: i64,
    mut when: Vec<Cmp>,
    put: Op,
    what: &str,
) -> Result<bool, Deposed> {
    let k = &inner.keys;
    when.insert(0, Cmp::CreateRevision(k.controller(), created));
    let out = inner
        .etcd
        .txn(Txn {
            when,
            then: vec![put],
            otherwise: vec![Op::Get(k.controller())],
        })
        .await;
    match out {
        Ok(o) if o.succeeded => Ok(true),
        Ok(o) => {
            let ours = o
                .got
                .first()
                .and_then(|kv| kv.as_ref())
                .is_some_and(|kv: &Kv| kv.create_revision == created);
            if ours {
                Ok(false)
            } else {
                Err(Deposed)
            }
        }
        Err(e) => {
            tracing::warn!("controller write for {what}: {e}");
            Ok(false)
        }
    }
}
