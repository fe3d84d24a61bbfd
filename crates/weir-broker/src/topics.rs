//! The topics this broker serves — names, ids, partition counts and per-topic config
//! overrides — and how they are kept: in every data directory, a snapshot
//! (`weir-topics.json`, the file earlier versions wrote whole on every change, still read
//! as it was) and a journal of the changes since (`weir-topics.journal`, one JSON line per
//! change, appended and synced). A change therefore costs the same however many topics
//! there are; the journal is folded into the snapshot at start-up and whenever it has grown
//! as long as there are topics. Kafka keeps this in its metadata log; Weir, being one
//! node, in these two files. Nothing here knows partitions' files beyond the names of
//! their directories, which start-up removes when a crash left them half made.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weir_kafka::topic::is_internal;
use weir_kafka::TopicPartition;

use crate::partition::Partition;
use weir_cluster::LeaderAndIsr;
use weir_log::checkpoint::{uuid_from_base64, uuid_to_base64, write_atomically};
use weir_log::{LogConfig, SharedLog};

pub const TOPICS_FILE: &str = "weir-topics.json";
pub const JOURNAL_FILE: &str = "weir-topics.journal";

/// The journal is folded into the snapshot once it has this many changes, or as many as
/// there are topics if that is more: rewriting the snapshot then costs at most a constant
/// per change.
const FOLD_AFTER: usize = 1024;

/// One topic as the broker serves it.
#[derive(Debug)]
pub struct Topic {
    pub name: String,
    pub id: uuid::Uuid,
    pub overrides: BTreeMap<String, String>,
    pub config: Arc<LogConfig>,
    /// Every partition of the topic, in order (index = partition), whether this broker
    /// holds a replica of it or not.
    pub partitions: Vec<PartitionView>,
}

/// One partition of a topic: where its replicas are, who leads it, and this broker's own
/// replica of it, if it holds one.
#[derive(Debug, Clone)]
pub struct PartitionView {
    /// The brokers holding its replicas, preferred leader first.
    pub replicas: Vec<i32>,
    /// Its leader, leader epoch and ISR; `None` until a leader is first elected.
    pub leadership: Option<LeaderAndIsr>,
    /// This broker's replica.
    pub replica: Option<Arc<Partition>>,
}

impl PartitionView {
    /// A single broker's partition: its one replica, which leads.
    pub fn single_node(node_id: i32, replica: Arc<Partition>) -> PartitionView {
        PartitionView {
            replicas: vec![node_id],
            leadership: Some(LeaderAndIsr::initial(node_id, vec![node_id])),
            replica: Some(replica),
        }
    }

    pub fn leader(&self) -> Option<i32> {
        self.leadership
            .as_ref()
            .map(|l| l.leader)
            .filter(|l| *l >= 0)
    }
}

impl Topic {
    pub fn is_internal(&self) -> bool {
        is_internal(&self.name)
    }

    pub fn partition(&self, index: i32) -> Option<&PartitionView> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }

    /// The replicas of this topic this broker holds.
    pub fn replicas(&self) -> impl Iterator<Item = &Arc<Partition>> {
        self.partitions.iter().filter_map(|p| p.replica.as_ref())
    }

    /// The same topic with another config.
    pub fn with_config(
        &self,
        overrides: BTreeMap<String, String>,
        config: Arc<LogConfig>,
    ) -> Topic {
        Topic {
            name: self.name.clone(),
            id: self.id,
            overrides,
            config,
            partitions: self.partitions.clone(),
        }
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

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Change {
    /// Partitions `from..to` of a topic are about to be made. Unless a `Create`,
    /// `Partitions` or `Abort` of the topic follows, a crash interrupted the making, and
    /// start-up removes what it left.
    Intent {
        topic: String,
        id: String,
        from: i32,
        to: i32,
    },
    /// The topic exists, whole.
    Create {
        topic: String,
        id: String,
        partitions: i32,
        #[serde(default)]
        configs: BTreeMap<String, String>,
    },
    /// The topic has grown to `partitions`.
    Partitions { topic: String, partitions: i32 },
    /// The topic's config overrides, the whole set.
    Configs {
        topic: String,
        configs: BTreeMap<String, String>,
    },
    /// An intent undone: what it made is gone.
    Abort { topic: String },
    /// The topic is gone; its directories (those with its id) are removed.
    Delete { topic: String, id: String },
}

impl Change {
    fn topic(&self) -> &str {
        match self {
            Change::Intent { topic, .. }
            | Change::Create { topic, .. }
            | Change::Partitions { topic, .. }
            | Change::Configs { topic, .. }
            | Change::Abort { topic }
            | Change::Delete { topic, .. } => topic,
        }
    }
}

/// Partition directories a crash may have left: `partitions` of `topic` (every one with
/// `None`) whose `partition.metadata` names `id`, or names none.
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    pub topic: String,
    pub id: uuid::Uuid,
    pub partitions: Option<Range<i32>>,
}

/// What start-up reads: the topics, and what a crash left half done.
#[derive(Debug, Default)]
pub struct Loaded {
    pub topics: BTreeMap<String, StoredTopic>,
    pub leftovers: Vec<Leftover>,
}

/// Reads the snapshot and journal of the first data directory that has either, and plays
/// the journal over the snapshot.
pub fn load(dirs: &[PathBuf]) -> Result<Loaded, String> {
    for d in dirs {
        let snapshot = weir_security::state_file::read::<TopicsFile>(&d.join(TOPICS_FILE))?;
        let journal = match std::fs::read(d.join(JOURNAL_FILE)) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("{}: {e}", d.join(JOURNAL_FILE).display())),
        };
        if snapshot.is_none() && journal.is_none() {
            continue;
        }
        let mut loaded = Loaded {
            topics: snapshot.map(|f| f.topics).unwrap_or_default(),
            leftovers: Vec::new(),
        };
        let changes = parse_journal(&d.join(JOURNAL_FILE), journal.as_deref().unwrap_or(&[]))?;
        replay(&mut loaded, changes)?;
        return Ok(loaded);
    }
    Ok(Loaded::default())
}

/// The journal's changes. A last line without its newline was being written when the
/// process stopped, and was never acknowledged: it is left out. Any other line that does
/// not parse is damage, and stops the start with an error naming it.
fn parse_journal(path: &Path, bytes: &[u8]) -> Result<Vec<Change>, String> {
    let whole = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => &bytes[..=end],
        None => &[][..],
    };
    let mut changes = Vec::new();
    for (i, line) in whole.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let change = serde_json::from_slice(line).map_err(|e| {
            format!(
                "{} line {}: {e} (the file is damaged; its changes since the last \
                 snapshot cannot be trusted)",
                path.display(),
                i + 1
            )
        })?;
        changes.push(change);
    }
    Ok(changes)
}

/// Plays `changes` over `loaded.topics`. Every change sets values, none adds to them, so
/// playing a journal again over a snapshot that already holds it changes nothing.
fn replay(loaded: &mut Loaded, changes: Vec<Change>) -> Result<(), String> {
    let parse = |topic: &str, id: &str| {
        uuid_from_base64(id)
            .ok_or_else(|| format!("{JOURNAL_FILE}: topic {topic} has a malformed id '{id}'"))
    };
    let mut intents: BTreeMap<String, Leftover> = BTreeMap::new();
    let mut deleted: Vec<Leftover> = Vec::new();
    for change in changes {
        let topic = change.topic().to_string();
        match change {
            Change::Intent { id, from, to, .. } => {
                intents.insert(
                    topic.clone(),
                    Leftover {
                        id: parse(&topic, &id)?,
                        topic,
                        partitions: Some(from..to),
                    },
                );
            }
            Change::Create {
                id,
                partitions,
                configs,
                ..
            } => {
                intents.remove(&topic);
                loaded.topics.insert(
                    topic,
                    StoredTopic {
                        id,
                        partitions,
                        configs,
                    },
                );
            }
            Change::Partitions { partitions, .. } => {
                intents.remove(&topic);
                if let Some(t) = loaded.topics.get_mut(&topic) {
                    t.partitions = partitions;
                }
            }
            Change::Configs { configs, .. } => {
                if let Some(t) = loaded.topics.get_mut(&topic) {
                    t.configs = configs;
                }
            }
            Change::Abort { .. } => {
                intents.remove(&topic);
            }
            Change::Delete { id, .. } => {
                intents.remove(&topic);
                loaded.topics.remove(&topic);
                deleted.push(Leftover {
                    id: parse(&topic, &id)?,
                    topic,
                    partitions: None,
                });
            }
        }
    }
    loaded.leftovers = deleted;
    loaded.leftovers.extend(intents.into_values());
    Ok(())
}

/// Removes the partition directories `leftovers` name from every data directory: those of
/// the topic whose `partition.metadata` names the leftover's id, or names none (a crash
/// struck before it was written). A directory with another id is left alone. Returns the
/// directories removed.
pub fn remove_leftovers(dirs: &[PathBuf], leftovers: &[Leftover]) -> Result<Vec<PathBuf>, String> {
    let mut removed = Vec::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        for name in names {
            let Some(tp) = TopicPartition::parse_dir_name(&name) else {
                continue;
            };
            let hit = leftovers.iter().find(|l| {
                *l.topic == *tp.topic
                    && l.partitions
                        .as_ref()
                        .is_none_or(|r| r.contains(&tp.partition))
            });
            let Some(leftover) = hit else { continue };
            let path = dir.join(&name);
            let id = weir_log::checkpoint::read_partition_metadata(
                &path.join(weir_log::log::PARTITION_METADATA_FILE),
            )
            .unwrap_or(None);
            if id.is_some_and(|id| id != leftover.id) {
                continue;
            }
            std::fs::remove_dir_all(&path)
                .map_err(|e| format!("removing {}: {e}", path.display()))?;
            removed.push(path);
        }
    }
    Ok(removed)
}

/// The topics' files in every data directory, as the broker changes them: changes are
/// appended to the journals, and the journals folded into the snapshots now and then.
pub struct TopicStore {
    journals: Vec<(PathBuf, Option<File>)>,
    /// Changes in the journals since the last snapshot.
    changes: usize,
}

impl TopicStore {
    /// Writes `topics` as every directory's snapshot and empties its journal: what
    /// start-up does once it has read them, so that the journal starts empty.
    pub fn open(
        dirs: &[PathBuf],
        topics: &BTreeMap<String, StoredTopic>,
    ) -> std::io::Result<TopicStore> {
        let mut store = TopicStore {
            journals: dirs.iter().map(|d| (d.clone(), None)).collect(),
            changes: 0,
        };
        for d in dirs {
            store.snapshot(d, topics)?;
        }
        Ok(store)
    }

    /// Appends `changes` to the journal of `dir` and syncs it.
    pub fn append(&mut self, dir: &Path, changes: &[Change]) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        for c in changes {
            serde_json::to_writer(&mut bytes, c).map_err(std::io::Error::other)?;
            bytes.push(b'\n');
        }
        let slot = self
            .journals
            .iter_mut()
            .find(|(d, _)| d == dir)
            .ok_or_else(|| {
                std::io::Error::other(format!("{} is no data directory", dir.display()))
            })?;
        if slot.1.is_none() {
            slot.1 = Some(open_journal(dir)?);
        }
        let Some(file) = slot.1.as_mut() else {
            unreachable!("opened above");
        };
        let written = file.write_all(&bytes).and_then(|()| file.sync_data());
        if written.is_err() {
            // A later append reopens it: a half-written line stays unterminated or is
            // completed by nothing, and is left out when read.
            slot.1 = None;
        }
        written
    }

    /// Counts `n` changes appended (to every directory); true when the journal is due
    /// to be folded into the snapshot, given how many topics there are.
    pub fn appended(&mut self, n: usize, topics: usize) -> bool {
        self.changes += n;
        self.changes >= FOLD_AFTER.max(topics)
    }

    /// Writes `topics` as `dir`'s snapshot, then empties its journal. A crash between the
    /// two leaves a journal that is played again over a snapshot already holding it,
    /// which changes nothing.
    pub fn snapshot(
        &mut self,
        dir: &Path,
        topics: &BTreeMap<String, StoredTopic>,
    ) -> std::io::Result<()> {
        let f = TopicsFile {
            topics: topics.clone(),
        };
        let bytes = weir_security::state_file::encode(&f).map_err(std::io::Error::other)?;
        write_atomically(&dir.join(TOPICS_FILE), &bytes)?;
        let file = open_journal(dir)?;
        file.set_len(0)?;
        file.sync_all()?;
        if let Some(slot) = self.journals.iter_mut().find(|(d, _)| d == dir) {
            slot.1 = Some(file);
        }
        Ok(())
    }

    /// Every directory's journal has been folded.
    pub fn folded(&mut self) {
        self.changes = 0;
    }
}

fn open_journal(dir: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(JOURNAL_FILE))
}

/// The stored form of a topic.
pub fn stored(topic: &Topic) -> StoredTopic {
    StoredTopic {
        id: uuid_to_base64(topic.id),
        partitions: topic.partitions.len() as i32,
        configs: topic.overrides.clone(),
    }
}

/// The journal line that says `topic` exists, whole.
pub fn created(topic: &Topic) -> Change {
    Change::Create {
        topic: topic.name.clone(),
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

/// Topics found as partition directories but missing from the files (a Kafka data
/// directory, or a partition made before the topics files knew of it).
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

    fn stored_topic(partitions: i32) -> StoredTopic {
        StoredTopic {
            id: uuid_to_base64(uuid::Uuid::new_v4()),
            partitions,
            configs: [("retention.ms".to_string(), "1000".to_string())].into(),
        }
    }

    fn create(name: &str, t: &StoredTopic) -> Change {
        Change::Create {
            topic: name.into(),
            id: t.id.clone(),
            partitions: t.partitions,
            configs: t.configs.clone(),
        }
    }

    #[test]
    fn a_snapshot_written_whole_by_an_earlier_version_loads() {
        let dir = tempfile::tempdir().unwrap();
        let mut topics = BTreeMap::new();
        topics.insert("orders".to_string(), stored_topic(3));
        let text = weir_security::state_file::encode(&TopicsFile {
            topics: topics.clone(),
        })
        .unwrap();
        std::fs::write(dir.path().join(TOPICS_FILE), text).unwrap();
        let loaded = load(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(loaded.topics, topics);
        assert!(loaded.leftovers.is_empty());
    }

    #[test]
    fn changes_play_over_the_snapshot_and_a_torn_last_line_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = [dir.path().to_path_buf()];
        let a = stored_topic(3);
        let b = stored_topic(1);
        let mut store = TopicStore::open(&dirs, &[("a".to_string(), a.clone())].into()).unwrap();
        store
            .append(
                dir.path(),
                &[
                    create("b", &b),
                    Change::Partitions {
                        topic: "a".into(),
                        partitions: 5,
                    },
                ],
            )
            .unwrap();
        store
            .append(
                dir.path(),
                &[Change::Configs {
                    topic: "b".into(),
                    configs: BTreeMap::new(),
                }],
            )
            .unwrap();
        // A crash in the middle of the next append.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(JOURNAL_FILE))
            .unwrap();
        f.write_all(br#"{"op":"delete","topic":"a","i"#).unwrap();
        let loaded = load(&dirs).unwrap();
        assert_eq!(loaded.topics["a"].partitions, 5);
        assert_eq!(loaded.topics["b"].configs, BTreeMap::new());
        assert_eq!(loaded.topics.len(), 2);
        // Folding and reading again gives the same; so does playing the journal twice.
        TopicStore::open(&dirs, &loaded.topics).unwrap();
        assert_eq!(load(&dirs).unwrap().topics, loaded.topics);
        assert_eq!(std::fs::read(dir.path().join(JOURNAL_FILE)).unwrap(), b"");
    }

    #[test]
    fn a_damaged_line_before_the_last_stops_the_start_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(JOURNAL_FILE), "{\"op\":\"nonsense\"}\n{}\n").unwrap();
        let e = load(&[dir.path().to_path_buf()]).unwrap_err();
        assert!(e.contains("weir-topics.journal line 1"), "{e}");
    }

    #[test]
    fn an_interrupted_creation_and_a_deletion_leave_their_directories_to_remove() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = [dir.path().to_path_buf()];
        let kept = stored_topic(1);
        let half = uuid::Uuid::new_v4();
        let gone = stored_topic(2);
        let mut store = TopicStore::open(&dirs, &BTreeMap::new()).unwrap();
        let intent = |topic: &str, id: &str, from, to| Change::Intent {
            topic: topic.into(),
            id: id.into(),
            from,
            to,
        };
        store
            .append(
                dir.path(),
                &[
                    intent("kept", &kept.id, 0, 1),
                    create("kept", &kept),
                    intent("gone", &gone.id, 0, 2),
                    create("gone", &gone),
                    intent("half", &uuid_to_base64(half), 0, 3),
                    Change::Delete {
                        topic: "gone".into(),
                        id: gone.id.clone(),
                    },
                ],
            )
            .unwrap();
        let loaded = load(&dirs).unwrap();
        assert_eq!(loaded.topics.keys().collect::<Vec<_>>(), ["kept"]);
        let gone_id = uuid_from_base64(&gone.id).unwrap();
        assert_eq!(
            loaded.leftovers,
            [
                Leftover {
                    topic: "gone".into(),
                    id: gone_id,
                    partitions: None
                },
                Leftover {
                    topic: "half".into(),
                    id: half,
                    partitions: Some(0..3)
                },
            ]
        );
        // On disk: half-0 made whole, half-1 without its metadata yet, half-7 (outside the
        // intent), gone-1, a "half-2" of some other topic id, and kept-0.
        let make = |name: &str, id: Option<uuid::Uuid>| {
            let p = dir.path().join(name);
            std::fs::create_dir_all(&p).unwrap();
            if let Some(id) = id {
                weir_log::checkpoint::write_partition_metadata(
                    &p.join(weir_log::log::PARTITION_METADATA_FILE),
                    id,
                )
                .unwrap();
            }
        };
        make("half-0", Some(half));
        make("half-1", None);
        make("half-2", Some(uuid::Uuid::new_v4()));
        make("half-7", Some(half));
        make("gone-1", Some(gone_id));
        make("kept-0", Some(uuid_from_base64(&kept.id).unwrap()));
        let mut removed = remove_leftovers(&dirs, &loaded.leftovers).unwrap();
        removed.sort();
        assert_eq!(
            removed,
            ["gone-1", "half-0", "half-1"].map(|n| dir.path().join(n))
        );
        for left in ["half-2", "half-7", "kept-0"] {
            assert!(dir.path().join(left).exists(), "{left}");
        }
    }
}
