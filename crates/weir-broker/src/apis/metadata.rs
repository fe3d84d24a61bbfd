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

use crate::broker::Broker;
use crate::partition::LEADER_EPOCH;
use crate::request::RequestContext;
use weir_kafka::acl::{Operation, ResourceType};
use weir_kafka::topic::{validate_topic_name, OFFSETS_TOPIC};

use crate::topics::Topic;

/// The cluster's "authorized operations" field, when asked for: 0 without DESCRIBE on
/// the cluster, as Kafka answers.
pub fn cluster_operations(broker: &Broker, ctx: &RequestContext) -> i32 {
    if broker.allowed_on_cluster(ctx, Operation::Describe) {
        broker.authorized_operations(ctx, ResourceType::Cluster, weir_kafka::acl::CLUSTER_NAME)
    } else {
        0
    }
}

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
    ctx: &RequestContext,
    topic: &Topic,
    include_ops: bool,
) -> MetadataResponseTopic {
    let version = ctx.version;
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.name.clone())));
    if version >= 10 {
        t.topic_id = topic.id;
    }
    if version >= 1 {
        t.is_internal = topic.is_internal();
    }
    if include_ops && version >= 8 {
        t.topic_authorized_operations =
            broker.authorized_operations(ctx, ResourceType::Topic, &topic.name);
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
        resp.cluster_authorized_operations = cluster_operations(broker, ctx);
    }
    let include_ops = req.include_topic_authorized_operations;
    let describable =
        |name: &str| broker.allowed(ctx, Operation::Describe, ResourceType::Topic, name);
    match req.topics {
        // null, or an empty list in v0: every topic the client may describe; the others
        // are left out, not reported.
        None => {
            resp.topics = broker
                .all_topics()
                .iter()
                .filter(|t| describable(&t.name))
                .map(|t| topic_entry(broker, ctx, t, include_ops))
                .collect();
        }
        Some(list) if list.is_empty() && v == 0 => {
            resp.topics = broker
                .all_topics()
                .iter()
                .filter(|t| describable(&t.name))
                .map(|t| topic_entry(broker, ctx, t, include_ops))
                .collect();
        }
        Some(list) => {
            // v0–3 always allowed auto-creation; later versions say so in the request.
            let may_create =
                broker.config.auto_create_topics_enable && (v < 4 || req.allow_auto_topic_creation);
            for requested in list {
                let entry = match requested.name.as_ref().map(|n| n.to_string()) {
                    // Authorization first: a denied client cannot tell whether it exists.
                    Some(name) if !describable(&name) => error_entry(
                        Some(name),
                        uuid::Uuid::nil(),
                        E::TopicAuthorizationFailed.code(),
                        v,
                    ),
                    Some(name) => match broker.topic(&name) {
                        Some(t) => topic_entry(broker, ctx, &t, include_ops),
                        None => match validate_topic_name(&name) {
                            Err(_) => error_entry(
                                Some(name),
                                uuid::Uuid::nil(),
                                E::InvalidTopicException.code(),
                                v,
                            ),
                            Ok(())
                                if may_create
                                    && !broker.allowed_on_cluster(ctx, Operation::Create)
                                    && !broker.allowed(
                                        ctx,
                                        Operation::Create,
                                        ResourceType::Topic,
                                        &name,
                                    ) =>
                            {
                                error_entry(
                                    Some(name),
                                    uuid::Uuid::nil(),
                                    E::TopicAuthorizationFailed.code(),
                                    v,
                                )
                            }
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
                                    Ok(t) => topic_entry(broker, ctx, &t, include_ops),
                                    // Raced with another creator: serve what exists.
                                    Err(_) if broker.topic(&name).is_some() => topic_entry(
                                        broker,
                                        ctx,
                                        &broker.topic(&name).expect("checked"),
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
                    // By id: a topic the client may not describe is as unknown as one
                    // that does not exist, as in Kafka.
                    None => match broker
                        .topic_by_id(requested.topic_id)
                        .filter(|t| describable(&t.name))
                    {
                        Some(t) => topic_entry(broker, ctx, &t, include_ops),
                        None => error_entry(None, requested.topic_id, E::UnknownTopicId.code(), v),
                    },
                };
                resp.topics.push(entry);
            }
        }
    }
    resp
}
