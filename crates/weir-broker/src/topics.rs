//! The topics this broker serves: names, ids, partition counts and per-topic config
//! overrides, kept in `weir-topics.json` in every data directory (Kafka keeps this in its
//! metadata log; Weir, being one node, in one small file written atomically). At start-up
//! the file is reconciled with the partition directories on disk, so a data directory
//! written by Kafka (no such file) loads too. Topic name rules are Kafka's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weir_kafka::topic::is_internal;
use weir_kafka::TopicPartition;

use crate::partition::Partition;
use weir_log::checkpoint::{uuid_from_base64, uuid_to_base64, write_atomically};
use weir_log::{LogConfig, SharedLog};

pub const TOPICS_FILE: &str = "weir-topics.json";

/// One topic as the broker serves it.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: uuid::Uuid,
    pub overrides: BTreeMap<String, String>,
    pub config: Arc<LogConfig>,
    pub partitions: Vec<Arc<Partition>>,
}

impl Topic {
    pub fn is_internal(&self) -> bool {
        is_internal(&self.name)
    }
}

/// What is stored for each topic.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredTopic {
    pub id: String,
    pub partitions: i32,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TopicsFile {
    topics: BTreeMap<String, StoredTopic>,
}

/// Reads the topics file of the first data directory that has one.
pub fn load(dirs: &[PathBuf]) -> Result<BTreeMap<String, StoredTopic>, String> {
    for d in dirs {
        if let Some(f) = weir_security::state_file::read::<TopicsFile>(&d.join(TOPICS_FILE))? {
            return Ok(f.topics);
        }
    }
    Ok(BTreeMap::new())
}

/// Writes the topics file to every data directory.
pub fn store(dirs: &[PathBuf], topics: &BTreeMap<String, StoredTopic>) -> std::io::Result<()> {
    let f = TopicsFile {
        topics: topics.clone(),
    };
    let bytes = weir_security::state_file::encode(&f).map_err(std::io::Error::other)?;
    for d in dirs {
        write_atomically(&d.join(TOPICS_FILE), &bytes)?;
    }
    Ok(())
}

/// The stored form of a topic.
pub fn stored(topic: &Topic) -> StoredTopic {
    StoredTopic {
        id: uuid_to_base64(topic.id),
        partitions: topic.partitions.len() as i32,
        configs: topic.overrides.clone(),
    }
}

/// Parses a stored topic id.
pub fn parse_id(name: &str, s: &StoredTopic) -> Result<uuid::Uuid, String> {
    uuid_from_base64(&s.id)
        .ok_or_else(|| format!("{TOPICS_FILE}: topic {name} has a malformed id '{}'", s.id))
}

/// Topics found as partition directories but missing from the file (a Kafka data
/// directory, or a crash between creating a partition and saving the file).
pub fn discover(logs: &[(TopicPartition, SharedLog)]) -> BTreeMap<String, (uuid::Uuid, i32)> {
    let mut found: BTreeMap<String, (uuid::Uuid, i32)> = BTreeMap::new();
    for (tp, log) in logs {
        let id = log
            .lock()
            .map(|l| l.topic_id())
            .unwrap_or(None)
            .unwrap_or_else(uuid::Uuid::new_v4);
        let e = found.entry(tp.topic.to_string()).or_insert((id, 0));
        e.1 = e.1.max(tp.partition + 1);
    }
    found
}

/// `<dir>/weir-topics.json`.
pub fn file_path(dir: &Path) -> PathBuf {
    dir.join(TOPICS_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let mut topics = BTreeMap::new();
        topics.insert(
            "orders".to_string(),
            StoredTopic {
                id: uuid_to_base64(uuid::Uuid::new_v4()),
                partitions: 3,
                configs: [("retention.ms".to_string(), "1000".to_string())].into(),
            },
        );
        store(&[dir.path().to_path_buf()], &topics).unwrap();
        assert_eq!(load(&[dir.path().to_path_buf()]).unwrap(), topics);
    }
}
