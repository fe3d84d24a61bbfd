//! The broker's side of transactions: the host the transaction coordinator (weir-txn) runs
//! on. It keeps `__transaction_state` (made on first use, read back into the coordinator
//! for each partition this broker leads), and writes COMMIT and ABORT markers: into the
//! partitions this broker leads directly, and through WriteTxnMarkers to the leaders of
//! the others. A marker on a `__consumer_offsets` partition also settles the offsets the
//! transaction committed there (TxnOffsetCommit) in the group coordinator.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use weir_client::conn::BrokerConnection;
use weir_client::security::Security;
use weir_kafka::topic::{OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC};
use weir_kafka::{ApiError, TopicPartition};
use weir_log::{AppendOrigin, LogConfig};
use weir_record::{BatchBuilder, Compression, ControlRecordType, EndTransactionMarker};
use weir_txn::{Markers, TxnHost};

use crate::broker::{Broker, NewTopic, NodeInfo};
use crate::partition::Partition;
use crate::topics::Topic;

/// How long a write to `__transaction_state`, or a marker, waits for the in-sync replicas
/// (Kafka's coordinator appends wait up to `request.timeout.ms`, 30 s).
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(30);

/// The WriteTxnMarkers version brokers send each other (the only one kafka-protocol has).
const WRITE_TXN_MARKERS_VERSION: i16 = 1;

/// The transaction coordinator's host: this broker.
pub(crate) struct BrokerTxnHost {
    pub(crate) broker: OnceLock<Weak<Broker>>,
    /// Connections to the other brokers, for WriteTxnMarkers.
    connections: Mutex<HashMap<i32, Arc<BrokerConnection>>>,
}

impl BrokerTxnHost {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(BrokerTxnHost {
            broker: OnceLock::new(),
            connections: Mutex::new(HashMap::new()),
        })
    }

    fn broker(&self) -> Option<Arc<Broker>> {
        self.broker.get().and_then(Weak::upgrade)
    }
}

/// What `__transaction_state` is made with, as Kafka forces it: compacted, uncompressed,
/// and never led by a replica that missed a write (its coordinator would abort a
/// transaction whose COMMIT markers are already out).
fn txn_state_overrides(config: &crate::config::BrokerConfig) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cleanup.policy".to_string(), "compact".to_string()),
        (
            "segment.bytes".to_string(),
            config.txn_state_segment_bytes.to_string(),
        ),
        ("compression.type".to_string(), "uncompressed".to_string()),
        (
            "unclean.leader.election.enable".to_string(),
            "false".to_string(),
        ),
    ])
}

/// `__transaction_state`'s log settings, for a log opened before its topic's configs are
/// read (one broker's start).
pub(crate) fn txn_state_topic_config(config: &crate::config::BrokerConfig) -> LogConfig {
    let overrides = txn_state_overrides(config);
    config
        .log_defaults
        .with_overrides(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .unwrap_or_else(|_| (*config.log_defaults).clone())
}

impl TxnHost for BrokerTxnHost {
    fn append(
        &self,
        partition: i32,
        coordinator_epoch: i32,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    ) -> BoxFuture<'static, Result<(), i16>> {
        let broker = self.broker();
        Box::pin(async move {
            let broker = broker.ok_or(E::CoordinatorNotAvailable.code())?;
            let topic = broker
                .topic(TRANSACTION_STATE_TOPIC)
                .ok_or(E::NotCoordinator.code())?;
            let p = topic
                .partition(partition)
                .and_then(|v| v.replica.clone())
                .ok_or(E::NotCoordinator.code())?;
            let role = p.role();
            if !role.leader || role.leader_epoch != coordinator_epoch {
                return Err(E::NotLeaderOrFollower.code());
            }
            let now = weir_log::now_ms();
            let mut b = BatchBuilder::new(Compression::None, 0, usize::MAX);
            b.append(now, Some(&key), value.as_deref(), &[])
                .map_err(|_| E::UnknownServerError.code())?;
            let bytes = b.build().map_err(|_| E::UnknownServerError.code())?.bytes;
            let info = crate::apis::off_worker(|| {
                p.append_bytes(bytes.into(), AppendOrigin::Coordinator, &topic.config)
            })
            .map_err(|e| {
                tracing::error!("writing to {TRANSACTION_STATE_TOPIC}-{partition}: {e}");
                e.kafka_error_code()
            })?;
            replicated(&p, &topic, info.last_offset + 1)
                .await
                .map_err(|e| e.code)
        })
    }

    fn write_markers(&self, markers: Markers) -> BoxFuture<'static, Vec<(TopicPartition, i16)>> {
        let Some(broker) = self.broker() else {
            let out = markers
                .partitions
                .into_iter()
                .map(|tp| (tp, E::CoordinatorNotAvailable.code()))
                .collect();
            return Box::pin(async move { out });
        };
        let me = broker.config.node_id;
        let mut out = Vec::new();
        let mut here = Vec::new();
        let mut elsewhere: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        for tp in markers.partitions.iter().cloned() {
            let leader = broker
                .topic(&tp.topic)
                .and_then(|t| t.partition(tp.partition).map(|v| v.leader()));
            match leader {
                None => out.push((tp, E::UnknownTopicOrPartition.code())),
                Some(None) => out.push((tp, E::NotLeaderOrFollower.code())),
                Some(Some(l)) if l == me => here.push(tp),
                Some(Some(l)) => elsewhere.entry(l).or_default().push(tp),
            }
        }
        let remote: Vec<_> = elsewhere
            .into_iter()
            .map(|(leader, tps)| {
                let conn = self.connection(&broker, leader);
                let m = Markers {
                    partitions: tps,
                    ..markers.clone()
                };
                async move { send_markers(conn.await, m).await }
            })
            .collect();
        let local = Markers {
            partitions: here,
            ..markers
        };
        Box::pin(async move {
            let (mine, theirs) = futures_util::future::join(
                write_markers_here(&broker, &local),
                futures_util::future::join_all(remote),
            )
            .await;
            out.extend(mine);
            out.extend(theirs.into_iter().flatten());
            out
        })
    }

    fn allocate_producer_id(&self) -> Result<i64, i16> {
        let broker = self.broker().ok_or(E::CoordinatorNotAvailable.code())?;
        // Answered COORDINATOR_LOAD_IN_PROGRESS, as Kafka does while no block of producer
        // ids is ready: clients retry it, where the storage or etcd error would be fatal.
        crate::apis::off_worker(|| broker.allocate_producer_id()).map_err(|e| {
            tracing::error!("allocating a producer id: {}", e.message);
            E::CoordinatorLoadInProgress.code()
        })
    }
}

impl BrokerTxnHost {
    /// A connection to broker `id` over the inter-broker listener (made, or the one kept).
    fn connection(
        &self,
        broker: &Arc<Broker>,
        id: i32,
    ) -> impl std::future::Future<Output = Result<Arc<BrokerConnection>, String>> + 'static {
        let kept = self
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .filter(|c| !c.is_broken())
            .cloned();
        let addr = broker.cluster.as_ref().and_then(|m| {
            let listener = m.fetchers.settings().listener.clone();
            let image = m.image();
            let e = image.broker(id)?.endpoint(&listener)?;
            Some((
                format!("{}:{}", e.host, e.port),
                m.fetchers.settings().socket_timeout_ms,
            ))
        });
        let me = broker.config.node_id;
        let host = broker.txn_host.clone();
        async move {
            if let Some(c) = kept {
                return Ok(c);
            }
            let (addr, timeout_ms) =
                addr.ok_or_else(|| format!("broker {id} has no inter-broker listener"))?;
            let timeout = Duration::from_millis(timeout_ms);
            let c = BrokerConnection::connect(
                &addr,
                &format!("weir-txn-markers-{me}"),
                timeout,
                timeout,
                &Security {
                    tls: None,
                    sasl: None,
                },
            )
            .await
            .map_err(|e| e.to_string())?;
            host.connections
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, c.clone());
            Ok(c)
        }
    }
}

/// Waits until the in-sync replicas of `p` hold the records before `end` (a replicated
/// partition only; one replica holds them already).
async fn replicated(p: &Partition, topic: &Topic, end: i64) -> Result<(), ApiError> {
    if !p.is_replicated() {
        return Ok(());
    }
    let deadline = tokio::time::Instant::now() + REPLICATION_TIMEOUT;
    p.wait_replicated(
        end,
        topic.config.min_insync_replicas.max(1) as usize,
        deadline,
    )
    .await
}

/// Sends the markers to another broker, which leads their partitions.
async fn send_markers(
    conn: Result<Arc<BrokerConnection>, String>,
    markers: Markers,
) -> Vec<(TopicPartition, i16)> {
    let failed = |markers: &Markers, code: i16| {
        markers
            .partitions
            .iter()
            .map(|tp| (tp.clone(), code))
            .collect::<Vec<_>>()
    };
    let conn = match conn {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!("sending transaction markers: {e}");
            return failed(&markers, E::NetworkException.code());
        }
    };
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in &markers.partitions {
        by_topic
            .entry(tp.topic.to_string())
            .or_default()
            .push(tp.partition);
    }
    let mut m = WritableTxnMarker::default();
    m.producer_id = ProducerId(markers.producer_id);
    m.producer_epoch = markers.producer_epoch;
    m.transaction_result = markers.commit;
    m.coordinator_epoch = markers.coordinator_epoch;
    m.topics = by_topic
        .into_iter()
        .map(|(name, ps)| {
            let mut t = WritableTxnMarkerTopic::default();
            t.name = TopicName(StrBytes::from_string(name));
            t.partition_indexes = ps;
            t
        })
        .collect();
    let mut req = WriteTxnMarkersRequest::default();
    req.markers = vec![m];
    match conn.request(&req, WRITE_TXN_MARKERS_VERSION).await {
        Ok(resp) => {
            let mut out = Vec::new();
            for r in resp.markers {
                for t in r.topics {
                    for p in t.partitions {
                        // Whether a partition is gone is this broker's metadata's call,
                        // made before sending: a leader that does not know it yet (it
                        // restarted, or lags the metadata) is asked again.
                        let code = if p.error_code == E::UnknownTopicOrPartition.code() {
                            E::NotLeaderOrFollower.code()
                        } else {
                            p.error_code
                        };
                        out.push((
                            TopicPartition::new(t.name.0.as_str(), p.partition_index),
                            code,
                        ));
                    }
                }
            }
            // A partition the answer left out is sent again.
            for tp in &markers.partitions {
                if !out.iter().any(|(o, _)| o == tp) {
                    out.push((tp.clone(), E::UnknownServerError.code()));
                }
            }
            out
        }
        Err(e) => {
            tracing::debug!("WriteTxnMarkers to {}: {e}", conn.addr());
            failed(&markers, E::NetworkException.code())
        }
    }
}

/// Writes the markers into the partitions this broker leads (WriteTxnMarkers, from this
/// broker's coordinator or another's), each waiting for its in-sync replicas; then, on a
/// `__consumer_offsets` partition, settles the transaction's offsets there.
pub(crate) async fn write_markers_here(
    broker: &Arc<Broker>,
    markers: &Markers,
) -> Vec<(TopicPartition, i16)> {
    let marker = EndTransactionMarker {
        kind: if markers.commit {
            ControlRecordType::Commit
        } else {
            ControlRecordType::Abort
        },
        coordinator_epoch: markers.coordinator_epoch,
    };
    let mut out = Vec::with_capacity(markers.partitions.len());
    let mut waits = Vec::new();
    for tp in &markers.partitions {
        let written = (|| {
            let topic = broker.topic(&tp.topic).ok_or(ApiError::new(
                E::UnknownTopicOrPartition,
                format!("{tp} does not exist"),
            ))?;
            let p = broker
                .leader_replica(&topic, tp.partition)
                .map_err(|e| ApiError {
                    code: e.code,
                    message: e.message,
                })?;
            if tp.topic.as_ref() == OFFSETS_TOPIC {
                broker
                    .offsets_partition_loaded(tp.partition)
                    .map_err(|code| {
                        ApiError::new(
                            E::try_from_code(code).unwrap_or(E::CoordinatorLoadInProgress),
                            format!("the groups of {tp} are still loading"),
                        )
                    })?;
            }
            let info = crate::apis::off_worker(|| {
                p.append_end_txn_marker(markers.producer_id, markers.producer_epoch, marker)
            })
            .map_err(|e| ApiError::new(e.error_code(), e.to_string()))?;
            Ok::<_, ApiError>((topic, p, info.last_offset + 1))
        })();
        match written {
            Ok(w) => waits.push((tp.clone(), w)),
            Err(e) => {
                tracing::debug!(
                    producer_id = markers.producer_id,
                    "a {} marker for {tp}: {e}",
                    marker.kind.name()
                );
                out.push((tp.clone(), e.code));
            }
        }
    }
    let done = futures_util::future::join_all(
        waits
            .iter()
            .map(|(_, (topic, p, end))| replicated(p, topic, *end)),
    )
    .await;
    for ((tp, _), r) in waits.into_iter().zip(done) {
        match r {
            Ok(()) => {
                if tp.topic.as_ref() == OFFSETS_TOPIC {
                    broker
                        .groups
                        .complete_txn(tp.partition, markers.producer_id, markers.commit);
                }
                out.push((tp, 0));
            }
            Err(e) => out.push((tp, e.code)),
        }
    }
    out
}

impl Broker {
    /// `__transaction_state`, made with `transaction.state.log.num.partitions` partitions
    /// if it does not exist yet (FindCoordinator for a transactional id makes it, as in
    /// Kafka). One broker then coordinates all its partitions at once.
    pub fn ensure_txn_state_topic(self: &Arc<Self>) -> Result<Arc<Topic>, ApiError> {
        if let Some(t) = self.topic(TRANSACTION_STATE_TOPIC) {
            return Ok(t);
        }
        let overrides = txn_state_overrides(&self.config);
        let mut ask = NewTopic::new(
            TRANSACTION_STATE_TOPIC,
            self.config.txn.log_partitions,
            overrides,
        );
        if let Some(s) = self.config.cluster.as_ref() {
            let live = self.live_brokers(&self.config.listeners[0].name).len();
            ask.replication_factor = s.replication.txn_state_replication_factor.min(live).max(1);
            let min_isr = s.replication.txn_state_min_isr.max(1) as usize;
            ask.overrides.insert(
                "min.insync.replicas".into(),
                min_isr.min(ask.replication_factor).to_string(),
            );
        }
        let (topic, made) = self.create_internal_topic(ask)?;
        // Only the call that made it loads it (one broker; a cluster member loads what it
        // leads as the metadata says).
        if made && self.cluster.is_none() {
            self.load_txn_state(&topic);
        }
        Ok(topic)
    }

    /// One broker: takes over every partition of `__transaction_state` (at start, or once
    /// the topic is made).
    pub(crate) fn load_txn_state(self: &Arc<Self>, topic: &Topic) {
        for (p, view) in topic.partitions.iter().enumerate() {
            if let Some(replica) = &view.replica {
                if let Err(e) = self.load_txn_partition(p as i32, replica) {
                    tracing::error!("loading {TRANSACTION_STATE_TOPIC}-{p}: {e}");
                }
            }
        }
    }

    /// Reads partition `p` of `__transaction_state` into the transaction coordinator, which
    /// then coordinates its ids at the replica's leader epoch; how many ids it holds.
    pub(crate) fn load_txn_partition(
        self: &Arc<Self>,
        p: i32,
        replica: &Partition,
    ) -> Result<usize, String> {
        let epoch = replica.role().leader_epoch;
        self.txns.begin_loading(p, epoch);
        let mut records: Vec<(i64, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        let read = crate::coordinator_log::read(replica, |e| {
            if let crate::coordinator_log::Logged::Record {
                offset, key, value, ..
            } = e
            {
                records.push((offset, key.to_vec(), value.map(<[u8]>::to_vec)));
            }
        });
        if let Err(e) = read {
            self.txns.unload_partition(p);
            return Err(e);
        }
        let loaded = self.txns.finish_loading(
            p,
            epoch,
            records
                .iter()
                .map(|(o, k, v)| (*o, k.as_slice(), v.as_deref())),
        );
        match loaded {
            Ok(n) => {
                tracing::info!(
                    partition = p,
                    transactional_ids = n,
                    coordinator_epoch = epoch,
                    "coordinating the transactions of {TRANSACTION_STATE_TOPIC}-{p}"
                );
                Ok(n)
            }
            Err(e) => {
                self.txns.unload_partition(p);
                Err(e)
            }
        }
    }

    /// The coordinator of `transactional_id`: the leader of its `__transaction_state`
    /// partition, as clients of `listener` reach it; or the error FindCoordinator answers.
    pub fn txn_coordinator_node(
        &self,
        transactional_id: &str,
        listener: &str,
    ) -> Result<NodeInfo, (i16, String)> {
        let p = self.txns.partition_for(transactional_id);
        let not_yet = |why: String| (E::CoordinatorNotAvailable.code(), why);
        let Some(m) = &self.cluster else {
            return Ok(self.this_node(listener));
        };
        let leader = self
            .topic(TRANSACTION_STATE_TOPIC)
            .and_then(|t| t.partition(p).and_then(|v| v.leader()))
            .ok_or_else(|| {
                not_yet(format!(
                    "{TRANSACTION_STATE_TOPIC}-{p} has no leader at the moment"
                ))
            })?;
        let image = m.image();
        let b = image.broker(leader).ok_or_else(|| {
            not_yet(format!(
                "broker {leader}, which leads {TRANSACTION_STATE_TOPIC}-{p}, is not live"
            ))
        })?;
        let e = b.endpoint(listener).ok_or_else(|| {
            not_yet(format!(
                "broker {leader}, which leads {TRANSACTION_STATE_TOPIC}-{p}, has no listener \
                 {listener}"
            ))
        })?;
        Ok(NodeInfo {
            id: leader,
            host: e.host.clone(),
            port: e.port,
            rack: b.rack.clone(),
        })
    }
}
