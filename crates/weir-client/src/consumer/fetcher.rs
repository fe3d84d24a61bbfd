//! Fetching (Kafka's `Fetcher`): one Fetch request per leader covering every fetchable
//! partition it leads, at most one in flight per broker, each running as its own task so it
//! progresses while the application works on the previous poll's records. A partition is
//! fetched again as soon as what is buffered for it falls below half of
//! `max.partition.fetch.bytes`, from the end of the buffer, so a steady stream never waits on
//! a round trip. Responses are decoded in the task, and applied here to the subscription
//! state when the consumer hands them back (dropping answers to requests made before a seek
//! or a reassignment); the consumer's `poll` hands the records out.
//!
//! Fetches are sessionless (session id 0, epoch -1: a full fetch each time, which every
//! Kafka broker serves).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, info, warn};

use super::config::ConsumerConfig;
use super::decode::{decode, AbortedTxn, DecodeOptions, Decoded};
use super::subscription::{record_bytes, FetchState, ResetTo, SubscriptionState};
use super::Event;
use crate::cluster::{Cluster, Metadata};
use crate::error::{ClientError, Result};
use weir_kafka::TopicPartition;

const FETCH_VERSIONS: (i16, i16) = (4, 12);

/// One partition of a planned fetch.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub tp: TopicPartition,
    pub topic: Arc<str>,
    pub epoch: u64,
    pub fetch_offset: i64,
    pub leader_epoch: i32,
}

/// One partition of an answered fetch.
#[derive(Debug)]
pub(crate) struct Fetched {
    pub tp: TopicPartition,
    pub epoch: u64,
    pub fetch_offset: i64,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Bytes of record data in the response.
    pub size: usize,
    /// The partition came first in the request, so the broker had to return at least one
    /// whole batch for it if it had data (KIP-74).
    pub first: bool,
    pub decoded: Decoded,
}

/// A fetch that ended.
#[derive(Debug)]
pub(crate) struct FetchDone {
    pub node: i32,
    pub planned: Vec<TopicPartition>,
    pub result: Result<Vec<Fetched>>,
}

/// Which brokers have a fetch in flight, and which are backing off after a failure.
#[derive(Debug, Default)]
pub(crate) struct Fetcher {
    in_flight: HashSet<i32>,
    backoff: HashMap<i32, Instant>,
    /// Per broker, rotates the order of partitions in the requests sent to it, so that
    /// every partition is listed early in turn.
    rotation: HashMap<i32, usize>,
}

impl Fetcher {
    /// A fetch ended: its partitions are applied to their state, or, if it failed, the
    /// broker is backed off. Returns whether fresher metadata may help (a leader moved, a
    /// broker left).
    pub fn complete(
        &mut self,
        subs: &mut SubscriptionState,
        done: FetchDone,
        cfg: &ConsumerConfig,
    ) -> bool {
        let now = Instant::now();
        self.in_flight.remove(&done.node);
        for tp in &done.planned {
            if let Some(ps) = subs.assigned.get_mut(tp) {
                ps.in_flight = false;
            }
        }
        match done.result {
            Ok(parts) => {
                let mut wants_metadata = false;
                for f in parts {
                    wants_metadata |= apply(subs, f, cfg, now);
                }
                wants_metadata
            }
            Err(e) => {
                debug!(node = done.node, "fetch failed: {e}");
                self.backoff
                    .insert(done.node, now + cfg.cluster.retry_backoff);
                // Whatever failed (a broken connection, a broker that has left the
                // cluster's map), fresher metadata may name the leader to ask instead.
                true
            }
        }
    }

    pub fn forget(&mut self) {
        self.backoff.clear();
    }

    /// The earliest instant a backed-off broker may be fetched from again.
    pub fn next_retry(&self) -> Option<Instant> {
        self.backoff.values().min().copied()
    }

    /// Plans the fetches to send now: per leader without a fetch in flight, the partitions
    /// that have a position, are not paused, have no fetch or error waiting, and have little
    /// buffered. Returns the plans and whether some partition's leader is unknown.
    pub fn plan(
        &mut self,
        subs: &mut SubscriptionState,
        meta: &Metadata,
        cfg: &ConsumerConfig,
        now: Instant,
    ) -> (Vec<(i32, Vec<Planned>)>, bool) {
        self.backoff.retain(|_, until| *until > now);
        let low_water = (cfg.max_partition_fetch_bytes.max(0) as usize / 2).max(1);
        let mut by_node: BTreeMap<i32, Vec<Planned>> = BTreeMap::new();
        let mut leader_unknown = false;
        for (tp, ps) in subs.assigned.iter_mut() {
            if ps.state != FetchState::Fetching
                || ps.paused
                || ps.in_flight
                || ps.error.is_some()
                || ps.buffered_bytes >= low_water
                || ps.fetch_after.is_some_and(|t| t > now)
            {
                continue;
            }
            let info = meta.topics.get(&*tp.topic).and_then(|t| {
                usize::try_from(tp.partition)
                    .ok()
                    .and_then(|i| t.partitions.get(i))
            });
            let Some(info) = info.filter(|i| i.leader >= 0 && meta.brokers.contains_key(&i.leader))
            else {
                leader_unknown = true;
                continue;
            };
            if self.in_flight.contains(&info.leader) || self.backoff.contains_key(&info.leader) {
                continue;
            }
            by_node.entry(info.leader).or_default().push(Planned {
                tp: tp.clone(),
                topic: ps.topic.clone(),
                epoch: ps.epoch,
                fetch_offset: ps.next_fetch_offset,
                leader_epoch: info.leader_epoch,
            });
        }
        let mut plans = Vec::new();
        for (node, mut parts) in by_node {
            let n = parts.len();
            let turn = self.rotation.entry(node).or_default();
            *turn = turn.wrapping_add(1);
            parts.rotate_left(*turn % n);
            // A partition whose last answer held no whole batch goes first: there the
            // broker must send one however large (KIP-74).
            if let Some(i) = parts
                .iter()
                .position(|p| subs.assigned.get(&p.tp).is_some_and(|ps| ps.starved))
            {
                parts[..=i].rotate_right(1);
            }
            for p in &parts {
                if let Some(ps) = subs.assigned.get_mut(&p.tp) {
                    ps.in_flight = true;
                }
            }
            self.in_flight.insert(node);
            plans.push((node, parts));
        }
        (plans, leader_unknown)
    }
}

/// Fetch errors after which fresher metadata (a new leader, a created topic) may help.
fn retry_after_metadata(code: i16) -> bool {
    matches!(
        code,
        3 | 5 | 6 | 9 | 56 | 74 | 76 | 78 | 100 | 103 // UNKNOWN_TOPIC_OR_PARTITION,
                                                      // LEADER_NOT_AVAILABLE,
                                                      // NOT_LEADER_OR_FOLLOWER,
                                                      // REPLICA_NOT_AVAILABLE,
                                                      // KAFKA_STORAGE_ERROR,
                                                      // FENCED_LEADER_EPOCH,
                                                      // UNKNOWN_LEADER_EPOCH,
                                                      // OFFSET_NOT_AVAILABLE,
                                                      // UNKNOWN_TOPIC_ID,
                                                      // INCONSISTENT_TOPIC_ID
    )
}

/// Applies one fetched partition to its state (Kafka's `FetchCollector`): buffers its
/// records, or acts on its error: resets an out-of-range position by `auto.offset.reset`,
/// backs off (and wants fresher metadata, returning true), or keeps the error for `poll` to
/// raise. An answer to a request made before a seek or a reassignment is dropped.
fn apply(subs: &mut SubscriptionState, f: Fetched, cfg: &ConsumerConfig, now: Instant) -> bool {
    let backoff = cfg.cluster.retry_backoff;
    let policy = cfg.auto_offset_reset;
    let Some(ps) = subs.assigned.get_mut(&f.tp) else {
        return false;
    };
    if ps.epoch != f.epoch
        || ps.state != FetchState::Fetching
        || ps.next_fetch_offset != f.fetch_offset
    {
        // An answer to a request made before a seek, a reset or an earlier fetch's
        // data was accepted: not what comes next.
        return false;
    }
    if f.high_watermark >= 0 {
        ps.high_watermark = f.high_watermark;
    }
    if f.last_stable_offset >= 0 {
        ps.last_stable_offset = f.last_stable_offset;
    }
    if f.log_start_offset >= 0 {
        ps.log_start_offset = f.log_start_offset;
    }
    let mut ready = false;
    let mut reset = None;
    let mut wants_metadata = false;
    match f.error_code {
        0 => {
            let d = f.decoded;
            if d.entries == 0 && d.error.is_none() && f.size > 0 {
                if f.first {
                    // KIP-74 guarantees the first partition a whole batch: a broker that
                    // sends none would stall this partition forever.
                    ps.error = Some(ClientError::Protocol(format!(
                        "failed to make progress reading {} at offset {}: the broker sent \
                         {} bytes but no complete batch",
                        f.tp, f.fetch_offset, f.size
                    )));
                    ready = true;
                }
                // Otherwise the response was full before this partition's first batch
                // ended; the next fetch lists it first.
                ps.starved = !f.first;
            } else {
                ps.starved = false;
                ready = !d.records.is_empty() || d.error.is_some();
                ps.buffered_bytes += d.records.iter().map(record_bytes).sum::<usize>();
                ps.buffer.extend(d.records);
                ps.next_fetch_offset = ps.next_fetch_offset.max(d.next_offset);
                ps.error = d.error;
                if ps.buffer.is_empty() && ps.error.is_none() {
                    // Only control or aborted batches: the position moves past them.
                    ps.position = ps.position.max(ps.next_fetch_offset);
                }
            }
        }
        // OFFSET_OUT_OF_RANGE for a fetch ahead of the position: the records buffered
        // before it are still good and go to the application first. Fetching resumes
        // after a backoff; once the buffer is drained the fetch is at the position and
        // the error is acted on below, as Kafka does only then.
        1 if f.fetch_offset != ps.position => {
            debug!(partition = %f.tp, offset = f.fetch_offset, position = ps.position,
                "read-ahead fetch out of range; handing out buffered records first");
            ps.fetch_after = Some(now + backoff);
        }
        1 => match ResetTo::by_policy(policy) {
            // OFFSET_OUT_OF_RANGE
            Some(to) => {
                info!(partition = %f.tp, offset = f.fetch_offset,
                    "fetch position out of range (log start {}, high watermark {}); resetting to {}",
                    f.log_start_offset, f.high_watermark, policy.name());
                reset = Some(to);
            }
            None => {
                ps.error = Some(ClientError::kafka(
                    1,
                    Some(format!(
                        "fetch position {} of {} is out of range (the log holds offsets {} to \
                         {}) and auto.offset.reset=none: seek() to a valid offset",
                        f.fetch_offset, f.tp, f.log_start_offset, f.high_watermark
                    )),
                ));
                ready = true;
            }
        },
        code if retry_after_metadata(code) => {
            debug!(partition = %f.tp, "fetch: {}; refreshing metadata", ClientError::kafka(code, None));
            ps.fetch_after = Some(now + backoff);
            wants_metadata = true;
        }
        code @ (-1 | 7 | 13) => {
            // UNKNOWN_SERVER_ERROR, REQUEST_TIMED_OUT, NETWORK_EXCEPTION: try again.
            warn!(partition = %f.tp, "fetch failed: {}", ClientError::kafka(code, None));
            ps.fetch_after = Some(now + backoff);
        }
        code => {
            ps.error = Some(ClientError::kafka(
                code,
                Some(format!("fetching {} at offset {}", f.tp, f.fetch_offset)),
            ));
            ready = true;
        }
    }
    if let Some(to) = reset {
        let _ = subs.request_reset(&f.tp, to);
    }
    if ready {
        subs.mark_ready(&f.tp);
    }
    wants_metadata
}

/// Runs one fetch and reports it as an `Event::Fetch`.
pub(crate) fn spawn_fetch(
    cluster: Arc<Cluster>,
    cfg: Arc<ConsumerConfig>,
    node: i32,
    parts: Vec<Planned>,
    events: UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let planned = parts.iter().map(|p| p.tp.clone()).collect();
        let result = fetch(&cluster, &cfg, node, parts).await;
        let _ = events.send(Event::Fetch(FetchDone {
            node,
            planned,
            result,
        }));
    });
}

async fn fetch(
    cluster: &Cluster,
    cfg: &ConsumerConfig,
    node: i32,
    parts: Vec<Planned>,
) -> Result<Vec<Fetched>> {
    let conn = cluster.node(node).await?;
    let v = conn.version_for(ApiKey::Fetch, FETCH_VERSIONS)?;
    let mut req = FetchRequest::default();
    req.replica_id = BrokerId(-1);
    req.max_wait_ms = cfg.fetch_max_wait.as_millis() as i32;
    req.min_bytes = cfg.fetch_min_bytes;
    req.max_bytes = cfg.fetch_max_bytes;
    req.isolation_level = cfg.isolation_level.wire();
    if v >= 7 {
        req.session_id = 0;
        req.session_epoch = -1;
    }
    if v >= 11 {
        if let Some(rack) = &cfg.client_rack {
            req.rack_id = StrBytes::from_string(rack.clone());
        }
    }
    // Topics in first-appearance order, partitions in plan order (the plan is rotated), so
    // the plan's first partition is the request's first.
    let mut topics: Vec<FetchTopic> = Vec::new();
    for p in &parts {
        let mut fp = FetchPartition::default();
        fp.partition = p.tp.partition;
        fp.fetch_offset = p.fetch_offset;
        fp.partition_max_bytes = cfg.max_partition_fetch_bytes;
        if v >= 9 {
            fp.current_leader_epoch = p.leader_epoch;
        }
        match topics
            .iter_mut()
            .find(|t| t.topic.0.as_str() == &*p.tp.topic)
        {
            Some(t) => t.partitions.push(fp),
            None => {
                let mut t = FetchTopic::default();
                t.topic = TopicName(StrBytes::from_string(p.tp.topic.to_string()));
                t.partitions.push(fp);
                topics.push(t);
            }
        }
    }
    req.topics = topics;
    let resp: FetchResponse = conn.request(&req, v).await?;
    if resp.error_code != 0 {
        return Err(ClientError::kafka(
            resp.error_code,
            Some(format!("Fetch from broker {node}")),
        ));
    }
    let opts = DecodeOptions {
        check_crcs: cfg.check_crcs,
        read_committed: cfg.isolation_level == super::config::IsolationLevel::ReadCommitted,
        max_decompressed: weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES,
    };
    let index: HashMap<(&str, i32), usize> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| ((&*p.tp.topic, p.tp.partition), i))
        .collect();
    let mut out = Vec::with_capacity(parts.len());
    for t in &resp.responses {
        for pd in &t.partitions {
            let Some(&i) = index.get(&(t.topic.0.as_str(), pd.partition_index)) else {
                continue;
            };
            let p = &parts[i];
            let data = pd.records.clone().unwrap_or_default();
            let decoded = if pd.error_code == 0 {
                let aborted: Vec<AbortedTxn> = pd
                    .aborted_transactions
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .map(|a| (a.producer_id.0, a.first_offset))
                    .collect();
                decode(
                    &p.topic,
                    p.tp.partition,
                    &data,
                    p.fetch_offset,
                    &aborted,
                    &opts,
                )
            } else {
                Decoded {
                    next_offset: p.fetch_offset,
                    ..Default::default()
                }
            };
            out.push(Fetched {
                tp: p.tp.clone(),
                epoch: p.epoch,
                fetch_offset: p.fetch_offset,
                error_code: pd.error_code,
                high_watermark: pd.high_watermark,
                last_stable_offset: pd.last_stable_offset,
                log_start_offset: pd.log_start_offset,
                size: data.len(),
                first: i == 0,
                decoded,
            });
        }
    }
    Ok(out)
}
