//! Fetching (Kafka's `Fetcher`): one Fetch request per leader covering every fetchable
//! partition it leads, at most one in flight per broker, each running as its own task so it
//! progresses while the application works on the previous poll's records. A partition is
//! fetched again as soon as what is buffered for it falls below half of
//! `max.partition.fetch.bytes`, from the end of the buffer, so a steady stream never waits on
//! a round trip. Responses are decoded in the task; the consumer applies them (dropping
//! answers to requests made before a seek or a reassignment).
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

use super::config::ConsumerConfig;
use super::decode::{decode, AbortedTxn, DecodeOptions, Decoded};
use super::subscription::{FetchState, SubscriptionState};
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
    pub fn done(&mut self, node: i32) {
        self.in_flight.remove(&node);
    }

    pub fn back_off(&mut self, node: i32, until: Instant) {
        self.backoff.insert(node, until);
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
