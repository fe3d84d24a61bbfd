//! # weir-cluster
//!
//! A Weir cluster's control plane, on etcd as Kafka's was on ZooKeeper: the consensus is
//! etcd's, never ours. Brokers register under leases; one of them is elected controller;
//! topics, their replica assignments, each partition's leadership, and the cluster-wide
//! security state live in etcd and change by compare-and-set; every broker watches them
//! and serves what they say.
//!
//! - [`connect`]: `etcd.connect` (hosts, then an optional key prefix).
//! - [`keys`] and [`records`]: where each piece of metadata lives, and its JSON.
//! - [`image`]: the metadata as of one etcd revision, parsed, immutable once published.
//! - [`assign`]: Kafka's replica assignment over brokers and racks.
//! - [`controller`]: the controller's decisions over an image (who leads what).
//! - [`session`]: the one live connection to etcd: the lease, the registration, the watch
//!   that keeps the image current, the controller's election and its writes, and the
//!   operations brokers perform (create and delete topics, set configs, hand out
//!   producer ids). It runs on a thread of its own, so a busy broker never starves its
//!   lease.
//!
//! The data plane (logs, requests, replication) is the broker's; this crate knows no
//! sockets of Kafka's and no files.

pub mod assign;
pub mod connect;
pub mod controller;
mod etcd;
pub mod image;
pub mod keys;
pub mod records;
pub mod session;
#[cfg(feature = "test-support")]
pub mod test_etcd;

pub use connect::EtcdConnect;
pub use image::{MetadataImage, TopicImage};
pub use keys::Document;
pub use records::{BrokerRegistration, Endpoint, LeaderAndIsr, NO_LEADER};
pub use session::{Cluster, ClusterConfig, OpError};
