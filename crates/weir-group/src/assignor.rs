//! The server-side assignors of the KIP-848 consumer protocol (`group.consumer.assignors`):
//! `uniform`, Kafka's default, and `range`. Pure functions from the members' subscriptions
//! and the previous target assignment to the next one; they never see the clock or a lock.
//!
//! Written here because no crate implements Kafka's assignors; the rules (what each
//! guarantees) are Kafka's, the algorithms our own.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

/// Partitions by topic id: a member's assignment.
pub(crate) type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// The assignors this coordinator knows, in Kafka's default preference order.
pub(crate) const ASSIGNORS: &[&str] = &["uniform", "range"];

/// One member as an assignor sees it.
pub(crate) struct AssignorMember<'a> {
    pub member_id: &'a str,
    /// The ids of the (existing) topics it subscribes to.
    pub topics: BTreeSet<Uuid>,
    /// Its previous target assignment (for stickiness).
    pub previous: Option<&'a Assignment>,
}

/// Runs assignor `name` (one of [`ASSIGNORS`]) over `members` (in the group's member
/// order) and `partitions` (topic id → partition count). Every partition of a subscribed
/// topic goes to exactly one member subscribing to it.
pub(crate) fn assign(
    name: &str,
    members: &[AssignorMember<'_>],
    partitions: &BTreeMap<Uuid, i32>,
) -> HashMap<String, Assignment> {
    let out = match name {
        "range" => range(members, partitions),
        _ => uniform(members, partitions),
    };
    debug_assert!(covers_each_partition_once(members, partitions, &out));
    out
}

/// `uniform`: every member gets as close to the same number of partitions as its
/// subscriptions allow (with one subscription for all, counts differ by at most one), and
/// keeps as much of its previous assignment as that balance allows.
fn uniform(
    members: &[AssignorMember<'_>],
    partitions: &BTreeMap<Uuid, i32>,
) -> HashMap<String, Assignment> {
    let n = members.len();
    let mut owned: Vec<BTreeSet<(Uuid, i32)>> = vec![BTreeSet::new(); n];
    let mut taken: HashMap<(Uuid, i32), usize> = HashMap::new();
    let eligible = |m: usize, topic: &Uuid| members[m].topics.contains(topic);

    // What a member subscribing to everything would get: the balanced share of the
    // partitions it may have. Anything kept above it is given up below.
    let share = |m: usize| -> usize {
        let mine: usize = members[m]
            .topics
            .iter()
            .filter_map(|t| partitions.get(t))
            .map(|&c| usize::try_from(c).unwrap_or(0))
            .sum();
        let sharing = members
            .iter()
            .filter(|o| o.topics.iter().any(|t| members[m].topics.contains(t)))
            .count()
            .max(1);
        mine.div_ceil(sharing)
    };

    // 1. Stickiness: keep what is still subscribed, exists and is nobody else's, up to
    //    the member's share.
    for (m, member) in members.iter().enumerate() {
        let cap = share(m);
        for (topic, parts) in member.previous.into_iter().flatten() {
            let Some(&count) = partitions.get(topic) else {
                continue;
            };
            if !eligible(m, topic) {
                continue;
            }
            for &p in parts {
                if owned[m].len() >= cap {
                    break;
                }
                if p < count && !taken.contains_key(&(*topic, p)) {
                    taken.insert((*topic, p), m);
                    owned[m].insert((*topic, p));
                }
            }
        }
    }

    // 2. The rest, each to the least loaded member that may have it.
    for (&topic, &count) in partitions {
        for p in 0..count {
            if taken.contains_key(&(topic, p)) {
                continue;
            }
            let best = (0..n)
                .filter(|&m| eligible(m, &topic))
                .min_by_key(|&m| (owned[m].len(), m));
            if let Some(m) = best {
                taken.insert((topic, p), m);
                owned[m].insert((topic, p));
            }
        }
    }

    // 3. Balance: move partitions from a member holding two or more above another member
    //    that may take them. Each move lowers the sum of squared counts, so this ends; the
    //    bound only guards against a mistake.
    let mut moves_left = taken.len().saturating_mul(n.max(1));
    'balance: while moves_left > 0 {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&m| std::cmp::Reverse(owned[m].len()));
        for &from in &order {
            let candidates: Vec<(Uuid, i32)> = owned[from].iter().rev().copied().collect();
            for (topic, p) in candidates {
                let to = (0..n)
                    .filter(|&m| m != from && eligible(m, &topic))
                    .min_by_key(|&m| (owned[m].len(), m));
                if let Some(to) = to {
                    if owned[from].len() > owned[to].len() + 1 {
                        owned[from].remove(&(topic, p));
                        owned[to].insert((topic, p));
                        moves_left -= 1;
                        continue 'balance;
                    }
                }
            }
        }
        break;
    }

    members
        .iter()
        .zip(owned)
        .map(|(m, parts)| {
            let mut a = Assignment::new();
            for (topic, p) in parts {
                a.entry(topic).or_default().insert(p);
            }
            (m.member_id.to_owned(), a)
        })
        .collect()
}

/// `range`: per topic, its subscribers in member id order take consecutive ranges of the
/// partitions, the first ones one more when they do not divide evenly; so members
/// subscribing to co-partitioned topics get the same partition numbers of each.
fn range(
    members: &[AssignorMember<'_>],
    partitions: &BTreeMap<Uuid, i32>,
) -> HashMap<String, Assignment> {
    let mut out: HashMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.to_owned(), Assignment::new()))
        .collect();
    for (&topic, &count) in partitions {
        let mut subscribers: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(&topic))
            .map(|m| m.member_id)
            .collect();
        if subscribers.is_empty() || count <= 0 {
            continue;
        }
        subscribers.sort_unstable();
        let k = i32::try_from(subscribers.len()).unwrap_or(i32::MAX);
        let (base, extra) = (count / k, count % k);
        let mut next = 0;
        for (i, member) in subscribers.into_iter().enumerate() {
            let i = i32::try_from(i).unwrap_or(i32::MAX);
            let take = base + i32::from(i < extra);
            if take > 0 {
                let a = out.entry(member.to_owned()).or_default();
                a.entry(topic).or_default().extend(next..next + take);
            }
            next += take;
        }
    }
    out
}

fn covers_each_partition_once(
    members: &[AssignorMember<'_>],
    partitions: &BTreeMap<Uuid, i32>,
    out: &HashMap<String, Assignment>,
) -> bool {
    let mut seen: HashMap<(Uuid, i32), usize> = HashMap::new();
    for m in members {
        for (topic, parts) in out.get(m.member_id).into_iter().flatten() {
            if !m.topics.contains(topic) {
                return false;
            }
            for &p in parts {
                *seen.entry((*topic, p)).or_default() += 1;
            }
        }
    }
    partitions.iter().all(|(topic, &count)| {
        let subscribed = members.iter().any(|m| m.topics.contains(topic));
        (0..count).all(|p| seen.get(&(*topic, p)).copied().unwrap_or(0) == usize::from(subscribed))
    }) && seen.values().all(|&c| c == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    #[test]
    fn uniform_balances_one_subscription_and_keeps_what_it_can() {
        let parts = BTreeMap::from([(topic(1), 4), (topic(2), 3)]);
        let all = BTreeSet::from([topic(1), topic(2)]);
        let two = [
            AssignorMember {
                member_id: "a",
                topics: all.clone(),
                previous: None,
            },
            AssignorMember {
                member_id: "b",
                topics: all.clone(),
                previous: None,
            },
        ];
        let first = assign("uniform", &two, &parts);
        let (a, b) = (&first["a"], &first["b"]);
        assert_eq!(count(a) + count(b), 7);
        assert!(count(a).abs_diff(count(b)) <= 1);

        // A third member joins: balance again, and nobody loses what it need not.
        let three = [
            AssignorMember {
                member_id: "a",
                topics: all.clone(),
                previous: Some(a),
            },
            AssignorMember {
                member_id: "b",
                topics: all.clone(),
                previous: Some(b),
            },
            AssignorMember {
                member_id: "c",
                topics: all.clone(),
                previous: None,
            },
        ];
        let next = assign("uniform", &three, &parts);
        let counts: Vec<usize> = ["a", "b", "c"].iter().map(|m| count(&next[*m])).collect();
        assert_eq!(counts.iter().sum::<usize>(), 7);
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
        for m in ["a", "b"] {
            for (t, ps) in &next[m] {
                assert!(
                    ps.is_subset(&first[m][t]),
                    "{m} was given partitions of {t} it had not before, while c joined"
                );
            }
        }
    }

    #[test]
    fn uniform_respects_different_subscriptions() {
        let parts = BTreeMap::from([(topic(1), 6), (topic(2), 2)]);
        let members = [
            AssignorMember {
                member_id: "a",
                topics: BTreeSet::from([topic(1)]),
                previous: None,
            },
            AssignorMember {
                member_id: "b",
                topics: BTreeSet::from([topic(1), topic(2)]),
                previous: None,
            },
            AssignorMember {
                member_id: "c",
                topics: BTreeSet::from([topic(2)]),
                previous: None,
            },
        ];
        let out = assign("uniform", &members, &parts);
        assert!(out["a"].keys().all(|t| *t == topic(1)));
        assert!(out["c"].keys().all(|t| *t == topic(2)));
        let counts: Vec<usize> = ["a", "b", "c"].iter().map(|m| count(&out[*m])).collect();
        assert_eq!(counts.iter().sum::<usize>(), 8);
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 2,
            "{counts:?}"
        );
    }

    #[test]
    fn range_gives_consecutive_partitions_in_member_id_order() {
        let parts = BTreeMap::from([(topic(1), 5), (topic(2), 5)]);
        let all = BTreeSet::from([topic(1), topic(2)]);
        let members = [
            AssignorMember {
                member_id: "m2",
                topics: all.clone(),
                previous: None,
            },
            AssignorMember {
                member_id: "m1",
                topics: all.clone(),
                previous: None,
            },
        ];
        let out = assign("range", &members, &parts);
        for t in [topic(1), topic(2)] {
            assert_eq!(out["m1"][&t], BTreeSet::from([0, 1, 2]));
            assert_eq!(out["m2"][&t], BTreeSet::from([3, 4]));
        }
    }

    #[test]
    fn nobody_subscribed_leaves_a_topic_unassigned() {
        let parts = BTreeMap::from([(topic(1), 3), (topic(9), 3)]);
        let members = [AssignorMember {
            member_id: "a",
            topics: BTreeSet::from([topic(1)]),
            previous: None,
        }];
        for name in ASSIGNORS {
            let out = assign(name, &members, &parts);
            assert_eq!(out["a"].keys().collect::<Vec<_>>(), vec![&topic(1)]);
        }
    }
}
