//! Fetch: slices of whole batches straight from the log, up to the high watermark, within
//! the request's byte limits (the first batch always goes, even if larger: KIP-74), and
//! long polling: a fetch that finds less than `min_bytes` waits until a partition it asked
//! for gets data or `max_wait_ms` passes. Weir runs no fetch sessions (session id 0) and no
//! transactions, so the last stable offset is the high watermark.
//!
//! The batches are never read into memory: the response is encoded around file ranges of
//! the segments, which go to the socket with sendfile (see `outgoing`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::select_all;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::ResponseError as E;
use weir_log::{FileSlice, LogError};

use crate::broker::Broker;
use crate::partition::Partition;
use crate::request::{FetchReply, RequestContext};
use weir_kafka::acl::{Operation, ResourceType};
use weir_security::quota::Kind;

/// Why a partition is not read here: its error code, and the leader (id, epoch) if known.
type Refusal = (i16, Option<(i32, i32)>);

/// One requested partition, resolved.
struct Wanted {
    topic_index: usize,
    partition: i32,
    /// The replica this broker leads, or the error and (where known) the leader's id and
    /// epoch, which Fetch v12+ tells the client in `current_leader`.
    target: Result<Arc<Partition>, Refusal>,
    fetch_offset: i64,
    max_bytes: usize,
    leader_epoch: i32,
    /// The epoch of the last batch a follower has (v12+), to find where it diverged.
    last_fetched_epoch: i32,
    /// Where a follower's log diverged from this leader's (KIP-320): the epoch and end
    /// offset it must truncate to before it fetches again.
    diverging: Option<(i32, i64)>,
}

/// The largest fetch response Weir builds, whatever the client asks (Kafka's
/// `fetch.max.bytes` broker cap is 55 MiB).
const MAX_RESPONSE_BYTES: usize = 55 * 1024 * 1024;

pub async fn fetch(broker: &Arc<Broker>, ctx: &RequestContext, req: FetchRequest) -> FetchReply {
    let v = ctx.version;
    let mut resp = FetchResponse::default();
    if req.session_id != 0 {
        // Weir never hands out a session id, so an incremental fetch cannot name one.
        resp.error_code = E::FetchSessionIdNotFound.code();
        return FetchReply {
            response: resp,
            records: Vec::new(),
        };
    }
    // A broker fetching as a follower names itself; it reads up to the log end, not the
    // high watermark, and needs CLUSTER_ACTION, as in Kafka.
    let follower = (req.replica_id.0 >= 0).then_some(req.replica_id.0);
    if follower.is_some() && !broker.allowed_on_cluster(ctx, Operation::ClusterAction) {
        resp.error_code = E::ClusterAuthorizationFailed.code();
        return FetchReply {
            response: resp,
            records: Vec::new(),
        };
    }
    let mut wanted = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        let name = t.topic.to_string();
        // Authorization comes before existence, so a denied client learns nothing.
        let topic = if follower.is_some()
            || broker.allowed(ctx, Operation::Read, ResourceType::Topic, &name)
        {
            Ok(broker.topic(&name))
        } else {
            Err(E::TopicAuthorizationFailed.code())
        };
        for p in &t.partitions {
            let target = match &topic {
                Err(code) => Err((*code, None)),
                Ok(None) => Err((E::UnknownTopicOrPartition.code(), None)),
                Ok(Some(topic)) => broker
                    .leader_replica(topic, p.partition)
                    .map_err(|e| (e.code, e.leader))
                    .and_then(|r| match follower {
                        // Not one of its replicas: as Kafka answers a stray follower.
                        Some(id) if !r.has_follower(id) => {
                            Err((E::NotLeaderOrFollower.code(), None))
                        }
                        _ => Ok(r),
                    }),
            };
            wanted.push(Wanted {
                topic_index: ti,
                partition: p.partition,
                target,
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes.max(0) as usize,
                leader_epoch: if v >= 9 { p.current_leader_epoch } else { -1 },
                last_fetched_epoch: if v >= 12 { p.last_fetched_epoch } else { -1 },
                diverging: None,
            });
        }
    }
    // A client with a fetch quota gets at most what the quota allows over its window.
    let quota_bytes = broker
        .quotas
        .max_fetch_bytes(ctx.user(), &ctx.client_id)
        .unwrap_or(usize::MAX);
    let max_bytes = if v >= 3 {
        req.max_bytes.max(0) as usize
    } else {
        usize::MAX
    }
    .min(MAX_RESPONSE_BYTES)
    .min(if follower.is_some() {
        usize::MAX
    } else {
        quota_bytes
    });
    if let Some(id) = follower {
        follower_progress(broker, id, &mut wanted);
    }
    let min_bytes = req.min_bytes.max(0) as usize;
    let deadline = Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let read_committed = v >= 4 && req.isolation_level == 1;
    loop {
        // Arm the wake-ups before reading, so an append in between is not missed.
        let partitions: Vec<Arc<Partition>> = wanted
            .iter()
            .filter_map(|w| w.target.as_ref().ok().cloned())
            .collect();
        let mut notified: Vec<_> = partitions
            .iter()
            .map(|p| Box::pin(p.appended.notified()))
            .collect();
        for n in notified.iter_mut() {
            n.as_mut().enable();
        }
        let (partition_data, total, any_error) =
            read_all(&wanted, max_bytes, read_committed, follower.is_some());
        let now = Instant::now();
        if total >= min_bytes
            || any_error
            || now >= deadline
            || notified.is_empty()
            || *broker.shutdown.borrow()
        {
            // Over its fetch quota, a client is answered empty and told to back off;
            // the bytes it did not get are taken back off its rate, as in Kafka.
            let now_ms = weir_log::now_ms();
            let throttle = if follower.is_some() {
                0 // replication is not a client's traffic
            } else {
                broker
                    .quotas
                    .record(Kind::Fetch, ctx.user(), &ctx.client_id, total, now_ms)
            };
            if throttle > 0 {
                broker
                    .quotas
                    .unrecord(Kind::Fetch, ctx.user(), &ctx.client_id, total, now_ms);
                ctx.throttle(throttle);
                resp.throttle_time_ms = throttle.min(i32::MAX as u32) as i32;
                return FetchReply {
                    response: resp,
                    records: Vec::new(),
                };
            }
            resp.responses = req
                .topics
                .iter()
                .map(|t| {
                    let mut tr = FetchableTopicResponse::default();
                    tr.topic = t.topic.clone();
                    if v >= 13 {
                        tr.topic_id = t.topic_id;
                    }
                    tr
                })
                .collect();
            let mut records = vec![Vec::new(); resp.responses.len()];
            for (w, (mut pd, slice)) in wanted.iter().zip(partition_data) {
                if v < 11 {
                    pd.preferred_read_replica = BrokerId(-1);
                }
                if v < 12 {
                    pd.current_leader = Default::default();
                    pd.diverging_epoch = Default::default();
                }
                resp.responses[w.topic_index].partitions.push(pd);
                records[w.topic_index].push(slice);
            }
            return FetchReply {
                response: resp,
                records,
            };
        }
        let _ = tokio::time::timeout(deadline - now, select_all(notified)).await;
    }
}

/// A follower's fetch, before it is read: where each partition's log diverged from this
/// leader's, if it did (then the follower's progress is left as it was); else its fetch
/// offset is its log end, which moves the high watermark and may bring it into the ISR.
fn follower_progress(broker: &Broker, id: i32, wanted: &mut [Wanted]) {
    for w in wanted.iter_mut() {
        let Ok(p) = &w.target else { continue };
        if w.last_fetched_epoch >= 0 {
            let found = p.lock_log().ok().map(|log| {
                log.leader_epochs()
                    .end_offset_for(w.last_fetched_epoch, log.log_end_offset())
            });
            if let Some((epoch, end)) = found {
                if epoch >= 0 && (epoch < w.last_fetched_epoch || end < w.fetch_offset) {
                    w.diverging = Some((epoch, end));
                    continue;
                }
            }
        }
        if let Some(isr) = p.on_follower_fetch(id, w.fetch_offset) {
            crate::cluster::propose_isr(broker, p, isr);
        }
    }
}

/// One partition's answer, its records still a file range.
type PartitionRead = (PartitionData, Option<FileSlice>);

/// Reads every wanted partition once; returns their data (the records as file ranges), the
/// bytes found, and whether any partition had an error (which ends long polling, as in
/// Kafka).
fn read_all(
    wanted: &[Wanted],
    max_bytes: usize,
    read_committed: bool,
    follower: bool,
) -> (Vec<PartitionRead>, usize, bool) {
    let mut out = Vec::with_capacity(wanted.len());
    let mut total = 0usize;
    let mut any_error = false;
    let mut min_one = true;
    for w in wanted {
        let mut pd = PartitionData::default();
        pd.partition_index = w.partition;
        pd.records = Some(Bytes::new());
        pd.aborted_transactions = read_committed.then(Vec::new);
        let partition = match &w.target {
            Ok(p) => p,
            Err((code, leader)) => {
                pd.error_code = *code;
                if let Some((id, epoch)) = leader {
                    pd.current_leader.leader_id = BrokerId(*id);
                    pd.current_leader.leader_epoch = *epoch;
                }
                pd.high_watermark = -1;
                pd.last_stable_offset = -1;
                pd.log_start_offset = -1;
                any_error = true;
                out.push((pd, None));
                continue;
            }
        };
        // Leadership may have moved while the fetch waited.
        let refused = if !partition.is_leader() {
            Some(E::NotLeaderOrFollower.code())
        } else {
            partition
                .check_epoch(w.leader_epoch)
                .err()
                .map(|m| m.code())
        };
        if let Some(code) = refused {
            pd.error_code = code;
            pd.high_watermark = -1;
            pd.last_stable_offset = -1;
            pd.log_start_offset = -1;
            any_error = true;
            out.push((pd, None));
            continue;
        }
        if let Some((epoch, end_offset)) = w.diverging {
            // No records: the follower truncates first (it is answered at once).
            pd.diverging_epoch.epoch = epoch;
            pd.diverging_epoch.end_offset = end_offset;
            if let Ok(log) = partition.lock_log() {
                pd.high_watermark = log.high_watermark();
                pd.last_stable_offset = pd.high_watermark;
                pd.log_start_offset = log.log_start_offset();
            }
            any_error = true;
            out.push((pd, None));
            continue;
        }
        let budget = w.max_bytes.min(max_bytes.saturating_sub(total));
        let result = partition.observe(partition.lock_log().and_then(|log| {
            // Consumers read what the in-sync replicas all have (read_committed: up to the
            // last stable offset, with the aborted transactions in what they get);
            // followers, everything.
            let lso = log.last_stable_offset();
            let upto = if follower {
                log.log_end_offset()
            } else if read_committed {
                lso
            } else {
                log.high_watermark()
            };
            let data = log.read(w.fetch_offset, budget, upto, min_one)?;
            let aborted = if read_committed {
                log.aborted_transactions_in(w.fetch_offset, &data)
            } else {
                Vec::new()
            };
            Ok((data, lso, aborted))
        }));
        let mut records = None;
        match result {
            Ok((data, lso, aborted)) => {
                pd.high_watermark = data.high_watermark;
                pd.last_stable_offset = lso;
                pd.log_start_offset = data.log_start_offset;
                if read_committed {
                    pd.aborted_transactions = Some(
                        aborted
                            .into_iter()
                            .map(|t| {
                                let mut a = AbortedTransaction::default();
                                a.producer_id = ProducerId(t.producer_id);
                                a.first_offset = t.first_offset;
                                a
                            })
                            .collect(),
                    );
                }
                // The slice's file handle keeps its bytes readable after the log's lock is
                // released, even if the segment is deleted meanwhile.
                if let Some(slice) = data.slice.filter(|s| s.len > 0) {
                    total += slice.len;
                    min_one = false;
                    records = Some(slice);
                }
            }
            Err(e) => {
                pd.error_code = e.kafka_error_code();
                if let LogError::OffsetOutOfRange {
                    log_start_offset,
                    log_end_offset,
                    ..
                } = e
                {
                    pd.high_watermark = log_end_offset;
                    pd.last_stable_offset = log_end_offset;
                    pd.log_start_offset = log_start_offset;
                }
                any_error = true;
            }
        }
        out.push((pd, records));
    }
    (out, total, any_error)
}
