//! The bounds Weir puts on what comes from outside, where more than one crate enforces the
//! same bound: each is named once, here. A bound that is hit gives the Kafka error code a
//! client understands (or, on the client side, an error that names the bound), and
//! whoever sent the input is the only one who notices.

/// The most bytes one record batch may inflate to when it is decompressed: by the broker
/// validating a produce request, by the log's recovery and cleaner reading a segment, and
/// by the consumer and `weir dump-log` reading records. A batch that inflates past it is
/// refused (CORRUPT_MESSAGE on produce) rather than allowed to take the memory.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 64 * 1024 * 1024;

/// Kafka's longest topic name (`Topic.MAX_NAME_LENGTH`): a partition's directory name must
/// fit the file system's 255 bytes with its `-<partition>` and a deletion suffix.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// The largest fetch response the broker builds, whatever a client asks (Kafka's
/// `fetch.max.bytes` broker cap, 55 MiB).
pub const MAX_FETCH_RESPONSE_BYTES: usize = 55 * 1024 * 1024;

/// The largest response frame the client reads from a broker; a larger size prefix means
/// the connection is not speaking Kafka, and it is closed.
pub const MAX_CLIENT_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// The most partitions one request may create, over all the topics it names: Kafka's
/// controller refuses a CreateTopics asking for more (`MAX_PARTITIONS_PER_BATCH`) with
/// POLICY_VIOLATION for every topic in it, and Weir does the same for CreateTopics,
/// CreatePartitions and the topics one Metadata request would auto-create. A client that
/// needs more asks in several requests.
pub const MAX_PARTITIONS_PER_REQUEST: usize = 10_000;
