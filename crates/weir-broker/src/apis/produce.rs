//! Produce: each partition's batch goes to its log (validated, offsets assigned, stored as
//! it came unless the topic asks for another codec), and the answer carries the base
//! offset, append time and log start offset, or the Kafka error code of what was wrong.
//! With acks=0 nothing is answered at all.

use std::sync::Arc;

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError as E;
use weir_log::{AppendOrigin, LogConfig, LogError, ProducedRecords, RejectedRecord};

use weir_kafka::acl::{Operation, ResourceType};
use weir_kafka::ApiError;

use crate::broker::Broker;
use crate::partition::Partition;
use crate::request::RequestContext;
use weir_security::quota::Kind;

/// Appends one partition's records. `blocking`: the append may take milliseconds (it
/// fsyncs, or inflates a compressed batch to validate it), so it runs off the runtime's
/// workers, letting other connections go on.
fn append(
    partition: &Partition,
    records: ProducedRecords,
    config: &LogConfig,
    blocking: bool,
) -> Result<weir_log::LogAppendInfo, Refused> {
    let run = || partition.append(records, config).map_err(Refused::from);
    if blocking {
        tokio::task::block_in_place(run)
    } else {
        run()
    }
}

/// An acks=all append waiting for the ISR: where its answer is (topic, partition index in
/// the response), and the offset the high watermark must reach.
struct Replicated {
    at: (usize, usize),
    partition: Arc<Partition>,
    end: i64,
    min_insync: usize,
}

/// Why a partition's records were not written: the error, and with INVALID_RECORD or
/// INVALID_TIMESTAMP the records of the batch that caused it (KIP-467).
struct Refused {
    error: ApiError,
    records: Vec<RejectedRecord>,
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Self {
        Refused {
            error,
            records: Vec::new(),
        }
    }
}

impl From<LogError> for Refused {
    fn from(e: LogError) -> Self {
        // The code and the summary come from the records, so both are taken first.
        let error = ApiError::new(e.error_code(), e.to_string());
        let records = match e {
            LogError::RejectedRecords { records } => records,
            _ => Vec::new(),
        };
        Refused { error, records }
    }
}

/// KIP-890 part 1: before a producer's first transactional batch on a partition (it has
/// no transaction open there), its coordinator must have the partition in the producer's
/// open transaction; else the batch would open one the coordinator never closes (a late
/// batch after an abort, say). Asked directly when this broker coordinates the id. The
/// coordinator's answers become what Kafka's leader answers a producer of Produce v10 and
/// below.
///
/// Not checked here: an id another broker coordinates (the leader would ask it with
/// AddPartitionsToTxn v4, which Weir does not send yet). There only an abort that bumped
/// the epoch (a timeout, a new producer's fence) makes the log refuse a late batch
/// (INVALID_PRODUCER_EPOCH); a late batch after a client's own abort is not refused.
fn verify_in_transaction(
    broker: &Broker,
    partition: &Partition,
    transactional_id: &str,
    (producer_id, producer_epoch): (i64, i16),
) -> Result<(), ApiError> {
    let open = partition
        .lock_log()
        .map_err(|e| ApiError::new(e.error_code(), e.to_string()))?
        .producer_state()
        .producers()
        .get(&producer_id)
        .is_some_and(|e| e.current_txn_first_offset >= 0 && e.producer_epoch == producer_epoch);
    if open {
        return Ok(());
    }
    match broker.txns.coordinates(transactional_id) {
        Ok(_) => {}
        // Another broker coordinates the id (see above).
        Err(code) if code == E::NotCoordinator.code() => return Ok(()),
        Err(_) => {
            return Err(ApiError::new(
                E::NotEnoughReplicas,
                format!(
                    "{}: the coordinator of transactional id '{transactional_id}' is still \
                     loading; retry",
                    partition.tp
                ),
            ))
        }
    }
    let code = match broker.txns.verify_partitions(
        transactional_id,
        producer_id,
        producer_epoch,
        std::slice::from_ref(&partition.tp),
    ) {
        Ok(r) => r.first().map_or(0, |(_, code)| *code),
        Err(code) => code,
    };
    let (error, why) = match E::try_from_code(code) {
        None if code == 0 => return Ok(()),
        Some(E::TransactionAbortable) => (
            E::InvalidTxnState,
            "has no open transaction holding this partition: add it (AddPartitionsToTxn) first",
        ),
        Some(E::ProducerFenced | E::InvalidProducerEpoch) => (
            E::InvalidProducerEpoch,
            "has a newer producer epoch: this producer is fenced",
        ),
        Some(E::InvalidProducerIdMapping) => (
            E::InvalidProducerIdMapping,
            "belongs to another producer id",
        ),
        _ => (
            E::NotEnoughReplicas,
            "could not be checked for this partition yet; retry",
        ),
    };
    Err(ApiError::new(
        error,
        format!(
            "{}: transactional id '{transactional_id}' {why}",
            partition.tp
        ),
    ))
}

pub async fn produce(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: ProduceRequest,
) -> Option<ProduceResponse> {
    let v = ctx.version;
    let acks = req.acks;
    let mut resp = ProduceResponse::default();
    // acks=all on a replicated partition: answered once its ISR holds the records.
    let mut waits: Vec<Replicated> = Vec::new();
    for topic_data in req.topic_data {
        let name = topic_data.name.to_string();
        let topic = broker.topic(&name);
        let writable = broker.allowed(ctx, Operation::Write, ResourceType::Topic, &name);
        let mut tr = TopicProduceResponse::default();
        tr.name = topic_data.name.clone();
        for pd in topic_data.partition_data {
            let mut pr = PartitionProduceResponse::default();
            pr.index = pd.index;
            let checked = (|| {
                if !matches!(acks, -1..=1) {
                    return Err(ApiError::new(
                        E::InvalidRequiredAcks,
                        format!("acks={acks} is not 0, 1 or -1"),
                    ));
                }
                if let Some(id) = &req.transactional_id {
                    if !broker.allowed(ctx, Operation::Write, ResourceType::TransactionalId, id) {
                        return Err(ApiError::new(
                            E::TransactionalIdAuthorizationFailed,
                            format!(
                                "{} may not write as transactional id '{}'",
                                ctx.principal, id.0
                            ),
                        ));
                    }
                }
                if !writable {
                    // Checked before existence, so a denied client learns nothing.
                    return Err(ApiError::new(
                        E::TopicAuthorizationFailed,
                        format!("{} may not write to topic '{name}'", ctx.principal),
                    ));
                }
                let topic = topic.as_ref().ok_or_else(|| {
                    ApiError::new(
                        E::UnknownTopicOrPartition,
                        format!("topic '{name}' does not exist"),
                    )
                })?;
                if topic.is_internal() {
                    return Err(ApiError::new(
                        E::InvalidTopicException,
                        format!("clients may not write to the internal topic '{name}'"),
                    ));
                }
                let partition = broker
                    .leader_replica(topic, pd.index)
                    .map_err(|e| ApiError {
                        code: e.code,
                        message: e.message,
                    })?;
                if acks == -1 {
                    // The leader's own ISR (the metadata's, as it applied it with its
                    // leadership), not the view's: a request may hold a view older than
                    // the leadership it found. One replica is its own ISR.
                    let in_sync = if partition.is_replicated() {
                        partition.isr().len()
                    } else {
                        1
                    };
                    let wanted = topic.config.min_insync_replicas.max(1) as usize;
                    if in_sync < wanted {
                        return Err(ApiError::new(
                            E::NotEnoughReplicas,
                            format!(
                                "min.insync.replicas={wanted} but {name}-{} has {in_sync} \
                                 in-sync replicas",
                                pd.index
                            ),
                        ));
                    }
                }
                let records = pd
                    .records
                    .as_ref()
                    .filter(|r| !r.is_empty())
                    .ok_or_else(|| {
                        ApiError::new(E::CorruptMessage, "the request holds no records")
                    })?;
                crate::metrics::bytes_in(records.len());
                // One walk over the entries' headers (sizes, CRCs, codecs), nothing
                // inflated yet; the records stay in the request's buffer.
                let produced =
                    ProducedRecords::analyze(records.clone(), &topic.config, AppendOrigin::Client)?;
                if let Some(producer) = produced.transactional_producer() {
                    let Some(id) = &req.transactional_id else {
                        // As Kafka: taken, such a batch would open a transaction no
                        // coordinator knows, which holds the last stable offset (and every
                        // read_committed consumer) back for good.
                        return Err(ApiError::new(
                            E::TransactionalIdAuthorizationFailed,
                            "a transactional batch needs the request's transactional id",
                        ));
                    };
                    verify_in_transaction(broker, &partition, &id.0, producer)?;
                }
                Ok((partition, produced, topic))
            })();
            let result = match checked {
                Ok((replica, produced, topic)) => {
                    let partition = &*replica;
                    // Validating a compressed batch inflates it (up to
                    // MAX_DECOMPRESSED_BATCH_BYTES): only so many run at once, which bounds
                    // the memory a flood of decompression bombs can take.
                    let inflating = produced.inflates();
                    let _slot = if inflating {
                        broker.inflate_slots.acquire().await.ok()
                    } else {
                        None
                    };
                    let fsync = topic.config.flush_messages <= 1;
                    let appended = append(partition, produced, &topic.config, fsync || inflating);
                    if let Ok(info) = &appended {
                        if acks == -1 && partition.is_replicated() {
                            waits.push(Replicated {
                                at: (resp.responses.len(), tr.partition_responses.len()),
                                partition: replica.clone(),
                                end: info.last_offset + 1,
                                min_insync: topic.config.min_insync_replicas.max(1) as usize,
                            });
                        }
                    }
                    appended
                }
                Err(e) => Err(Refused::from(e)),
            };
            match result {
                Ok(info) => {
                    pr.base_offset = info.first_offset;
                    pr.log_append_time_ms = info.log_append_time;
                    if v >= 5 {
                        pr.log_start_offset = info.log_start_offset;
                    }
                }
                Err(Refused { error, records }) => {
                    pr.error_code = error.code;
                    pr.base_offset = -1;
                    pr.log_append_time_ms = -1;
                    if v >= 8 {
                        pr.error_message = Some(StrBytes::from_string(error.message));
                        pr.record_errors = records
                            .into_iter()
                            .map(|r| {
                                let mut e = BatchIndexAndErrorMessage::default();
                                e.batch_index = r.index;
                                e.batch_index_error_message =
                                    Some(StrBytes::from_string(r.message));
                                e
                            })
                            .collect();
                    }
                }
            }
            tr.partition_responses.push(pr);
        }
        resp.responses.push(tr);
    }
    if !waits.is_empty() {
        let deadline = tokio::time::Instant::now()
            + std::time::Duration::from_millis(req.timeout_ms.max(0) as u64);
        let outcomes = futures_util::future::join_all(
            waits
                .iter()
                .map(|w| w.partition.wait_replicated(w.end, w.min_insync, deadline)),
        )
        .await;
        for (w, outcome) in waits.iter().zip(outcomes) {
            if let Err(e) = outcome {
                let pr = &mut resp.responses[w.at.0].partition_responses[w.at.1];
                pr.error_code = e.code;
                if v >= 8 {
                    pr.error_message = Some(StrBytes::from_string(e.message));
                }
            }
        }
    }
    // The request's bytes count against the client's produce quota, as in Kafka; over
    // it, the answer says how long to back off and the connection rests that long.
    let throttle = broker.quotas.record(
        Kind::Produce,
        ctx.user(),
        &ctx.client_id,
        ctx.size,
        weir_log::now_ms(),
    );
    if throttle > 0 {
        ctx.throttle(throttle);
        resp.throttle_time_ms = throttle.min(i32::MAX as u32) as i32;
    }
    (acks != 0).then_some(resp)
}
