//! # weir-broker
//!
//! Weir's Kafka protocol server: the Kafka clients people already run (librdkafka and
//! everything on it, kafka-python, aiokafka, kafkajs, the Java client) create topics,
//! produce, consume and use consumer groups against it unchanged.
//!
//! - [`server`]: listeners and connection limits; [`connection`]: framing, in-order
//!   responses, one task per connection; [`outgoing`]: responses on their way out, fetched
//!   records sent from the segment files with sendfile.
//! - [`apis`]: one module per API family, and the table of versions served.
//! - [`broker`]: the shared state (log manager, topics, groups, producer ids).
//! - [`group`]: Kafka's classic consumer-group protocol, offsets in `__consumer_offsets`.
//! - [`config`]: Kafka's broker settings, checked at start-up.
//! - [`sasl`], [`tls`], [`principal`]: who a client is; [`acl`]: what it may do; [`quota`]: how fast.
//!
//! Wire messages are the `kafka-protocol` crate's; records and storage are weir-record's
//! and weir-log's.

pub mod acl;
pub mod apis;
pub mod broker;
pub mod config;
pub mod connection;
pub mod group;
pub mod metrics;
pub mod outgoing;
pub mod principal;
pub mod quota;
pub mod sasl;
pub mod server;
pub mod state_file;
pub mod tls;
pub mod topics;

pub use broker::Broker;
pub use config::BrokerConfig;
pub use server::RunningBroker;
