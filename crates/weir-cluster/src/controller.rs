//! The controller's decisions, as Kafka's controller makes them, over one metadata image:
//! which partitions need a new leadership and what it is. Pure: the session applies each
//! decision with a compare-and-set guarded by the controller's own key, so a deposed
//! controller's writes fail, and a decision made from a stale image fails too (its
//! partition's state moved meanwhile) and is made again from the newer one.
//!
//! The rules (Kafka's `PartitionStateMachine` and `ReplicaStateMachine`):
//! - A new partition is led by its first assigned replica that may lead (live, not shutting
//!   down); every such replica is in its ISR. With none, it waits.
//! - A partition whose leader died is led by the first assigned replica in the ISR that
//!   may lead; dead brokers leave the ISR, but the ISR never empties: its last member stays,
//!   with no leader, so that only it can lead again (unclean election off). With
//!   `unclean.leader.election.enable`, any live replica may lead, with an ISR of itself.
//! - A leader shutting down hands over to another ISR member; with none it keeps leading
//!   until it is gone.
//! - A preferred election makes the first assigned replica the leader again, if it may lead
//!   and is in the ISR.

use std::collections::{BTreeMap, BTreeSet};

use crate::image::{MetadataImage, TopicImage};
use crate::records::{LeaderAndIsr, PartitionName, Reassigning, TopicRecord, NO_LEADER};

/// Why the controller changes a partition's leadership (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// A new partition gets its first leader.
    New,
    /// Its leader is gone: another ISR member leads, or none.
    LeaderGone,
    /// It had no leader and an ISR member is back.
    LeaderBack,
    /// Its leader is shutting down and hands over.
    ShuttingDown,
    /// Dead or departing followers leave the ISR.
    FollowersGone,
    /// The preferred replica leads again.
    Preferred,
    /// Its leader restarted (a new incarnation registered): leadership starts again at a
    /// new epoch, so nothing of the old process's leadership carries over.
    Restarted,
    /// It is moving to other replicas (AlterPartitionReassignments): leadership goes to a
    /// target replica once all of them are in sync, and replicas it left leave the ISR.
    Reassigned,
    /// No ISR member can lead and the topic allows an unclean election.
    Unclean,
}

/// One decision: the new state of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    pub topic: String,
    pub partition: i32,
    /// The topic incarnation it is for (its key's create revision): a change meant for a
    /// deleted topic must not land on a new one of the same name.
    pub topic_create_revision: i64,
    /// The mod revision of the state it replaces, `None` if the partition has none yet.
    pub replaces: Option<i64>,
    pub state: LeaderAndIsr,
    pub why: Why,
}

/// What the controller is asked to do beyond keeping every partition led.
#[derive(Debug, Clone, Default)]
pub struct Asks {
    /// Partitions whose preferred replica should lead again (ElectLeaders, or the
    /// automatic rebalance).
    pub preferred: BTreeSet<PartitionName>,
    /// `unclean.leader.election.enable` for topics that do not set it.
    pub unclean_default: bool,
    /// Leaderless partitions any live replica may lead (ElectLeaders, unclean).
    pub unclean: BTreeSet<PartitionName>,
    /// Brokers that restarted since the controller last looked (Kafka's "bounced"
    /// brokers): what they led is elected again.
    pub bounced: BTreeSet<i32>,
}

/// Every change the image needs.
pub fn plan(image: &MetadataImage, asks: &Asks) -> Vec<StateChange> {
    let mut out = Vec::new();
    for t in image.topics.values() {
        let unclean = image
            .topic_configs
            .get(&t.name)
            .and_then(|c| c.value.get("unclean.leader.election.enable").cloned())
            .map_or(asks.unclean_default, |v| v.eq_ignore_ascii_case("true"));
        for (p, replicas) in t.assignment.iter().enumerate() {
            let p = p as i32;
            let name = PartitionName {
                topic: t.name.clone(),
                partition: p,
            };
            let preferred = asks.preferred.contains(&name);
            let unclean = unclean || asks.unclean.contains(&name);
            let moving = t.reassigning.get(&p);
            let wanted = Wanted {
                moving,
                preferred,
                unclean,
                restarted: &asks.bounced,
            };
            if let Some((state, why)) = decide(image, t, p, replicas, &wanted) {
                out.push(StateChange {
                    topic: t.name.clone(),
                    partition: p,
                    topic_create_revision: t.create_revision,
                    replaces: t.states.get(&p).map(|s| s.mod_revision),
                    state,
                    why,
                });
            }
        }
    }
    out
}

/// A topic whose partitions finished moving: its record with each such partition's target
/// as its replicas, written over `mod_revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovesDone {
    pub topic: String,
    pub mod_revision: i64,
    pub create_revision: i64,
    pub record: TopicRecord,
    pub partitions: Vec<i32>,
}

/// The moves that are done (Kafka's reassignment completion): every target replica is in
/// the ISR and a target replica leads. The replicas left then drop out of the ISR through
/// `plan`, and their brokers remove their copies.
pub fn moves_done(image: &MetadataImage) -> Vec<MovesDone> {
    let mut out = Vec::new();
    for t in image.topics.values().filter(|t| !t.reassigning.is_empty()) {
        let mut assignment = t.assignment.clone();
        let mut reassigning = t.reassigning.clone();
        let mut done = Vec::new();
        for (p, m) in &t.reassigning {
            let Some(s) = t.state(*p) else { continue };
            if m.target.iter().all(|r| s.isr.contains(r)) && m.target.contains(&s.leader) {
                if let Some(slot) = usize::try_from(*p).ok().and_then(|i| assignment.get_mut(i)) {
                    *slot = m.target.clone();
                    reassigning.remove(p);
                    done.push(*p);
                }
            }
        }
        if done.is_empty() {
            continue;
        }
        out.push(MovesDone {
            topic: t.name.clone(),
            mod_revision: t.mod_revision,
            create_revision: t.create_revision,
            record: TopicRecord {
                version: crate::records::RECORD_VERSION,
                topic_id: weir_kafka::topic::uuid_to_base64(t.id),
                partitions: assignment,
                reassigning,
            },
            partitions: done,
        });
    }
    out
}

/// What is asked of one partition beyond keeping it led.
struct Wanted<'a> {
    /// Its move under way.
    moving: Option<&'a Reassigning>,
    /// Its preferred replica should lead.
    preferred: bool,
    /// Any live replica may lead it if no ISR member can.
    unclean: bool,
    /// Brokers that restarted.
    restarted: &'a BTreeSet<i32>,
}

fn decide(
    image: &MetadataImage,
    t: &TopicImage,
    p: i32,
    replicas: &[i32],
    wanted: &Wanted<'_>,
) -> Option<(LeaderAndIsr, Why)> {
    let Wanted {
        moving,
        preferred,
        unclean,
        restarted,
    } = *wanted;
    let may_lead = |b: i32| image.may_lead(b);
    let Some(s) = t.state(p) else {
        let live: Vec<i32> = replicas.iter().copied().filter(|b| may_lead(*b)).collect();
        let leader = *live.first()?;
        return Some((LeaderAndIsr::initial(leader, live), Why::New));
    };
    // The ISR without dead or departing brokers, nor restarted ones (a process that
    // restarted may hold less than it had acknowledged, until it has caught up again as a
    // follower); never empty while it had a member.
    let mut kept: Vec<i32> = s
        .isr
        .iter()
        .copied()
        .filter(|b| may_lead(*b) && !restarted.contains(b))
        .collect();
    if kept.is_empty() {
        kept = s.isr.iter().copied().filter(|b| may_lead(*b)).collect();
    }
    let bounced = restarted.contains(&s.leader);
    let leader_live = s.leader != NO_LEADER && image.is_live(s.leader);
    if s.leader != NO_LEADER && leader_live && may_lead(s.leader) {
        // A healthy leader. Followers that died, are leaving or restarted drop out of
        // the ISR.
        if bounced {
            // Another ISR member that did not restart takes over; with none, the restarted
            // broker leads again. Either way at a new epoch, so nothing of the old
            // process's leadership carries over.
            let next = replicas
                .iter()
                .copied()
                .find(|b| kept.contains(b) && may_lead(*b))
                .unwrap_or(s.leader);
            let mut isr = kept;
            if !isr.contains(&next) {
                isr.insert(0, next);
            }
            return Some((s.with_leader(next, isr), Why::Restarted));
        }
        let mut isr = kept;
        if !isr.contains(&s.leader) {
            isr.insert(0, s.leader);
        }
        if let Some(m) = moving {
            // Every target replica in sync: a target replica leads before the move is
            // written as done (it never leaves a leader outside its replicas).
            let synced = m.target.iter().all(|r| s.isr.contains(r));
            if synced && !m.target.contains(&s.leader) {
                if let Some(next) = m
                    .target
                    .iter()
                    .copied()
                    .find(|b| isr.contains(b) && may_lead(*b))
                {
                    return Some((s.with_leader(next, isr), Why::Reassigned));
                }
            }
        }
        if !replicas.contains(&s.leader) {
            // Its replicas no longer hold the leader (a move cancelled, or done): an ISR
            // member among them takes over.
            let mut within: Vec<i32> = isr
                .iter()
                .copied()
                .filter(|b| replicas.contains(b))
                .collect();
            if let Some(next) = replicas
                .iter()
                .copied()
                .find(|b| within.contains(b) && may_lead(*b))
            {
                within.retain(|b| *b != next);
                within.insert(0, next);
                return Some((s.with_leader(next, within), Why::Reassigned));
            }
        } else if isr.iter().any(|b| !replicas.contains(b)) {
            isr.retain(|b| replicas.contains(b));
            return Some((s.with_isr(isr), Why::Reassigned));
        }
        if preferred {
            let want = *replicas.first()?;
            if want != s.leader && may_lead(want) && s.isr.contains(&want) {
                return Some((s.with_leader(want, isr), Why::Preferred));
            }
        }
        if isr != s.isr {
            return Some((s.with_isr(isr), Why::FollowersGone));
        }
        return None;
    }
    // No leader, or one that is gone or leaving: the first ISR member in preference order
    // that may lead takes over.
    let next = replicas
        .iter()
        .copied()
        .find(|b| *b != s.leader && s.isr.contains(b) && may_lead(*b));
    if let Some(next) = next {
        let why = if s.leader == NO_LEADER {
            Why::LeaderBack
        } else if leader_live {
            Why::ShuttingDown
        } else {
            Why::LeaderGone
        };
        return Some((s.with_leader(next, kept), why));
    }
    if leader_live {
        // Shutting down with no one to hand over to: it leads until it is gone.
        return None;
    }
    if unclean {
        if let Some(any) = replicas.iter().copied().find(|b| may_lead(*b)) {
            return Some((s.with_leader(any, vec![any]), Why::Unclean));
        }
    }
    if s.leader == NO_LEADER {
        return None; // already waiting for an ISR member
    }
    // The leader died and no one can take over: no leader, and the ISR keeps its last
    // member so that only a replica with every committed record leads again.
    let isr = if kept.is_empty() {
        vec![s.leader]
    } else {
        kept
    };
    Some((s.with_leader(NO_LEADER, isr), Why::LeaderGone))
}

/// The partitions whose preferred replica should lead again because its broker leads too
/// few of the partitions it prefers (Kafka's `leader.imbalance.per.broker.percentage`).
pub fn imbalanced(image: &MetadataImage, percentage: u32) -> BTreeSet<PartitionName> {
    // broker → (partitions it prefers, those it does not lead)
    let mut per: BTreeMap<i32, Vec<(PartitionName, bool)>> = BTreeMap::new();
    for t in image.topics.values() {
        for (p, replicas) in t.assignment.iter().enumerate() {
            let Some(&want) = replicas.first() else {
                continue;
            };
            let led = t.state(p as i32).is_some_and(|s| s.leader == want);
            per.entry(want).or_default().push((
                PartitionName {
                    topic: t.name.clone(),
                    partition: p as i32,
                },
                led,
            ));
        }
    }
    let mut out = BTreeSet::new();
    for (broker, parts) in per {
        if !image.may_lead(broker) {
            continue;
        }
        let not_led = parts.iter().filter(|(_, led)| !led).count();
        if not_led * 100 > parts.len() * percentage as usize {
            out.extend(
                parts
                    .into_iter()
                    .filter(|(_, led)| !led)
                    .map(|(name, _)| name),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Kv;
    use crate::keys::Keys;
    use crate::records::{
        encode, BrokerRegistration, ConfigRecord, Endpoint, PartitionStateRecord, TopicRecord,
    };

    struct World {
        keys: Keys,
        image: MetadataImage,
        rev: i64,
    }

    impl World {
        fn new() -> World {
            let keys = Keys::new("");
            World {
                image: MetadataImage::from_kvs(&keys, 0, []),
                keys,
                rev: 0,
            }
        }

        fn put(&mut self, key: String, value: Vec<u8>) {
            self.put_created_at(key, value, self.rev + 1);
        }

        /// A put of a key created at `create` (an update, when it is the key's own).
        fn put_created_at(&mut self, key: String, value: Vec<u8>, create: i64) {
            self.rev += 1;
            let kv = Kv {
                key,
                value: value.into(),
                create_revision: create,
                mod_revision: self.rev,
                lease: 0,
            };
            self.image
                .apply(&self.keys, self.rev, [crate::image::Event::Put(kv)]);
        }

        fn broker(&mut self, id: i32, shutting_down: bool) {
            self.put(
                self.keys.broker(id),
                encode(&BrokerRegistration {
                    version: 1,
                    id,
                    endpoints: vec![Endpoint {
                        listener: "PLAINTEXT".into(),
                        security_protocol: "PLAINTEXT".into(),
                        host: "h".into(),
                        port: 1,
                    }],
                    rack: None,
                    incarnation: "i".into(),
                    timestamp: 0,
                    partition_capacity: 1000,
                    shutting_down,
                }),
            );
        }

        fn dies(&mut self, id: i32) {
            self.rev += 1;
            self.image.apply(
                &self.keys,
                self.rev,
                [crate::image::Event::Delete {
                    key: self.keys.broker(id),
                    mod_revision: self.rev,
                }],
            );
        }

        fn topic(&mut self, name: &str, assignment: Vec<Vec<i32>>) {
            self.put(
                self.keys.topic(name),
                encode(&TopicRecord {
                    version: 1,
                    topic_id: weir_kafka::topic::uuid_to_base64(uuid::Uuid::new_v4()),
                    partitions: assignment,
                    reassigning: Default::default(),
                }),
            );
        }

        /// Plans, applies every change as the session would, and returns them.
        fn step(&mut self, asks: &Asks) -> Vec<StateChange> {
            let changes = plan(&self.image, asks);
            for c in &changes {
                let t = self.image.topic(&c.topic).unwrap();
                assert_eq!(
                    t.states.get(&c.partition).map(|s| s.mod_revision),
                    c.replaces
                );
                self.put(
                    self.keys.partition_state(&c.topic, c.partition),
                    encode(&PartitionStateRecord {
                        version: 1,
                        controller_epoch: 1,
                        state: c.state.clone(),
                    }),
                );
            }
            changes
        }

        fn state(&self, topic: &str, p: i32) -> LeaderAndIsr {
            self.image.topic(topic).unwrap().state(p).unwrap().clone()
        }
    }

    #[test]
    fn a_move_hands_leadership_to_its_target_then_is_written_as_done() {
        let mut w = World::new();
        for b in [1, 2, 3] {
            w.broker(b, false);
        }
        w.topic("t", vec![vec![1]]);
        w.step(&Asks::default());
        // Moving to [2, 3]: the full set is the target then the replica it leaves.
        let moving = Reassigning {
            target: vec![2, 3],
            original: vec![1],
        };
        assert_eq!(moving.full_set(), vec![2, 3, 1]);
        assert_eq!((moving.adding(), moving.removing()), (vec![2, 3], vec![1]));
        let id = w.image.topic("t").unwrap().id;
        let record = |partitions: Vec<Vec<i32>>, reassigning: BTreeMap<i32, Reassigning>| {
            encode(&TopicRecord {
                version: 1,
                topic_id: weir_kafka::topic::uuid_to_base64(id),
                partitions,
                reassigning,
            })
        };
        let r = record(vec![moving.full_set()], [(0, moving.clone())].into());
        let key = w.keys.topic("t");
        let created = w.image.topic("t").unwrap().create_revision;
        w.put_created_at(key.clone(), r, created);
        // Not in sync yet: nothing moves.
        assert!(w.step(&Asks::default()).is_empty());
        assert!(moves_done(&w.image).is_empty());
        // The leader added both to the ISR as they caught up.
        let s = w.state("t", 0).with_isr(vec![1, 2, 3]);
        let state_key = w.keys.partition_state("t", 0);
        w.put(
            state_key,
            encode(&PartitionStateRecord {
                version: 1,
                controller_epoch: 1,
                state: s,
            }),
        );
        assert!(
            moves_done(&w.image).is_empty(),
            "its leader is not a target yet"
        );
        let c = w.step(&Asks::default());
        assert_eq!(c[0].why, Why::Reassigned);
        assert_eq!(w.state("t", 0).leader, 2);
        let done = moves_done(&w.image);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].record.partitions, vec![vec![2, 3]]);
        assert!(done[0].record.reassigning.is_empty());
        let r = record(vec![vec![2, 3]], BTreeMap::new());
        w.put_created_at(key, r, created);
        // The replica it left goes from the ISR.
        let c = w.step(&Asks::default());
        assert_eq!(c[0].why, Why::Reassigned);
        assert_eq!(w.state("t", 0).isr, vec![2, 3]);
        assert!(w.step(&Asks::default()).is_empty(), "settled");
    }

    #[test]
    fn a_new_partition_is_led_by_its_first_live_replica() {
        let mut w = World::new();
        w.broker(1, false);
        w.broker(2, false);
        w.topic("t", vec![vec![3, 2, 1], vec![3]]);
        let c = w.step(&Asks::default());
        assert_eq!(
            c.len(),
            1,
            "partition 1's only replica is not live: it waits"
        );
        assert_eq!(w.state("t", 0), LeaderAndIsr::initial(2, vec![2, 1]));
        assert!(w.step(&Asks::default()).is_empty(), "nothing more to do");
        w.broker(3, false);
        w.step(&Asks::default());
        assert_eq!(w.state("t", 1), LeaderAndIsr::initial(3, vec![3]));
    }

    #[test]
    fn a_dead_leader_hands_over_within_the_isr_or_leaves_its_last_member() {
        let mut w = World::new();
        for b in [1, 2, 3] {
            w.broker(b, false);
        }
        w.topic("t", vec![vec![1, 2, 3], vec![2]]);
        w.step(&Asks::default());
        w.dies(1);
        w.dies(2);
        let c = w.step(&Asks::default());
        assert!(c.iter().all(|c| c.why == Why::LeaderGone), "{c:?}");
        let s = w.state("t", 0);
        assert_eq!((s.leader, s.leader_epoch, s.isr.clone()), (3, 1, vec![3]));
        let s = w.state("t", 1);
        assert_eq!((s.leader, s.leader_epoch, s.isr.clone()), (-1, 1, vec![2]));
        // Broker 3 cannot lead partition 1: it was never in its ISR.
        assert!(w.step(&Asks::default()).is_empty());
        w.broker(2, false);
        let c = w.step(&Asks::default());
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].why, Why::LeaderBack);
        let s = w.state("t", 1);
        assert_eq!((s.leader, s.leader_epoch, s.isr.clone()), (2, 2, vec![2]));
    }

    #[test]
    fn an_unclean_election_only_where_the_topic_allows_it() {
        let mut w = World::new();
        w.broker(1, false);
        w.broker(2, false);
        w.topic("t", vec![vec![1, 2]]);
        w.step(&Asks::default());
        // Broker 2 falls out of the ISR (as a lagging follower would), then 1 dies.
        let s = w.state("t", 0).with_isr(vec![1]);
        w.put(
            w.keys.partition_state("t", 0),
            encode(&PartitionStateRecord {
                version: 1,
                controller_epoch: 1,
                state: s,
            }),
        );
        w.dies(1);
        w.step(&Asks::default());
        assert_eq!(w.state("t", 0).leader, -1);
        w.put(
            w.keys.topic_config("t"),
            encode(&ConfigRecord {
                version: 1,
                config: [("unclean.leader.election.enable".into(), "true".into())].into(),
            }),
        );
        let c = w.step(&Asks::default());
        assert_eq!(c[0].why, Why::Unclean);
        assert_eq!(w.state("t", 0).isr, vec![2]);
    }

    #[test]
    fn a_leader_shutting_down_hands_over_or_keeps_leading() {
        let mut w = World::new();
        w.broker(1, false);
        w.broker(2, false);
        w.topic("t", vec![vec![1, 2], vec![1]]);
        w.step(&Asks::default());
        w.broker(1, true);
        let c = w.step(&Asks::default());
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].why, Why::ShuttingDown);
        assert_eq!(w.state("t", 0).leader, 2);
        assert_eq!(w.state("t", 0).isr, vec![2]);
        assert_eq!(w.state("t", 1).leader, 1, "no one to hand partition 1 to");
    }

    #[test]
    fn a_restarted_leader_leads_again_at_a_new_epoch() {
        let mut w = World::new();
        w.broker(1, false);
        w.topic("t", vec![vec![1]]);
        w.step(&Asks::default());
        let c = w.step(&Asks {
            bounced: [1].into(),
            ..Default::default()
        });
        assert_eq!(c[0].why, Why::Restarted);
        let s = w.state("t", 0);
        assert_eq!((s.leader, s.leader_epoch), (1, 1));
    }

    #[test]
    fn a_restarted_replica_leaves_the_isr_and_leads_only_if_no_other_member_can() {
        let mut w = World::new();
        for b in [1, 2, 3] {
            w.broker(b, false);
        }
        w.topic("t", vec![vec![1, 2, 3], vec![2, 1, 3]]);
        w.step(&Asks::default());
        let c = w.step(&Asks {
            bounced: [1].into(),
            ..Default::default()
        });
        assert_eq!(c.len(), 2, "{c:?}");
        let s = w.state("t", 0);
        assert_eq!(
            (s.leader, s.leader_epoch, s.isr.clone()),
            (2, 1, vec![2, 3])
        );
        let s = w.state("t", 1);
        assert_eq!(
            (s.leader, s.leader_epoch, s.isr.clone()),
            (2, 0, vec![2, 3])
        );
        assert_eq!(w.step(&Asks::default()), vec![], "settled");
    }

    #[test]
    fn the_preferred_replica_leads_again_when_asked_or_when_imbalanced() {
        let mut w = World::new();
        w.broker(1, false);
        w.broker(2, false);
        w.topic("t", vec![vec![1, 2]]);
        w.step(&Asks::default());
        w.dies(1);
        w.step(&Asks::default());
        w.broker(1, false);
        // Back in the ISR (as a follower catching up would be).
        let s = w.state("t", 0).with_isr(vec![2, 1]);
        w.put(
            w.keys.partition_state("t", 0),
            encode(&PartitionStateRecord {
                version: 1,
                controller_epoch: 1,
                state: s,
            }),
        );
        assert!(w.step(&Asks::default()).is_empty());
        let wanted = imbalanced(&w.image, 10);
        assert_eq!(wanted.len(), 1);
        let c = w.step(&Asks {
            preferred: wanted,
            ..Default::default()
        });
        assert_eq!(c[0].why, Why::Preferred);
        assert_eq!(w.state("t", 0).leader, 1);
        assert!(imbalanced(&w.image, 10).is_empty());
    }
}
