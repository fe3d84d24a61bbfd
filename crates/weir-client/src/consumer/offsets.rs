//! ListOffsets: the first offset at or after a timestamp, or the earliest (-2) or latest
//! (-1) offset, asked of each partition's leader, retried (with a metadata refresh) on the
//! errors Kafka treats as retriable until a deadline. Used for offset resets,
//! `beginning_offsets`, `end_offsets` and `offsets_for_times`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::config::ConsumerConfig;
use crate::cluster::Cluster;
use crate::error::{ClientError, Result};
use weir_kafka::TopicPartition;

const LIST_OFFSETS_VERSIONS: (i16, i16) = (1, 7);

/// What ListOffsets found for one partition (offset -1 when no record is at or after the
/// timestamp asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListedOffset {
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: Option<i32>,
}

/// Errors after which the same question, asked again (of the leader metadata then names),
/// may get an answer.
fn retriable(code: i16) -> bool {
    ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

/// Asks each partition's leader for the offset of `query[tp]` (a timestamp, or -1 / -2).
pub(crate) async fn list_offsets(
    cluster: &Cluster,
    cfg: &ConsumerConfig,
    query: &BTreeMap<TopicPartition, i64>,
    timeout: Duration,
) -> Result<BTreeMap<TopicPartition, ListedOffset>> {
    let deadline = super::deadline_after(timeout);
    let mut pending = query.clone();
    let mut found = BTreeMap::new();
    let mut refresh = false;
    let mut last_error: Option<ClientError> = None;
    while !pending.is_empty() {
        let topics: BTreeSet<&str> = pending.keys().map(|tp| &*tp.topic).collect();
        let mut meta = cluster.metadata();
        if refresh || topics.iter().any(|t| !meta.topics.contains_key(*t)) {
            let names: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
            match cluster
                .refresh(Some(&names), cfg.allow_auto_create_topics)
                .await
            {
                Ok(_) => meta = cluster.metadata(),
                Err(e) => last_error = Some(e),
            }
            refresh = false;
        }
        // Partitions by leader; those without one wait for fresher metadata.
        let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, i64, i32)>> = BTreeMap::new();
        for (tp, ts) in &pending {
            let leader = meta.topics.get(&*tp.topic).and_then(|t| {
                usize::try_from(tp.partition)
                    .ok()
                    .and_then(|i| t.partitions.get(i))
            });
            match leader {
                Some(p) if p.leader >= 0 => {
                    by_leader
                        .entry(p.leader)
                        .or_default()
                        .push((tp.clone(), *ts, p.leader_epoch))
                }
                _ => {
                    refresh = true;
                    let code = meta.topic_errors.get(&*tp.topic).copied().unwrap_or(3);
                    last_error = Some(ClientError::kafka(code, Some(format!("partition {tp}"))));
                }
            }
        }
        let asks = by_leader
            .into_iter()
            .map(|(node, parts)| ask(cluster, cfg, node, parts));
        for result in join_all(asks).await {
            match result {
                Ok(answers) => {
                    for (tp, answer) in answers {
                        match answer {
                            Ok(listed) => {
                                pending.remove(&tp);
                                found.insert(tp, listed);
                            }
                            Err(code) if retriable(code) => {
                                refresh = true;
                                last_error = Some(ClientError::kafka(
                                    code,
                                    Some(format!("ListOffsets for {tp}")),
                                ));
                            }
                            Err(code) => {
                                return Err(ClientError::kafka(
                                    code,
                                    Some(format!("ListOffsets for {tp}")),
                                ))
                            }
                        }
                    }
                }
                Err(e) if e.is_retriable() => {
                    refresh = true;
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        if pending.is_empty() {
            break;
        }
        if Instant::now() + cfg.cluster.retry_backoff >= deadline {
            let names: Vec<String> = pending.keys().map(|tp| tp.to_string()).collect();
            return Err(ClientError::Timeout {
                what: format!(
                    "ListOffsets for {}{}",
                    names.join(", "),
                    last_error
                        .map(|e| format!(" (last error: {e})"))
                        .unwrap_or_default()
                ),
                ms: timeout.as_millis() as u64,
            });
        }
        tokio::time::sleep(cfg.cluster.retry_backoff).await;
    }
    Ok(found)
}

type Answers = Vec<(TopicPartition, std::result::Result<ListedOffset, i16>)>;

async fn ask(
    cluster: &Cluster,
    cfg: &ConsumerConfig,
    node: i32,
    parts: Vec<(TopicPartition, i64, i32)>,
) -> Result<Answers> {
    let conn = cluster.node(node).await?;
    let v = conn.version_for(ApiKey::ListOffsets, LIST_OFFSETS_VERSIONS)?;
    let mut req = ListOffsetsRequest::default();
    req.replica_id = BrokerId(-1);
    if v >= 2 {
        req.isolation_level = cfg.isolation_level.wire();
    }
    let mut by_topic: BTreeMap<&str, Vec<ListOffsetsPartition>> = BTreeMap::new();
    for (tp, ts, epoch) in &parts {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = tp.partition;
        p.timestamp = *ts;
        if v >= 4 {
            p.current_leader_epoch = *epoch;
        }
        by_topic.entry(&*tp.topic).or_default().push(p);
    }
    req.topics = by_topic
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = ListOffsetsTopic::default();
            t.name = TopicName(StrBytes::from_string(name.to_string()));
            t.partitions = partitions;
            t
        })
        .collect();
    let resp: ListOffsetsResponse = conn.request(&req, v).await?;
    let mut out: Answers = Vec::new();
    for t in &resp.topics {
        for p in &t.partitions {
            let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
            if !parts.iter().any(|(x, _, _)| *x == tp) {
                continue;
            }
            let answer = if p.error_code != 0 {
                Err(p.error_code)
            } else {
                Ok(ListedOffset {
                    offset: p.offset,
                    timestamp: p.timestamp,
                    leader_epoch: (v >= 4 && p.leader_epoch >= 0).then_some(p.leader_epoch),
                })
            };
            out.push((tp, answer));
        }
    }
    Ok(out)
}
