//! The rebalance listener (Kafka's `ConsumerRebalanceListener`) and the context its
//! callbacks get. Callbacks are synchronous and run inside `poll` (or `close`/`unsubscribe`),
//! on the task that called it, never concurrently with another consumer call; they should be
//! quick. What they need the consumer for goes through [`RebalanceContext`]: reading and
//! setting positions, and committing offsets, which the consumer does synchronously as soon
//! as the callback returns (before the rebalance goes on), as a Java listener calling
//! `commitSync` would.

use std::collections::{BTreeSet, HashMap};

use super::record::OffsetAndMetadata;

use super::subscription::{FetchState, ResetTo, SubscriptionState};
use crate::error::Result;
use weir_kafka::TopicPartition;

/// Told when the group takes partitions away from this consumer or gives it new ones.
///
/// With the eager protocol every rebalance revokes everything first; with the cooperative
/// protocol (`partition.assignment.strategy=cooperative-sticky`) only the partitions that
/// move are revoked. `on_partitions_revoked` and `on_partitions_lost` are called only with
/// a non-empty set; `on_partitions_assigned` after every completed rebalance, possibly with
/// an empty set (the partitions *added*).
pub trait RebalanceListener: Send {
    /// The partitions are about to go to another member: their positions are still valid
    /// and, with auto-commit on, were committed just before this call.
    fn on_partitions_revoked(
        &mut self,
        ctx: &mut RebalanceContext<'_>,
        partitions: &[TopicPartition],
    );

    /// The partitions are now this consumer's. Positions are looked up after this call
    /// (committed offset, else `auto.offset.reset`) unless the callback seeks.
    fn on_partitions_assigned(
        &mut self,
        ctx: &mut RebalanceContext<'_>,
        partitions: &[TopicPartition],
    );

    /// The partitions were lost without a chance to commit (the member was thrown out of
    /// the group, e.g. after missing heartbeats): other members may already own them.
    /// Defaults to `on_partitions_revoked`, as in Kafka.
    fn on_partitions_lost(
        &mut self,
        ctx: &mut RebalanceContext<'_>,
        partitions: &[TopicPartition],
    ) {
        self.on_partitions_revoked(ctx, partitions);
    }
}

/// What a rebalance callback may do with the consumer.
pub struct RebalanceContext<'a> {
    subs: &'a mut SubscriptionState,
    commits: HashMap<TopicPartition, OffsetAndMetadata>,
}

impl<'a> RebalanceContext<'a> {
    pub(crate) fn new(subs: &'a mut SubscriptionState) -> Self {
        RebalanceContext {
            subs,
            commits: HashMap::new(),
        }
    }

    pub(crate) fn into_commits(self) -> HashMap<TopicPartition, OffsetAndMetadata> {
        self.commits
    }

    /// The partitions assigned right now.
    pub fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.subs.assignment()
    }

    /// The consumed position of a partition (the next offset `poll` hands out), if known.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.subs
            .assigned
            .get(tp)
            .filter(|ps| ps.state == FetchState::Fetching)
            .map(|ps| ps.position)
    }

    /// Sets where consumption of an assigned partition starts.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        self.subs.seek(tp, offset)
    }

    pub fn seek_to_beginning(&mut self, tps: &[TopicPartition]) -> Result<()> {
        tps.iter()
            .try_for_each(|tp| self.subs.request_reset(tp, ResetTo::Earliest))
    }

    pub fn seek_to_end(&mut self, tps: &[TopicPartition]) -> Result<()> {
        tps.iter()
            .try_for_each(|tp| self.subs.request_reset(tp, ResetTo::Latest))
    }

    /// Commits these offsets (synchronously, when the callback returns). A failure is
    /// returned by the `poll` that ran the callback.
    pub fn commit(&mut self, offsets: HashMap<TopicPartition, OffsetAndMetadata>) {
        self.commits.extend(offsets);
    }

    /// Commits the consumed positions of these partitions (those that have one).
    pub fn commit_positions(&mut self, tps: &[TopicPartition]) {
        for tp in tps {
            if let Some(offset) = self.position(tp) {
                let epoch = self.subs.assigned.get(tp).and_then(|ps| ps.position_epoch);
                self.commits.insert(
                    tp.clone(),
                    OffsetAndMetadata::new(offset).with_leader_epoch(epoch),
                );
            }
        }
    }
}
