//! The cooperative sticky assignor (Kafka's `CooperativeStickyAssignor`, KIP-429): balanced
//! like round-robin, but each member keeps what it owned as far as balance allows, and a
//! partition that moves from one member to another is left unassigned in this rebalance.
//! Its owner revokes it, rejoins, and the next rebalance hands it over, so no partition is
//! ever consumed by two members at once.
//!
//! The algorithm is Weir's own (not a port of Kafka's `AbstractStickyAssignor`), with the
//! same contract:
//! 1. Ownership claims come from each member's subscription (owned partitions and the
//!    generation they were owned in). A claim on a partition that does not exist, or of a
//!    topic the member no longer subscribes to, is dropped. When several members claim a
//!    partition, the highest generation wins; a tie in the highest generation invalidates
//!    every claim on it (Kafka does the same).
//! 2. Every member keeps its valid claims; unclaimed partitions go, those with the fewest
//!    eligible members first, to the eligible member holding the fewest.
//! 3. While some member holds at least two more partitions than another member that could
//!    take one of them, one moves (preferring partitions the source did not own). Each
//!    move lowers the sum of squared counts, so this ends; with identical subscriptions the
//!    counts end up differing by at most one.
//! 4. Partitions given to a member other than their valid owner are removed from the
//!    assignment (the cooperative step).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::assignor::{MemberSubscription, PartitionAssignor};
use weir_kafka::TopicPartition;

/// Kafka's `CooperativeStickyAssignor`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CooperativeStickyAssignor;

impl CooperativeStickyAssignor {
    /// The user data Kafka's assignor sends in the subscription: the generation (i32), for
    /// members of groups whose consumer protocol predates the generation field.
    pub fn user_data(generation: i32) -> bytes::Bytes {
        bytes::Bytes::copy_from_slice(&generation.to_be_bytes())
    }

    /// A member's generation: the subscription's field (v2+), else the user data's.
    fn generation(m: &MemberSubscription) -> i32 {
        if m.generation >= 0 {
            return m.generation;
        }
        match m.user_data.as_deref() {
            Some(d) if d.len() >= 4 => i32::from_be_bytes([d[0], d[1], d[2], d[3]]),
            _ => -1,
        }
    }
}

impl PartitionAssignor for CooperativeStickyAssignor {
    fn name(&self) -> &'static str {
        "cooperative-sticky"
    }

    fn assign(
        &self,
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &[MemberSubscription],
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut plan = Plan::new(partitions_per_topic, members);
        plan.place_unowned();
        plan.balance();
        plan.into_cooperative_assignment()
    }
}

struct Plan<'a> {
    /// Member ids in order; indexes below refer to this.
    members: Vec<&'a str>,
    /// Every existing partition of every subscribed topic, in order.
    partitions: Vec<TopicPartition>,
    /// The partition's valid previous owner (step 1).
    owner: HashMap<usize, usize>,
    /// Current plan: partition index -> member index.
    assigned: HashMap<usize, usize>,
    /// Member index -> partition indexes held in the plan.
    held: Vec<BTreeSet<usize>>,
    /// Partition index -> members that may take it.
    eligible: Vec<Vec<usize>>,
}

impl<'a> Plan<'a> {
    fn new(
        partitions_per_topic: &BTreeMap<String, i32>,
        members: &'a [MemberSubscription],
    ) -> Self {
        let mut sorted: Vec<&MemberSubscription> = members.iter().collect();
        sorted.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        let member_ids: Vec<&str> = sorted.iter().map(|m| m.member_id.as_str()).collect();
        let subscriptions: Vec<BTreeSet<&str>> = sorted
            .iter()
            .map(|m| m.topics.iter().map(String::as_str).collect())
            .collect();
        let topics: BTreeSet<&str> = subscriptions.iter().flatten().copied().collect();
        let mut partitions = Vec::new();
        for topic in topics {
            let count = partitions_per_topic.get(topic).copied().unwrap_or(0);
            partitions.extend((0..count.max(0)).map(|p| TopicPartition::new(topic, p)));
        }
        let index: HashMap<&TopicPartition, usize> =
            partitions.iter().enumerate().map(|(i, p)| (p, i)).collect();
        let eligible: Vec<Vec<usize>> = partitions
            .iter()
            .map(|p| {
                (0..member_ids.len())
                    .filter(|&m| subscriptions[m].contains(&*p.topic))
                    .collect()
            })
            .collect();

        // Step 1: valid claims, highest generation wins, ties invalidate.
        let mut best: HashMap<usize, (i32, Vec<usize>)> = HashMap::new();
        for (m, sub) in sorted.iter().enumerate() {
            let generation = CooperativeStickyAssignor::generation(sub);
            let mut seen = BTreeSet::new();
            for tp in &sub.owned_partitions {
                let Some(&p) = index.get(tp) else { continue };
                if !subscriptions[m].contains(&*tp.topic) || !seen.insert(p) {
                    continue;
                }
                let entry = best.entry(p).or_insert((generation, Vec::new()));
                if generation > entry.0 {
                    *entry = (generation, vec![m]);
                } else if generation == entry.0 {
                    entry.1.push(m);
                }
            }
        }
        let owner: HashMap<usize, usize> = best
            .into_iter()
            .filter_map(|(p, (_, claimants))| (claimants.len() == 1).then(|| (p, claimants[0])))
            .collect();
        let mut plan = Plan {
            held: vec![BTreeSet::new(); member_ids.len()],
            members: member_ids,
            partitions,
            owner,
            assigned: HashMap::new(),
            eligible,
        };
        let claims: Vec<(usize, usize)> = plan.owner.iter().map(|(&p, &m)| (p, m)).collect();
        for (p, m) in claims {
            plan.give(p, m);
        }
        plan
    }

    fn give(&mut self, p: usize, m: usize) {
        if let Some(old) = self.assigned.insert(p, m) {
            self.held[old].remove(&p);
        }
        self.held[m].insert(p);
    }

    /// The eligible member holding the fewest partitions (the first in member order on a tie).
    fn least_loaded(&self, p: usize) -> Option<usize> {
        self.eligible[p]
            .iter()
            .copied()
            .min_by_key(|&m| (self.held[m].len(), m))
    }

    /// Step 2.
    fn place_unowned(&mut self) {
        let mut unowned: Vec<usize> = (0..self.partitions.len())
            .filter(|p| !self.assigned.contains_key(p))
            .collect();
        unowned.sort_by_key(|&p| (self.eligible[p].len(), p));
        for p in unowned {
            if let Some(m) = self.least_loaded(p) {
                self.give(p, m);
            }
        }
    }

    /// Step 3.
    fn balance(&mut self) {
        // Each move lowers the sum of squared counts by at least 2, so the number of moves
        // is bounded; the cap only guards against a bug turning into a hang.
        let max_moves = self.partitions.len().saturating_mul(self.members.len()) + 1;
        for _ in 0..max_moves {
            if !self.move_one() {
                return;
            }
        }
    }

    fn move_one(&mut self) -> bool {
        let mut sources: Vec<usize> = (0..self.members.len()).collect();
        sources.sort_by_key(|&m| (std::cmp::Reverse(self.held[m].len()), m));
        for a in sources {
            let count_a = self.held[a].len();
            if count_a < 2 {
                return false;
            }
            // Partitions `a` did not own move first; among equals, the last in order.
            let mut candidates: Vec<usize> = self.held[a].iter().copied().collect();
            candidates.sort_by_key(|p| (self.owner.get(p) == Some(&a), std::cmp::Reverse(*p)));
            for p in candidates {
                if let Some(b) = self.least_loaded(p) {
                    if self.held[b].len() + 1 < count_a {
                        self.give(p, b);
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Step 4, and the answer.
    fn into_cooperative_assignment(self) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut out: BTreeMap<String, Vec<TopicPartition>> = self
            .members
            .iter()
            .map(|m| (m.to_string(), Vec::new()))
            .collect();
        for (m, held) in self.held.iter().enumerate() {
            let slot = out.entry(self.members[m].to_string()).or_default();
            for &p in held {
                let moving = self.owner.get(&p).is_some_and(|&o| o != m);
                if !moving {
                    slot.push(self.partitions[p].clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tps(v: &[(&str, i32)]) -> Vec<TopicPartition> {
        v.iter().map(|(t, p)| TopicPartition::new(*t, *p)).collect()
    }

    #[test]
    fn user_data_generation_is_used_for_old_subscriptions() {
        let mut m = MemberSubscription::new("a", &["t"]);
        m.user_data = Some(CooperativeStickyAssignor::user_data(4));
        assert_eq!(CooperativeStickyAssignor::generation(&m), 4);
    }

    #[test]
    fn tie_in_the_highest_generation_invalidates_the_claims() {
        let parts: BTreeMap<String, i32> = [("t".to_string(), 2)].into();
        let members = vec![
            MemberSubscription::new("a", &["t"]).owning(&[("t", 0), ("t", 1)], 3),
            MemberSubscription::new("b", &["t"]).owning(&[("t", 0)], 3),
        ];
        let out = CooperativeStickyAssignor.assign(&parts, &members);
        // t-0 has no valid owner, so it may go anywhere at once; t-1 stays with a.
        assert!(out["a"].contains(&TopicPartition::new("t", 1)));
        let all: usize = out.values().map(Vec::len).sum();
        assert_eq!(all, 2);
        assert_eq!(out["b"], tps(&[("t", 0)]));
    }

    #[test]
    fn unequal_subscriptions_balance_where_they_can() {
        let parts: BTreeMap<String, i32> = [("x".to_string(), 4), ("y".to_string(), 2)].into();
        let members = vec![
            MemberSubscription::new("a", &["x", "y"]),
            MemberSubscription::new("b", &["x"]),
            MemberSubscription::new("c", &["y"]),
        ];
        let out = CooperativeStickyAssignor.assign(&parts, &members);
        let counts: Vec<usize> = ["a", "b", "c"].iter().map(|m| out[*m].len()).collect();
        assert_eq!(counts.iter().sum::<usize>(), 6);
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
        assert!(out["b"].iter().all(|p| &*p.topic == "x"));
        assert!(out["c"].iter().all(|p| &*p.topic == "y"));
    }
}
