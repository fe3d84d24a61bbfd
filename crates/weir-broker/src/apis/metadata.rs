//! Metadata: this broker as the whole cluster (controller and leader of every partition,
//! at the address advertised for the client's listener), the topics asked for, and topic
//! auto-creation as Kafka does it (`auto.create.topics.enable`, `num.partitions`), bounded
//! like a CreateTopics and by the controller mutation quota. It never makes files on the
//! runtime's worker threads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use crate::broker::{Broker, NewTopic};
use crate::request::RequestContext;
use crate::throttled_log::ThrottledLog;
use weir_kafka::acl::{Operation, ResourceType};
use weir_kafka::limits::MAX_PARTITIONS_PER_REQUEST;
use weir_kafka::topic::{validate_topic_name, OFFSETS_TOPIC};
use weir_kafka::ApiError;

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

/// Every live broker with an endpoint on the client's listener.
pub fn broker_entries(broker: &Broker, ctx: &RequestContext) -> Vec<MetadataResponseBroker> {
    broker
        .live_brokers(&ctx.listener)
        .into_iter()
        .map(|n| {
            let mut b = MetadataResponseBroker::default();
            b.node_id = BrokerId(n.id);
            b.host = StrBytes::from_string(n.host);
            b.port = n.port as i32;
            b.rack = n.rack.map(StrBytes::from_string);
            b
        })
        .collect()
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
    let me = broker.config.node_id;
    t.partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(i, view)| {
            let mut p = MetadataResponsePartition::default();
            p.partition_index = i as i32;
            p.replica_nodes = view.replicas.iter().map(|r| BrokerId(*r)).collect();
            // A replica is offline when its broker is gone, or when it is this broker's
            // and sits on a failed disk.
            let local_offline = view.replica.as_ref().is_some_and(|r| r.is_offline());
            let offline = |r: i32| !broker.is_live(r) || (r == me && local_offline);
            if version >= 5 {
                p.offline_replicas = view
                    .replicas
                    .iter()
                    .filter(|r| offline(**r))
                    .map(|r| BrokerId(*r))
                    .collect();
            }
            match &view.leadership {
                Some(l) => {
                    if version >= 7 {
                        p.leader_epoch = l.leader_epoch;
                    }
                    p.isr_nodes = l.isr.iter().map(|r| BrokerId(*r)).collect();
                    if l.leader >= 0 && !offline(l.leader) {
                        p.leader_id = BrokerId(l.leader);
                    } else {
                        // No replica can lead: as Kafka reports a partition whose
                        // replicas are all offline.
                        p.error_code = E::LeaderNotAvailable.code();
                        p.leader_id = BrokerId(-1);
                    }
                }
                None => {
                    // Not yet led: the controller elects its first leader shortly.
                    p.error_code = E::LeaderNotAvailable.code();
                    p.leader_id = BrokerId(-1);
                    if version >= 7 {
                        p.leader_epoch = -1;
                    }
                }
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
    resp.brokers = broker_entries(broker, ctx);
    if v >= 2 {
        resp.cluster_id = Some(StrBytes::from_string(broker.cluster_id().to_string()));
    }
    if v >= 1 {
        resp.controller_id = BrokerId(broker.controller_id());
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
            // Each requested topic's entry; names to auto-create wait for theirs.
            let mut entries: Vec<Option<MetadataResponseTopic>> = Vec::new();
            let mut to_create: Vec<String> = Vec::new();
            for requested in &list {
                // A topic id, when set, names the topic; the name is then ignored, as Kafka
                // does (the Java client sends an empty name beside an id).
                let name = if requested.topic_id.is_nil() {
                    requested.name.as_ref().map(|n| n.to_string())
                } else {
                    None
                };
                let entry = match name {
                    // Authorization first: a denied client cannot tell whether it exists.
                    Some(name) if !describable(&name) => Some(error_entry(
                        Some(name),
                        uuid::Uuid::nil(),
                        E::TopicAuthorizationFailed.code(),
                        v,
                    )),
                    Some(name) => match broker.topic(&name) {
                        Some(t) => Some(topic_entry(broker, ctx, &t, include_ops)),
                        None => match validate_topic_name(&name) {
                            Err(_) => Some(error_entry(
                                Some(name),
                                uuid::Uuid::nil(),
                                E::InvalidTopicException.code(),
                                v,
                            )),
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
                                Some(error_entry(
                                    Some(name),
                                    uuid::Uuid::nil(),
                                    E::TopicAuthorizationFailed.code(),
                                    v,
                                ))
                            }
                            Ok(()) if may_create => {
                                if !to_create.contains(&name) {
                                    to_create.push(name);
                                }
                                None
                            }
                            Ok(()) => Some(error_entry(
                                Some(name),
                                uuid::Uuid::nil(),
                                E::UnknownTopicOrPartition.code(),
                                v,
                            )),
                        },
                    },
                    // By id. Ids are not secret: a topic the client may not describe is
                    // answered TOPIC_AUTHORIZATION_FAILED with its id and no name, as Kafka
                    // answers.
                    None => Some(match broker.topic_by_id(requested.topic_id) {
                        Some(t) if describable(&t.name) => {
                            topic_entry(broker, ctx, &t, include_ops)
                        }
                        Some(_) => error_entry(
                            None,
                            requested.topic_id,
                            E::TopicAuthorizationFailed.code(),
                            v,
                        ),
                        None => error_entry(None, requested.topic_id, E::UnknownTopicId.code(), v),
                    }),
                };
                entries.push(entry);
            }
            let created = auto_create(broker, ctx, to_create);
            for (requested, entry) in list.iter().zip(entries) {
                let entry = entry.unwrap_or_else(|| {
                    let name = requested
                        .name
                        .as_ref()
                        .map(|n| n.to_string())
                        .unwrap_or_default();
                    match created.get(&name) {
                        Some(Ok(t)) => topic_entry(broker, ctx, t, include_ops),
                        Some(Err(code)) => error_entry(Some(name), uuid::Uuid::nil(), *code, v),
                        None => error_entry(
                            Some(name),
                            uuid::Uuid::nil(),
                            E::UnknownTopicOrPartition.code(),
                            v,
                        ),
                    }
                });
                resp.topics.push(entry);
            }
            let throttle = created.throttle_ms;
            if throttle > 0 {
                ctx.throttle(throttle);
                if v >= 3 {
                    resp.throttle_time_ms = throttle.min(i32::MAX as u32) as i32;
                }
            }
        }
    }
    resp
}

/// What auto-creation made of the names it was given: a topic, or the error code its
/// Metadata entry carries; and how long the client is throttled for.
#[derive(Default)]
struct AutoCreated {
    topics: BTreeMap<String, Result<Arc<Topic>, i16>>,
    throttle_ms: u32,
}

impl AutoCreated {
    fn get(&self, name: &str) -> Option<&Result<Arc<Topic>, i16>> {
        self.topics.get(name)
    }
}

/// Refused auto-creations are logged once a second at most: a client naming thousands of
/// topics would otherwise write thousands of lines.
static REFUSED: ThrottledLog = ThrottledLog::new(Duration::from_secs(1));

/// Auto-creates `names` with `num.partitions` each, as one CreateTopics would, within the
/// same bounds: no more partitions than one request may create (the names past that are
/// left for the client's next request), the broker's capacity, and the client's controller
/// mutation quota. A name refused for a bound is answered UNKNOWN_TOPIC_OR_PARTITION,
/// which clients retry, as Kafka answers while an auto-creation is pending (Metadata has
/// no message to say more: the broker logs why). The work runs off the runtime's worker
/// threads.
fn auto_create(broker: &Broker, ctx: &RequestContext, names: Vec<String>) -> AutoCreated {
    let mut out = AutoCreated::default();
    if names.is_empty() {
        return out;
    }
    let each = broker.config.num_partitions.max(1) as usize;
    let mut asks = Vec::new();
    let mut total = 0usize;
    for name in names {
        if name == OFFSETS_TOPIC {
            let t = super::off_worker(|| broker.ensure_offsets_topic());
            out.topics.insert(name, t.map_err(|e| e.code));
        } else if total + each > MAX_PARTITIONS_PER_REQUEST {
            out.topics
                .insert(name, Err(E::UnknownTopicOrPartition.code()));
        } else {
            total += each;
            asks.push(NewTopic::new(name, each as i32, BTreeMap::new()));
        }
    }
    let names: Vec<String> = asks.iter().map(|a| a.name.clone()).collect();
    let mut throttle_ms = 0u32;
    let limit = super::mutation_limit(broker, ctx);
    let results = super::off_worker(|| {
        // Not waited for in a cluster: the client is answered LEADER_NOT_AVAILABLE for
        // partitions not yet led, and asks again, as against Kafka.
        broker.create_topics(asks, false, Duration::ZERO, &mut |w, n| {
            broker
                .mutations
                .record(&limit, n, Instant::now())
                .map_err(|ms| {
                    throttle_ms = throttle_ms.max(ms);
                    let what = format!("auto-creating topic '{w}'");
                    let why = super::over_mutation_quota(broker, &what, ctx, &limit);
                    ApiError::new(E::ThrottlingQuotaExceeded, why)
                })
        })
    });
    out.throttle_ms = throttle_ms;
    let mut refused = 0usize;
    let mut why = None;
    for (name, r) in names.into_iter().zip(results) {
        // Made meanwhile by another request: serve it.
        let r = match r.map_err(|e| broker.topic(&name).ok_or(e)) {
            Ok(t) | Err(Ok(t)) => Ok(t),
            Err(Err(e))
                if e.code == E::ThrottlingQuotaExceeded.code()
                    || e.code == E::PolicyViolation.code() =>
            {
                refused += 1;
                why.get_or_insert(e.message);
                Err(E::UnknownTopicOrPartition.code())
            }
            Err(Err(e)) => Err(e.code),
        };
        out.topics.insert(name, r);
    }
    if let Some(why) = why {
        if let Some(left_out) = REFUSED.due(Instant::now()) {
            let since = if left_out > 0 {
                format!(" ({left_out} more such refusals in the last second)")
            } else {
                String::new()
            };
            tracing::info!(
                principal = %ctx.principal,
                client_id = %ctx.client_id,
                peer = %ctx.peer,
                "not auto-creating {refused} topics a Metadata request named: {why}{since}"
            );
        }
    }
    out
}
