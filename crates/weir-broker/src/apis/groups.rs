//! The broker's side of the group APIs: FindCoordinator (a group's coordinator is the
//! leader of its `__consumer_offsets` partition: this broker when it is alone), and the
//! rest handed to the group coordinator with what only the broker knows: which partitions
//! exist, whether this broker coordinates the group (else NOT_COORDINATOR, or
//! COORDINATOR_LOAD_IN_PROGRESS while it loads it), and what the client may do. As in Kafka, a group's
//! members need READ on it, describing it DESCRIBE, deleting it or its offsets DELETE;
//! committing offsets of a topic needs READ on the topic, seeing them DESCRIBE.

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
    OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;

use crate::broker::Broker;
use crate::request::RequestContext;
use weir_kafka::acl::{Operation, ResourceType};

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

pub(super) fn may(broker: &Broker, ctx: &RequestContext, op: Operation, group: &str) -> bool {
    broker.allowed(ctx, op, ResourceType::Group, group)
}

pub(super) fn topic_may(broker: &Broker, ctx: &RequestContext, op: Operation, topic: &str) -> bool {
    broker.allowed(ctx, op, ResourceType::Topic, topic)
}

const GROUP_DENIED: i16 = E::GroupAuthorizationFailed.code();
const NOT_COORDINATOR: i16 = E::NotCoordinator.code();
const COORDINATOR_NOT_AVAILABLE: i16 = E::CoordinatorNotAvailable.code();
const TOPIC_DENIED: i16 = E::TopicAuthorizationFailed.code();

pub fn find_coordinator(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let v = ctx.version;
    // The coordinator's topic must exist before the coordinator is usable.
    let ready = match req.key_type {
        KEY_TYPE_GROUP => super::off_worker(|| broker.ensure_offsets_topic())
            .map(|_| ())
            .map_err(|e| (e.code, e.message)),
        KEY_TYPE_TRANSACTION => super::off_worker(|| broker.ensure_txn_state_topic())
            .map(|_| ())
            .map_err(|e| (e.code, e.message)),
        other => Err((
            E::InvalidRequest.code(),
            format!("unknown coordinator key type {other} (0: group, 1: transaction)"),
        )),
    };
    // Finding a group's coordinator takes DESCRIBE on the group; a transaction's, on the
    // transactional id. Checked before anything else is said about the key.
    let answer = |key: &str| {
        let (rt, denied, what) = if req.key_type == KEY_TYPE_TRANSACTION {
            (
                ResourceType::TransactionalId,
                E::TransactionalIdAuthorizationFailed,
                "transactional id",
            )
        } else {
            (ResourceType::Group, E::GroupAuthorizationFailed, "group")
        };
        if !broker.allowed(ctx, Operation::Describe, rt, key) {
            return Err((
                denied.code(),
                format!("{} may not describe {what} '{key}'", ctx.principal),
            ));
        }
        ready.clone()?;
        if req.key_type == KEY_TYPE_TRANSACTION {
            return broker.txn_coordinator_node(key, &ctx.listener);
        }
        broker.group_coordinator_node(key, &ctx.listener)
    };
    let mut resp = FindCoordinatorResponse::default();
    if v >= 4 {
        resp.coordinators = req
            .coordinator_keys
            .iter()
            .map(|k| {
                let mut c = Coordinator::default();
                c.key = k.clone();
                match answer(k) {
                    Ok(n) => {
                        c.node_id = BrokerId(n.id);
                        c.host = StrBytes::from_string(n.host);
                        c.port = n.port as i32;
                    }
                    Err((code, msg)) => {
                        c.node_id = BrokerId(-1);
                        c.port = -1;
                        c.error_code = code;
                        c.error_message = Some(StrBytes::from_string(msg));
                    }
                }
                c
            })
            .collect();
    } else {
        match answer(&req.key) {
            Ok(n) => {
                resp.node_id = BrokerId(n.id);
                resp.host = StrBytes::from_string(n.host);
                resp.port = n.port as i32;
            }
            Err((code, msg)) => {
                resp.node_id = BrokerId(-1);
                resp.port = -1;
                resp.error_code = code;
                if v >= 1 {
                    resp.error_message = Some(StrBytes::from_string(msg));
                }
            }
        }
    }
    resp
}

pub async fn offset_commit(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    mut req: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let topic_errors =
        |topics: &[kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic],
         code: i16| {
            topics
                .iter()
                .map(|t| {
                    let mut out = OffsetCommitResponseTopic::default();
                    out.name = t.name.clone();
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut r = OffsetCommitResponsePartition::default();
                            r.partition_index = p.partition_index;
                            r.error_code = code;
                            r
                        })
                        .collect();
                    out
                })
                .collect::<Vec<_>>()
        };
    if !may(broker, ctx, Operation::Read, &req.group_id) {
        let mut resp = OffsetCommitResponse::default();
        resp.topics = topic_errors(&req.topics, GROUP_DENIED);
        return resp;
    }
    if let Err(code) = broker.coordinates(&req.group_id) {
        let mut resp = OffsetCommitResponse::default();
        resp.topics = topic_errors(&req.topics, code);
        return resp;
    }
    let (allowed, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
        .into_iter()
        .partition(|t| topic_may(broker, ctx, Operation::Read, &t.name));
    req.topics = allowed;
    let exists = |topic: &str, partition: i32| broker.partition_exists(topic, partition);
    let group = req.group_id.0.to_string();
    let mut resp = broker.groups.offset_commit(req, ctx.version, &exists);
    if let Err(code) = commit_replicated(broker, &group).await {
        // Kafka's translation of a commit whose append did not reach the ISR: the client
        // finds the coordinator again and commits again.
        for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            if p.error_code == 0 {
                p.error_code = code;
            }
        }
    }
    resp.topics.extend(topic_errors(&denied, TOPIC_DENIED));
    resp
}

/// TxnOffsetCommit: offsets committed in a transaction, held by the group coordinator until
/// the transaction's marker. Takes WRITE on the transactional id, READ on the group and on
/// each topic, as in Kafka.
pub async fn txn_offset_commit(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    mut req: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let topic_errors = |topics: &[TxnOffsetCommitRequestTopic], code: i16| {
        topics
            .iter()
            .map(|t| {
                let mut out = TxnOffsetCommitResponseTopic::default();
                out.name = t.name.clone();
                out.partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut r = TxnOffsetCommitResponsePartition::default();
                        r.partition_index = p.partition_index;
                        r.error_code = code;
                        r
                    })
                    .collect();
                out
            })
            .collect::<Vec<_>>()
    };
    let refused = if req.transactional_id.0.is_empty() {
        Some(E::InvalidRequest.code())
    } else if !broker.allowed(
        ctx,
        Operation::Write,
        ResourceType::TransactionalId,
        &req.transactional_id.0,
    ) {
        Some(E::TransactionalIdAuthorizationFailed.code())
    } else if !may(broker, ctx, Operation::Read, &req.group_id) {
        Some(GROUP_DENIED)
    } else {
        broker
            .coordinates(&req.group_id)
            .err()
            .or_else(|| offsets_in_transaction(broker, &req).err())
    };
    if let Some(code) = refused {
        let mut resp = TxnOffsetCommitResponse::default();
        resp.topics = topic_errors(&req.topics, code);
        return resp;
    }
    let (allowed, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
        .into_iter()
        .partition(|t| topic_may(broker, ctx, Operation::Read, &t.name));
    req.topics = allowed;
    let exists = |topic: &str, partition: i32| broker.partition_exists(topic, partition);
    let group = req.group_id.0.to_string();
    let mut resp = broker.groups.txn_offset_commit(req, ctx.version, &exists);
    if let Err(code) = commit_replicated(broker, &group).await {
        for p in resp.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
            if p.error_code == 0 {
                p.error_code = code;
            }
        }
    }
    resp.topics.extend(topic_errors(&denied, TOPIC_DENIED));
    resp
}

/// KIP-890 part 1 for TxnOffsetCommit: where this broker also coordinates the
/// transactional id, the group's offsets partition must be in the producer's open
/// transaction (AddOffsetsToTxn); else the offsets would be written into a transaction the
/// coordinator never closes there. Kafka's answers for TxnOffsetCommit v3 and below.
fn offsets_in_transaction(broker: &Broker, req: &TxnOffsetCommitRequest) -> Result<(), i16> {
    let id = req.transactional_id.0.as_str();
    match broker.txns.coordinates(id) {
        Ok(_) => {}
        Err(code) if code == NOT_COORDINATOR => return Ok(()),
        Err(_) => return Err(E::CoordinatorLoadInProgress.code()),
    }
    let tp = weir_kafka::TopicPartition::new(
        weir_kafka::topic::OFFSETS_TOPIC,
        broker.groups.partition_for(&req.group_id.0),
    );
    let code = match broker.txns.verify_partitions(
        id,
        req.producer_id.0,
        req.producer_epoch,
        std::slice::from_ref(&tp),
    ) {
        Ok(r) => r.first().map_or(0, |(_, c)| *c),
        Err(code) => code,
    };
    match E::try_from_code(code) {
        None if code == 0 => Ok(()),
        Some(E::TransactionAbortable) => Err(E::InvalidTxnState.code()),
        Some(E::ProducerFenced) => Err(E::InvalidProducerEpoch.code()),
        Some(E::InvalidProducerIdMapping | E::InvalidProducerEpoch) => Err(code),
        _ => Err(E::CoordinatorLoadInProgress.code()),
    }
}

/// A commit is answered once every in-sync replica of the group's offsets partition has
/// it (the coordinator's writes are acks=all, as in Kafka), within
/// `offsets.commit.timeout.ms`: else COORDINATOR_NOT_AVAILABLE, or NOT_COORDINATOR if the
/// partition's leadership moved meanwhile.
pub(super) async fn commit_replicated(broker: &Arc<Broker>, group: &str) -> Result<(), i16> {
    let Some(topic) = broker.topic(weir_kafka::topic::OFFSETS_TOPIC) else {
        return Ok(());
    };
    let partition = broker.groups.partition_for(group);
    let Some(replica) = topic
        .partition(partition)
        .and_then(|v| v.replica.clone())
        .filter(|r| r.is_replicated())
    else {
        return Ok(());
    };
    let end = replica
        .lock_log()
        .map_err(|_| NOT_COORDINATOR)?
        .log_end_offset();
    let deadline = tokio::time::Instant::now()
        + std::time::Duration::from_millis(broker.config.offsets_commit_timeout_ms);
    let min_insync = topic.config.min_insync_replicas.max(1) as usize;
    replica
        .wait_replicated(end, min_insync, deadline)
        .await
        .map_err(|e| {
            if e.code == E::NotLeaderOrFollower.code() {
                NOT_COORDINATOR
            } else {
                COORDINATOR_NOT_AVAILABLE
            }
        })
}

pub fn offset_fetch(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: OffsetFetchRequest,
) -> OffsetFetchResponse {
    // Which groups the client may not describe, and whether it listed topics (then the
    // ones it may not describe are answered TOPIC_AUTHORIZATION_FAILED) or asked for all
    // (then they are left out).
    let v = ctx.version;
    if v >= 8 {
        let denied: Vec<bool> = req
            .groups
            .iter()
            .map(|g| !may(broker, ctx, Operation::Describe, &g.group_id))
            .collect();
        let listed: Vec<bool> = req.groups.iter().map(|g| g.topics.is_some()).collect();
        let elsewhere: Vec<Option<i16>> = req
            .groups
            .iter()
            .map(|g| broker.coordinates(&g.group_id).err())
            .collect();
        let mut resp = broker.groups.offset_fetch(req, v);
        for (((g, denied), listed), elsewhere) in resp
            .groups
            .iter_mut()
            .zip(denied)
            .zip(listed)
            .zip(elsewhere)
        {
            if denied || elsewhere.is_some() {
                *g = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                g.error_code = if denied {
                    GROUP_DENIED
                } else {
                    elsewhere.unwrap_or_default()
                };
                continue;
            }
            hide_topics(
                &mut g.topics,
                listed,
                |t: &OffsetFetchResponseTopics| {
                    topic_may(broker, ctx, Operation::Describe, &t.name)
                },
                |t: &mut OffsetFetchResponseTopics| {
                    for p in &mut t.partitions {
                        *p = OffsetFetchResponsePartitions::default()
                            .with_partition_index(p.partition_index)
                            .with_committed_offset(-1)
                            .with_metadata(Some(StrBytes::default()))
                            .with_error_code(TOPIC_DENIED);
                    }
                },
            );
        }
        return resp;
    }
    if !may(broker, ctx, Operation::Describe, &req.group_id) {
        let mut resp = OffsetFetchResponse::default();
        resp.error_code = GROUP_DENIED;
        // v1 has no top-level error: each partition asked for carries it.
        resp.topics = req
            .topics
            .iter()
            .flatten()
            .map(|t| {
                let mut out = OffsetFetchResponseTopic::default();
                out.name = t.name.clone();
                out.partitions = t
                    .partition_indexes
                    .iter()
                    .map(|&i| {
                        OffsetFetchResponsePartition::default()
                            .with_partition_index(i)
                            .with_committed_offset(-1)
                            .with_metadata(Some(StrBytes::default()))
                            .with_error_code(GROUP_DENIED)
                    })
                    .collect();
                out
            })
            .collect();
        return resp;
    }
    if let Err(code) = broker.coordinates(&req.group_id) {
        let mut resp = OffsetFetchResponse::default();
        resp.error_code = code;
        return resp;
    }
    let listed = req.topics.is_some();
    let mut resp = broker.groups.offset_fetch(req, v);
    hide_topics(
        &mut resp.topics,
        listed,
        |t: &OffsetFetchResponseTopic| topic_may(broker, ctx, Operation::Describe, &t.name),
        |t: &mut OffsetFetchResponseTopic| {
            for p in &mut t.partitions {
                *p = OffsetFetchResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_committed_offset(-1)
                    .with_metadata(Some(StrBytes::default()))
                    .with_error_code(TOPIC_DENIED);
            }
        },
    );
    resp
}

/// Offsets of topics the client may not describe: answered with an error where it named
/// them, left out where it asked for everything.
fn hide_topics<T>(
    topics: &mut Vec<T>,
    listed: bool,
    allowed: impl Fn(&T) -> bool,
    deny: impl Fn(&mut T),
) {
    if listed {
        topics.iter_mut().filter(|t| !allowed(t)).for_each(deny);
    } else {
        topics.retain(|t| allowed(t));
    }
}

pub async fn join_group(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: JoinGroupRequest,
) -> JoinGroupResponse {
    if !may(broker, ctx, Operation::Read, &req.group_id) {
        return weir_group::join_group_error(&req.member_id, ctx.version, GROUP_DENIED);
    }
    if let Err(code) = broker.coordinates(&req.group_id) {
        return weir_group::join_group_error(&req.member_id, ctx.version, code);
    }
    // Kafka reports client hosts as "/<ip>".
    let host = format!("/{}", ctx.peer.ip());
    broker
        .groups
        .join_group(req, ctx.version, &ctx.client_id, &host)
        .await
}

pub async fn sync_group(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: SyncGroupRequest,
) -> SyncGroupResponse {
    if !may(broker, ctx, Operation::Read, &req.group_id) {
        return SyncGroupResponse::default().with_error_code(GROUP_DENIED);
    }
    if let Err(code) = broker.coordinates(&req.group_id) {
        return SyncGroupResponse::default().with_error_code(code);
    }
    broker.groups.sync_group(req, ctx.version).await
}

pub fn heartbeat(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: HeartbeatRequest,
) -> HeartbeatResponse {
    if !may(broker, ctx, Operation::Read, &req.group_id) {
        return HeartbeatResponse::default().with_error_code(GROUP_DENIED);
    }
    if let Err(code) = broker.coordinates(&req.group_id) {
        return HeartbeatResponse::default().with_error_code(code);
    }
    broker.groups.heartbeat(req, ctx.version)
}

pub fn leave_group(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: LeaveGroupRequest,
) -> LeaveGroupResponse {
    if !may(broker, ctx, Operation::Read, &req.group_id) {
        return LeaveGroupResponse::default().with_error_code(GROUP_DENIED);
    }
    if let Err(code) = broker.coordinates(&req.group_id) {
        return LeaveGroupResponse::default().with_error_code(code);
    }
    broker.groups.leave_group(req, ctx.version)
}

/// The broker's topics as the consumer protocol sees them, read at the moment of a
/// heartbeat: regular expressions match the topics that are not internal.
struct BrokerTopics<'a>(&'a Broker);

impl weir_group::TopicCatalog for BrokerTopics<'_> {
    fn by_name(&self, name: &str) -> Option<weir_group::TopicInfo> {
        self.0.topic(name).map(|t| topic_info(&t))
    }

    fn matchable(&self) -> Vec<weir_group::TopicInfo> {
        self.0
            .all_topics()
            .into_iter()
            .filter(|t| !weir_kafka::topic::is_internal(&t.name))
            .map(|t| topic_info(&t))
            .collect()
    }
}

fn topic_info(t: &crate::topics::Topic) -> weir_group::TopicInfo {
    weir_group::TopicInfo {
        name: t.name.clone(),
        id: t.id,
        partitions: i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
    }
}

/// KIP-848's one membership API. Members need READ on the group (as for JoinGroup), and
/// DESCRIBE on the topics they name.
pub fn consumer_group_heartbeat(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let refuse = |code: i16, message: String| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message)))
            .with_member_epoch(-1)
    };
    if !may(broker, ctx, Operation::Read, &req.group_id) {
        return refuse(
            GROUP_DENIED,
            format!(
                "{} may not read group '{}'",
                ctx.principal,
                req.group_id.0.as_str()
            ),
        );
    }
    let denied: Vec<&str> = req
        .subscribed_topic_names
        .iter()
        .flatten()
        .map(|t| t.0.as_str())
        .filter(|t| !topic_may(broker, ctx, Operation::Describe, t))
        .collect();
    if !denied.is_empty() {
        return refuse(
            TOPIC_DENIED,
            format!(
                "{} may not describe topics {}",
                ctx.principal,
                denied.join(", ")
            ),
        );
    }
    if let Err(code) = broker.coordinates(&req.group_id) {
        return refuse(code, "this broker does not coordinate the group".into());
    }
    let host = format!("/{}", ctx.peer.ip());
    broker.groups.consumer_group_heartbeat(
        req,
        ctx.version,
        &ctx.client_id,
        &host,
        &BrokerTopics(broker),
    )
}

pub fn consumer_group_describe(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let with_ops = req.include_authorized_operations;
    let mut resp = broker.groups.consumer_group_describe(req, ctx.version);
    for g in &mut resp.groups {
        let id = g.group_id.clone();
        let refused = |code: i16| {
            kafka_protocol::messages::consumer_group_describe_response::DescribedGroup::default()
                .with_group_id(id.clone())
                .with_error_code(code)
                .with_authorized_operations(i32::MIN)
        };
        if !may(broker, ctx, Operation::Describe, &g.group_id) {
            *g = refused(GROUP_DENIED);
        } else if let Err(code) = broker.coordinates(&g.group_id) {
            *g = refused(code);
        } else if with_ops && g.error_code == 0 {
            g.authorized_operations =
                broker.authorized_operations(ctx, ResourceType::Group, &g.group_id);
        }
    }
    resp
}

/// Every group, with DESCRIBE on the cluster; else the groups the client may describe.
pub fn list_groups(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: ListGroupsRequest,
) -> ListGroupsResponse {
    let mut resp = broker.groups.list_groups(req, ctx.version);
    if !broker.allowed_on_cluster(ctx, Operation::Describe) {
        resp.groups
            .retain(|g| may(broker, ctx, Operation::Describe, &g.group_id));
    }
    resp
}

pub fn describe_groups(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let with_ops = ctx.version >= 3 && req.include_authorized_operations;
    let mut resp = broker.groups.describe_groups(req, ctx.version);
    for g in &mut resp.groups {
        if !may(broker, ctx, Operation::Describe, &g.group_id) {
            *g = DescribedGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(GROUP_DENIED);
        } else if let Err(code) = broker.coordinates(&g.group_id) {
            *g = DescribedGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(code);
        } else if with_ops {
            g.authorized_operations =
                broker.authorized_operations(ctx, ResourceType::Group, &g.group_id);
        }
    }
    resp
}

pub fn delete_groups(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    mut req: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let (allowed, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut req.groups_names)
        .into_iter()
        .partition(|g| may(broker, ctx, Operation::Delete, g));
    let (here, elsewhere): (Vec<_>, Vec<_>) = allowed
        .into_iter()
        .map(|g| {
            let code = broker.coordinates(&g).err();
            (g, code)
        })
        .partition(|(_, code)| code.is_none());
    req.groups_names = here.into_iter().map(|(g, _)| g).collect();
    let mut resp = broker.groups.delete_groups(req, ctx.version);
    resp.results.extend(denied.into_iter().map(|g| {
        DeletableGroupResult::default()
            .with_group_id(g)
            .with_error_code(GROUP_DENIED)
    }));
    resp.results.extend(elsewhere.into_iter().map(|(g, code)| {
        DeletableGroupResult::default()
            .with_group_id(g)
            .with_error_code(code.unwrap_or_default())
    }));
    resp
}

pub fn offset_delete(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    mut req: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    if !may(broker, ctx, Operation::Delete, &req.group_id) {
        return OffsetDeleteResponse::default().with_error_code(GROUP_DENIED);
    }
    if let Err(code) = broker.coordinates(&req.group_id) {
        return OffsetDeleteResponse::default().with_error_code(code);
    }
    let (allowed, denied): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
        .into_iter()
        .partition(|t| topic_may(broker, ctx, Operation::Read, &t.name));
    req.topics = allowed;
    let mut resp = broker.groups.offset_delete(req, ctx.version);
    if resp.error_code == 0 {
        resp.topics.extend(denied.into_iter().map(|t| {
            let mut out = OffsetDeleteResponseTopic::default();
            out.name = t.name;
            out.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(TOPIC_DENIED)
                })
                .collect();
            out
        }));
    }
    resp
}
