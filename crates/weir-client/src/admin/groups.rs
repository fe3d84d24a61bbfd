//! Consumer groups through the admin client: listing (every broker), describing and
//! deleting groups, and reading, setting and deleting their committed offsets, as
//! `kafka-consumer-groups.sh` does. Each group's requests go to its coordinator; this file
//! never joins a group (that is the consumer's).

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerProtocolAssignment, DeleteGroupsRequest,
    DescribeGroupsRequest, GroupId, ListGroupsRequest, OffsetCommitRequest, OffsetDeleteRequest,
    OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError as E;

use super::{
    by_topic, err, match_answer, match_answers, partition_item, sb, with_context, Admin, Route,
    TopicPartitionKey,
};
use crate::error::{ClientError, Result};

const LIST_GROUPS: (i16, i16) = (0, 4);
const DESCRIBE_GROUPS: (i16, i16) = (0, 5);
const CONSUMER_GROUP_DESCRIBE: (i16, i16) = (0, 0);
const DELETE_GROUPS: (i16, i16) = (0, 2);
const OFFSET_FETCH: (i16, i16) = (1, 7);
const OFFSET_COMMIT: (i16, i16) = (2, 8);
const OFFSET_DELETE: (i16, i16) = (0, 0);

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

/// "group 'g'", for errors about a group.
fn group_item(group: &String) -> String {
    format!("group '{group}'")
}

impl Admin {
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
                .send(
                    "listing groups",
                    Route::Node(id),
                    LIST_GROUPS,
                    |_| ListGroupsRequest::default(),
                    |r| vec![r.error_code],
                )
                .await?;
            err(resp.error_code, None)?;
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
    /// nobody has used is reported in state "Dead" (as Kafka does), not as an error. As
    /// Kafka's admin client does, a KIP-848 group is described with ConsumerGroupDescribe,
    /// and DescribeGroups is used where that API is not served or the group is classic.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription> {
        if let Some(described) = self.describe_consumer_group(group).await? {
            return Ok(described);
        }
        self.describe_classic_group(group).await
    }

    /// ConsumerGroupDescribe; `None` when the broker does not serve it or the group is not
    /// a consumer-protocol group.
    async fn describe_consumer_group(&self, group: &str) -> Result<Option<GroupDescription>> {
        let build =
            |_| ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(sb(group))]);
        let resp = match self
            .send(
                "describing a group",
                Route::Coordinator(group),
                CONSUMER_GROUP_DESCRIBE,
                build,
                |r| r.groups.iter().map(|g| g.error_code).collect(),
            )
            .await
        {
            Ok(resp) => resp,
            // An older broker: it has no consumer-protocol groups to describe.
            Err(ClientError::Protocol(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(g) = resp
            .groups
            .into_iter()
            .find(|g| g.group_id.as_str() == group)
        else {
            return Err(ClientError::Protocol(format!(
                "ConsumerGroupDescribe did not answer for group '{group}'"
            )));
        };
        if g.error_code == E::GroupIdNotFound.code() {
            return Ok(None);
        }
        err(g.error_code, g.error_message.as_ref())?;
        let members = g
            .members
            .into_iter()
            .map(|m| MemberDescription {
                member_id: m.member_id.to_string(),
                group_instance_id: m.instance_id.map(|i| i.to_string()),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                assignment: m
                    .assignment
                    .topic_partitions
                    .into_iter()
                    .flat_map(|t| {
                        let name = t.topic_name.to_string();
                        t.partitions.into_iter().map(move |p| (name.clone(), p))
                    })
                    .collect(),
            })
            .collect();
        Ok(Some(GroupDescription {
            group_id: group.to_owned(),
            state: g.group_state.to_string(),
            protocol_type: "consumer".into(),
            protocol: g.assignor_name.to_string(),
            members,
        }))
    }

    async fn describe_classic_group(&self, group: &str) -> Result<GroupDescription> {
        let build = |_| {
            let mut req = DescribeGroupsRequest::default();
            req.groups = vec![GroupId(sb(group))];
            req
        };
        let resp = self
            .send(
                "describing a group",
                Route::Coordinator(group),
                DESCRIBE_GROUPS,
                build,
                |r| r.groups.iter().map(|g| g.error_code).collect(),
            )
            .await?;
        let answered = resp.groups.into_iter().map(|g| {
            let id = g.group_id.to_string();
            let description = err(g.error_code, g.error_message.as_ref()).map(|()| {
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
                GroupDescription {
                    group_id: id.clone(),
                    state: g.group_state.to_string(),
                    protocol_type: g.protocol_type.to_string(),
                    protocol: g.protocol_data.to_string(),
                    members,
                }
            });
            (id, description)
        });
        match_answer("DescribeGroups", group.to_string(), answered, group_item)
    }

    /// Deletes groups (they must have no members: NON_EMPTY_GROUP otherwise).
    pub async fn delete_groups(&self, groups: &[String]) -> Result<Vec<(String, Result<()>)>> {
        let mut out = Vec::new();
        // Each group may have a different coordinator.
        for group in groups {
            let r = async {
                let build = |_| {
                    let mut req = DeleteGroupsRequest::default();
                    req.groups_names = vec![GroupId(sb(group))];
                    req
                };
                let resp = self
                    .send(
                        "deleting a group",
                        Route::Coordinator(group),
                        DELETE_GROUPS,
                        build,
                        |r| r.results.iter().map(|r| r.error_code).collect(),
                    )
                    .await?;
                let answered = resp.results.iter().map(|r| {
                    let result = err(r.error_code, None).map_err(|e| with_context(e, group));
                    (r.group_id.to_string(), result)
                });
                match_answer("DeleteGroups", group.clone(), answered, group_item)
            }
            .await;
            out.push((group.clone(), r));
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
        let build = |_| {
            let mut req = OffsetFetchRequest::default();
            req.group_id = GroupId(sb(group));
            req.topics = partitions.map(|tps| {
                by_topic(tps.iter().map(|tp| (tp, ())), |p, ()| p)
                    .into_iter()
                    .map(|(t, ps)| {
                        let mut rt = OffsetFetchRequestTopic::default();
                        rt.name = TopicName(sb(t));
                        rt.partition_indexes = ps;
                        rt
                    })
                    .collect()
            });
            req
        };
        let resp = self
            .send(
                "fetching committed offsets",
                Route::Coordinator(group),
                OFFSET_FETCH,
                build,
                |r| vec![r.error_code],
            )
            .await?;
        err(resp.error_code, None)?;
        let answered = resp.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| {
                let key = (t.name.to_string(), p.partition_index);
                let r = match p.error_code {
                    0 => Ok(p.committed_offset),
                    code => Err(ClientError::kafka(code, Some(partition_item(&key)))),
                };
                (key, r)
            })
        });
        let matched = match partitions {
            Some(tps) => {
                match_answers("OffsetFetch", tps.iter().cloned(), answered, partition_item)?
            }
            // Every partition the group committed: there is nothing to match.
            None => answered.collect(),
        };
        let mut out = BTreeMap::new();
        for (key, committed) in matched {
            let committed = committed?;
            if committed >= 0 {
                out.insert(key, committed);
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
        let build = |_| {
            let mut req = OffsetCommitRequest::default();
            req.group_id = GroupId(sb(group));
            // No generation and no member: an admin commit, which the coordinator
            // takes only for a group nobody is in.
            req.generation_id_or_member_epoch = -1;
            req.member_id = StrBytes::default();
            req.retention_time_ms = -1;
            req.topics = by_topic(offsets, |p, o| {
                let mut rp = OffsetCommitRequestPartition::default();
                rp.partition_index = p;
                rp.committed_offset = *o;
                rp.committed_leader_epoch = -1;
                rp.committed_metadata = Some(StrBytes::default());
                rp
            })
            .into_iter()
            .map(|(t, ps)| {
                let mut rt = OffsetCommitRequestTopic::default();
                rt.name = TopicName(sb(t));
                rt.partitions = ps;
                rt
            })
            .collect();
            req
        };
        let resp = self
            .send(
                "committing offsets",
                Route::Coordinator(group),
                OFFSET_COMMIT,
                build,
                |r| {
                    let partitions = r.topics.iter().flat_map(|t| &t.partitions);
                    partitions.map(|p| p.error_code).collect()
                },
            )
            .await?;
        let answered = resp.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| {
                let key = (t.name.to_string(), p.partition_index);
                let r = match p.error_code {
                    0 => Ok(()),
                    code if code == E::UnknownMemberId.code() => Err(ClientError::kafka(
                        code,
                        Some(format!(
                            "group '{group}' has active members; stop its consumers first"
                        )),
                    )),
                    code => Err(ClientError::kafka(
                        code,
                        Some(format!("{} in group '{group}'", partition_item(&key))),
                    )),
                };
                (key, r)
            })
        });
        let asked = offsets.keys().cloned();
        for (_, r) in match_answers("OffsetCommit", asked, answered, partition_item)? {
            r?;
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
        let build = |_| {
            let mut req = OffsetDeleteRequest::default();
            req.group_id = GroupId(sb(group));
            req.topics = by_topic(partitions.iter().map(|tp| (tp, ())), |p, ()| {
                let mut rp = OffsetDeleteRequestPartition::default();
                rp.partition_index = p;
                rp
            })
            .into_iter()
            .map(|(t, ps)| {
                let mut rt = OffsetDeleteRequestTopic::default();
                rt.name = TopicName(sb(t));
                rt.partitions = ps;
                rt
            })
            .collect();
            req
        };
        let resp = self
            .send(
                "deleting committed offsets",
                Route::Coordinator(group),
                OFFSET_DELETE,
                build,
                |r| vec![r.error_code],
            )
            .await?;
        err(resp.error_code, None).map_err(|e| with_context(e, group))?;
        let answered = resp.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| {
                let key = (t.name.to_string(), p.partition_index);
                let r = err(p.error_code, None).map_err(|e| with_context(e, &partition_item(&key)));
                (key, r)
            })
        });
        let asked = partitions.iter().cloned();
        for (_, r) in match_answers("OffsetDelete", asked, answered, partition_item)? {
            r?;
        }
        Ok(())
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
}
