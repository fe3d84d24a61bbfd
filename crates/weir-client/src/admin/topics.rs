//! Topics and their partitions through the admin client: listing, describing, creating and
//! deleting topics, adding partitions, and the partitions' offsets (ListOffsets) and
//! records (DeleteRecords). Topic changes go to the controller, offsets and records to
//! each partition's leader; nothing here reads or writes a group.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest,
    DeleteRecordsResponse, DeleteTopicsRequest, ListOffsetsRequest, ListOffsetsResponse,
    MetadataRequest, TopicName,
};
use kafka_protocol::protocol::Request;
use kafka_protocol::ResponseError as E;

use super::{
    by_topic, err, match_answers, no_routing_codes, partition_item, sb, topic_item, with_context,
    Admin, Route, TopicPartitionKey,
};
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
        let build = |v: i16| {
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
            req
        };
        let resp = self
            .send(
                "describing topics",
                Route::Any,
                METADATA,
                build,
                no_routing_codes,
            )
            .await?;
        let answered = resp.topics.into_iter().filter_map(|t| {
            let name = t.name.as_ref()?.to_string();
            if t.error_code != 0 {
                let e = ClientError::kafka(t.error_code, Some(format!("topic '{name}'")));
                return Some((name, Err(e)));
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
            let description = TopicDescription {
                name: name.clone(),
                id: t.topic_id,
                internal: t.is_internal,
                partitions,
            };
            Some((name, Ok(description)))
        });
        match_answers("Metadata", names.iter().cloned(), answered, topic_item)
    }

    /// Creates topics; each gets its own result (TOPIC_ALREADY_EXISTS,
    /// INVALID_PARTITIONS, INVALID_CONFIG, ...). With `validate_only` the broker checks
    /// the request and creates nothing.
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Result<Vec<(String, Result<()>)>> {
        let build = |_| {
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
            req
        };
        let resp = self
            .send(
                "creating topics",
                Route::Controller,
                CREATE_TOPICS,
                build,
                |r| r.topics.iter().map(|t| t.error_code).collect(),
            )
            .await?;
        match_answers(
            "CreateTopics",
            topics.iter().map(|t| t.name.clone()),
            resp.topics.iter().map(|t| {
                let r = err(t.error_code, t.error_message.as_ref());
                (t.name.to_string(), r)
            }),
            topic_item,
        )
    }

    /// Deletes topics by name; each gets its own result.
    pub async fn delete_topics(&self, names: &[String]) -> Result<Vec<(String, Result<()>)>> {
        let build = |v: i16| {
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
            req
        };
        let resp = self
            .send(
                "deleting topics",
                Route::Controller,
                DELETE_TOPICS,
                build,
                |r| r.responses.iter().map(|t| t.error_code).collect(),
            )
            .await?;
        match_answers(
            "DeleteTopics",
            names.iter().cloned(),
            resp.responses.iter().filter_map(|t| {
                let r = err(t.error_code, t.error_message.as_ref());
                Some((t.name.as_ref()?.to_string(), r))
            }),
            topic_item,
        )
    }

    /// Grows topics to the given total partition counts (Kafka cannot shrink a topic).
    pub async fn create_partitions(
        &self,
        totals: &[(String, i32)],
        validate_only: bool,
    ) -> Result<Vec<(String, Result<()>)>> {
        let build = |_| {
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
            req
        };
        let resp = self
            .send(
                "adding partitions",
                Route::Controller,
                CREATE_PARTITIONS,
                build,
                |r| r.results.iter().map(|t| t.error_code).collect(),
            )
            .await?;
        match_answers(
            "CreatePartitions",
            totals.iter().map(|(n, _)| n.clone()),
            resp.results.iter().map(|t| {
                let r = err(t.error_code, t.error_message.as_ref());
                (t.name.to_string(), r)
            }),
            topic_item,
        )
    }

    /// Looks up offsets (earliest, latest, by time) of partitions, asking each leader.
    pub async fn list_offsets(
        &self,
        partitions: &[(TopicPartitionKey, OffsetSpec)],
    ) -> Result<BTreeMap<TopicPartitionKey, ListedOffset>> {
        let build = |group: &[(TopicPartitionKey, OffsetSpec)]| {
            let mut req = ListOffsetsRequest::default();
            req.replica_id = BrokerId(-1);
            req.topics = by_topic(group.iter().map(|(tp, spec)| (tp, spec)), |p, spec| {
                let mut lp = ListOffsetsPartition::default();
                lp.partition_index = p;
                lp.current_leader_epoch = -1;
                lp.timestamp = spec.wire();
                lp
            })
            .into_iter()
            .map(|(t, ps)| {
                let mut lt = ListOffsetsTopic::default();
                lt.name = TopicName(sb(t));
                lt.partitions = ps;
                lt
            })
            .collect();
            req
        };
        let answers = |resp: &ListOffsetsResponse| {
            let partitions = resp.topics.iter().flat_map(|t| {
                t.partitions.iter().map(|p| {
                    let key = (t.name.to_string(), p.partition_index);
                    let r = err(p.error_code, None)
                        .map_err(|e| with_context(e, &partition_item(&key)))
                        .map(|()| ListedOffset {
                            offset: p.offset,
                            timestamp: p.timestamp,
                        });
                    (key, r)
                })
            });
            partitions.collect()
        };
        let items = partitions.iter().map(|(tp, s)| (tp, *s));
        let found = self
            .to_leaders(
                "listing offsets",
                "ListOffsets",
                LIST_OFFSETS,
                items,
                build,
                answers,
            )
            .await?;
        found.into_iter().map(|(tp, r)| Ok((tp, r?))).collect()
    }

    /// Deletes every record below the given offsets (-1: the high watermark), moving
    /// each partition's log start; returns the new low watermarks.
    pub async fn delete_records(
        &self,
        before: &BTreeMap<TopicPartitionKey, i64>,
    ) -> Result<BTreeMap<TopicPartitionKey, Result<i64>>> {
        let build = |group: &[(TopicPartitionKey, i64)]| {
            let mut req = DeleteRecordsRequest::default();
            req.timeout_ms = self.timeout_ms();
            req.topics = by_topic(group.iter().map(|(tp, o)| (tp, o)), |p, offset| {
                let mut dp = DeleteRecordsPartition::default();
                dp.partition_index = p;
                dp.offset = *offset;
                dp
            })
            .into_iter()
            .map(|(t, ps)| {
                let mut dt = DeleteRecordsTopic::default();
                dt.name = TopicName(sb(t));
                dt.partitions = ps;
                dt
            })
            .collect();
            req
        };
        let answers = |resp: &DeleteRecordsResponse| {
            let partitions = resp.topics.iter().flat_map(|t| {
                t.partitions.iter().map(|p| {
                    let key = (t.name.to_string(), p.partition_index);
                    let r = err(p.error_code, None)
                        .map(|_| p.low_watermark)
                        .map_err(|e| with_context(e, &partition_item(&key)));
                    (key, r)
                })
            });
            partitions.collect()
        };
        let items = before.iter().map(|(tp, o)| (tp, *o));
        let deleted = self
            .to_leaders(
                "deleting records",
                "DeleteRecords",
                DELETE_RECORDS,
                items,
                build,
                answers,
            )
            .await?;
        Ok(deleted.into_iter().collect())
    }

    /// Sends the request `build` makes for each leader's share of `items` to that leader,
    /// and matches the partitions `answers` reads from its answer to that share.
    pub(super) async fn to_leaders<'a, T: Copy, R: Request, V: Clone>(
        &self,
        what: &str,
        api: &str,
        versions: (i16, i16),
        items: impl Iterator<Item = (&'a TopicPartitionKey, T)>,
        build: impl Fn(&[(TopicPartitionKey, T)]) -> R,
        answers: impl Fn(&R::Response) -> Vec<(TopicPartitionKey, Result<V>)>,
    ) -> Result<Vec<(TopicPartitionKey, Result<V>)>> {
        let mut out = Vec::new();
        for (leader, share) in self.by_leader(items).await? {
            let route = Route::Node(leader);
            let resp = self
                .send(what, route, versions, |_| build(&share), no_routing_codes)
                .await?;
            let asked = share.iter().map(|(tp, _)| tp.clone());
            out.extend(match_answers(api, asked, answers(&resp), partition_item)?);
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

const ALTER_REASSIGNMENTS: (i16, i16) = (0, 1);
const LIST_REASSIGNMENTS: (i16, i16) = (0, 0);

/// A partition's move under way (ListPartitionReassignments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    /// Its replicas while it moves: the target's, then those it leaves.
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

impl Admin {
    /// Moves partitions to other replicas (AlterPartitionReassignments, KIP-455): each
    /// `(topic, partition, Some(replicas))` starts a move there, `None` cancels the one
    /// under way. The answer per partition says whether it started; the move itself goes
    /// on in the cluster (see `list_reassignments`).
    pub async fn alter_reassignments(
        &self,
        moves: &[(String, i32, Option<Vec<i32>>)],
    ) -> Result<Vec<((String, i32), Result<()>)>> {
        use kafka_protocol::messages::alter_partition_reassignments_request::{
            ReassignablePartition, ReassignableTopic,
        };
        use kafka_protocol::messages::AlterPartitionReassignmentsRequest;
        let build = |_| {
            let mut req = AlterPartitionReassignmentsRequest::default();
            req.timeout_ms = self.timeout_ms();
            req.allow_replication_factor_change = true;
            let mut topics: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
            for (t, p, replicas) in moves {
                let mut rp = ReassignablePartition::default();
                rp.partition_index = *p;
                rp.replicas = replicas
                    .as_ref()
                    .map(|r| r.iter().map(|b| BrokerId(*b)).collect());
                topics.entry(t.as_str()).or_default().push(rp);
            }
            req.topics = topics
                .into_iter()
                .map(|(name, partitions)| {
                    let mut rt = ReassignableTopic::default();
                    rt.name = TopicName(sb(name));
                    rt.partitions = partitions;
                    rt
                })
                .collect();
            req
        };
        let resp = self
            .send(
                "moving partitions",
                Route::Controller,
                ALTER_REASSIGNMENTS,
                build,
                |r| vec![r.error_code],
            )
            .await?;
        err(resp.error_code, resp.error_message.as_ref())?;
        Ok(resp
            .responses
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    (
                        (t.name.to_string(), p.partition_index),
                        err(p.error_code, p.error_message.as_ref()),
                    )
                })
            })
            .collect())
    }

    /// The partition moves under way in the cluster (ListPartitionReassignments).
    pub async fn list_reassignments(&self) -> Result<Vec<Reassignment>> {
        use kafka_protocol::messages::ListPartitionReassignmentsRequest;
        let build = |_| {
            let mut req = ListPartitionReassignmentsRequest::default();
            req.timeout_ms = self.timeout_ms();
            req.topics = None;
            req
        };
        let resp = self
            .send(
                "listing partition moves",
                Route::Controller,
                LIST_REASSIGNMENTS,
                build,
                |r| vec![r.error_code],
            )
            .await?;
        err(resp.error_code, resp.error_message.as_ref())?;
        let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
        Ok(resp
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| Reassignment {
                    topic: t.name.to_string(),
                    partition: p.partition_index,
                    replicas: ids(&p.replicas),
                    adding: ids(&p.adding_replicas),
                    removing: ids(&p.removing_replicas),
                })
            })
            .collect())
    }
}
