//! Topics and their partitions through the admin client: listing, describing, creating and
//! deleting topics, adding partitions, and the partitions' offsets (ListOffsets) and
//! records (DeleteRecords). Topic changes go to the controller, offsets and records to
//! each partition's leader; nothing here reads or writes a group.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest,
    DeleteTopicsRequest, ListOffsetsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::ResponseError as E;

use super::{err, is_routing_error, sb, with_context, Admin, TopicPartitionKey};
use crate::error::{ClientError, Result};

const METADATA: (i16, i16) = (1, 12);
const CREATE_TOPICS: (i16, i16) = (2, 7);
const DELETE_TOPICS: (i16, i16) = (1, 6);
const CREATE_PARTITIONS: (i16, i16) = (0, 3);
const DELETE_RECORDS: (i16, i16) = (0, 2);
const LIST_OFFSETS: (i16, i16) = (1, 7);

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

impl Admin {
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
