//! Kafka's replica assignment (`AdminUtils.assignReplicasToBrokers`), so that topics
//! spread over brokers and racks as they would in Kafka:
//!
//! - The first replica of each partition goes round-robin over the brokers from a random
//!   start, so leaders spread evenly.
//! - The other replicas follow at a shift from the first that grows each time the
//!   partitions have gone once round the brokers, so a broker's followers are spread too.
//! - With racks, the brokers are first arranged alternating between racks, and a replica
//!   skips a broker whose rack already holds one while some rack holds none.
//!
//! Pure functions: the caller says which brokers there are and gives the randomness.

use std::collections::{BTreeMap, BTreeSet};

/// A broker the assignment may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: i32,
    pub rack: Option<String>,
}

/// Why no assignment could be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssignError {
    /// More replicas per partition than there are brokers (INVALID_REPLICATION_FACTOR).
    ReplicationFactor { asked: usize, brokers: usize },
    /// Some brokers have a rack and some do not (INVALID_REPLICATION_FACTOR in Kafka too).
    PartialRacks,
}

impl std::fmt::Display for AssignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AssignError::ReplicationFactor { asked, brokers } => write!(
                f,
                "Replication factor: {asked} larger than available brokers: {brokers}."
            ),
            AssignError::PartialRacks => write!(
                f,
                "Not all brokers have rack information: set broker.rack on every broker or on none"
            ),
        }
    }
}

/// Where the round-robin starts: for new topics random, for added partitions where the
/// topic's first partition started (so they continue its pattern).
#[derive(Debug, Clone, Copy)]
pub struct Start {
    pub index: usize,
    pub shift: usize,
}

impl Start {
    pub fn random(brokers: usize) -> Start {
        let n = brokers.max(1);
        Start {
            index: fastrand::usize(..n),
            shift: fastrand::usize(..n),
        }
    }
}

/// Replicas for partitions `first..first + count`, `replication_factor` each, over
/// `brokers` (any order: they are sorted by id, as Kafka sorts them).
pub fn assign(
    brokers: &[Candidate],
    count: usize,
    replication_factor: usize,
    first: usize,
    start: Start,
) -> Result<Vec<Vec<i32>>, AssignError> {
    if replication_factor == 0 || replication_factor > brokers.len() {
        return Err(AssignError::ReplicationFactor {
            asked: replication_factor,
            brokers: brokers.len(),
        });
    }
    let with_rack = brokers.iter().filter(|b| b.rack.is_some()).count();
    if with_rack == 0 {
        let mut ids: Vec<i32> = brokers.iter().map(|b| b.id).collect();
        ids.sort_unstable();
        Ok(rack_unaware(&ids, count, replication_factor, first, start))
    } else if with_rack == brokers.len() {
        Ok(rack_aware(brokers, count, replication_factor, first, start))
    } else {
        Err(AssignError::PartialRacks)
    }
}

/// The index of the `j`th follower of a partition whose leader is at `first`.
fn follower_index(first: usize, shift: usize, j: usize, n: usize) -> usize {
    let step = 1 + (shift + j) % (n - 1);
    (first + step) % n
}

fn rack_unaware(ids: &[i32], count: usize, rf: usize, first: usize, start: Start) -> Vec<Vec<i32>> {
    let n = ids.len();
    let mut shift = start.shift;
    let mut out = Vec::with_capacity(count);
    for p in first..first + count {
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let leader = (p + start.index) % n;
        let mut replicas = vec![ids[leader]];
        for j in 0..rf - 1 {
            replicas.push(ids[follower_index(leader, shift, j, n)]);
        }
        out.push(replicas);
    }
    out
}

/// The brokers in the order that alternates racks: one of each rack (racks sorted, brokers
/// within a rack by id), then the next of each, and so on.
fn rack_alternated(brokers: &[Candidate]) -> Vec<(i32, String)> {
    let mut by_rack: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for b in brokers {
        by_rack
            .entry(b.rack.clone().unwrap_or_default())
            .or_default()
            .push(b.id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
        ids.reverse(); // popped from the end, lowest first
    }
    let racks: Vec<String> = by_rack.keys().cloned().collect();
    let mut out = Vec::with_capacity(brokers.len());
    let mut r = 0;
    while out.len() < brokers.len() {
        let rack = &racks[r];
        if let Some(id) = by_rack.get_mut(rack).and_then(|ids| ids.pop()) {
            out.push((id, rack.clone()));
        }
        r = (r + 1) % racks.len();
    }
    out
}

fn rack_aware(
    brokers: &[Candidate],
    count: usize,
    rf: usize,
    first: usize,
    start: Start,
) -> Vec<Vec<i32>> {
    let arranged = rack_alternated(brokers);
    let n = arranged.len();
    let racks = arranged
        .iter()
        .map(|(_, r)| r.as_str())
        .collect::<BTreeSet<_>>()
        .len();
    let mut shift = start.shift;
    let mut out = Vec::with_capacity(count);
    for p in first..first + count {
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let leader = (p + start.index) % n;
        let mut replicas = vec![arranged[leader].0];
        let mut racks_used = BTreeSet::from([arranged[leader].1.as_str()]);
        let mut brokers_used = BTreeSet::from([arranged[leader].0]);
        let mut k = 0;
        for _ in 0..rf - 1 {
            loop {
                let (id, rack) = &arranged[follower_index(leader, shift * racks, k, n)];
                k += 1;
                // Skip a broker whose rack already has a replica while another rack has
                // none, or that has one itself while another broker has none.
                let rack_ok = !racks_used.contains(rack.as_str()) || racks_used.len() == racks;
                let broker_ok = !brokers_used.contains(id) || brokers_used.len() == n;
                if rack_ok && broker_ok {
                    replicas.push(*id);
                    racks_used.insert(rack.as_str());
                    brokers_used.insert(*id);
                    break;
                }
            }
        }
        out.push(replicas);
    }
    out
}

/// Where added partitions continue a topic's pattern from: the index of its partition 0's
/// first replica among the sorted brokers (Kafka's `createPartitionsWithAssignment`).
pub fn start_of(brokers: &[Candidate], existing: &[Vec<i32>]) -> Start {
    let mut ids: Vec<i32> = brokers.iter().map(|b| b.id).collect();
    ids.sort_unstable();
    let index = existing
        .first()
        .and_then(|r| r.first())
        .and_then(|leader| ids.iter().position(|id| id == leader));
    match index {
        Some(index) => Start {
            index,
            shift: fastrand::usize(..ids.len().max(1)),
        },
        None => Start::random(ids.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(ids: &[i32]) -> Vec<Candidate> {
        ids.iter().map(|&id| Candidate { id, rack: None }).collect()
    }

    #[test]
    fn rack_unaware_matches_kafka_s_example() {
        // Kafka's AdminUtils documents brokers 0..4, 10 partitions, RF 3, start 0, shift 0:
        //   broker-0 broker-1 broker-2 broker-3 broker-4
        //   p0       p1       p2       p3       p4       (1st replica)
        //   p5       p6       p7       p8       p9       (1st replica)
        //   p4       p0       p1       p2       p3       (2nd replica)
        //   p8       p9       p5       p6       p7       (2nd replica)
        //   p3       p4       p0       p1       p2       (3rd replica)
        //   p7       p8       p9       p5       p6       (3rd replica)
        let a = assign(
            &brokers(&[0, 1, 2, 3, 4]),
            10,
            3,
            0,
            Start { index: 0, shift: 0 },
        )
        .unwrap();
        assert_eq!(a[0], [0, 1, 2]);
        assert_eq!(a[4], [4, 0, 1]);
        assert_eq!(a[5], [0, 2, 3]);
        assert_eq!(a[9], [4, 1, 2]);
    }

    #[test]
    fn rack_aware_puts_each_replica_on_another_rack() {
        let racks = [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")];
        let bs: Vec<Candidate> = racks
            .iter()
            .map(|(id, r)| Candidate {
                id: *id,
                rack: Some(r.to_string()),
            })
            .collect();
        let rack = |id: i32| racks.iter().find(|(b, _)| *b == id).unwrap().1;
        for index in 0..6 {
            for shift in 0..6 {
                let a = assign(&bs, 12, 3, 0, Start { index, shift }).unwrap();
                for replicas in &a {
                    let distinct: BTreeSet<&str> = replicas.iter().map(|&b| rack(b)).collect();
                    assert_eq!(distinct.len(), 3, "{replicas:?}");
                }
                let mut leaders = BTreeMap::new();
                for replicas in &a {
                    *leaders.entry(replicas[0]).or_insert(0) += 1;
                }
                assert!(leaders.values().all(|&n| n == 2), "{leaders:?}");
            }
        }
    }

    #[test]
    fn impossible_asks_are_refused() {
        assert_eq!(
            assign(&brokers(&[1, 2]), 1, 3, 0, Start::random(2)),
            Err(AssignError::ReplicationFactor {
                asked: 3,
                brokers: 2
            })
        );
        let mixed = vec![
            Candidate {
                id: 1,
                rack: Some("a".into()),
            },
            Candidate { id: 2, rack: None },
        ];
        assert_eq!(
            assign(&mixed, 1, 1, 0, Start::random(2)),
            Err(AssignError::PartialRacks)
        );
    }

    proptest::proptest! {
        #[test]
        fn every_partition_gets_distinct_replicas_and_leaders_spread(
            n in 1usize..8, rf in 1usize..4, count in 1usize..40, first in 0usize..10,
            index in 0usize..8, shift in 0usize..8,
        ) {
            proptest::prop_assume!(rf <= n);
            let ids: Vec<i32> = (0..n as i32).map(|i| i * 10 + 1).collect();
            let a = assign(&brokers(&ids), count, rf, first, Start { index, shift }).unwrap();
            proptest::prop_assert_eq!(a.len(), count);
            let mut leaders = BTreeMap::new();
            for r in &a {
                let distinct: BTreeSet<i32> = r.iter().copied().collect();
                proptest::prop_assert_eq!(distinct.len(), rf);
                *leaders.entry(r[0]).or_insert(0usize) += 1;
            }
            let (lo, hi) = (count / n, count.div_ceil(n));
            proptest::prop_assert!(leaders.values().all(|&c| c >= lo && c <= hi));
        }
    }
}
