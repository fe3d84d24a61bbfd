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
    ApiKey, ConsumerProtocolAssignment, DeleteGroupsRequest, DescribeGroupsRequest, GroupId,
    ListGroupsRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::ResponseError as E;

use super::{err, is_routing_error, sb, with_context, Admin, TopicPartitionKey};
use crate::error::{ClientError, Result};

const LIST_GROUPS: (i16, i16) = (0, 4);
const DESCRIBE_GROUPS: (i16, i16) = (0, 5);
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
