//! Partition assignors, run by the group leader on every member's subscription: Kafka's
//! `RangeAssignor` and `RoundRobinAssignor` (same results as the Java client for the same
//! members), and `CooperativeStickyAssignor` (in [`super::sticky`]). Also the consumer
//! protocol's subscription and assignment bytes (`ConsumerProtocol`: an i16 version, then
//! the `ConsumerProtocolSubscription`/`ConsumerProtocolAssignment` message), read and
//! written exactly as Kafka's clients do so that Weir and Java members can share a group.
//! Pure functions: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{consumer_protocol_assignment, consumer_protocol_subscription};
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::config::AssignmentStrategy;
use crate::error::{ClientError, Result};
use weir_kafka::TopicPartition;

pub use super::sticky::CooperativeStickyAssignor;

/// The highest consumer protocol version this client writes (v3 adds the rack id).
pub const CONSUMER_PROTOCOL_VERSION: i16 = 3;

/// What one member told the group: its topics and, for sticky assignors, what it owns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberSubscription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub topics: Vec<String>,
    /// Partitions the member owned when it joined (consumer protocol v1+).
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation those partitions were owned in; -1 if unknown.
    pub generation: i32,
    pub rack_id: Option<String>,
    /// The assignor-specific bytes the member sent.
    pub user_data: Option<Bytes>,
}

impl MemberSubscription {
    /// A member subscribed to `topics` that owns nothing (handy for tests and tools).
    pub fn new(member_id: impl Into<String>, topics: &[&str]) -> Self {
        MemberSubscription {
            member_id: member_id.into(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            generation: -1,
            ..Default::default()
        }
    }

    pub fn owning(mut self, partitions: &[(&str, i32)], generation: i32) -> Self {
        self.owned_partitions = partitions
            .iter()
            .map(|(t, p)| TopicPartition::new(*t, *p))
            .collect();
        self.generation = generation;
        self
    }

    pub(crate) fn subscribes(&self, topic: &str) -> bool {
        self.topics.iter().any(|t| t == topic)
    }
}

/// Kafka's `MemberInfo` order: members with a `group.instance.id` first, by instance id;
/// then the others by member id. Range and round-robin walk members in this order.
pub(crate) fn member_order(a: &MemberSubscription, b: &MemberSubscription) -> std::cmp::Ordering {
    match (&a.group_instance_id, &b.group_instance_id) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    }
}

/// A partition assignor: given every topic's partition count and every member's
/// subscription, the partitions of each member (every member appears, possibly with none).
/// Topics that do not exist (absent from `partitions_per_topic`) get no partitions.
pub trait PartitionAssignor: Send + Sync {
    /// The protocol name in JoinGroup.
    fn name(&self) -> &'static str;
    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, Vec<TopicPartition>>;
}

/// The assignor behind a configured strategy.
pub fn assignor_for(strategy: AssignmentStrategy) -> Box<dyn PartitionAssignor> {
    match strategy {
        AssignmentStrategy::Range => Box::new(RangeAssignor),
        AssignmentStrategy::RoundRobin => Box::new(RoundRobinAssignor),
        AssignmentStrategy::CooperativeSticky => Box::new(CooperativeStickyAssignor),
    }
}

fn empty_assignment(members: &[MemberSubscription]) -> BTreeMap<String, Vec<TopicPartition>> {
    members
        .iter()
        .map(|m| (m.member_id.clone(), Vec::new()))
        .collect()
}

/// Kafka's `RangeAssignor`: per topic, the members subscribed to it in `MemberInfo` order
/// each take a contiguous range; the first `partitions % members` take one extra.
#[derive(Debug, Clone, Copy, Default)]
pub struct RangeAssignor;

impl PartitionAssignor for RangeAssignor {
    fn name(&self) -> &'static str {
        "range"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut out = empty_assignment(members);
        for (topic, &count) in partitions_per_topic {
            let mut subscribers: Vec<&MemberSubscription> =
                members.iter().filter(|m| m.subscribes(topic)).collect();
            if subscribers.is_empty() || count <= 0 {
                continue;
            }
            subscribers.sort_by(|a, b| member_order(a, b));
            let n = subscribers.len() as i32;
            let per = count / n;
            let extra = count % n;
            for (i, m) in subscribers.iter().enumerate() {
                let i = i as i32;
                let start = per * i + i.min(extra);
                let len = per + i32::from(i < extra);
                let slot = out.entry(m.member_id.clone()).or_default();
                slot.extend((start..start + len).map(|p| TopicPartition::new(topic.as_str(), p)));
            }
        }
        for v in out.values_mut() {
            v.sort();
        }
        out
    }
}

/// Kafka's `RoundRobinAssignor`: every partition of every subscribed topic, sorted by topic
/// then partition, dealt in turn to the members (in `MemberInfo` order), skipping members
/// not subscribed to the partition's topic.
#[derive(Debug, Clone, Copy, Default)]
pub struct RoundRobinAssignor;

impl PartitionAssignor for RoundRobinAssignor {
    fn name(&self) -> &'static str {
        "roundrobin"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut out = empty_assignment(members);
        let mut sorted: Vec<&MemberSubscription> = members.iter().collect();
        sorted.sort_by(|a, b| member_order(a, b));
        if sorted.is_empty() {
            return out;
        }
        let topics: BTreeSet<&str> = members
            .iter()
            .flat_map(|m| m.topics.iter().map(String::as_str))
            .filter(|t| partitions_per_topic.contains_key(*t))
            .collect();
        let mut next = 0usize;
        for topic in topics {
            let count = partitions_per_topic.get(topic).copied().unwrap_or(0);
            for p in 0..count.max(0) {
                // Some member subscribes to `topic` (it came from a subscription), so this
                // loop ends within one turn.
                let mut tries = 0;
                while !sorted[next].subscribes(topic) && tries < sorted.len() {
                    next = (next + 1) % sorted.len();
                    tries += 1;
                }
                if let Some(slot) = out.get_mut(&sorted[next].member_id) {
                    slot.push(TopicPartition::new(topic, p));
                }
                next = (next + 1) % sorted.len();
            }
        }
        out
    }
}

/// Partitions grouped by topic, topics and partitions in order (the wire shape).
pub(crate) fn group_by_topic(partitions: &[TopicPartition]) -> BTreeMap<&str, Vec<i32>> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&*tp.topic).or_default().push(tp.partition);
    }
    for v in by_topic.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    by_topic
}

fn version_prefixed<M: Encodable>(msg: &M, version: i16, what: &str) -> Result<Bytes> {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i16(version);
    msg.encode(&mut buf, version)
        .map_err(|e| ClientError::Protocol(format!("encoding the {what}: {e}")))?;
    Ok(buf.freeze())
}

/// Reads the version prefix; a version newer than ours is read as ours (its fields are a
/// superset), as Kafka's `ConsumerProtocol` does.
fn read_version(data: &mut Bytes, what: &str) -> Result<i16> {
    if data.len() < 2 {
        return Err(ClientError::Protocol(format!(
            "the {what} is {} bytes, too short for its version",
            data.len()
        )));
    }
    let v = i16::from_be_bytes([data[0], data[1]]);
    let _ = data.split_to(2);
    if v < 0 {
        return Err(ClientError::Protocol(format!(
            "the {what} has an invalid version {v}"
        )));
    }
    Ok(v.min(CONSUMER_PROTOCOL_VERSION))
}

/// The JoinGroup metadata of one protocol: this member's subscription.
pub(crate) fn encode_subscription(
    topics: &BTreeSet<String>,
    owned: &[TopicPartition],
    generation: i32,
    rack: Option<&str>,
    user_data: Option<Bytes>,
) -> Result<Bytes> {
    let mut sub = ConsumerProtocolSubscription::default();
    sub.topics = topics
        .iter()
        .map(|t| StrBytes::from_string(t.clone()))
        .collect();
    sub.user_data = user_data;
    sub.owned_partitions = group_by_topic(owned)
        .into_iter()
        .map(|(topic, partitions)| {
            let mut tp = consumer_protocol_subscription::TopicPartition::default();
            tp.topic = TopicName(StrBytes::from_string(topic.to_string()));
            tp.partitions = partitions;
            tp
        })
        .collect();
    sub.generation_id = generation;
    sub.rack_id = rack.map(|r| StrBytes::from_string(r.to_string()));
    version_prefixed(&sub, CONSUMER_PROTOCOL_VERSION, "subscription")
}

/// A member's subscription from its JoinGroup metadata.
pub(crate) fn decode_subscription(
    member_id: &str,
    group_instance_id: Option<&str>,
    metadata: &Bytes,
) -> Result<MemberSubscription> {
    let what = format!("subscription of member {member_id}");
    let mut data = metadata.clone();
    let version = read_version(&mut data, &what)?;
    let sub = ConsumerProtocolSubscription::decode(&mut data, version)
        .map_err(|e| ClientError::Protocol(format!("reading the {what}: {e}")))?;
    Ok(MemberSubscription {
        member_id: member_id.to_string(),
        group_instance_id: group_instance_id.map(str::to_string),
        topics: sub.topics.iter().map(|t| t.to_string()).collect(),
        owned_partitions: sub
            .owned_partitions
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| TopicPartition::new(t.topic.0.to_string(), *p))
            })
            .collect(),
        generation: sub.generation_id,
        rack_id: sub.rack_id.map(|r| r.to_string()),
        user_data: sub.user_data,
    })
}

/// The SyncGroup bytes of one member's assignment.
pub(crate) fn encode_assignment(partitions: &[TopicPartition]) -> Result<Bytes> {
    let mut a = ConsumerProtocolAssignment::default();
    a.assigned_partitions = group_by_topic(partitions)
        .into_iter()
        .map(|(topic, partitions)| {
            let mut tp = consumer_protocol_assignment::TopicPartition::default();
            tp.topic = TopicName(StrBytes::from_string(topic.to_string()));
            tp.partitions = partitions;
            tp
        })
        .collect();
    version_prefixed(&a, CONSUMER_PROTOCOL_VERSION, "assignment")
}

/// This member's partitions from its SyncGroup answer. Empty bytes mean no assignment (a
/// leader may send nothing for a member).
pub(crate) fn decode_assignment(bytes: &Bytes) -> Result<Vec<TopicPartition>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let mut data = bytes.clone();
    let version = read_version(&mut data, "assignment")?;
    let a = ConsumerProtocolAssignment::decode(&mut data, version)
        .map_err(|e| ClientError::Protocol(format!("reading the assignment: {e}")))?;
    let mut out: Vec<TopicPartition> = a
        .assigned_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| TopicPartition::new(t.topic.0.to_string(), *p))
        })
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_round_trip_and_forward_compatibility() {
        let topics: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let owned = vec![TopicPartition::new("a", 1), TopicPartition::new("a", 0)];
        let bytes = encode_subscription(&topics, &owned, 7, Some("r1"), None).unwrap();
        assert_eq!(&bytes[..2], &[0, 3]);
        let s = decode_subscription("m", Some("i"), &bytes).unwrap();
        assert_eq!(s.topics, vec!["a", "b"]);
        assert_eq!(
            s.owned_partitions,
            vec![TopicPartition::new("a", 0), TopicPartition::new("a", 1)]
        );
        assert_eq!(s.generation, 7);
        assert_eq!(s.rack_id.as_deref(), Some("r1"));
        // A future version (with fields appended) is read as v3.
        let mut future = BytesMut::new();
        future.put_i16(9);
        future.extend_from_slice(&bytes[2..]);
        future.extend_from_slice(&[1, 2, 3]);
        let s = decode_subscription("m", None, &future.freeze()).unwrap();
        assert_eq!(s.generation, 7);
        // Version 0 (topics and user data only), as old clients write it.
        let mut v0 = BytesMut::new();
        v0.put_i16(0);
        v0.put_i32(1);
        v0.put_i16(1);
        v0.put_slice(b"t");
        v0.put_i32(-1);
        let s = decode_subscription("m", None, &v0.freeze()).unwrap();
        assert_eq!(s.topics, vec!["t"]);
        assert_eq!(s.generation, -1);
        assert!(decode_subscription("m", None, &Bytes::from_static(&[0])).is_err());
    }

    #[test]
    fn assignment_round_trip() {
        let parts = vec![
            TopicPartition::new("b", 2),
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 1),
        ];
        let bytes = encode_assignment(&parts).unwrap();
        let back = decode_assignment(&bytes).unwrap();
        assert_eq!(
            back,
            vec![
                TopicPartition::new("a", 0),
                TopicPartition::new("b", 1),
                TopicPartition::new("b", 2)
            ]
        );
        assert!(decode_assignment(&Bytes::new()).unwrap().is_empty());
    }
}
