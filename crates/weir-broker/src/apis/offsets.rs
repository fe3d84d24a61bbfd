//! Offset questions about partitions: ListOffsets (earliest, latest, by timestamp, the
//! record with the largest timestamp), OffsetForLeaderEpoch (where an epoch ended), and
//! DeleteRecords (moving the log start offset).

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use kafka_protocol::ResponseError as E;

use crate::broker::Broker;
use crate::partition::Partition;
use crate::request::RequestContext;
use weir_kafka::acl::{Operation, ResourceType};

/// The partition's replica this broker leads, if the client may do `op` to its topic
/// (checked first, so a denied client cannot learn whether it exists), it exists, and
/// this broker leads it.
fn resolve(
    broker: &Broker,
    allowed: bool,
    topic: &str,
    partition: i32,
) -> Result<Arc<Partition>, i16> {
    if !allowed {
        return Err(E::TopicAuthorizationFailed.code());
    }
    let t = broker
        .topic(topic)
        .ok_or(E::UnknownTopicOrPartition.code())?;
    broker.leader_replica(&t, partition).map_err(|e| e.code)
}

pub fn list_offsets(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let v = ctx.version;
    let mut resp = ListOffsetsResponse::default();
    for t in req.topics {
        let name = t.name.to_string();
        let allowed = broker.allowed(ctx, Operation::Describe, ResourceType::Topic, &name);
        let mut tr = ListOffsetsTopicResponse::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = ListOffsetsPartitionResponse::default();
            pr.partition_index = p.partition_index;
            pr.timestamp = -1;
            pr.offset = -1;
            let result = resolve(broker, allowed, &name, p.partition_index).and_then(|part| {
                if v >= 4 {
                    part.check_epoch(p.current_leader_epoch)
                        .map_err(|m| m.code())?;
                }
                let mut log = part.lock_log().map_err(|e| e.kafka_error_code())?;
                // As Kafka: a consumer sees only what it may fetch (the high watermark, or
                // the last stable offset for read_committed); a replica or a debugging
                // tool, the whole log.
                let found = if req.replica_id.0 == -1 {
                    let fetchable = if v >= 2 && req.isolation_level == 1 {
                        log.last_stable_offset()
                    } else {
                        log.high_watermark()
                    };
                    log.offset_for_timestamp_below(p.timestamp, fetchable)
                } else {
                    log.offset_for_timestamp(p.timestamp)
                };
                let found = part.observe(found).map_err(|e| e.kafka_error_code())?;
                let epoch = found.map(|f| {
                    log.leader_epochs()
                        .entries()
                        .iter()
                        .rev()
                        .find(|(_, start)| *start <= f.offset)
                        .map_or(-1, |(e, _)| *e)
                });
                Ok((found, epoch))
            });
            match result {
                Ok((Some(found), epoch)) => {
                    pr.timestamp = found.timestamp;
                    pr.offset = found.offset;
                    if v >= 4 {
                        pr.leader_epoch = epoch.unwrap_or(-1);
                    }
                }
                Ok((None, _)) => {}
                Err(code) => pr.error_code = code,
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}

pub fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut resp = OffsetForLeaderEpochResponse::default();
    for t in req.topics {
        let name = t.topic.to_string();
        let allowed = broker.allowed(ctx, Operation::Describe, ResourceType::Topic, &name);
        let mut tr = OffsetForLeaderTopicResult::default();
        tr.topic = t.topic.clone();
        for p in t.partitions {
            let mut pr = EpochEndOffset::default();
            pr.partition = p.partition;
            pr.leader_epoch = -1;
            pr.end_offset = -1;
            let result = resolve(broker, allowed, &name, p.partition).and_then(|part| {
                part.check_epoch(p.current_leader_epoch)
                    .map_err(|m| m.code())?;
                let log = part.lock_log().map_err(|e| e.kafka_error_code())?;
                Ok(log
                    .leader_epochs()
                    .end_offset_for(p.leader_epoch, log.log_end_offset()))
            });
            match result {
                Ok((epoch, end)) => {
                    pr.leader_epoch = epoch;
                    pr.end_offset = end;
                }
                Err(code) => pr.error_code = code,
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}

pub fn delete_records(
    broker: &Arc<Broker>,
    ctx: &RequestContext,
    req: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let mut resp = DeleteRecordsResponse::default();
    for t in req.topics {
        let name = t.name.to_string();
        let allowed = broker.allowed(ctx, Operation::Delete, ResourceType::Topic, &name);
        let mut tr = DeleteRecordsTopicResult::default();
        tr.name = t.name.clone();
        for p in t.partitions {
            let mut pr = DeleteRecordsPartitionResult::default();
            pr.partition_index = p.partition_index;
            pr.low_watermark = -1;
            let result = resolve(broker, allowed, &name, p.partition_index).and_then(|part| {
                let mut log = part.lock_log().map_err(|e| e.kafka_error_code())?;
                // -1 means "up to the high watermark".
                let offset = if p.offset == -1 {
                    log.high_watermark()
                } else {
                    p.offset
                };
                part.observe(log.delete_records_before(offset))
                    .map_err(|e| e.kafka_error_code())
            });
            match result {
                Ok(low) => pr.low_watermark = low,
                Err(code) => pr.error_code = code,
            }
            tr.partitions.push(pr);
        }
        resp.topics.push(tr);
    }
    resp
}
