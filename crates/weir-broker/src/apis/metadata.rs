//! Metadata: this broker as the whole cluster (controller and leader of every partition,
//! at the address advertised for the client's listener), the topics asked for, and topic
//! auto-creation as Kafka does it (`auto.create.topics.enable`, `num.partitions`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use crate::broker::{Broker, LEADER_EPOCH};
use crate::connection::RequestContext;
use crate::topics::{self, Topic, OFFSETS_TOPIC};

/// Kafka's AclOperation codes, for the "authorized operations" bit fields: without ACLs
/// every operation a resource type has is allowed.
pub const TOPIC_OPERATIONS: i32 =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
pub const CLUSTER_OPERATIONS: i32 =
    (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);

pub fn broker_entry(broker: &Broker, ctx: &RequestContext) -> MetadataResponseBroker {
    let adv = broker.config.advertised(&ctx.listener);
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(broker.config.node_id);
    b.host = StrBytes::from_string(adv.host.clone());
    b.port = adv.port as i32;
    b
}

fn topic_entry(
    broker: &Broker,
    topic: &Topic,
    version: i16,
    include_ops: bool,
) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.name.clone())));
    if version >= 10 {
        t.topic_id = topic.id;
    }
    if version >= 1 {
        t.is_internal = topic.is_internal();
    }
    if include_ops && version >= 8 {
        t.topic_authorized_operations = TOPIC_OPERATIONS;
    }
    let node = BrokerId(broker.config.node_id);
    t.partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let mut p = MetadataResponsePartition::default();
            p.partition_index = i as i32;
            if version >= 7 {
                p.leader_epoch = LEADER_EPOCH;
            }
            p.replica_nodes = vec![node];
            if part.is_offline() {
                // Its only replica is on a failed disk: no leader, as Kafka reports a
                // partition whose replicas are all offline.
                p.error_code = E::LeaderNotAvailable.code();
                p.leader_id = BrokerId(-1);
                if version >= 5 {
                    p.offline_replicas = vec![node];
                }
            } else {
                p.leader_id = node;
                p.isr_nodes = vec![node];
            }
            p
        })
        .collect();
    t
}

fn error_entry(
    name: Option<String>,
    id: uuid::Uuid,
    code: i16,
    version: i16,
) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.error_code = code;
    t.name = name.map(|n| TopicName(StrBytes::from_string(n)));
    if version >= 10 {
        t.topic_id = id;
    }
    t
}

pub fn metadata(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: MetadataRequest,
) -> MetadataResponse {
    let v = ctx.version;
    let mut resp = MetadataResponse::default();
    resp.brokers = vec![broker_entry(broker, ctx)];
    if v >= 2 {
        resp.cluster_id = Some(StrBytes::from_string(broker.cluster_id().to_string()));
    }
    if v >= 1 {
        resp.controller_id = BrokerId(broker.config.node_id);
    }
    if req.include_cluster_authorized_operations && (8..=10).contains(&v) {
        resp.cluster_authorized_operations = CLUSTER_OPERATIONS;
    }
    let include_ops = req.include_topic_authorized_operations;
    match req.topics {
        // null: every topic (v0 sends an empty list to mean the same).
        None => {
            resp.topics = broker
                .all_topics()
                .iter()
                .map(|t| topic_entry(broker, t, v, include_ops))
                .collect();
        }
        Some(list) if list.is_empty() && v == 0 => {
            resp.topics = broker
                .all_topics()
                .iter()
                .map(|t| topic_entry(broker, t, v, include_ops))
                .collect();
        }
        Some(list) => {
            // v0–3 always allowed auto-creation; later versions say so in the request.
            let may_create =
                broker.config.auto_create_topics_enable && (v < 4 || req.allow_auto_topic_creation);
            for requested in list {
                let entry = match requested.name.as_ref().map(|n| n.to_string()) {
                    Some(name) => match broker.topic(&name) {
                        Some(t) => topic_entry(broker, &t, v, include_ops),
                        None => match topics::validate_topic_name(&name) {
                            Err(_) => error_entry(
                                Some(name),
                                uuid::Uuid::nil(),
                                E::InvalidTopicException.code(),
                                v,
                            ),
                            Ok(()) if may_create => {
                                let created = if name == OFFSETS_TOPIC {
                                    broker.ensure_offsets_topic()
                                } else {
                                    broker.create_topic(
                                        &name,
                                        broker.config.num_partitions,
                                        BTreeMap::new(),
                                        false,
                                    )
                                };
                                match created {
                                    Ok(t) => topic_entry(broker, &t, v, include_ops),
                                    // Raced with another creator: serve what exists.
                                    Err(_) if broker.topic(&name).is_some() => topic_entry(
                                        broker,
                                        &broker.topic(&name).expect("checked"),
                                        v,
                                        include_ops,
                                    ),
                                    Err(e) => error_entry(Some(name), uuid::Uuid::nil(), e.code, v),
                                }
                            }
                            Ok(()) => error_entry(
                                Some(name),
                                uuid::Uuid::nil(),
                                E::UnknownTopicOrPartition.code(),
                                v,
                            ),
                        },
                    },
                    None => match broker.topic_by_id(requested.topic_id) {
                        Some(t) => topic_entry(broker, &t, v, include_ops),
                        None => error_entry(None, requested.topic_id, E::UnknownTopicId.code(), v),
                    },
                };
                resp.topics.push(entry);
            }
        }
    }
    resp
}
