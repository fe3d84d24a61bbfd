//! The values stored under the keys of `keys`, as JSON with a `version` field (as Kafka's
//! znodes are), so that a newer Weir can tell an older value from its own. A value this
//! version cannot read is an error for that key alone: the image leaves it out and says so.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The version every record is written with.
pub const RECORD_VERSION: u32 = 1;

fn version() -> u32 {
    RECORD_VERSION
}

/// `{prefix}/cluster/id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterIdRecord {
    #[serde(default = "version")]
    pub version: u32,
    pub id: String,
}

/// One advertised listener of a broker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The listener's name (`PLAINTEXT`, `SSL`, `INTERNAL` ...): clients are told the
    /// endpoint of the listener they themselves connected through.
    pub listener: String,
    pub security_protocol: String,
    pub host: String,
    pub port: u16,
}

/// `{prefix}/brokers/ids/{id}`: a live broker, kept under its lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    #[serde(default = "version")]
    pub version: u32,
    pub id: i32,
    pub endpoints: Vec<Endpoint>,
    #[serde(default)]
    pub rack: Option<String>,
    /// New each time the broker process starts: tells a restarted broker from the one
    /// before it (Kafka's incarnation id).
    pub incarnation: String,
    /// When it registered, ms since the epoch.
    pub timestamp: i64,
    /// The most partitions it can hold (`max.broker.partitions` and what its file
    /// descriptors and memory mappings allow): replicas are not assigned past it.
    pub partition_capacity: usize,
    /// It asked to shut down (SIGTERM): the controller moves its leadership away and
    /// elects no new leader on it.
    #[serde(default)]
    pub shutting_down: bool,
}

impl BrokerRegistration {
    /// The endpoint of `listener`, if the broker has that listener.
    pub fn endpoint(&self, listener: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.listener == listener)
    }
}

/// `{prefix}/controller`: the controller, kept under its lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerRecord {
    #[serde(default = "version")]
    pub version: u32,
    pub broker_id: i32,
    /// The controller epoch it was elected with.
    pub epoch: i32,
    pub timestamp: i64,
}

/// `{prefix}/controller_epoch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerEpochRecord {
    #[serde(default = "version")]
    pub version: u32,
    pub epoch: i32,
}

/// `{prefix}/brokers/topics/{topic}`: a topic's id and where its replicas live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    #[serde(default = "version")]
    pub version: u32,
    /// Kafka's textual topic id (base64).
    pub topic_id: String,
    /// Each partition's replicas, in preference order (the first is the preferred
    /// leader); index = partition. A partition being moved has its target replicas here
    /// first, then those it is leaving (KIP-455's full replica set).
    pub partitions: Vec<Vec<i32>>,
    /// The partitions being moved (AlterPartitionReassignments), by index.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reassigning: BTreeMap<i32, Reassigning>,
}

/// A partition's move to other replicas: where it goes, and where it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reassigning {
    pub target: Vec<i32>,
    pub original: Vec<i32>,
}

impl Reassigning {
    /// The replicas a partition has while it moves: the target's, then the original ones
    /// it leaves, so that the preferred leader is the target's first.
    pub fn full_set(&self) -> Vec<i32> {
        let mut all = self.target.clone();
        all.extend(self.original.iter().filter(|r| !self.target.contains(r)));
        all
    }

    pub fn adding(&self) -> Vec<i32> {
        self.target
            .iter()
            .copied()
            .filter(|r| !self.original.contains(r))
            .collect()
    }

    pub fn removing(&self) -> Vec<i32> {
        self.original
            .iter()
            .copied()
            .filter(|r| !self.target.contains(r))
            .collect()
    }
}

/// A partition's leadership, as Kafka's `LeaderAndIsr`: who leads, at which epoch, and
/// which replicas are in sync with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderAndIsr {
    /// The leader's broker id, or -1 when no replica can lead.
    pub leader: i32,
    /// Raised each time the leader changes (to -1 as well).
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
    /// Raised on every change of this state.
    pub partition_epoch: i32,
}

/// No leader.
pub const NO_LEADER: i32 = -1;

impl LeaderAndIsr {
    /// A new partition's state.
    pub fn initial(leader: i32, isr: Vec<i32>) -> LeaderAndIsr {
        LeaderAndIsr {
            leader,
            leader_epoch: 0,
            isr,
            partition_epoch: 0,
        }
    }

    /// The state with a new leader (and ISR): both epochs move on.
    pub fn with_leader(&self, leader: i32, isr: Vec<i32>) -> LeaderAndIsr {
        LeaderAndIsr {
            leader,
            leader_epoch: self.leader_epoch + 1,
            isr,
            partition_epoch: self.partition_epoch + 1,
        }
    }

    /// The state with another ISR and the same leader: the leader epoch stays.
    pub fn with_isr(&self, isr: Vec<i32>) -> LeaderAndIsr {
        LeaderAndIsr {
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            isr,
            partition_epoch: self.partition_epoch + 1,
        }
    }
}

/// `{prefix}/brokers/topics/{topic}/partitions/{p}/state`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStateRecord {
    #[serde(default = "version")]
    pub version: u32,
    /// The epoch of the controller that wrote it.
    pub controller_epoch: i32,
    #[serde(flatten)]
    pub state: LeaderAndIsr,
}

/// `{prefix}/config/topics/{topic}` and `{prefix}/config/brokers/{entity}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRecord {
    #[serde(default = "version")]
    pub version: u32,
    pub config: BTreeMap<String, String>,
}

/// `{prefix}/latest_producer_id_block`: the last block of producer ids handed out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdBlockRecord {
    #[serde(default = "version")]
    pub version: u32,
    pub broker: i32,
    pub block_start: i64,
    /// The first id after the block.
    pub block_end: i64,
}

/// One partition, named.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionName {
    pub topic: String,
    pub partition: i32,
}

/// `{prefix}/admin/preferred_replica_election`: partitions whose preferred replica should
/// lead again, and (ElectLeaders' unclean elections) leaderless ones any live replica may
/// lead. The controller elects and removes the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreferredElectionRecord {
    #[serde(default = "version")]
    pub version: u32,
    pub partitions: Vec<PartitionName>,
    #[serde(default)]
    pub unclean: Vec<PartitionName>,
}

/// A record as JSON bytes.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    // Plain data (strings, numbers, maps with string keys): serializing cannot fail.
    serde_json::to_vec(record).expect("a record serializes")
}

/// A record from its JSON bytes, refused if newer than this version writes.
pub fn decode<T: for<'de> Deserialize<'de> + Versioned>(bytes: &[u8]) -> Result<T, String> {
    let r: T = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if r.version() > RECORD_VERSION {
        return Err(format!(
            "written by a newer Weir (record version {}, this one reads up to {RECORD_VERSION})",
            r.version()
        ));
    }
    Ok(r)
}

/// A record's version field.
pub trait Versioned {
    fn version(&self) -> u32;
}

macro_rules! versioned {
    ($($t:ty),*) => {
        $(impl Versioned for $t {
            fn version(&self) -> u32 {
                self.version
            }
        })*
    };
}

versioned!(
    ClusterIdRecord,
    BrokerRegistration,
    ControllerRecord,
    ControllerEpochRecord,
    TopicRecord,
    PartitionStateRecord,
    ConfigRecord,
    ProducerIdBlockRecord,
    PreferredElectionRecord
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_state_reads_as_kafka_writes_its_znode() {
        let r = PartitionStateRecord {
            version: 1,
            controller_epoch: 3,
            state: LeaderAndIsr {
                leader: 2,
                leader_epoch: 5,
                isr: vec![2, 1],
                partition_epoch: 9,
            },
        };
        let json = String::from_utf8(encode(&r)).unwrap();
        assert_eq!(
            json,
            r#"{"version":1,"controller_epoch":3,"leader":2,"leader_epoch":5,"isr":[2,1],"partition_epoch":9}"#
        );
        assert_eq!(decode::<PartitionStateRecord>(json.as_bytes()).unwrap(), r);
    }

    #[test]
    fn a_newer_record_is_refused_and_an_older_read() {
        let newer = br#"{"version":2,"id":"x"}"#;
        let e = decode::<ClusterIdRecord>(newer).unwrap_err();
        assert!(e.contains("newer Weir"), "{e}");
        let bare = br#"{"id":"x"}"#;
        assert_eq!(decode::<ClusterIdRecord>(bare).unwrap().id, "x");
    }

    #[test]
    fn epochs_move_as_kafka_moves_them() {
        let s = LeaderAndIsr::initial(1, vec![1, 2]);
        let moved = s.with_leader(2, vec![2]);
        assert_eq!((moved.leader_epoch, moved.partition_epoch), (1, 1));
        let shrunk = moved.with_isr(vec![2]);
        assert_eq!((shrunk.leader_epoch, shrunk.partition_epoch), (1, 2));
    }
}
