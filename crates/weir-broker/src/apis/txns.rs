//! Transactions (KIP-98): InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn and EndTxn for the coordinator (weir-txn); WriteTxnMarkers, which a
//! coordinator sends the leaders of a transaction's partitions; and the admin side of
//! KIP-664: ListTransactions, DescribeTransactions, DescribeProducers.
//!
//! Each handler checks authorization first, as Kafka does, then leaves the rules to the
//! coordinator; what stays here is Kafka's translation of its errors for older versions.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState as DescribedTxn,
};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTxn;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeProducersRequest, DescribeProducersResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use weir_kafka::acl::{Operation, ResourceType};
use weir_kafka::topic::OFFSETS_TOPIC;
use weir_kafka::TopicPartition;
use weir_txn::{ListFilter, Markers};

use crate::broker::Broker;
use crate::request::RequestContext;

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Kafka sends PRODUCER_FENCED only to clients that know it: InitProducerId v4+, and
/// AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2+. Older ones get
/// INVALID_PRODUCER_EPOCH, which means the same to them.
fn fenced_for(code: i16, knows_fenced: bool) -> i16 {
    if code == E::ProducerFenced.code() && !knows_fenced {
        E::InvalidProducerEpoch.code()
    } else {
        code
    }
}

fn may_write(broker: &Broker, ctx: &RequestContext, transactional_id: &str) -> bool {
    broker.allowed(
        ctx,
        Operation::Write,
        ResourceType::TransactionalId,
        transactional_id,
    )
}

/// InitProducerId for a transactional producer.
pub async fn init_transactional_producer(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: &InitProducerIdRequest,
    transactional_id: &str,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    // Authorization first, as in Kafka; then an empty id, which only a null one means
    // "idempotent, not transactional".
    if !may_write(broker, ctx, transactional_id) {
        resp.error_code = E::TransactionalIdAuthorizationFailed.code();
        return resp;
    }
    if transactional_id.is_empty() {
        resp.error_code = E::InvalidRequest.code();
        return resp;
    }
    let expected = match (req.producer_id.0, req.producer_epoch) {
        (-1, -1) => None,
        (pid, epoch) if pid >= 0 && epoch >= 0 => Some((pid, epoch)),
        _ => {
            // Both or neither, as Kafka requires.
            resp.error_code = E::InvalidRequest.code();
            return resp;
        }
    };
    match broker
        .txns
        .init_producer_id(transactional_id, req.transaction_timeout_ms, expected)
        .await
    {
        Ok((pid, epoch)) => {
            resp.producer_id = ProducerId(pid);
            resp.producer_epoch = epoch;
        }
        Err(code) => resp.error_code = fenced_for(code, ctx.version >= 4),
    }
    resp
}

/// AddPartitionsToTxn: a client's one transaction (v0–3), or a broker's batch of them
/// (v4+, KIP-890), each maybe only asking whether its partitions are in (`verify_only`).
pub async fn add_partitions_to_txn(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let mut resp = AddPartitionsToTxnResponse::default();
    let v = ctx.version;
    if v <= 3 {
        let id = req.v3_and_below_transactional_id.0.to_string();
        let topics: Vec<(String, Vec<i32>)> = req
            .v3_and_below_topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.partitions.clone()))
            .collect();
        let results = add_one(
            broker,
            ctx,
            &id,
            (
                req.v3_and_below_producer_id.0,
                req.v3_and_below_producer_epoch,
            ),
            &topics,
            false,
        )
        .await;
        resp.results_by_topic_v3_and_below = topic_results(results, v >= 2);
        return resp;
    }
    // The batched form is for brokers only.
    if !broker.allowed_on_cluster(ctx, Operation::ClusterAction) {
        resp.error_code = E::ClusterAuthorizationFailed.code();
        return resp;
    }
    for t in req.transactions {
        let id = t.transactional_id.0.to_string();
        let topics: Vec<(String, Vec<i32>)> = t
            .topics
            .iter()
            .map(|t| (t.name.0.to_string(), t.partitions.clone()))
            .collect();
        let results = add_one(
            broker,
            ctx,
            &id,
            (t.producer_id.0, t.producer_epoch),
            &topics,
            t.verify_only,
        )
        .await;
        let mut r = AddPartitionsToTxnResult::default();
        r.transactional_id = t.transactional_id;
        r.topic_results = topic_results(results, true);
        resp.results_by_transaction.push(r);
    }
    resp
}

/// Each partition's outcome of adding `topics` to one transaction.
async fn add_one(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    transactional_id: &str,
    (producer_id, producer_epoch): (i64, i16),
    topics: &[(String, Vec<i32>)],
    verify_only: bool,
) -> Vec<(TopicPartition, i16)> {
    let all = |code: i16| {
        topics
            .iter()
            .flat_map(|(t, ps)| {
                ps.iter()
                    .map(move |p| (TopicPartition::new(t.as_str(), *p), code))
            })
            .collect::<Vec<_>>()
    };
    if transactional_id.is_empty() {
        return all(E::InvalidRequest.code());
    }
    if !may_write(broker, ctx, transactional_id) {
        return all(E::TransactionalIdAuthorizationFailed.code());
    }
    // Kafka's order: topics the client may not write to, then ones that do not exist;
    // either fails the others with OPERATION_NOT_ATTEMPTED.
    let mut refused = Vec::new();
    for (t, ps) in topics {
        let code = if !broker.allowed(ctx, Operation::Write, ResourceType::Topic, t) {
            Some(E::TopicAuthorizationFailed.code())
        } else if ps.iter().any(|p| !broker.partition_exists(t, *p)) {
            Some(E::UnknownTopicOrPartition.code())
        } else {
            None
        };
        if let Some(code) = code {
            for p in ps {
                refused.push((TopicPartition::new(t.as_str(), *p), code));
            }
        }
    }
    if !refused.is_empty() {
        let mut out = all(E::OperationNotAttempted.code());
        for (tp, code) in refused {
            if let Some(o) = out.iter_mut().find(|(o, _)| *o == tp) {
                o.1 = code;
            }
        }
        return out;
    }
    let partitions: Vec<TopicPartition> = all(0).into_iter().map(|(tp, _)| tp).collect();
    if verify_only {
        return match broker.txns.verify_partitions(
            transactional_id,
            producer_id,
            producer_epoch,
            &partitions,
        ) {
            Ok(r) => r,
            Err(code) => all(code),
        };
    }
    let code = match broker
        .txns
        .add_partitions(transactional_id, producer_id, producer_epoch, &partitions)
        .await
    {
        Ok(()) => 0,
        Err(code) => code,
    };
    all(code)
}

fn topic_results(
    results: Vec<(TopicPartition, i16)>,
    knows_fenced: bool,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut out: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for (tp, code) in results {
        let mut p = AddPartitionsToTxnPartitionResult::default();
        p.partition_index = tp.partition;
        p.partition_error_code = fenced_for(code, knows_fenced);
        match out
            .iter_mut()
            .find(|t| t.name.0.as_str() == tp.topic.as_ref())
        {
            Some(t) => t.results_by_partition.push(p),
            None => {
                let mut t = AddPartitionsToTxnTopicResult::default();
                t.name = TopicName(sb(tp.topic.to_string()));
                t.results_by_partition.push(p);
                out.push(t);
            }
        }
    }
    out
}

/// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction, so
/// that TxnOffsetCommit may write there and the markers reach it.
pub async fn add_offsets_to_txn(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let mut resp = AddOffsetsToTxnResponse::default();
    let id = req.transactional_id.0.as_str();
    let code = if id.is_empty() {
        E::InvalidRequest.code()
    } else if !may_write(broker, ctx, id) {
        E::TransactionalIdAuthorizationFailed.code()
    } else if !broker.allowed(ctx, Operation::Read, ResourceType::Group, &req.group_id.0) {
        E::GroupAuthorizationFailed.code()
    } else {
        match super::off_worker(|| broker.ensure_offsets_topic()) {
            Err(e) => e.code,
            Ok(_) => {
                let tp = TopicPartition::new(
                    OFFSETS_TOPIC,
                    broker.groups.partition_for(&req.group_id.0),
                );
                match broker
                    .txns
                    .add_partitions(id, req.producer_id.0, req.producer_epoch, &[tp])
                    .await
                {
                    Ok(()) => 0,
                    Err(code) => code,
                }
            }
        }
    };
    resp.error_code = fenced_for(code, ctx.version >= 2);
    resp
}

/// EndTxn: commit or abort.
pub async fn end_txn(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: EndTxnRequest,
) -> EndTxnResponse {
    let mut resp = EndTxnResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    let id = req.transactional_id.0.as_str();
    let code = if id.is_empty() {
        E::InvalidRequest.code()
    } else if !may_write(broker, ctx, id) {
        E::TransactionalIdAuthorizationFailed.code()
    } else {
        match broker
            .txns
            .end_txn(id, req.producer_id.0, req.producer_epoch, req.committed)
            .await
        {
            Ok(()) => 0,
            Err(code) => code,
        }
    };
    resp.error_code = fenced_for(code, ctx.version >= 2);
    resp
}

/// WriteTxnMarkers: a coordinator's markers for partitions this broker leads.
pub async fn write_txn_markers(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let allowed = broker.allowed_on_cluster(ctx, Operation::ClusterAction);
    let mut resp = WriteTxnMarkersResponse::default();
    for m in req.markers {
        let partitions: Vec<TopicPartition> = m
            .topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|p| TopicPartition::new(t.name.0.as_str(), *p))
            })
            .collect();
        let results = if allowed {
            crate::transactions::write_markers_here(
                broker,
                &Markers {
                    producer_id: m.producer_id.0,
                    producer_epoch: m.producer_epoch,
                    commit: m.transaction_result,
                    coordinator_epoch: m.coordinator_epoch,
                    partitions,
                },
            )
            .await
        } else {
            partitions
                .into_iter()
                .map(|tp| (tp, E::ClusterAuthorizationFailed.code()))
                .collect()
        };
        let mut r = WritableTxnMarkerResult::default();
        r.producer_id = m.producer_id;
        for (tp, code) in results {
            let mut p = WritableTxnMarkerPartitionResult::default();
            p.partition_index = tp.partition;
            p.error_code = code;
            match r
                .topics
                .iter_mut()
                .find(|t| t.name.0.as_str() == tp.topic.as_ref())
            {
                Some(t) => t.partitions.push(p),
                None => {
                    let mut t = WritableTxnMarkerTopicResult::default();
                    t.name = TopicName(sb(tp.topic.to_string()));
                    t.partitions.push(p);
                    r.topics.push(t);
                }
            }
        }
        resp.markers.push(r);
    }
    resp
}

/// ListTransactions: the transactions this broker coordinates that the client may
/// describe.
pub fn list_transactions(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let mut resp = ListTransactionsResponse::default();
    const STATES: &[&str] = &[
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    ];
    let states: Vec<String> = req.state_filters.iter().map(|s| s.to_string()).collect();
    resp.unknown_state_filters = states
        .iter()
        .filter(|s| !STATES.contains(&s.as_str()))
        .map(|s| sb(s.clone()))
        .collect();
    let filter = ListFilter {
        states,
        producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
        min_duration_ms: if ctx.version >= 1 {
            req.duration_filter
        } else {
            -1
        },
    };
    let (listed, loading) = broker.txns.list(&filter);
    if loading {
        resp.error_code = E::CoordinatorLoadInProgress.code();
        return resp;
    }
    resp.transaction_states = listed
        .into_iter()
        .filter(|t| {
            broker.allowed(
                ctx,
                Operation::Describe,
                ResourceType::TransactionalId,
                &t.transactional_id,
            )
        })
        .map(|t| {
            let mut s = ListedTxn::default();
            s.transactional_id = TransactionalId(sb(t.transactional_id));
            s.producer_id = ProducerId(t.producer_id);
            s.transaction_state = sb(t.state.name());
            s
        })
        .collect();
    resp
}

/// DescribeTransactions: each id's state, where this broker coordinates it.
pub fn describe_transactions(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut resp = DescribeTransactionsResponse::default();
    resp.transaction_states = req
        .transactional_ids
        .into_iter()
        .map(|id| {
            let mut s = DescribedTxn::default();
            s.producer_id = ProducerId(-1);
            s.producer_epoch = -1;
            s.transaction_start_time_ms = -1;
            s.transaction_state = sb("");
            let allowed = broker.allowed(
                ctx,
                Operation::Describe,
                ResourceType::TransactionalId,
                &id.0,
            );
            if !allowed {
                s.error_code = E::TransactionalIdAuthorizationFailed.code();
            } else {
                match broker.txns.describe(&id.0) {
                    Err(code) => s.error_code = code,
                    Ok(m) => {
                        s.transaction_state = sb(m.state.name());
                        s.transaction_timeout_ms = m.txn_timeout_ms;
                        s.transaction_start_time_ms = m.txn_start_ms;
                        s.producer_id = ProducerId(m.producer_id);
                        s.producer_epoch = m.producer_epoch;
                        let mut topics: Vec<TopicData> = Vec::new();
                        for tp in &m.partitions {
                            if !broker.allowed(
                                ctx,
                                Operation::Describe,
                                ResourceType::Topic,
                                &tp.topic,
                            ) {
                                continue;
                            }
                            match topics
                                .iter_mut()
                                .find(|t| t.topic.0.as_str() == tp.topic.as_ref())
                            {
                                Some(t) => t.partitions.push(tp.partition),
                                None => {
                                    let mut t = TopicData::default();
                                    t.topic = TopicName(sb(tp.topic.to_string()));
                                    t.partitions.push(tp.partition);
                                    topics.push(t);
                                }
                            }
                        }
                        s.topics = topics;
                    }
                }
            }
            s.transactional_id = id;
            s
        })
        .collect();
    resp
}

/// DescribeProducers: the producers a partition's leader knows, with their open
/// transactions (KIP-664, to find hanging ones).
pub fn describe_producers(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let mut resp = DescribeProducersResponse::default();
    for t in req.topics {
        let name = t.name.0.to_string();
        let allowed = broker.allowed(ctx, Operation::Read, ResourceType::Topic, &name);
        let topic = broker.topic(&name);
        let mut tr = TopicResponse::default();
        tr.name = t.name;
        for p in t.partition_indexes {
            let mut pr = PartitionResponse::default();
            pr.partition_index = p;
            let found = (|| {
                if !allowed {
                    return Err((E::TopicAuthorizationFailed.code(), None));
                }
                let topic = topic
                    .as_ref()
                    .ok_or((E::UnknownTopicOrPartition.code(), None))?;
                let replica = broker
                    .leader_replica(topic, p)
                    .map_err(|e| (e.code, Some(e.message)))?;
                let log = replica
                    .lock_log()
                    .map_err(|e| (e.error_code().code(), Some(e.to_string())))?;
                let mut producers: Vec<ProducerState> = log
                    .producer_state()
                    .producers()
                    .values()
                    .map(|e| {
                        let mut s = ProducerState::default();
                        s.producer_id = ProducerId(e.producer_id);
                        s.producer_epoch = e.producer_epoch as i32;
                        s.last_sequence = e.last_seq().unwrap_or(-1);
                        s.last_timestamp = e.last_timestamp;
                        s.coordinator_epoch = e.coordinator_epoch;
                        s.current_txn_start_offset = e.current_txn_first_offset;
                        s
                    })
                    .collect();
                producers.sort_by_key(|s| s.producer_id.0);
                Ok(producers)
            })();
            match found {
                Ok(producers) => pr.active_producers = producers,
                Err((code, message)) => {
                    pr.error_code = code;
                    pr.error_message = message.map(sb);
                }
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}
