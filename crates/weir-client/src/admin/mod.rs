//! The admin client: topics and partitions, configs, consumer groups and their offsets,
//! deleting records, ACLs and client quotas — the operations of Kafka's `Admin`, over the Kafka protocol, so
//! it works against any Kafka-compatible broker.
//!
//! Each request goes where Kafka sends it: topic creation, deletion and new partitions to
//! the controller; group operations to the group's coordinator; record deletion and offset
//! lookups to each partition's leader; listing groups to every broker. Retriable errors
//! (a moved controller or coordinator, a broken connection) are retried with
//! `retry.backoff.ms` between tries until `default.api.timeout.ms` has passed; anything
//! else is returned at once, per item where Kafka answers per item.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, ConsumerProtocolAssignment, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, GroupId, IncrementalAlterConfigsRequest, ListGroupsRequest,
    ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetDeleteRequest,
    OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError as E;

use crate::cluster::{Cluster, ClusterConfig};
use crate::config::Props;
use crate::conn::BrokerConnection;
use crate::error::{ClientError, Result};

mod acls;
mod quotas;
pub use quotas::{QuotaAlteration, QuotaEntity, QuotaMatch};
/// The ACL and config vocabulary of the admin API is Kafka's, defined once in weir-kafka.
pub use weir_kafka::acl::{
    AclBinding, AclBindingFilter, Operation, PatternFilter, PatternType, Permission, ResourceType,
};
use weir_kafka::config::AlterConfigOpType;
pub use weir_kafka::config::{
    ConfigEntry, ConfigResource, ConfigSource, ConfigSynonym, ConfigType,
};

const METADATA: (i16, i16) = (1, 12);
const CREATE_TOPICS: (i16, i16) = (2, 7);
const DELETE_TOPICS: (i16, i16) = (1, 6);
const CREATE_PARTITIONS: (i16, i16) = (0, 3);
const DESCRIBE_CONFIGS: (i16, i16) = (1, 4);
const INCREMENTAL_ALTER_CONFIGS: (i16, i16) = (0, 1);
const LIST_GROUPS: (i16, i16) = (0, 4);
const DESCRIBE_GROUPS: (i16, i16) = (0, 5);
const DELETE_GROUPS: (i16, i16) = (0, 2);
const DELETE_RECORDS: (i16, i16) = (0, 2);
const LIST_OFFSETS: (i16, i16) = (1, 7);
const OFFSET_FETCH: (i16, i16) = (1, 7);
const OFFSET_COMMIT: (i16, i16) = (2, 8);
const OFFSET_DELETE: (i16, i16) = (0, 0);

/// The admin client's settings.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub cluster: ClusterConfig,
    /// `default.api.timeout.ms`: how long one admin call may take, retries included.
    pub api_timeout: Duration,
}

impl AdminConfig {
    /// Kafka's admin keys: `bootstrap.servers`, `client.id`, `request.timeout.ms`,
    /// `default.api.timeout.ms`, `retry.backoff.ms`, `socket.connection.setup.timeout.ms`.
    pub fn from_properties<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        let mut p = Props::new(pairs);
        let cluster = p.cluster("weir-admin")?;
        let api_timeout = Duration::from_millis(p.int("default.api.timeout.ms", 60_000u64, 1)?);
        p.finish(&["retries"])?;
        Ok(AdminConfig {
            cluster,
            api_timeout,
        })
    }
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    /// -1 for the broker's `num.partitions`.
    pub num_partitions: i32,
    /// -1 for the broker's `default.replication.factor`.
    pub replication_factor: i16,
    /// Topic-level settings (`cleanup.policy`, `retention.ms`, ...).
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    pub fn new(name: impl Into<String>, num_partitions: i32, replication_factor: i16) -> Self {
        NewTopic {
            name: name.into(),
            num_partitions,
            replication_factor,
            configs: Vec::new(),
        }
    }
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.push((key.into(), value.into()));
        self
    }
}

/// One partition of a described topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    pub partition: i32,
    /// -1 when the partition has no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub offline_replicas: Vec<i32>,
}

/// A topic as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub id: uuid::Uuid,
    pub internal: bool,
    pub partitions: Vec<PartitionDescription>,
}

/// A broker of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerDescription {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// The cluster as Metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    pub cluster_id: Option<String>,
    pub controller: i32,
    pub brokers: Vec<BrokerDescription>,
}

/// A change to one config (IncrementalAlterConfigs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    Set(String, String),
    /// Back to the default.
    Delete(String),
    /// Add to a list-valued config.
    Append(String, String),
    /// Remove from a list-valued config.
    Subtract(String, String),
}

impl AlterConfigOp {
    fn wire(&self) -> AlterableConfig {
        let (name, op, value) = match self {
            AlterConfigOp::Set(k, v) => (k, AlterConfigOpType::Set, Some(v)),
            AlterConfigOp::Delete(k) => (k, AlterConfigOpType::Delete, None),
            AlterConfigOp::Append(k, v) => (k, AlterConfigOpType::Append, Some(v)),
            AlterConfigOp::Subtract(k, v) => (k, AlterConfigOpType::Subtract, Some(v)),
        };
        let mut c = AlterableConfig::default();
        c.name = StrBytes::from_string(name.clone());
        c.config_operation = op.code();
        c.value = value.map(|v| StrBytes::from_string(v.clone()));
        c
    }
}

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    /// "consumer" for consumer groups; "" for groups that only commit offsets.
    pub protocol_type: String,
    /// Empty when the broker is too old to say.
    pub state: String,
}

/// A member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub host: String,
    /// The partitions assigned to the member, when the group is a consumer group.
    pub assignment: Vec<(String, i32)>,
}

/// A group as DescribeGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    /// Stable, PreparingRebalance, CompletingRebalance, Empty or Dead.
    pub state: String,
    pub protocol_type: String,
    /// The assignor the group chose (range, cooperative-sticky, ...).
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

/// Which offset ListOffsets looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    /// The first offset whose timestamp is at or after this (ms since the epoch).
    Timestamp(i64),
    /// The offset of the record with the largest timestamp.
    MaxTimestamp,
}

impl OffsetSpec {
    fn wire(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(t) => t,
            OffsetSpec::MaxTimestamp => -3,
        }
    }
}

/// What ListOffsets found: `offset` is -1 when no record has a timestamp that late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    pub offset: i64,
    pub timestamp: i64,
}

/// A topic-partition.
pub type TopicPartitionKey = (String, i32);

/// The admin client.
pub struct Admin {
    cluster: Arc<Cluster>,
    config: AdminConfig,
}

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn err(code: i16, message: Option<&StrBytes>) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::kafka(code, message.map(|m| m.to_string())))
    }
}

/// Errors that mean "ask the controller or coordinator again": Kafka returns them per
/// item, but they concern the whole request.
fn is_routing_error(code: i16) -> bool {
    code == E::NotController.code()
        || code == E::NotCoordinator.code()
        || code == E::CoordinatorNotAvailable.code()
        || code == E::CoordinatorLoadInProgress.code()
}

impl Admin {
    /// An admin client from Kafka-style properties (`bootstrap.servers` at least).
    pub fn from_properties<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self> {
        Self::new(AdminConfig::from_properties(pairs)?)
    }

    pub fn new(config: AdminConfig) -> Result<Self> {
        Ok(Admin {
            cluster: Cluster::new(config.cluster.clone())?,
            config,
        })
    }

    /// Runs `call` until it succeeds, fails with an error retrying cannot help, or
    /// `default.api.timeout.ms` passes.
    async fn retrying<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + self.config.api_timeout;
        loop {
            let e = match call().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let backoff = self.config.cluster.retry_backoff;
            if !e.is_retriable() || Instant::now() + backoff >= deadline {
                return Err(match e {
                    ClientError::Connection { .. } | ClientError::Timeout { .. }
                        if e.is_retriable() =>
                    {
                        ClientError::Timeout {
                            what: format!("{what}: {e}"),
                            ms: self.config.api_timeout.as_millis() as u64,
                        }
                    }
                    e => e,
                });
            }
            tracing::debug!("{what}: {e}; retrying");
            if e.needs_metadata_refresh() {
                let _ = self.cluster.refresh(Some(&[]), false).await;
            }
            tokio::time::sleep(backoff).await;
        }
    }

    /// The controller, where topic changes go (any broker if the metadata names none).
    async fn controller(&self) -> Result<Arc<BrokerConnection>> {
        let m = self.cluster.refresh(Some(&[]), false).await?;
        if m.brokers.contains_key(&m.controller) {
            self.cluster.node(m.controller).await
        } else {
            self.cluster.any().await
        }
    }

    /// The group's coordinator; a routing error makes the next call look it up again.
    async fn coordinator(&self, group: &str) -> Result<Arc<BrokerConnection>> {
        self.cluster.coordinator(group).await
    }

    fn routing_failure(&self, group: Option<&str>, code: i16) -> ClientError {
        if let Some(g) = group {
            self.cluster.forget_coordinator(g);
        }
        ClientError::kafka(code, None)
    }

    fn timeout_ms(&self) -> i32 {
        i32::try_from(self.config.api_timeout.as_millis()).unwrap_or(i32::MAX)
    }

    /// The cluster's id, controller and brokers.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        self.retrying("describing the cluster", || async {
            let conn = self.cluster.any().await?;
            let v = conn.version_for(ApiKey::Metadata, METADATA)?;
            let mut req = MetadataRequest::default();
            req.topics = Some(Vec::new());
            let resp = conn.request(&req, v).await?;
            let mut brokers: Vec<BrokerDescription> = resp
                .brokers
                .iter()
                .map(|b| BrokerDescription {
                    id: b.node_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.to_string()),
                })
                .collect();
            brokers.sort_by_key(|b| b.id);
            Ok(ClusterDescription {
                cluster_id: resp.cluster_id.as_ref().map(|c| c.to_string()),
                controller: resp.controller_id.0,
                brokers,
            })
        })
        .await
    }

    /// The names of all topics; internal ones (`__consumer_offsets`) only if asked.
    pub async fn list_topics(&self, include_internal: bool) -> Result<Vec<String>> {
        let m = self
            .retrying("listing topics", || self.cluster.refresh(None, false))
            .await?;
        let mut names: Vec<String> = m
            .topics
            .iter()
            .filter(|(_, t)| include_internal || !t.internal)
            .map(|(n, _)| n.clone())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Describes topics (leaders, replicas, in-sync replicas). A topic that does not
    /// exist is an UNKNOWN_TOPIC_OR_PARTITION error in its slot.
    pub async fn describe_topics(
        &self,
        names: &[String],
    ) -> Result<Vec<(String, Result<TopicDescription>)>> {
        let resp = self
            .retrying("describing topics", || async {
                let conn = self.cluster.any().await?;
                let v = conn.version_for(ApiKey::Metadata, METADATA)?;
                let mut req = MetadataRequest::default();
                req.topics = Some(
                    names
                        .iter()
                        .map(|n| {
                            let mut t = MetadataRequestTopic::default();
                            t.name = Some(TopicName(sb(n)));
                            t
                        })
                        .collect(),
                );
                if v >= 4 {
                    req.allow_auto_topic_creation = false;
                }
                conn.request(&req, v).await
            })
            .await?;
        let mut found: HashMap<String, Result<TopicDescription>> = HashMap::new();
        for t in resp.topics {
            let Some(name) = t.name.as_ref().map(|n| n.to_string()) else {
                continue;
            };
            if t.error_code != 0 {
                found.insert(
                    name.clone(),
                    Err(ClientError::kafka(
                        t.error_code,
                        Some(format!("topic '{name}'")),
                    )),
                );
                continue;
            }
            let mut partitions: Vec<PartitionDescription> = t
                .partitions
                .iter()
                .map(|p| PartitionDescription {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    offline_replicas: p.offline_replicas.iter().map(|b| b.0).collect(),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            found.insert(
                name.clone(),
                Ok(TopicDescription {
                    name,
                    id: t.topic_id,
                    internal: t.is_internal,
                    partitions,
                }),
            );
        }
        Ok(names
            .iter()
            .map(|n| {
                let r = found.remove(n).unwrap_or_else(|| {
                    Err(ClientError::kafka(
                        E::UnknownTopicOrPartition.code(),
                        Some(format!("topic '{n}'")),
                    ))
                });
                (n.clone(), r)
            })
            .collect())
    }

    /// Creates topics; each gets its own result (TOPIC_ALREADY_EXISTS,
    /// INVALID_PARTITIONS, INVALID_CONFIG, ...). With `validate_only` the broker checks
    /// the request and creates nothing.
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Result<Vec<(String, Result<()>)>> {
        let resp = self
            .retrying("creating topics", || async {
                let conn = self.controller().await?;
                let v = conn.version_for(ApiKey::CreateTopics, CREATE_TOPICS)?;
                let mut req = CreateTopicsRequest::default();
                req.timeout_ms = self.timeout_ms();
                req.validate_only = validate_only;
                req.topics = topics
                    .iter()
                    .map(|t| {
                        let mut c = CreatableTopic::default();
                        c.name = TopicName(sb(&t.name));
                        c.num_partitions = t.num_partitions;
                        c.replication_factor = t.replication_factor;
                        c.configs = t
                            .configs
                            .iter()
                            .map(|(k, v)| {
                                let mut e = CreatableTopicConfig::default();
                                e.name = sb(k);
                                e.value = Some(sb(v));
                                e
                            })
                            .collect();
                        c
                    })
                    .collect();
                let resp = conn.request(&req, v).await?;
                if let Some(t) = resp.topics.iter().find(|t| is_routing_error(t.error_code)) {
                    return Err(self.routing_failure(None, t.error_code));
                }
                Ok(resp)
            })
            .await?;
        let mut by_name: HashMap<String, Result<()>> = resp
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    err(t.error_code, t.error_message.as_ref()),
                )
            })
            .collect();
        Ok(topics
            .iter()
            .map(|t| {
                let r = by_name.remove(&t.name).unwrap_or_else(|| {
                    Err(ClientError::Protocol(format!(
                        "the broker did not answer for topic '{}'",
                        t.name
                    )))
                });
                (t.name.clone(), r)
            })
            .collect())
    }

    /// Deletes topics by name; each gets its own result.
    pub async fn delete_topics(&self, names: &[String]) -> Result<Vec<(String, Result<()>)>> {
        let resp = self
            .retrying("deleting topics", || async {
                let conn = self.controller().await?;
                let v = conn.version_for(ApiKey::DeleteTopics, DELETE_TOPICS)?;
                let mut req = DeleteTopicsRequest::default();
                req.timeout_ms = self.timeout_ms();
                if v >= 6 {
                    req.topics = names
                        .iter()
                        .map(|n| {
                            let mut s = DeleteTopicState::default();
                            s.name = Some(TopicName(sb(n)));
                            s
                        })
                        .collect();
                } else {
                    req.topic_names = names.iter().map(|n| TopicName(sb(n))).collect();
                }
                let resp = conn.request(&req, v).await?;
                if let Some(t) = resp
                    .responses
                    .iter()
                    .find(|t| is_routing_error(t.error_code))
                {
                    return Err(self.routing_failure(None, t.error_code));
                }
                Ok(resp)
            })
            .await?;
        let mut by_name: HashMap<String, Result<()>> = resp
            .responses
            .iter()
            .filter_map(|t| {
                let name = t.name.as_ref()?.to_string();
                Some((name, err(t.error_code, t.error_message.as_ref())))
            })
            .collect();
        Ok(names
            .iter()
            .map(|n| {
                let r = by_name.remove(n).unwrap_or_else(|| {
                    Err(ClientError::Protocol(format!(
                        "the broker did not answer for topic '{n}'"
                    )))
                });
                (n.clone(), r)
            })
            .collect())
    }

    /// Grows topics to the given total partition counts (Kafka cannot shrink a topic).
    pub async fn create_partitions(
        &self,
        totals: &[(String, i32)],
        validate_only: bool,
    ) -> Result<Vec<(String, Result<()>)>> {
        let resp = self
            .retrying("adding partitions", || async {
                let conn = self.controller().await?;
                let v = conn.version_for(ApiKey::CreatePartitions, CREATE_PARTITIONS)?;
                let mut req = CreatePartitionsRequest::default();
                req.timeout_ms = self.timeout_ms();
                req.validate_only = validate_only;
                req.topics = totals
                    .iter()
                    .map(|(name, count)| {
                        let mut t = CreatePartitionsTopic::default();
                        t.name = TopicName(sb(name));
                        t.count = *count;
                        t.assignments = None;
                        t
                    })
                    .collect();
                let resp = conn.request(&req, v).await?;
                if let Some(t) = resp.results.iter().find(|t| is_routing_error(t.error_code)) {
                    return Err(self.routing_failure(None, t.error_code));
                }
                Ok(resp)
            })
            .await?;
        let mut by_name: HashMap<String, Result<()>> = resp
            .results
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    err(t.error_code, t.error_message.as_ref()),
                )
            })
            .collect();
        Ok(totals
            .iter()
            .map(|(n, _)| {
                let r = by_name.remove(n).unwrap_or_else(|| {
                    Err(ClientError::Protocol(format!(
                        "the broker did not answer for topic '{n}'"
                    )))
                });
                (n.clone(), r)
            })
            .collect())
    }

    /// The configs of a topic or broker (all of them, defaults included).
    pub async fn describe_configs(&self, resource: &ConfigResource) -> Result<Vec<ConfigEntry>> {
        let (kind, name) = resource.wire();
        let resp = self
            .retrying("describing configs", || async {
                // A broker's configs are answered by that broker.
                let conn = match resource {
                    ConfigResource::Broker(id) => {
                        self.cluster.refresh(Some(&[]), false).await?;
                        self.cluster.node(*id).await?
                    }
                    ConfigResource::Topic(_) => self.cluster.any().await?,
                };
                let v = conn.version_for(ApiKey::DescribeConfigs, DESCRIBE_CONFIGS)?;
                let mut req = DescribeConfigsRequest::default();
                let mut r = DescribeConfigsResource::default();
                r.resource_type = kind;
                r.resource_name = sb(&name);
                r.configuration_keys = None;
                req.resources = vec![r];
                conn.request(&req, v).await
            })
            .await?;
        let result = resp
            .results
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("DescribeConfigs answered nothing".into()))?;
        err(result.error_code, result.error_message.as_ref())?;
        let mut entries: Vec<ConfigEntry> = result
            .configs
            .into_iter()
            .map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                source: ConfigSource::from_code(c.config_source),
                read_only: c.read_only,
                sensitive: c.is_sensitive,
                config_type: ConfigType::from_code(c.config_type),
                documentation: c.documentation.map(|d| d.to_string()),
                synonyms: c
                    .synonyms
                    .into_iter()
                    .map(|s| ConfigSynonym {
                        name: s.name.to_string(),
                        value: s.value.map(|v| v.to_string()),
                        source: ConfigSource::from_code(s.source),
                    })
                    .collect(),
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Changes configs of a topic or broker (IncrementalAlterConfigs: only the named keys
    /// change).
    pub async fn alter_configs(
        &self,
        resource: &ConfigResource,
        ops: &[AlterConfigOp],
        validate_only: bool,
    ) -> Result<()> {
        let (kind, name) = resource.wire();
        let resp = self
            .retrying("altering configs", || async {
                let conn = match resource {
                    ConfigResource::Broker(id) => {
                        self.cluster.refresh(Some(&[]), false).await?;
                        self.cluster.node(*id).await?
                    }
                    ConfigResource::Topic(_) => self.controller().await?,
                };
                let v =
                    conn.version_for(ApiKey::IncrementalAlterConfigs, INCREMENTAL_ALTER_CONFIGS)?;
                let mut req = IncrementalAlterConfigsRequest::default();
                req.validate_only = validate_only;
                let mut r = AlterConfigsResource::default();
                r.resource_type = kind;
                r.resource_name = sb(&name);
                r.configs = ops.iter().map(AlterConfigOp::wire).collect();
                req.resources = vec![r];
                let resp = conn.request(&req, v).await?;
                if let Some(r) = resp
                    .responses
                    .iter()
                    .find(|r| is_routing_error(r.error_code))
                {
                    return Err(self.routing_failure(None, r.error_code));
                }
                Ok(resp)
            })
            .await?;
        match resp.responses.first() {
            Some(r) => err(r.error_code, r.error_message.as_ref()),
            None => Err(ClientError::Protocol(
                "IncrementalAlterConfigs answered nothing".into(),
            )),
        }
    }

    /// Every group on every broker.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let m = self
            .retrying("listing groups", || self.cluster.refresh(Some(&[]), false))
            .await?;
        let mut ids: Vec<i32> = m.brokers.keys().copied().collect();
        ids.sort();
        let mut out: BTreeMap<String, GroupListing> = BTreeMap::new();
        for id in ids {
            let resp = self
                .retrying("listing groups", || async {
                    let conn = self.cluster.node(id).await?;
                    let v = conn.version_for(ApiKey::ListGroups, LIST_GROUPS)?;
                    let resp = conn.request(&ListGroupsRequest::default(), v).await?;
                    if resp.error_code != 0 {
                        return Err(ClientError::kafka(resp.error_code, None));
                    }
                    Ok(resp)
                })
                .await?;
            for g in resp.groups {
                out.insert(
                    g.group_id.to_string(),
                    GroupListing {
                        group_id: g.group_id.to_string(),
                        protocol_type: g.protocol_type.to_string(),
                        state: g.group_state.to_string(),
                    },
                );
            }
        }
        Ok(out.into_values().collect())
    }

    /// Describes a group: its state, assignor and members with their partitions. A group
    /// nobody has used is reported in state "Dead" (as Kafka does), not as an error.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription> {
        let resp = self
            .retrying("describing a group", || async {
                let conn = self.coordinator(group).await?;
                let v = conn.version_for(ApiKey::DescribeGroups, DESCRIBE_GROUPS)?;
                let mut req = DescribeGroupsRequest::default();
                req.groups = vec![GroupId(sb(group))];
                let resp = conn.request(&req, v).await?;
                if let Some(g) = resp.groups.iter().find(|g| is_routing_error(g.error_code)) {
                    return Err(self.routing_failure(Some(group), g.error_code));
                }
                Ok(resp)
            })
            .await?;
        let g = resp
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("DescribeGroups answered nothing".into()))?;
        err(g.error_code, g.error_message.as_ref())?;
        let consumer = g.protocol_type.as_str() == "consumer";
        let members = g
            .members
            .into_iter()
            .map(|m| MemberDescription {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.map(|i| i.to_string()),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: if consumer {
                    decode_assignment(m.member_assignment)
                } else {
                    Vec::new()
                },
            })
            .collect();
        Ok(GroupDescription {
            group_id: g.group_id.to_string(),
            state: g.group_state.to_string(),
            protocol_type: g.protocol_type.to_string(),
            protocol: g.protocol_data.to_string(),
            members,
        })
    }

    /// Deletes groups (they must have no members: NON_EMPTY_GROUP otherwise).
    pub async fn delete_groups(&self, groups: &[String]) -> Result<Vec<(String, Result<()>)>> {
        let mut out = Vec::new();
        // Each group may have a different coordinator.
        for group in groups {
            let r = self
                .retrying("deleting a group", || async {
                    let conn = self.coordinator(group).await?;
                    let v = conn.version_for(ApiKey::DeleteGroups, DELETE_GROUPS)?;
                    let mut req = DeleteGroupsRequest::default();
                    req.groups_names = vec![GroupId(sb(group))];
                    let resp = conn.request(&req, v).await?;
                    let code = resp.results.first().map(|r| r.error_code).ok_or_else(|| {
                        ClientError::Protocol("DeleteGroups answered nothing".into())
                    })?;
                    if is_routing_error(code) {
                        return Err(self.routing_failure(Some(group), code));
                    }
                    Ok(code)
                })
                .await;
            out.push((
                group.clone(),
                r.and_then(|code| err(code, None).map_err(|e| with_context(e, group))),
            ));
        }
        Ok(out)
    }

    /// A group's committed offsets: of `partitions`, or of every partition it committed
    /// when `None`. Partitions without a commit are left out.
    pub async fn list_group_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartitionKey]>,
    ) -> Result<BTreeMap<TopicPartitionKey, i64>> {
        let resp = self
            .retrying("fetching committed offsets", || async {
                let conn = self.coordinator(group).await?;
                let v = conn.version_for(ApiKey::OffsetFetch, OFFSET_FETCH)?;
                let mut req = OffsetFetchRequest::default();
                req.group_id = GroupId(sb(group));
                req.topics = partitions.map(|tps| {
                    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                    for (t, p) in tps {
                        by_topic.entry(t.as_str()).or_default().push(*p);
                    }
                    by_topic
                        .into_iter()
                        .map(|(t, ps)| {
                            let mut rt = OffsetFetchRequestTopic::default();
                            rt.name = TopicName(sb(t));
                            rt.partition_indexes = ps;
                            rt
                        })
                        .collect()
                });
                let resp = conn.request(&req, v).await?;
                if is_routing_error(resp.error_code) {
                    return Err(self.routing_failure(Some(group), resp.error_code));
                }
                err(resp.error_code, None)?;
                Ok(resp)
            })
            .await?;
        let mut out = BTreeMap::new();
        for t in resp.topics {
            for p in t.partitions {
                if p.error_code != 0 {
                    return Err(ClientError::kafka(
                        p.error_code,
                        Some(format!("{}-{}", t.name.as_str(), p.partition_index)),
                    ));
                }
                if p.committed_offset >= 0 {
                    out.insert((t.name.to_string(), p.partition_index), p.committed_offset);
                }
            }
        }
        Ok(out)
    }

    /// Sets a group's committed offsets, as `kafka-consumer-groups.sh --reset-offsets`
    /// does: the group must have no active members (UNKNOWN_MEMBER_ID otherwise).
    pub async fn alter_group_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartitionKey, i64>,
    ) -> Result<()> {
        let resp = self
            .retrying("committing offsets", || async {
                let conn = self.coordinator(group).await?;
                let v = conn.version_for(ApiKey::OffsetCommit, OFFSET_COMMIT)?;
                let mut req = OffsetCommitRequest::default();
                req.group_id = GroupId(sb(group));
                // No generation and no member: an admin commit, which the coordinator
                // takes only for a group nobody is in.
                req.generation_id_or_member_epoch = -1;
                req.member_id = StrBytes::default();
                req.retention_time_ms = -1;
                let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> =
                    BTreeMap::new();
                for ((t, p), o) in offsets {
                    let mut rp = OffsetCommitRequestPartition::default();
                    rp.partition_index = *p;
                    rp.committed_offset = *o;
                    rp.committed_leader_epoch = -1;
                    rp.committed_metadata = Some(StrBytes::default());
                    by_topic.entry(t.as_str()).or_default().push(rp);
                }
                req.topics = by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut rt = OffsetCommitRequestTopic::default();
                        rt.name = TopicName(sb(t));
                        rt.partitions = ps;
                        rt
                    })
                    .collect();
                let resp = conn.request(&req, v).await?;
                for t in &resp.topics {
                    if let Some(p) = t.partitions.iter().find(|p| is_routing_error(p.error_code)) {
                        return Err(self.routing_failure(Some(group), p.error_code));
                    }
                }
                Ok(resp)
            })
            .await?;
        for t in resp.topics {
            for p in t.partitions {
                if p.error_code != 0 {
                    let what = format!(
                        "{}-{} in group '{group}'",
                        t.name.as_str(),
                        p.partition_index
                    );
                    let e = ClientError::kafka(p.error_code, Some(what));
                    return Err(if p.error_code == E::UnknownMemberId.code() {
                        ClientError::kafka(
                            p.error_code,
                            Some(format!(
                                "group '{group}' has active members; stop its consumers first"
                            )),
                        )
                    } else {
                        e
                    });
                }
            }
        }
        Ok(())
    }

    /// Forgets a group's committed offsets for `partitions` (OffsetDelete; the group must
    /// not be consuming them).
    pub async fn delete_group_offsets(
        &self,
        group: &str,
        partitions: &[TopicPartitionKey],
    ) -> Result<()> {
        let resp = self
            .retrying("deleting committed offsets", || async {
                let conn = self.coordinator(group).await?;
                let v = conn.version_for(ApiKey::OffsetDelete, OFFSET_DELETE)?;
                let mut req = OffsetDeleteRequest::default();
                req.group_id = GroupId(sb(group));
                let mut by_topic: BTreeMap<&str, Vec<OffsetDeleteRequestPartition>> =
                    BTreeMap::new();
                for (t, p) in partitions {
                    let mut rp = OffsetDeleteRequestPartition::default();
                    rp.partition_index = *p;
                    by_topic.entry(t.as_str()).or_default().push(rp);
                }
                req.topics = by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut rt = OffsetDeleteRequestTopic::default();
                        rt.name = TopicName(sb(t));
                        rt.partitions = ps;
                        rt
                    })
                    .collect();
                let resp = conn.request(&req, v).await?;
                if is_routing_error(resp.error_code) {
                    return Err(self.routing_failure(Some(group), resp.error_code));
                }
                Ok(resp)
            })
            .await?;
        err(resp.error_code, None).map_err(|e| with_context(e, group))?;
        for t in resp.topics {
            for p in t.partitions {
                err(p.error_code, None).map_err(|e| {
                    with_context(e, &format!("{}-{}", t.name.as_str(), p.partition_index))
                })?;
            }
        }
        Ok(())
    }

    /// Looks up offsets (earliest, latest, by time) of partitions, asking each leader.
    pub async fn list_offsets(
        &self,
        partitions: &[(TopicPartitionKey, OffsetSpec)],
    ) -> Result<BTreeMap<TopicPartitionKey, ListedOffset>> {
        let mut out = BTreeMap::new();
        for (leader, group) in self
            .by_leader(partitions.iter().map(|(tp, s)| (tp, *s)))
            .await?
        {
            let resp = self
                .retrying("listing offsets", || async {
                    let conn = self.cluster.node(leader).await?;
                    let v = conn.version_for(ApiKey::ListOffsets, LIST_OFFSETS)?;
                    let mut req = ListOffsetsRequest::default();
                    req.replica_id = BrokerId(-1);
                    req.topics = group_by_topic(&group, |p, spec: &OffsetSpec| {
                        let mut lp = ListOffsetsPartition::default();
                        lp.partition_index = p;
                        lp.current_leader_epoch = -1;
                        lp.timestamp = spec.wire();
                        lp
                    })
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut lt = ListOffsetsTopic::default();
                        lt.name = TopicName(sb(&t));
                        lt.partitions = ps;
                        lt
                    })
                    .collect();
                    conn.request(&req, v).await
                })
                .await?;
            for t in resp.topics {
                for p in t.partitions {
                    let key = (t.name.to_string(), p.partition_index);
                    err(p.error_code, None)
                        .map_err(|e| with_context(e, &format!("{}-{}", key.0, key.1)))?;
                    out.insert(
                        key,
                        ListedOffset {
                            offset: p.offset,
                            timestamp: p.timestamp,
                        },
                    );
                }
            }
        }
        Ok(out)
    }

    /// Deletes every record below the given offsets (-1: the high watermark), moving
    /// each partition's log start; returns the new low watermarks.
    pub async fn delete_records(
        &self,
        before: &BTreeMap<TopicPartitionKey, i64>,
    ) -> Result<BTreeMap<TopicPartitionKey, Result<i64>>> {
        let mut out = BTreeMap::new();
        for (leader, group) in self
            .by_leader(before.iter().map(|(tp, o)| (tp, *o)))
            .await?
        {
            let resp = self
                .retrying("deleting records", || async {
                    let conn = self.cluster.node(leader).await?;
                    let v = conn.version_for(ApiKey::DeleteRecords, DELETE_RECORDS)?;
                    let mut req = DeleteRecordsRequest::default();
                    req.timeout_ms = self.timeout_ms();
                    req.topics = group_by_topic(&group, |p, offset: &i64| {
                        let mut dp = DeleteRecordsPartition::default();
                        dp.partition_index = p;
                        dp.offset = *offset;
                        dp
                    })
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut dt = DeleteRecordsTopic::default();
                        dt.name = TopicName(sb(&t));
                        dt.partitions = ps;
                        dt
                    })
                    .collect();
                    conn.request(&req, v).await
                })
                .await?;
            for t in resp.topics {
                for p in t.partitions {
                    let key = (t.name.to_string(), p.partition_index);
                    let r = err(p.error_code, None)
                        .map(|_| p.low_watermark)
                        .map_err(|e| with_context(e, &format!("{}-{}", key.0, key.1)));
                    out.insert(key, r);
                }
            }
        }
        Ok(out)
    }

    /// Splits per-partition items by the partition's leader.
    async fn by_leader<'a, T: Copy>(
        &self,
        items: impl Iterator<Item = (&'a TopicPartitionKey, T)>,
    ) -> Result<Vec<(i32, Vec<(TopicPartitionKey, T)>)>> {
        let items: Vec<(TopicPartitionKey, T)> = items.map(|(tp, v)| (tp.clone(), v)).collect();
        let mut topics: Vec<String> = items.iter().map(|((t, _), _)| t.clone()).collect();
        topics.sort();
        topics.dedup();
        let m = self
            .retrying("looking up leaders", || {
                self.cluster.refresh(Some(&topics), false)
            })
            .await?;
        let mut by: BTreeMap<i32, Vec<(TopicPartitionKey, T)>> = BTreeMap::new();
        for ((t, p), v) in items {
            let Some(info) = m.topics.get(&t) else {
                let code = m
                    .topic_errors
                    .get(&t)
                    .copied()
                    .unwrap_or(E::UnknownTopicOrPartition.code());
                return Err(ClientError::kafka(code, Some(format!("topic '{t}'"))));
            };
            let leader = usize::try_from(p)
                .ok()
                .and_then(|i| info.partitions.get(i))
                .map(|pi| pi.leader)
                .ok_or_else(|| {
                    ClientError::kafka(
                        E::UnknownTopicOrPartition.code(),
                        Some(format!(
                            "{t}-{p}: the topic has {} partitions",
                            info.partitions.len()
                        )),
                    )
                })?;
            if leader < 0 {
                return Err(ClientError::kafka(
                    E::LeaderNotAvailable.code(),
                    Some(format!("{t}-{p}")),
                ));
            }
            by.entry(leader).or_default().push(((t, p), v));
        }
        Ok(by.into_iter().collect())
    }
}

/// Groups per-partition items into per-topic lists, in topic order.
fn group_by_topic<T, P>(
    items: &[(TopicPartitionKey, T)],
    mut make: impl FnMut(i32, &T) -> P,
) -> Vec<(String, Vec<P>)> {
    let mut by: BTreeMap<&str, Vec<P>> = BTreeMap::new();
    for ((t, p), v) in items {
        by.entry(t.as_str()).or_default().push(make(*p, v));
    }
    by.into_iter().map(|(t, ps)| (t.to_string(), ps)).collect()
}

fn with_context(e: ClientError, what: &str) -> ClientError {
    match e {
        ClientError::Kafka {
            error,
            message: None,
        } => ClientError::Kafka {
            error,
            message: Some(what.to_string()),
        },
        e => e,
    }
}

/// The partitions in a consumer group member's assignment (Kafka's
/// ConsumerProtocolAssignment: a version, then the partitions). Bytes that do not parse
/// yield no partitions: the assignment belongs to the group's own clients, and describing
/// the group should not fail on it.
pub fn decode_assignment(bytes: Bytes) -> Vec<(String, i32)> {
    let mut buf = bytes;
    if buf.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([buf[0], buf[1]]);
    let mut rest = buf.split_off(2);
    // Versions above what we know keep the fields we read at the same places.
    let decoded = ConsumerProtocolAssignment::decode(&mut rest, version.clamp(0, 3));
    let Ok(a) = decoded else { return Vec::new() };
    let mut out: Vec<(String, i32)> = a
        .assigned_partitions
        .into_iter()
        .flat_map(|tp| {
            let t = tp.topic.to_string();
            tp.partitions.into_iter().map(move |p| (t.clone(), p))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn assignments_decode_as_kafka_encodes_them() {
        let mut a = ConsumerProtocolAssignment::default();
        let mut tp = TopicPartition::default();
        tp.topic = TopicName(sb("orders"));
        tp.partitions = vec![2, 0];
        a.assigned_partitions = vec![tp];
        for version in [0i16, 1, 3] {
            let mut buf = bytes::BytesMut::new();
            buf.extend_from_slice(&version.to_be_bytes());
            a.encode(&mut buf, version).unwrap();
            assert_eq!(
                decode_assignment(buf.freeze()),
                vec![("orders".to_string(), 0), ("orders".to_string(), 2)]
            );
        }
        assert!(decode_assignment(Bytes::from_static(&[0, 1, 0xff])).is_empty());
        assert!(decode_assignment(Bytes::new()).is_empty());
    }

    #[test]
    fn unknown_admin_settings_are_refused() {
        let e = AdminConfig::from_properties([("bootstrap.servers", "h:1"), ("acks", "all")])
            .unwrap_err();
        assert!(e.to_string().contains("acks"), "{e}");
        let c = AdminConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("default.api.timeout.ms", "1500"),
        ])
        .unwrap();
        assert_eq!(c.api_timeout, Duration::from_millis(1500));
    }
}
