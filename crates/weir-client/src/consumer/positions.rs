//! Where each assigned partition starts reading (Kafka's `updateFetchPositions`): the
//! group's committed offset (OffsetFetch), else `auto.offset.reset` through ListOffsets, or
//! the reset a seek asked for. One lookup runs in the background at a time; its results are
//! applied unless a seek or a reassignment made them stale. Reads no records.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;
use tracing::debug;

use super::config::ConsumerConfig;
use super::group::{self, GroupShared};
use super::offsets;
use super::subscription::{FetchState, ResetTo, SubscriptionState};
use super::Event;
use crate::cluster::Cluster;
use crate::error::ClientError;
use weir_kafka::TopicPartition;

/// One partition's position lookup.
#[derive(Debug)]
pub(crate) struct PositionResult {
    tp: TopicPartition,
    epoch: u64,
    outcome: PositionOutcome,
}

/// What a lookup found for one partition.
#[derive(Debug)]
enum PositionOutcome {
    Found {
        offset: i64,
        leader_epoch: Option<i32>,
    },
    /// Ask again after the backoff.
    Retry(ClientError),
    /// Raise to the application (e.g. no committed offset and auto.offset.reset=none).
    Failed(ClientError),
}

/// A partition to look a position up for, as it stood when the lookup began.
pub(crate) struct PositionJob {
    tp: TopicPartition,
    epoch: u64,
    state: FetchState,
}

fn no_offset_error(tp: &TopicPartition) -> ClientError {
    ClientError::Config(format!(
        "no committed offset for {tp} and auto.offset.reset=none: seek() to an offset, or set \
         auto.offset.reset to earliest or latest"
    ))
}

/// The position lookups: at most one in flight.
#[derive(Debug, Default)]
pub(crate) struct PositionLookups {
    in_flight: bool,
}

impl PositionLookups {
    /// The partitions to look positions up for now, marked as being looked up: those
    /// without a position, no lookup under way, no error waiting and no backoff running.
    /// `None` while a lookup is in flight, or when there is nothing to look up.
    pub fn due(&mut self, subs: &mut SubscriptionState, now: Instant) -> Option<Vec<PositionJob>> {
        if self.in_flight {
            return None;
        }
        let mut jobs = Vec::new();
        for (tp, ps) in subs.assigned.iter_mut() {
            if ps.state == FetchState::Fetching
                || ps.resolving
                || ps.error.is_some()
                || ps.retry_at.is_some_and(|t| t > now)
            {
                continue;
            }
            ps.resolving = true;
            ps.retry_at = None;
            jobs.push(PositionJob {
                tp: tp.clone(),
                epoch: ps.epoch,
                state: ps.state,
            });
        }
        if jobs.is_empty() {
            return None;
        }
        self.in_flight = true;
        Some(jobs)
    }

    /// A lookup ended: positions found are set; a failure is retried after `backoff`, or
    /// kept for `poll` to raise. Results for a partition sought or reassigned since are
    /// dropped. Returns whether fresher metadata may help.
    pub fn complete(
        &mut self,
        subs: &mut SubscriptionState,
        results: Vec<PositionResult>,
        backoff: Duration,
    ) -> bool {
        self.in_flight = false;
        let now = Instant::now();
        let mut wants_metadata = false;
        for r in results {
            let Some(ps) = subs.assigned.get_mut(&r.tp) else {
                continue;
            };
            if ps.epoch != r.epoch {
                continue;
            }
            ps.resolving = false;
            match r.outcome {
                PositionOutcome::Found {
                    offset,
                    leader_epoch,
                } => {
                    debug!(partition = %r.tp, offset, "position set");
                    ps.state = FetchState::Fetching;
                    ps.position = offset;
                    ps.position_epoch = leader_epoch;
                    ps.next_fetch_offset = offset;
                }
                PositionOutcome::Retry(e) => {
                    debug!(partition = %r.tp, "position lookup failed, retrying: {e}");
                    ps.retry_at = Some(now + backoff);
                    wants_metadata |= e.needs_metadata_refresh();
                }
                PositionOutcome::Failed(e) => {
                    ps.error = Some(e);
                    ps.retry_at = Some(now + backoff);
                    subs.mark_ready(&r.tp);
                }
            }
        }
        wants_metadata
    }
}

/// Runs a lookup in the background; its results come back as `Event::Positions`.
pub(crate) fn spawn_lookup(
    cluster: Arc<Cluster>,
    cfg: Arc<ConsumerConfig>,
    group: Option<Arc<GroupShared>>,
    jobs: Vec<PositionJob>,
    events: UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let results = resolve(cluster, cfg, group, jobs).await;
        let _ = events.send(Event::Positions(results));
    });
}

/// Looks up positions: the group's committed offsets for partitions without one, then
/// ListOffsets for the resets (asked for, or by `auto.offset.reset` where nothing is
/// committed).
async fn resolve(
    cluster: Arc<Cluster>,
    cfg: Arc<ConsumerConfig>,
    shared: Option<Arc<GroupShared>>,
    jobs: Vec<PositionJob>,
) -> Vec<PositionResult> {
    let timeout = cfg.default_api_timeout;
    let policy = ResetTo::by_policy(cfg.auto_offset_reset);
    let mut results = Vec::new();
    let mut resets: Vec<(TopicPartition, u64, ResetTo)> = Vec::new();
    let initializing: Vec<TopicPartition> = jobs
        .iter()
        .filter(|j| j.state == FetchState::Initializing)
        .map(|j| j.tp.clone())
        .collect();
    let committed = match (&shared, initializing.is_empty()) {
        (Some(g), false) => Some(group::fetch_committed(g, &initializing, timeout).await),
        _ => None,
    };
    for job in jobs {
        let result = |outcome| PositionResult {
            tp: job.tp.clone(),
            epoch: job.epoch,
            outcome,
        };
        match job.state {
            FetchState::Fetching => {}
            FetchState::AwaitReset(to) => resets.push((job.tp.clone(), job.epoch, to)),
            FetchState::Initializing => {
                let found = match &committed {
                    Some(Ok(map)) => map.get(&job.tp).cloned().flatten(),
                    Some(Err(e)) if e.is_retriable() => {
                        results.push(result(PositionOutcome::Retry(e.clone())));
                        continue;
                    }
                    Some(Err(e)) => {
                        results.push(result(PositionOutcome::Failed(e.clone())));
                        continue;
                    }
                    None => None,
                };
                match (found, policy) {
                    (Some(o), _) => results.push(result(PositionOutcome::Found {
                        offset: o.offset,
                        leader_epoch: o.leader_epoch,
                    })),
                    (None, Some(to)) => resets.push((job.tp.clone(), job.epoch, to)),
                    (None, None) => {
                        results.push(result(PositionOutcome::Failed(no_offset_error(&job.tp))))
                    }
                }
            }
        }
    }
    if resets.is_empty() {
        return results;
    }
    let query: BTreeMap<TopicPartition, i64> = resets
        .iter()
        .map(|(tp, _, to)| (tp.clone(), to.timestamp()))
        .collect();
    let listed = offsets::list_offsets(&cluster, &cfg, &query, timeout).await;
    for (tp, epoch, _) in resets {
        let outcome = match &listed {
            Ok(found) => match found.get(&tp) {
                Some(l) if l.offset >= 0 => PositionOutcome::Found {
                    offset: l.offset,
                    leader_epoch: l.leader_epoch,
                },
                _ => PositionOutcome::Retry(ClientError::Protocol(format!(
                    "ListOffsets gave no offset for {tp}"
                ))),
            },
            Err(e) if e.is_retriable() => PositionOutcome::Retry(e.clone()),
            Err(e) => PositionOutcome::Failed(e.clone()),
        };
        results.push(PositionResult { tp, epoch, outcome });
    }
    results
}
