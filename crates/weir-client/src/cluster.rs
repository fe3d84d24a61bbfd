//! What the client knows of the cluster: the brokers (from `bootstrap.servers`, then from
//! Metadata), each topic's partitions and their leaders, group coordinators, and one
//! connection per broker, made on first use and remade when it breaks. Any
//! Kafka-compatible broker works: nothing here is specific to Weir.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::conn::BrokerConnection;
use crate::error::{ClientError, Result};

/// One partition's leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    pub leader: i32,
    pub leader_epoch: i32,
}

/// What Metadata said of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: uuid::Uuid,
    pub partitions: Vec<PartitionInfo>,
    pub internal: bool,
}

/// The cluster as last seen.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    pub brokers: HashMap<i32, String>,
    pub controller: i32,
    pub cluster_id: Option<String>,
    pub topics: HashMap<String, TopicInfo>,
    /// Topics the broker said do not exist (or errored on), with the error code.
    pub topic_errors: HashMap<String, i16>,
}

/// What FindCoordinator looks for (its `key_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorKind {
    /// A consumer group's coordinator (key type 0).
    Group,
    /// A transactional id's coordinator (key type 1, FindCoordinator v1 and later).
    Transaction,
}

impl CoordinatorKind {
    fn key_type(self) -> i8 {
        match self {
            CoordinatorKind::Group => 0,
            CoordinatorKind::Transaction => 1,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            CoordinatorKind::Group => "group",
            CoordinatorKind::Transaction => "transactional id",
        }
    }
}

/// Connection settings shared by every client.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub bootstrap_servers: Vec<String>,
    pub client_id: String,
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    pub retry_backoff: Duration,
    /// TLS and SASL (`security.protocol` and its settings).
    pub security: crate::security::Security,
}

/// The cluster: metadata and connections.
pub struct Cluster {
    config: ClusterConfig,
    metadata: RwLock<Metadata>,
    connections: tokio::sync::Mutex<HashMap<String, Arc<BrokerConnection>>>,
    /// The coordinator found for each (kind, key): a group's and a transactional id's are
    /// cached apart, as the same name may be both.
    coordinators: Mutex<HashMap<(CoordinatorKind, String), i32>>,
    /// Counts metadata refreshes, so that callers may cache what they derive from it.
    generation: std::sync::atomic::AtomicU64,
    /// The runtime connections are made on (their sockets and the tasks that read their
    /// answers live there), when it is not the caller's: the producer's I/O thread.
    io: Option<tokio::runtime::Handle>,
}

const METADATA_VERSIONS: (i16, i16) = (1, 12);
const FIND_COORDINATOR_VERSIONS: (i16, i16) = (0, 4);

impl Cluster {
    pub fn new(config: ClusterConfig) -> Result<Arc<Self>> {
        Self::with_io(config, None)
    }

    /// A cluster whose connections live on the runtime `io` (if given), whichever runtime
    /// asks for them.
    pub fn with_io(config: ClusterConfig, io: Option<tokio::runtime::Handle>) -> Result<Arc<Self>> {
        if config.bootstrap_servers.is_empty() {
            return Err(ClientError::Config(
                "bootstrap.servers names no broker".into(),
            ));
        }
        Ok(Arc::new(Cluster {
            config,
            metadata: RwLock::new(Metadata::default()),
            connections: tokio::sync::Mutex::new(HashMap::new()),
            coordinators: Mutex::new(HashMap::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
            io,
        }))
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Changes whenever the metadata is refreshed.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// A snapshot of the metadata.
    pub fn metadata(&self) -> Metadata {
        self.metadata.read().map(|m| m.clone()).unwrap_or_default()
    }

    /// A (cached or new) connection to `addr`.
    pub async fn connect(&self, addr: &str) -> Result<Arc<BrokerConnection>> {
        let mut conns = self.connections.lock().await;
        if let Some(c) = conns.get(addr) {
            if !c.is_broken() {
                return Ok(c.clone());
            }
        }
        let cfg = &self.config;
        let connect = {
            let (addr, client_id, security) = (
                addr.to_string(),
                cfg.client_id.clone(),
                cfg.security.clone(),
            );
            let (connect_timeout, request_timeout) = (cfg.connect_timeout, cfg.request_timeout);
            async move {
                let (id, sec) = (&client_id, &security);
                BrokerConnection::connect(&addr, id, connect_timeout, request_timeout, sec).await
            }
        };
        let c = match &self.io {
            None => connect.await?,
            Some(io) => io.spawn(connect).await.map_err(|_| ClientError::Closed)??,
        };
        conns.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// A connection to broker `node` (from the metadata).
    pub async fn node(&self, node: i32) -> Result<Arc<BrokerConnection>> {
        let addr = self
            .metadata
            .read()
            .ok()
            .and_then(|m| m.brokers.get(&node).cloned())
            .ok_or_else(|| {
                ClientError::Protocol(format!("broker {node} is not in the metadata"))
            })?;
        self.connect(&addr).await
    }

    /// A connection to any broker: a known one, else a bootstrap server.
    pub async fn any(&self) -> Result<Arc<BrokerConnection>> {
        let known: Vec<String> = self
            .metadata
            .read()
            .map(|m| m.brokers.values().cloned().collect())
            .unwrap_or_default();
        let mut last = None;
        for addr in known.iter().chain(self.config.bootstrap_servers.iter()) {
            match self.connect(addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Config("no broker to connect to".into())))
    }

    /// Refreshes the metadata of `topics` (all topics if `None`), creating missing ones if
    /// the broker allows it and `auto_create` is set.
    pub async fn refresh(&self, topics: Option<&[String]>, auto_create: bool) -> Result<Metadata> {
        let conn = self.any().await?;
        let v = conn.version_for(ApiKey::Metadata, METADATA_VERSIONS)?;
        let mut req = MetadataRequest::default();
        req.topics = topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    let mut r = MetadataRequestTopic::default();
                    r.name = Some(TopicName(StrBytes::from_string(t.clone())));
                    r
                })
                .collect()
        });
        if v >= 4 {
            req.allow_auto_topic_creation = auto_create;
        }
        let resp: MetadataResponse = conn.request(&req, v).await?;
        let mut fresh = Metadata {
            brokers: resp
                .brokers
                .iter()
                .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
                .collect(),
            controller: resp.controller_id.0,
            cluster_id: resp.cluster_id.as_ref().map(|c| c.to_string()),
            ..Default::default()
        };
        for t in &resp.topics {
            let Some(name) = t.name.as_ref().map(|n| n.to_string()) else {
                continue;
            };
            if t.error_code != 0 {
                fresh.topic_errors.insert(name, t.error_code);
                continue;
            }
            let mut partitions = vec![
                PartitionInfo {
                    leader: -1,
                    leader_epoch: -1
                };
                t.partitions.len()
            ];
            for p in &t.partitions {
                if let Some(slot) = usize::try_from(p.partition_index)
                    .ok()
                    .and_then(|i| partitions.get_mut(i))
                {
                    *slot = PartitionInfo {
                        leader: if p.error_code == 0 { p.leader_id.0 } else { -1 },
                        leader_epoch: p.leader_epoch,
                    };
                }
            }
            fresh.topics.insert(
                name,
                TopicInfo {
                    id: t.topic_id,
                    partitions,
                    internal: t.is_internal,
                },
            );
        }
        let mut m = self
            .metadata
            .write()
            .map_err(|_| ClientError::Protocol("poisoned".into()))?;
        m.brokers = fresh.brokers.clone();
        m.controller = fresh.controller;
        m.cluster_id = fresh.cluster_id.clone();
        if topics.is_none() {
            m.topics.clear();
            m.topic_errors.clear();
        }
        for (k, v) in &fresh.topics {
            m.topics.insert(k.clone(), v.clone());
            m.topic_errors.remove(k);
        }
        for (k, v) in &fresh.topic_errors {
            m.topics.remove(k);
            m.topic_errors.insert(k.clone(), *v);
        }
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(fresh)
    }

    /// A topic's partitions, refreshing the metadata if the topic is not known yet.
    pub async fn topic(&self, topic: &str, auto_create: bool) -> Result<TopicInfo> {
        if let Some(t) = self
            .metadata
            .read()
            .ok()
            .and_then(|m| m.topics.get(topic).cloned())
        {
            return Ok(t);
        }
        let fresh = self
            .refresh(Some(&[topic.to_string()]), auto_create)
            .await?;
        match fresh.topics.get(topic) {
            Some(t) => Ok(t.clone()),
            None => Err(ClientError::kafka(
                fresh.topic_errors.get(topic).copied().unwrap_or(3),
                Some(format!("topic '{topic}'")),
            )),
        }
    }

    /// Forgets what is known of a group's coordinator (after NOT_COORDINATOR and the like).
    pub fn forget_coordinator(&self, group: &str) {
        self.forget_coordinator_of(CoordinatorKind::Group, group)
    }

    /// Forgets the coordinator found for `key`.
    pub fn forget_coordinator_of(&self, kind: CoordinatorKind, key: &str) {
        if let Ok(mut c) = self.coordinators.lock() {
            c.remove(&(kind, key.to_string()));
        }
    }

    /// The broker last found to coordinate `key`, if any.
    pub fn known_coordinator(&self, kind: CoordinatorKind, key: &str) -> Option<i32> {
        self.coordinators
            .lock()
            .ok()
            .and_then(|c| c.get(&(kind, key.to_string())).copied())
    }

    /// The coordinator of `group` (FindCoordinator, cached).
    pub async fn coordinator(&self, group: &str) -> Result<Arc<BrokerConnection>> {
        self.coordinator_of(CoordinatorKind::Group, group).await
    }

    /// The coordinator of a group or a transactional id (FindCoordinator, cached).
    pub async fn coordinator_of(
        &self,
        kind: CoordinatorKind,
        key: &str,
    ) -> Result<Arc<BrokerConnection>> {
        let cache_key = (kind, key.to_string());
        let cached = self
            .coordinators
            .lock()
            .ok()
            .and_then(|c| c.get(&cache_key).copied());
        if let Some(node) = cached {
            if let Ok(c) = self.node(node).await {
                return Ok(c);
            }
        }
        let conn = self.any().await?;
        let lowest = match kind {
            CoordinatorKind::Group => FIND_COORDINATOR_VERSIONS.0,
            // Version 0 has no key type: it can only find a group's coordinator.
            CoordinatorKind::Transaction => 1,
        };
        let v = conn.version_for(
            ApiKey::FindCoordinator,
            (lowest, FIND_COORDINATOR_VERSIONS.1),
        )?;
        let mut req = FindCoordinatorRequest::default();
        req.key_type = kind.key_type();
        if v >= 4 {
            req.coordinator_keys = vec![StrBytes::from_string(key.to_string())];
        } else {
            req.key = StrBytes::from_string(key.to_string());
        }
        let resp: FindCoordinatorResponse = conn.request(&req, v).await?;
        let (code, node, host, port) = if v >= 4 {
            let c = resp.coordinators.first().ok_or_else(|| {
                ClientError::Protocol("FindCoordinator answered with no coordinator".into())
            })?;
            (c.error_code, c.node_id.0, c.host.to_string(), c.port)
        } else {
            (
                resp.error_code,
                resp.node_id.0,
                resp.host.to_string(),
                resp.port,
            )
        };
        if code != 0 {
            return Err(ClientError::kafka(
                code,
                Some(format!(
                    "finding the coordinator of {} '{key}'",
                    kind.describe()
                )),
            ));
        }
        if let Ok(mut m) = self.metadata.write() {
            m.brokers.insert(node, format!("{host}:{port}"));
        }
        if let Ok(mut c) = self.coordinators.lock() {
            c.insert(cache_key, node);
        }
        self.connect(&format!("{host}:{port}")).await
    }
}
