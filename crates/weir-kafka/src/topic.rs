//! Topics and their partitions: the `TopicPartition` every crate names a partition by,
//! Kafka's topic name rules (`Topic.validate`), and the names of Kafka's internal topics.

use std::fmt;
use std::sync::Arc;

use crate::limits::MAX_TOPIC_NAME_LENGTH;

/// The compacted topic that keeps consumer groups and their committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The compacted topic that keeps the transaction coordinator's state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// A partition of a topic. The name is shared (`Arc<str>`): a partition is named on every
/// record the producer queues and every batch the log appends, so naming one is a reference
/// count, not an allocation. Displays as Kafka prints it, `topic-partition`, which is also
/// the partition's directory name in a data directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The partition's directory name in a data directory: `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        self.to_string()
    }

    /// Parses a partition directory name (the topic may itself contain dashes).
    pub fn parse_dir_name(name: &str) -> Option<Self> {
        let (topic, partition) = name.rsplit_once('-')?;
        if topic.is_empty()
            || partition.is_empty()
            || !partition.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        Some(TopicPartition::new(topic, partition.parse().ok()?))
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl<T: Into<Arc<str>>> From<(T, i32)> for TopicPartition {
    fn from((topic, partition): (T, i32)) -> Self {
        TopicPartition::new(topic, partition)
    }
}

/// Kafka's topic name rules (`Topic.validate`): 1 to 249 ASCII letters, digits, `.`, `_`
/// and `-`, and not `.` or `..`. The error says which rule the name breaks.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("the topic name cannot be '{name}'"));
    }
    if name.len() > MAX_TOPIC_NAME_LENGTH {
        return Err(format!(
            "the topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '.' || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "topic '{name}' contains '{c}': only ASCII letters, digits, '.', '_' and '-' are allowed"
        ));
    }
    Ok(())
}

/// Whether Kafka treats the topic as internal (clients may not write to it).
pub fn is_internal(name: &str) -> bool {
    name == OFFSETS_TOPIC || name == TRANSACTION_STATE_TOPIC
}

/// Kafka's textual topic id: the 16 bytes in URL-safe base64 without padding.
pub fn uuid_to_base64(id: uuid::Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Parses Kafka's textual topic id.
pub fn uuid_from_base64(s: &str) -> Option<uuid::Uuid> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    if s.len() != 22 {
        return None;
    }
    let mut bytes = Vec::with_capacity(16);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= val(*c)? << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            bytes.push((n >> (16 - 8 * i)) as u8);
        }
    }
    uuid::Uuid::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_name_rules() {
        assert!(validate_topic_name("orders.v2_eu-1").is_ok());
        assert!(validate_topic_name("").is_err());
        assert!(validate_topic_name("..").is_err());
        assert!(validate_topic_name("a b").is_err());
        assert!(validate_topic_name("ü").is_err());
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
        assert!(validate_topic_name(&"x".repeat(250)).is_err());
    }

    #[test]
    fn directory_names_round_trip_with_dashes_in_the_topic() {
        let tp = TopicPartition::new("eu-orders-v2", 17);
        assert_eq!(tp.dir_name(), "eu-orders-v2-17");
        assert_eq!(TopicPartition::parse_dir_name(&tp.dir_name()), Some(tp));
        assert_eq!(TopicPartition::parse_dir_name("orders"), None);
        assert_eq!(TopicPartition::parse_dir_name("-3"), None);
        assert_eq!(TopicPartition::parse_dir_name("orders-x"), None);
    }
}
