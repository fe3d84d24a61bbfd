//! What the coordinator keeps for one transactional id (Kafka's `TransactionMetadata`), and
//! the rule by which it changes: a transition is first prepared in memory (one at a time per
//! id), written to `__transaction_state`, and applied only once that write is durable; a
//! failed write drops the prepared transition and leaves the id as it was.
//!
//! Also the cache a coordinator rebuilds from its `__transaction_state` partitions when it
//! takes them over: the last value of each key wins, a tombstone removes the id.

use std::collections::{BTreeMap, BTreeSet};

use weir_kafka::TopicPartition;

use crate::records::{self, RecordError, TxnLogValue};
use crate::state::TxnState;

/// A producer epoch at or past this is exhausted: the next bump takes a new producer id.
pub const MAX_PRODUCER_EPOCH: i16 = i16::MAX - 1;

/// The state of one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id before the last rotation (-1 when none).
    pub previous_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump (so a retried InitProducerId gets the same answer);
    /// not persisted, as in Kafka: -1 after a load.
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the open transaction began (-1 when none).
    pub txn_start_ms: i64,
    pub txn_last_update_ms: i64,
    /// The transition written but not yet durable, if one is.
    pub pending: Option<TxnState>,
}

/// A transition prepared from a `TxnMetadata`: what goes to `__transaction_state`, and
/// what the id becomes once it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnTransit {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub txn_timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    pub txn_start_ms: i64,
    pub txn_last_update_ms: i64,
}

/// Why a transition cannot be prepared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// Another transition of this id is being written (Kafka answers
    /// CONCURRENT_TRANSACTIONS, which clients retry).
    #[error("transactional id {id}: a transition to {pending} is being written")]
    Pending { id: String, pending: &'static str },
    /// Not a move Kafka's coordinator makes (a bug in the caller).
    #[error("transactional id {id}: {from} cannot become {to}")]
    Illegal {
        id: String,
        from: &'static str,
        to: &'static str,
    },
}

impl TxnMetadata {
    /// A transactional id seen for the first time: Empty, at epoch -1 (InitProducerId's
    /// first bump makes it 0).
    pub fn new(transactional_id: &str, producer_id: i64, txn_timeout_ms: i32, now_ms: i64) -> Self {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id,
            previous_producer_id: -1,
            producer_epoch: -1,
            last_producer_epoch: -1,
            txn_timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            txn_start_ms: -1,
            txn_last_update_ms: now_ms,
            pending: None,
        }
    }

    /// The id as a record of `__transaction_state` left it.
    pub fn from_log(transactional_id: &str, v: &TxnLogValue) -> Self {
        let partitions = v
            .partitions
            .iter()
            .flatten()
            .flat_map(|(topic, ps)| {
                ps.iter()
                    .map(move |p| TopicPartition::new(topic.as_str(), *p))
            })
            .collect();
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            producer_id: v.producer_id,
            previous_producer_id: v.previous_producer_id,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: -1,
            txn_timeout_ms: v.transaction_timeout_ms,
            state: v.state,
            partitions,
            txn_start_ms: v.start_timestamp_ms,
            txn_last_update_ms: v.last_update_timestamp_ms,
            pending: None,
        }
    }

    pub fn is_epoch_exhausted(&self) -> bool {
        self.producer_epoch >= MAX_PRODUCER_EPOCH
    }

    /// Whether an open transaction has outlived its timeout at `now_ms` (the timeout counts
    /// from its start; adding partitions does not extend it).
    pub fn has_timed_out(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing
            && self.pending.is_none()
            && self.txn_start_ms >= 0
            && self.txn_start_ms + self.txn_timeout_ms as i64 <= now_ms
    }

    /// Prepares a move to `transit.state`, marking it pending; the caller writes
    /// `transit.log_value()` and then calls `complete` (or `abandon` if the write failed).
    pub fn prepare(&mut self, transit: TxnTransit) -> Result<TxnTransit, TransitionError> {
        if let Some(pending) = self.pending {
            return Err(TransitionError::Pending {
                id: self.transactional_id.clone(),
                pending: pending.name(),
            });
        }
        if !self.state.can_transition_to(transit.state) {
            return Err(TransitionError::Illegal {
                id: self.transactional_id.clone(),
                from: self.state.name(),
                to: transit.state.name(),
            });
        }
        self.pending = Some(transit.state);
        Ok(transit)
    }

    /// A transition from the current state with these changes (the fields not named keep
    /// their values).
    pub fn transit(&self, state: TxnState) -> TxnTransit {
        TxnTransit {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: self.last_producer_epoch,
            txn_timeout_ms: self.txn_timeout_ms,
            state,
            partitions: self.partitions.clone(),
            txn_start_ms: self.txn_start_ms,
            txn_last_update_ms: self.txn_last_update_ms,
        }
    }

    /// The prepared transition is durable: the id takes it on.
    pub fn complete(&mut self, t: TxnTransit) {
        assert_eq!(
            self.pending,
            Some(t.state),
            "{}: completing a transition that was not prepared",
            self.transactional_id
        );
        self.pending = None;
        self.producer_id = t.producer_id;
        self.previous_producer_id = t.previous_producer_id;
        self.producer_epoch = t.producer_epoch;
        self.last_producer_epoch = t.last_producer_epoch;
        self.txn_timeout_ms = t.txn_timeout_ms;
        self.state = t.state;
        self.partitions = t.partitions;
        self.txn_start_ms = t.txn_start_ms;
        self.txn_last_update_ms = t.txn_last_update_ms;
    }

    /// The prepared transition's write failed: nothing changes.
    pub fn abandon(&mut self) {
        self.pending = None;
    }
}

impl TxnTransit {
    /// The record value of this transition. Kafka writes a null partition list for Empty
    /// and the partitions for every other state (none, for the Complete states).
    pub fn log_value(&self) -> TxnLogValue {
        let partitions = (self.state != TxnState::Empty).then(|| {
            let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for tp in &self.partitions {
                by_topic
                    .entry(tp.topic.to_string())
                    .or_default()
                    .push(tp.partition);
            }
            by_topic
        });
        TxnLogValue {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            transaction_timeout_ms: self.txn_timeout_ms,
            state: self.state,
            partitions,
            last_update_timestamp_ms: self.txn_last_update_ms,
            start_timestamp_ms: self.txn_start_ms,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: -1,
            client_transaction_version: 0,
        }
    }
}

/// One record of `__transaction_state` as a load reads it: offset, key, value (`None`: a
/// tombstone).
pub type StoredRecord<'a> = (i64, &'a [u8], Option<&'a [u8]>);

/// Rebuilds the coordinator's cache of one `__transaction_state` partition from its records
/// in offset order: the last value of a key wins and a
/// tombstone removes it. A record that cannot be read is an error naming its place, as
/// Kafka stops loading on one; a key of an unknown version is skipped.
pub fn load<'a>(
    records: impl IntoIterator<Item = StoredRecord<'a>>,
) -> Result<BTreeMap<String, TxnMetadata>, (i64, RecordError)> {
    let mut out = BTreeMap::new();
    for (offset, key, value) in records {
        let id = match records::decode_key(key) {
            Ok(id) => id,
            Err(RecordError::UnknownVersion { .. }) => continue,
            Err(e) => return Err((offset, e)),
        };
        match value {
            None => {
                out.remove(&id);
            }
            Some(v) => {
                let v = records::decode_value(v).map_err(|e| (offset, e))?;
                out.insert(id.clone(), TxnMetadata::from_log(&id, &v));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{encode_key, encode_value};

    #[test]
    fn a_transition_is_applied_only_once_durable_and_one_at_a_time() {
        let mut m = TxnMetadata::new("tx", 1000, 60_000, 5);
        // InitProducerId's bump: Empty -> Empty at epoch 0.
        let mut t = m.transit(TxnState::Empty);
        t.producer_epoch = 0;
        let t = m.prepare(t).unwrap();
        assert_eq!(m.producer_epoch, -1, "not applied before it is durable");
        assert!(matches!(
            m.prepare(m.transit(TxnState::Ongoing)),
            Err(TransitionError::Pending { .. })
        ));
        m.complete(t);
        assert_eq!(
            (m.state, m.producer_epoch, m.pending),
            (TxnState::Empty, 0, None)
        );

        // AddPartitionsToTxn: Empty -> Ongoing; the write fails, nothing changes.
        let mut t = m.transit(TxnState::Ongoing);
        t.partitions.insert(TopicPartition::new("orders", 1));
        t.txn_start_ms = 10;
        m.prepare(t.clone()).unwrap();
        m.abandon();
        assert_eq!((m.state, m.partitions.len()), (TxnState::Empty, 0));
        m.prepare(t.clone()).unwrap();
        m.complete(t);
        assert_eq!(m.state, TxnState::Ongoing);
        assert!(m.has_timed_out(10 + 60_000) && !m.has_timed_out(10 + 59_999));

        // Ongoing cannot complete without preparing first.
        assert!(matches!(
            m.prepare(m.transit(TxnState::CompleteCommit)),
            Err(TransitionError::Illegal { .. })
        ));
        let t = m.prepare(m.transit(TxnState::PrepareCommit)).unwrap();
        assert_eq!(
            t.log_value().partitions,
            Some(BTreeMap::from([("orders".to_string(), vec![1])]))
        );
        m.complete(t);
        let mut done = m.transit(TxnState::CompleteCommit);
        done.partitions.clear();
        let done = m.prepare(done).unwrap();
        assert_eq!(done.log_value().partitions, Some(BTreeMap::new()));
        m.complete(done);
        assert_eq!(m.state, TxnState::CompleteCommit);
        assert_eq!(m.transit(TxnState::Empty).log_value().partitions, None);
    }

    #[test]
    fn the_cache_is_the_last_value_of_each_key() {
        let value = |state: TxnState, epoch: i16| {
            let mut m = TxnMetadata::new("x", 7, 30_000, 1);
            m.producer_epoch = epoch;
            encode_value(&m.transit(state).log_value()).unwrap()
        };
        let (a, b) = (encode_key("a").unwrap(), encode_key("b").unwrap());
        let v1 = value(TxnState::Empty, 0);
        let v2 = value(TxnState::Ongoing, 0);
        let v3 = value(TxnState::Empty, 1);
        // A key of another version (a future record type) is skipped.
        let other = [0u8, 9, 0, 1, b'z'];
        let records: Vec<StoredRecord<'_>> = vec![
            (0, &a, Some(&v1)),
            (1, &b, Some(&v2)),
            (2, &other, Some(&v1)),
            (3, &a, Some(&v3)),
            (4, &b, None),
        ];
        let cache = load(records).unwrap();
        assert_eq!(cache.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(cache["a"].producer_epoch, 1);
        assert_eq!(
            cache["a"].last_producer_epoch, -1,
            "not persisted, as in Kafka"
        );
        let broken: Vec<StoredRecord<'_>> = vec![(9, &a, Some(&v1[..5]))];
        assert_eq!(load(broken), Err((9, RecordError::Truncated)));
    }
}
