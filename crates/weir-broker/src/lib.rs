//! # weir-broker
//!
//! Weir's Kafka protocol server: the Kafka clients people already run (librdkafka and
//! everything on it, kafka-python, aiokafka, kafkajs, the Java client) create topics,
//! produce, consume and use consumer groups against it unchanged.
//!
//! A request's way through the house, top to bottom (arrows only point down):
//!
//! - [`server`]: listeners and connection limits, one task per connection.
//! - [`connection`]: one client: reads frames within the request memory ([`memory`]),
//!   runs SASL's session, hands each request to [`apis`] and writes the answers back in
//!   order.
//! - [`wire`]: all of Kafka's framing, both ways: request frames decoded, answers encoded
//!   (fetches spliced around file ranges that go out with sendfile); [`versions`]: the APIs
//!   and versions served.
//! - [`apis`]: one module per API family; a handler takes the [`request::RequestContext`]
//!   and the request and answers with a [`request::Response`] value.
//! - [`broker`]: the shared state (log manager, topics, groups, security, producer ids) and
//!   the operations that change topics, each all or nothing; [`topics`] and [`partition`]:
//!   what it serves and how the topics are kept, and [`partition::Partition::append`], the
//!   one way records reach a log.
//! - [`cluster`]: a member of a cluster whose metadata is in etcd (`etcd.connect`): joining,
//!   applying each metadata image (replicas made or removed, roles, configs, security
//!   state, the groups it coordinates), and topic changes written to etcd; the session and
//!   the controller are weir-cluster's.
//! - [`transactions`]: the host of weir-txn's transaction coordinator: `__transaction_state`
//!   and the markers, here and through WriteTxnMarkers; [`coordinator_log`]: reading a
//!   coordinator's partition back.
//! - [`descriptors`]: the file-descriptor budget, split between connections and logs;
//!   [`mutation_quota`]: Kafka's controller mutation quota on creating and deleting;
//!   [`request_quota`]: Kafka's request quota on the time handlers take.
//! - [`config`]: Kafka's broker settings, checked at start-up; [`metrics`]: Prometheus.
//!
//! Wire messages are the `kafka-protocol` crate's; Kafka's vocabulary is weir-kafka's;
//! records and storage are weir-record's and weir-log's; consumer groups are weir-group's; transactions are weir-txn's;
//! principals, ACLs and quotas are weir-security's; etcd and the controller are
//! weir-cluster's.

pub mod apis;
pub mod broker;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod coordinator_log;
pub mod descriptors;
pub mod dynamic_config;
pub mod group_configs;
pub mod kafka_configs;
pub mod kafka_import;
pub mod log_levels;
pub mod memory;
pub mod metrics;
pub mod mutation_quota;
pub mod partition;
pub mod replica_fetcher;
pub mod replica_set;
pub mod request;
pub mod request_quota;
pub mod server;
pub mod throttled_log;
pub mod topics;
pub mod transactions;
pub mod versions;
pub mod wire;

pub use broker::Broker;
pub use config::BrokerConfig;
pub use server::RunningBroker;
