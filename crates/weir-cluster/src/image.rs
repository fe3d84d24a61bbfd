//! The metadata image: everything under the cluster's prefix, parsed, as of one etcd
//! revision. Built from a full read and kept current by the watch's events; immutable
//! once published (readers hold an `Arc`, and a change makes a new image that shares every
//! untouched topic with the old one). Queries answer what the broker and the controller
//! ask: who is live, who leads a partition, what a topic's config is. Nothing here talks
//! to etcd.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::keys::{Document, Key, Keys};
use crate::records::{
    decode, BrokerRegistration, ClusterIdRecord, ConfigRecord, ControllerEpochRecord,
    ControllerRecord, LeaderAndIsr, PartitionStateRecord, PreferredElectionRecord,
    ProducerIdBlockRecord, TopicRecord, NO_LEADER,
};

/// One key as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: Bytes,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// The lease it is kept under, 0 if none.
    pub lease: i64,
}

/// A change to one key, from the watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Put(Kv),
    Delete { key: String, mod_revision: i64 },
}

/// A value with the revisions of its key: what a compare-and-set compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamped<T> {
    pub value: T,
    pub create_revision: i64,
    pub mod_revision: i64,
}

fn stamped<T>(value: T, kv: &Kv) -> Stamped<T> {
    Stamped {
        value,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
    }
}

/// A topic: its id and assignment, and the revisions of its key.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicImage {
    pub name: String,
    pub id: uuid::Uuid,
    /// Each partition's replicas, preferred leader first; index = partition.
    pub assignment: Vec<Vec<i32>>,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// Partitions being moved, by index.
    pub reassigning: BTreeMap<i32, crate::records::Reassigning>,
    /// Partition states written for this incarnation of the topic (a state written
    /// before the topic was last created is a leftover and is not here).
    pub states: BTreeMap<i32, Stamped<PartitionStateRecord>>,
}

impl TopicImage {
    pub fn partition_count(&self) -> usize {
        self.assignment.len()
    }

    /// A partition's leadership, if the controller has set it.
    pub fn state(&self, partition: i32) -> Option<&LeaderAndIsr> {
        self.states.get(&partition).map(|s| &s.value.state)
    }

    pub fn replicas(&self, partition: i32) -> &[i32] {
        usize::try_from(partition)
            .ok()
            .and_then(|p| self.assignment.get(p))
            .map_or(&[], |r| r.as_slice())
    }
}

/// A cluster-wide state document (ACLs, users, quotas), kept whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentImage {
    pub bytes: Bytes,
    pub mod_revision: i64,
}

/// The whole metadata as of `revision`.
#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    /// The etcd revision this image reflects.
    pub revision: i64,
    pub cluster_id: Option<String>,
    /// The live brokers, by id.
    pub brokers: BTreeMap<i32, Arc<Stamped<BrokerRegistration>>>,
    pub controller: Option<Stamped<ControllerRecord>>,
    pub controller_epoch: Option<Stamped<i32>>,
    pub topics: BTreeMap<String, Arc<TopicImage>>,
    pub topic_configs: BTreeMap<String, Arc<Stamped<BTreeMap<String, String>>>>,
    /// By entity: a broker id, or `<default>`.
    pub broker_configs: BTreeMap<String, Arc<Stamped<BTreeMap<String, String>>>>,
    pub documents: BTreeMap<Document, DocumentImage>,
    pub producer_id_block: Option<Stamped<ProducerIdBlockRecord>>,
    pub preferred_election: Option<Stamped<PreferredElectionRecord>>,
    /// Partition states whose topic key is not in the image (yet, or any more): kept so
    /// that a topic arriving after its states in the same batch still finds them.
    orphan_states: BTreeMap<(String, i32), Stamped<PartitionStateRecord>>,
    /// Keys whose value could not be read, with why: left out of the image.
    pub unreadable: BTreeMap<String, String>,
}

impl MetadataImage {
    /// The image of a full read at `revision`.
    pub fn from_kvs(keys: &Keys, revision: i64, kvs: impl IntoIterator<Item = Kv>) -> Self {
        let mut image = MetadataImage {
            revision,
            ..Default::default()
        };
        for kv in kvs {
            image.put(keys, kv);
        }
        image
    }

    /// Applies a batch of watch events, all of revision `revision` or before.
    pub fn apply(&mut self, keys: &Keys, revision: i64, events: impl IntoIterator<Item = Event>) {
        for e in events {
            match e {
                Event::Put(kv) => self.put(keys, kv),
                Event::Delete { key, .. } => self.delete(keys, &key),
            }
        }
        debug_assert!(revision >= self.revision, "revisions only move on");
        self.revision = self.revision.max(revision);
    }

    fn put(&mut self, keys: &Keys, kv: Kv) {
        let Some(key) = keys.parse(&kv.key) else {
            return;
        };
        self.unreadable.remove(&kv.key);
        if let Err(e) = self.put_parsed(key, &kv) {
            tracing::warn!("etcd key {}: {e}; left out of the metadata", kv.key);
            self.unreadable.insert(kv.key.clone(), e);
        }
    }

    fn put_parsed(&mut self, key: Key, kv: &Kv) -> Result<(), String> {
        let stamp = |value| stamped(value, kv);
        match key {
            Key::ClusterId => self.cluster_id = Some(decode::<ClusterIdRecord>(&kv.value)?.id),
            Key::Broker(id) => {
                let r = decode::<BrokerRegistration>(&kv.value)?;
                if r.id != id {
                    return Err(format!("names broker {} under the key of {id}", r.id));
                }
                self.brokers.insert(id, Arc::new(stamp(r)));
            }
            Key::Controller => {
                self.controller = Some(stamped(decode::<ControllerRecord>(&kv.value)?, kv))
            }
            Key::ControllerEpoch => {
                self.controller_epoch = Some(stamped(
                    decode::<ControllerEpochRecord>(&kv.value)?.epoch,
                    kv,
                ))
            }
            Key::Topic(name) => {
                let r = decode::<TopicRecord>(&kv.value)?;
                let id = weir_kafka::topic::uuid_from_base64(&r.topic_id)
                    .ok_or_else(|| format!("'{}' is not a topic id", r.topic_id))?;
                let mut states = match self.topics.get(&name) {
                    // The same topic changed (partitions added): its states stay.
                    Some(t) if t.create_revision == kv.create_revision => t.states.clone(),
                    _ => BTreeMap::new(),
                };
                let orphans: Vec<(String, i32)> = self
                    .orphan_states
                    .range((name.clone(), i32::MIN)..=(name.clone(), i32::MAX))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in orphans {
                    if let Some(s) = self.orphan_states.remove(&k) {
                        if s.mod_revision >= kv.create_revision {
                            states.insert(k.1, s);
                        }
                    }
                }
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicImage {
                        name,
                        id,
                        assignment: r.partitions,
                        reassigning: r.reassigning,
                        create_revision: kv.create_revision,
                        mod_revision: kv.mod_revision,
                        states,
                    }),
                );
            }
            Key::PartitionState(name, p) => {
                let s = stamped(decode::<PartitionStateRecord>(&kv.value)?, kv);
                match self.topics.get_mut(&name) {
                    Some(t) if s.mod_revision >= t.create_revision => {
                        Arc::make_mut(t).states.insert(p, s);
                    }
                    Some(_) => {} // a leftover of an earlier topic of that name
                    None => {
                        self.orphan_states.insert((name, p), s);
                    }
                }
            }
            Key::TopicConfig(name) => {
                let c = decode::<ConfigRecord>(&kv.value)?.config;
                self.topic_configs.insert(name, Arc::new(stamped(c, kv)));
            }
            Key::BrokerConfig(entity) => {
                let c = decode::<ConfigRecord>(&kv.value)?.config;
                self.broker_configs.insert(entity, Arc::new(stamped(c, kv)));
            }
            Key::Document(d) => {
                self.documents.insert(
                    d,
                    DocumentImage {
                        bytes: kv.value.clone(),
                        mod_revision: kv.mod_revision,
                    },
                );
            }
            Key::ProducerIdBlock => {
                self.producer_id_block =
                    Some(stamped(decode::<ProducerIdBlockRecord>(&kv.value)?, kv))
            }
            Key::PreferredElection => {
                self.preferred_election =
                    Some(stamped(decode::<PreferredElectionRecord>(&kv.value)?, kv))
            }
        }
        Ok(())
    }

    fn delete(&mut self, keys: &Keys, raw: &str) {
        self.unreadable.remove(raw);
        let Some(key) = keys.parse(raw) else { return };
        match key {
            Key::ClusterId => self.cluster_id = None,
            Key::Broker(id) => {
                self.brokers.remove(&id);
            }
            Key::Controller => self.controller = None,
            Key::ControllerEpoch => self.controller_epoch = None,
            Key::Topic(name) => {
                self.topics.remove(&name);
            }
            Key::PartitionState(name, p) => {
                if let Some(t) = self.topics.get_mut(&name) {
                    if t.states.contains_key(&p) {
                        Arc::make_mut(t).states.remove(&p);
                    }
                }
                self.orphan_states.remove(&(name, p));
            }
            Key::TopicConfig(name) => {
                self.topic_configs.remove(&name);
            }
            Key::BrokerConfig(entity) => {
                self.broker_configs.remove(&entity);
            }
            Key::Document(d) => {
                self.documents.remove(&d);
            }
            Key::ProducerIdBlock => self.producer_id_block = None,
            Key::PreferredElection => self.preferred_election = None,
        }
    }

    pub fn is_live(&self, broker: i32) -> bool {
        self.brokers.contains_key(&broker)
    }

    /// Live and not shutting down: may be elected leader.
    pub fn may_lead(&self, broker: i32) -> bool {
        self.brokers
            .get(&broker)
            .is_some_and(|b| !b.value.shutting_down)
    }

    pub fn broker(&self, id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&id).map(|b| &b.value)
    }

    /// The controller's broker id, if one is elected and live.
    pub fn controller_id(&self) -> Option<i32> {
        self.controller.as_ref().map(|c| c.value.broker_id)
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: uuid::Uuid) -> Option<&Arc<TopicImage>> {
        self.topics.values().find(|t| t.id == id)
    }

    /// A topic's config overrides (none if it has no config key).
    pub fn topic_config(&self, name: &str) -> BTreeMap<String, String> {
        self.topic_configs
            .get(name)
            .map(|c| c.value.clone())
            .unwrap_or_default()
    }

    /// The live leader of a partition, if it has one.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<i32> {
        let leader = self.topics.get(topic)?.state(partition)?.leader;
        (leader != NO_LEADER && self.is_live(leader)).then_some(leader)
    }

    /// How many replicas are assigned to each broker (live or not).
    pub fn replicas_per_broker(&self) -> BTreeMap<i32, usize> {
        let mut out = BTreeMap::new();
        for t in self.topics.values() {
            for r in t.assignment.iter().flatten() {
                *out.entry(*r).or_insert(0) += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{encode, Endpoint};

    fn kv(key: String, value: Vec<u8>, create: i64, modr: i64) -> Kv {
        Kv {
            key,
            value: value.into(),
            create_revision: create,
            mod_revision: modr,
            lease: 0,
        }
    }

    fn topic(id: uuid::Uuid, parts: Vec<Vec<i32>>) -> Vec<u8> {
        encode(&TopicRecord {
            version: 1,
            topic_id: weir_kafka::topic::uuid_to_base64(id),
            partitions: parts,
            reassigning: Default::default(),
        })
    }

    fn state(leader: i32, epoch: i32) -> Vec<u8> {
        encode(&PartitionStateRecord {
            version: 1,
            controller_epoch: 1,
            state: LeaderAndIsr {
                leader,
                leader_epoch: epoch,
                isr: vec![leader],
                partition_epoch: epoch,
            },
        })
    }

    fn broker(id: i32) -> Vec<u8> {
        encode(&BrokerRegistration {
            version: 1,
            id,
            endpoints: vec![Endpoint {
                listener: "PLAINTEXT".into(),
                security_protocol: "PLAINTEXT".into(),
                host: "h".into(),
                port: 9092,
            }],
            rack: None,
            incarnation: "x".into(),
            timestamp: 0,
            partition_capacity: 100,
            shutting_down: false,
        })
    }

    #[test]
    fn states_follow_their_topic_and_leftovers_of_an_older_topic_are_ignored() {
        let k = Keys::new("/w");
        let id = uuid::Uuid::new_v4();
        // A state of an earlier topic "t" (revision 3) comes before the topic (5).
        let mut image = MetadataImage::from_kvs(
            &k,
            6,
            [
                kv(k.partition_state("t", 0), state(1, 4), 3, 3),
                kv(k.partition_state("t", 1), state(2, 0), 6, 6),
                kv(k.topic("t"), topic(id, vec![vec![1], vec![2]]), 5, 5),
                kv(k.broker(1), broker(1), 2, 2),
            ],
        );
        let t = image.topic("t").unwrap();
        assert_eq!(t.state(0), None, "written before the topic was created");
        assert_eq!(t.state(1).unwrap().leader, 2);
        assert_eq!(image.leader("t", 1), None, "broker 2 is not live");
        image.apply(
            &k,
            7,
            [Event::Put(kv(k.partition_state("t", 0), state(1, 0), 7, 7))],
        );
        assert_eq!(image.leader("t", 0), Some(1));
        // Partitions added: the topic's states stay.
        image.apply(
            &k,
            8,
            [Event::Put(kv(
                k.topic("t"),
                topic(id, vec![vec![1], vec![2], vec![1]]),
                5,
                8,
            ))],
        );
        assert_eq!(image.topic("t").unwrap().partition_count(), 3);
        assert_eq!(image.leader("t", 0), Some(1));
        // Deleted and created again: the old states are gone with it.
        image.apply(
            &k,
            9,
            [
                Event::Delete {
                    key: k.topic("t"),
                    mod_revision: 9,
                },
                Event::Put(kv(k.topic("t"), topic(id, vec![vec![1]]), 9, 9)),
            ],
        );
        assert_eq!(image.topic("t").unwrap().state(0), None);
        assert_eq!(image.revision, 9);
    }

    #[test]
    fn an_unreadable_value_is_left_out_and_named() {
        let k = Keys::new("");
        let image = MetadataImage::from_kvs(
            &k,
            2,
            [
                kv(k.broker(1), b"{not json".to_vec(), 1, 1),
                kv(k.broker(2), broker(3), 1, 1),
                kv("/elsewhere".into(), b"x".to_vec(), 1, 1),
            ],
        );
        assert!(image.brokers.is_empty());
        assert_eq!(image.unreadable.len(), 2);
        assert!(image.unreadable[&k.broker(2)].contains("key of 2"));
    }
}
