//! What the consumer reads and where it stands (Kafka's `SubscriptionState`): the topics
//! subscribed to or the partitions assigned by hand, and per assigned partition its fetch
//! state (waiting for a committed offset, waiting for a reset, or fetching), its position
//! (the next offset to hand out), the records fetched ahead of the application, and an
//! error waiting to be raised. Owns no I/O; the consumer drives it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use indexmap::IndexMap;

use super::config::AutoOffsetReset;
use super::record::{ConsumerRecord, OffsetAndMetadata};

use crate::error::ClientError;
use weir_kafka::TopicPartition;

/// Per-record memory beyond its bytes (the `ConsumerRecord` itself), counted against the
/// prefetch budget so that many tiny records cannot pile up unbounded.
pub(crate) const RECORD_OVERHEAD_BYTES: usize = 128;

/// How the partitions were chosen.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    #[default]
    None,
    /// `subscribe`: the group assigns partitions of these topics.
    Subscribed(BTreeSet<String>),
    /// `assign`: the application chose the partitions.
    Manual,
}

/// Where a reset goes (ListOffsets' special timestamps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResetTo {
    Earliest,
    Latest,
}

impl ResetTo {
    /// Where `auto.offset.reset` sends a partition without a valid position (`None`: nowhere,
    /// the application must seek).
    pub(crate) fn by_policy(policy: AutoOffsetReset) -> Option<ResetTo> {
        match policy {
            AutoOffsetReset::Earliest => Some(ResetTo::Earliest),
            AutoOffsetReset::Latest => Some(ResetTo::Latest),
            AutoOffsetReset::None => None,
        }
    }

    pub(crate) fn timestamp(self) -> i64 {
        match self {
            ResetTo::Earliest => -2,
            ResetTo::Latest => -1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FetchState {
    /// No position yet: the group's committed offset decides, else `auto.offset.reset`.
    Initializing,
    /// A reset was asked for (seek_to_beginning/end, or out of range with a reset policy).
    AwaitReset(ResetTo),
    /// The position is known; fetches go out from `next_fetch_offset`.
    Fetching,
}

/// One assigned partition.
#[derive(Debug)]
pub(crate) struct PartitionState {
    pub topic: Arc<str>,
    pub state: FetchState,
    /// The offset of the next record to hand to the application (valid when Fetching).
    pub position: i64,
    /// Leader epoch of the last record handed out (committed with the offset).
    pub position_epoch: Option<i32>,
    /// Where the next fetch starts: the end of what is buffered.
    pub next_fetch_offset: i64,
    /// Changes on every seek or reset, so that answers to older requests are dropped.
    pub epoch: u64,
    /// A position lookup (OffsetFetch / ListOffsets) is under way.
    pub resolving: bool,
    /// No position lookup before this instant (after a failed one).
    pub retry_at: Option<Instant>,
    pub paused: bool,
    /// A fetch for this partition is under way.
    pub in_flight: bool,
    /// No fetch before this instant (after an error that needs fresher metadata).
    pub fetch_after: Option<Instant>,
    /// The last fetch was full before this partition's first batch ended: the next request
    /// lists it first, where KIP-74 guarantees it a whole batch.
    pub starved: bool,
    pub buffer: VecDeque<ConsumerRecord>,
    pub buffered_bytes: usize,
    /// An error to raise once the records before it have been handed out.
    pub error: Option<ClientError>,
    /// In the ready queue.
    queued: bool,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub last_stable_offset: i64,
}

impl PartitionState {
    fn new(topic: &str, epoch: u64) -> Self {
        PartitionState {
            topic: Arc::from(topic),
            state: FetchState::Initializing,
            position: -1,
            position_epoch: None,
            next_fetch_offset: -1,
            epoch,
            resolving: false,
            retry_at: None,
            paused: false,
            in_flight: false,
            fetch_after: None,
            starved: false,
            buffer: VecDeque::new(),
            buffered_bytes: 0,
            error: None,
            queued: false,
            high_watermark: -1,
            log_start_offset: -1,
            last_stable_offset: -1,
        }
    }

    fn clear_fetched(&mut self) {
        self.buffer.clear();
        self.buffered_bytes = 0;
        self.error = None;
        self.resolving = false;
        self.retry_at = None;
    }
}

/// The memory a record holds, for the prefetch budget.
pub(crate) fn record_bytes(r: &ConsumerRecord) -> usize {
    RECORD_OVERHEAD_BYTES
        + r.key.as_ref().map_or(0, |k| k.len())
        + r.value.as_ref().map_or(0, |v| v.len())
        + r.headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
            .sum::<usize>()
}

#[derive(Debug, Default)]
pub(crate) struct SubscriptionState {
    pub mode: Mode,
    /// In the order fetches list them.
    pub assigned: IndexMap<TopicPartition, PartitionState>,
    next_epoch: u64,
    /// Partitions with records or an error to hand out, first come first served.
    ready: VecDeque<TopicPartition>,
}

impl SubscriptionState {
    fn new_epoch(&mut self) -> u64 {
        self.next_epoch += 1;
        self.next_epoch
    }

    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        match &self.mode {
            Mode::Subscribed(t) => t.clone(),
            _ => BTreeSet::new(),
        }
    }

    pub fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.assigned.keys().cloned().collect()
    }

    pub fn is_assigned(&self, tp: &TopicPartition) -> bool {
        self.assigned.contains_key(tp)
    }

    /// Adds partitions (new ones start Initializing; present ones are kept as they are).
    pub fn add(&mut self, tps: impl IntoIterator<Item = TopicPartition>) {
        for tp in tps {
            if !self.assigned.contains_key(&tp) {
                let epoch = self.new_epoch();
                let state = PartitionState::new(&tp.topic, epoch);
                self.assigned.insert(tp, state);
            }
        }
    }

    /// Removes partitions, dropping what was fetched for them.
    pub fn remove(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            self.assigned.shift_remove(tp);
        }
        self.ready.retain(|tp| !tps.contains(tp));
    }

    /// Makes the assignment exactly `tps`, keeping the state of partitions that stay.
    pub fn set_assignment(&mut self, tps: &BTreeSet<TopicPartition>) {
        let gone: Vec<TopicPartition> = self
            .assigned
            .keys()
            .filter(|tp| !tps.contains(*tp))
            .cloned()
            .collect();
        self.remove(&gone);
        self.add(tps.iter().cloned());
    }

    pub fn clear(&mut self) {
        self.assigned.clear();
        self.ready.clear();
    }

    fn not_assigned(tp: &TopicPartition) -> ClientError {
        ClientError::Config(format!(
            "partition {tp} is not assigned to this consumer (assign() it, or wait for the \
             group to assign it)"
        ))
    }

    /// Sets the position; fetched records and waiting errors are dropped.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<(), ClientError> {
        if offset < 0 {
            return Err(ClientError::Config(format!(
                "cannot seek {tp} to the negative offset {offset}"
            )));
        }
        let epoch = self.new_epoch();
        let ps = self
            .assigned
            .get_mut(tp)
            .ok_or_else(|| Self::not_assigned(tp))?;
        ps.clear_fetched();
        ps.epoch = epoch;
        ps.state = FetchState::Fetching;
        ps.position = offset;
        ps.position_epoch = None;
        ps.next_fetch_offset = offset;
        Ok(())
    }

    /// Asks for a reset (done lazily by the next poll or position call, as in Kafka).
    pub fn request_reset(&mut self, tp: &TopicPartition, to: ResetTo) -> Result<(), ClientError> {
        let epoch = self.new_epoch();
        let ps = self
            .assigned
            .get_mut(tp)
            .ok_or_else(|| Self::not_assigned(tp))?;
        ps.clear_fetched();
        ps.epoch = epoch;
        ps.state = FetchState::AwaitReset(to);
        Ok(())
    }

    /// Consumed positions of the partitions that have one: what a commit commits.
    pub fn consumed(&self) -> HashMap<TopicPartition, OffsetAndMetadata> {
        self.assigned
            .iter()
            .filter(|(_, ps)| ps.state == FetchState::Fetching)
            .map(|(tp, ps)| {
                (
                    tp.clone(),
                    OffsetAndMetadata::new(ps.position).with_leader_epoch(ps.position_epoch),
                )
            })
            .collect()
    }

    /// Queues a partition whose records or error are waiting to be handed out.
    pub fn mark_ready(&mut self, tp: &TopicPartition) {
        if let Some(ps) = self.assigned.get_mut(tp) {
            if !ps.queued {
                ps.queued = true;
                self.ready.push_back(tp.clone());
            }
        }
    }

    /// Hands out up to `max` records, partition by partition in arrival order, moving
    /// positions past them. An error waiting behind a partition's records is returned only
    /// when no record has been collected yet (else it comes next time), as in Kafka.
    pub fn drain(&mut self, max: usize) -> Result<Vec<ConsumerRecord>, ClientError> {
        let mut out: Vec<ConsumerRecord> = Vec::new();
        let mut skipped: Vec<TopicPartition> = Vec::new();
        while out.len() < max {
            let Some(tp) = self.ready.pop_front() else {
                break;
            };
            let Some(ps) = self.assigned.get_mut(&tp) else {
                continue;
            };
            if ps.paused || (ps.state != FetchState::Fetching && ps.error.is_none()) {
                if ps.paused {
                    skipped.push(tp);
                } else {
                    ps.queued = false;
                }
                continue;
            }
            let take = (max - out.len()).min(ps.buffer.len());
            for r in ps.buffer.drain(..take) {
                ps.buffered_bytes = ps.buffered_bytes.saturating_sub(record_bytes(&r));
                ps.position = r.offset.saturating_add(1);
                ps.position_epoch = r.leader_epoch.or(ps.position_epoch);
                out.push(r);
            }
            if !ps.buffer.is_empty() {
                // `max` reached; this partition goes first next time.
                self.ready.push_front(tp);
                break;
            }
            ps.buffered_bytes = 0;
            if ps.state == FetchState::Fetching {
                ps.position = ps.position.max(ps.next_fetch_offset);
            }
            if ps.error.is_some() {
                if out.is_empty() {
                    ps.queued = false;
                    let error = ps.error.take();
                    for s in skipped.into_iter().rev() {
                        self.ready.push_front(s);
                    }
                    return Err(error.unwrap_or(ClientError::Closed));
                }
                self.ready.push_front(tp);
                break;
            }
            ps.queued = false;
        }
        for s in skipped.into_iter().rev() {
            self.ready.push_front(s);
        }
        Ok(out)
    }

    /// Takes the error waiting for `tp`, if nothing is buffered before it.
    pub fn take_error(&mut self, tp: &TopicPartition) -> Option<ClientError> {
        let ps = self.assigned.get_mut(tp)?;
        if ps.buffer.is_empty() {
            ps.error.take()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(tp: &TopicPartition, offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            topic: Arc::from(&*tp.topic),
            partition: tp.partition,
            offset,
            timestamp: 0,
            timestamp_type: super::super::record::TimestampType::CreateTime,
            key: None,
            value: None,
            headers: Vec::new(),
            leader_epoch: Some(3),
        }
    }

    fn fill(s: &mut SubscriptionState, tp: &TopicPartition, offsets: std::ops::Range<i64>) {
        let ps = s.assigned.get_mut(tp).unwrap();
        for o in offsets.clone() {
            let r = rec(tp, o);
            ps.buffered_bytes += record_bytes(&r);
            ps.buffer.push_back(r);
        }
        ps.next_fetch_offset = offsets.end + 2;
        s.mark_ready(tp);
    }

    #[test]
    fn drain_moves_positions_and_raises_errors_after_records() {
        let a = TopicPartition::new("t", 0);
        let b = TopicPartition::new("t", 1);
        let mut s = SubscriptionState::default();
        s.add([a.clone(), b.clone()]);
        s.seek(&a, 0).unwrap();
        s.seek(&b, 10).unwrap();
        fill(&mut s, &a, 0..3);
        fill(&mut s, &b, 10..12);
        s.assigned.get_mut(&b).unwrap().error = Some(ClientError::Closed);
        let got: Vec<i64> = s.drain(4).unwrap().iter().map(|r| r.offset).collect();
        assert_eq!(got, vec![0, 1, 2, 10]);
        // a's buffer ended: its position jumps to where its next fetch starts.
        assert_eq!(s.assigned[&a].position, 5);
        let got: Vec<i64> = s.drain(4).unwrap().iter().map(|r| r.offset).collect();
        assert_eq!(got, vec![11]);
        assert!(
            s.drain(4).is_err(),
            "the error comes once its records are out"
        );
        assert!(s.drain(4).unwrap().is_empty());
        assert_eq!(s.consumed()[&b].offset, 14);
        assert_eq!(s.consumed()[&b].leader_epoch, Some(3));
    }

    #[test]
    fn seek_and_paused_partitions() {
        let a = TopicPartition::new("t", 0);
        let mut s = SubscriptionState::default();
        s.add([a.clone()]);
        assert!(s.seek(&a, -1).is_err());
        assert!(s.seek(&TopicPartition::new("x", 0), 1).is_err());
        s.seek(&a, 0).unwrap();
        fill(&mut s, &a, 0..3);
        s.assigned.get_mut(&a).unwrap().paused = true;
        assert!(s.drain(10).unwrap().is_empty());
        s.assigned.get_mut(&a).unwrap().paused = false;
        assert_eq!(s.drain(10).unwrap().len(), 3);
        fill(&mut s, &a, 5..7);
        s.seek(&a, 1).unwrap();
        assert!(
            s.drain(10).unwrap().is_empty(),
            "a seek drops what was fetched"
        );
    }
}
