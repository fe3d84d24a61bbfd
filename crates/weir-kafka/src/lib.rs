//! # weir-kafka
//!
//! Kafka's shared vocabulary, defined once for every crate of Weir: the broker side and the
//! client both speak it, so neither defines its own copy and nothing converts between them.
//!
//! - [`TopicPartition`] and Kafka's topic name rules ([`topic`]).
//! - [`acl`]: the resource, pattern, operation and permission enums with their wire codes,
//!   and Kafka's `AclBinding` and `AclBindingFilter`.
//! - [`config`]: where a config value comes from, its type, and one entry as
//!   DescribeConfigs reports it.
//! - [`error`]: a Kafka error code with its message, and Kafka's names for the codes.
//! - [`quota`]: client-quota entity types, filter matches and quota names.
//! - [`limits`]: every bound Weir puts on what comes from outside and that more than one
//!   crate enforces, each named once.
//!
//! Plain data: no I/O, no async, nothing that knows sockets or files.

pub mod acl;
pub mod config;
pub mod error;
pub mod limits;
pub mod quota;
pub mod topic;

pub use error::{ApiError, ErrorCode};
pub use topic::TopicPartition;
