//! # weir-client
//!
//! An async Rust client for any Kafka-compatible broker (Weir, Apache Kafka, Redpanda): a
//! producer with Kafka's batching, memory bound and partitioners; a consumer with groups;
//! and an admin client. Configuration uses Kafka's keys and defaults.
//!
//! - [`conn`]: one broker connection (framing, version negotiation, pipelining).
//! - [`cluster`]: metadata, leaders, coordinators, connections.
//! - [`producer`], [`consumer`], [`admin`]: the three clients.
//! - [`partitioner`]: murmur2 as the Java client computes it, and KIP-794's sticky choice.

pub mod admin;
pub mod cluster;
pub mod config;
pub mod conn;
pub mod consumer;
pub mod error;
pub mod partitioner;
pub mod producer;
mod props;
pub mod security;

pub use config::{Acks, ProducerConfig};
pub use consumer::{
    AssignmentStrategy, AutoOffsetReset, CommitFuture, Consumer, ConsumerConfig, ConsumerRecord,
    IsolationLevel, OffsetAndMetadata, OffsetAndTimestamp, RebalanceContext, RebalanceListener,
    TimestampType,
};
pub use error::{ClientError, Result};
pub use producer::{
    ConsumerGroupMetadata, DeliveryFuture, DeliveryListener, Producer, ProducerRecord,
    RecordMetadata,
};
/// Partitions are named as every Kafka crate of Weir names them.
pub use weir_kafka::TopicPartition;
