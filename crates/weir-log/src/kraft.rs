//! Kafka's KRaft metadata log (`__cluster_metadata-0` in a Kafka 4 data directory), read for a
//! move from Kafka to Weir: the topics with their ids, partition counts and configs, the
//! ACLs, the SCRAM credentials and the client quotas, as the latest snapshot and the log
//! after it leave them. Only reads: the directory stays as Kafka left it, so the move can
//! go back, and Weir never serves it as a topic.
//!
//! Written by hand because no crate decodes Kafka's metadata records: each record's value is
//! Kafka's `ApiMessageAndVersion` (frame version, record type and version as unsigned
//! varints, then the record in the flexible wire format). The record types and field orders
//! are those of Kafka 4.4's `metadata/src/main/resources/common/metadata/*.json`; each type
//! read here has had version 0 only, and a newer version is refused rather than guessed.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::ops::ControlFlow;
use std::path::Path;

use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;
use weir_record::LogEntry;

use crate::segment::walk_entries;

/// The metadata log's directory name in a Kafka data directory.
pub const METADATA_DIR: &str = "__cluster_metadata-0";

/// A topic as the metadata names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KraftTopic {
    pub id: uuid::Uuid,
    pub partitions: i32,
    /// Topic-level config overrides (ConfigRecord of resource type TOPIC).
    pub configs: BTreeMap<String, String>,
}

/// An ACL as AccessControlEntryRecord carries it (Kafka's wire codes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KraftAcl {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

/// A user's SCRAM credential for one mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KraftScram {
    pub mechanism: i8,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: i32,
}

/// A client quota's entity: (entity type, name; `None` is the type's default), e.g.
/// `[("user", Some("alice")), ("client-id", None)]`.
pub type QuotaEntity = Vec<(String, Option<String>)>;

/// What the metadata log holds that a single Weir broker keeps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KraftImage {
    pub topics: BTreeMap<String, KraftTopic>,
    pub acls: Vec<KraftAcl>,
    /// user → mechanism → credential.
    pub scram: BTreeMap<String, BTreeMap<i8, KraftScram>>,
    /// entity → key → value.
    pub quotas: BTreeMap<QuotaEntity, BTreeMap<String, f64>>,
    /// Broker-level configs (ConfigRecord of resource type BROKER): resource name ("" for
    /// the cluster default) → key → value.
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
}

// Record types (Kafka's MetadataRecordType) read here.
const TOPIC: u16 = 2;
const PARTITION: u16 = 3;
const CONFIG: u16 = 4;
const REMOVE_TOPIC: u16 = 9;
const USER_SCRAM_CREDENTIAL: u16 = 11;
const CLIENT_QUOTA: u16 = 14;
const ACCESS_CONTROL_ENTRY: u16 = 18;
const REMOVE_ACCESS_CONTROL_ENTRY: u16 = 19;
const REMOVE_USER_SCRAM_CREDENTIAL: u16 = 22;

// ConfigResource.Type codes.
const CONFIG_RESOURCE_TOPIC: i8 = 2;
const CONFIG_RESOURCE_BROKER: i8 = 4;

/// The image of `dir` (a `__cluster_metadata-0` directory): its newest snapshot, then the
/// log's records after it. `None` if `dir` does not exist.
pub fn read_image(dir: &Path) -> io::Result<Option<KraftImage>> {
    if !dir.is_dir() {
        return Ok(None);
    }
    let mut snapshots = Vec::new();
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".checkpoint") {
            // <end offset, 20 digits>-<epoch, 10 digits>.checkpoint
            if let Some(end) = stem.split('-').next().and_then(|o| o.parse::<i64>().ok()) {
                snapshots.push((end, name));
            }
        } else if let Some(base) = name
            .strip_suffix(".log")
            .and_then(|b| b.parse::<i64>().ok())
        {
            segments.push((base, name));
        }
    }
    snapshots.sort();
    segments.sort();
    let mut image = Builder::default();
    let mut from = 0;
    if let Some((end, name)) = snapshots.last() {
        image.read_file(&dir.join(name), i64::MIN)?;
        from = *end;
    }
    for (_, name) in &segments {
        image.read_file(&dir.join(name), from)?;
    }
    Ok(Some(image.finish()))
}

/// The image as records build it: topics by id until the end, when names are what count.
#[derive(Default)]
struct Builder {
    topics: BTreeMap<uuid::Uuid, (String, i32)>,
    configs: BTreeMap<(i8, String), BTreeMap<String, String>>,
    acls: BTreeMap<uuid::Uuid, KraftAcl>,
    scram: BTreeMap<String, BTreeMap<i8, KraftScram>>,
    quotas: BTreeMap<QuotaEntity, BTreeMap<String, f64>>,
}

impl Builder {
    /// Applies the records of one file (snapshot or segment) at offsets from `from` on.
    fn read_file(&mut self, path: &Path, from: i64) -> io::Result<()> {
        let file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        let mut failure = None;
        walk_entries(&file, 0, len, |_, entry| {
            let LogEntry::V2(batch) = &entry else {
                return Ok(ControlFlow::Continue(()));
            };
            // Control batches: the raft log's own (leader changes, snapshot headers, voters).
            if batch.is_control() {
                return Ok(ControlFlow::Continue(()));
            }
            let records = entry
                .records(MAX_DECOMPRESSED_BATCH_BYTES)
                .map_err(|e| bad(path, format!("a batch does not decode: {e}")))?;
            for record in records.iter() {
                let record =
                    record.map_err(|e| bad(path, format!("a record does not decode: {e}")))?;
                if record.offset < from {
                    continue;
                }
                let Some(value) = record.value else { continue };
                if let Err(e) = self.apply(value) {
                    failure = Some(bad(
                        path,
                        format!("record at offset {}: {e}", record.offset),
                    ));
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        })?;
        // A torn tail (Kafka killed mid-write) ends the walk: what came before it stands,
        // as Kafka's own recovery would truncate there.
        failure.map_or(Ok(()), Err)
    }

    fn apply(&mut self, value: &[u8]) -> Result<(), String> {
        let mut r = Reader(value);
        let frame = r.uvarint()?;
        if frame != 1 {
            return Err(format!("unknown frame version {frame}"));
        }
        let kind = u16::try_from(r.uvarint()?).map_err(|_| "record type out of range")?;
        let version = r.uvarint()?;
        let known = matches!(
            kind,
            TOPIC
                | CONFIG
                | REMOVE_TOPIC
                | USER_SCRAM_CREDENTIAL
                | CLIENT_QUOTA
                | ACCESS_CONTROL_ENTRY
                | REMOVE_ACCESS_CONTROL_ENTRY
                | REMOVE_USER_SCRAM_CREDENTIAL
        );
        if known && version != 0 {
            return Err(format!(
                "record type {kind} at version {version}, newer than Weir reads"
            ));
        }
        match kind {
            TOPIC => {
                let name = r.string()?;
                let id = r.uuid()?;
                self.topics.insert(id, (name, 0));
            }
            // Its first two fields (partition id, topic id) are the same in v0–v2.
            PARTITION => {
                let partition = r.i32()?;
                let id = r.uuid()?;
                if let Some(t) = self.topics.get_mut(&id) {
                    t.1 = t.1.max(partition.saturating_add(1));
                }
            }
            CONFIG => {
                let resource_type = r.i8()?;
                let resource = r.string()?;
                let key = r.string()?;
                let value = r.nullable_string()?;
                let configs = self.configs.entry((resource_type, resource)).or_default();
                match value {
                    Some(v) => configs.insert(key, v),
                    None => configs.remove(&key),
                };
            }
            REMOVE_TOPIC => {
                let id = r.uuid()?;
                if let Some((name, _)) = self.topics.remove(&id) {
                    self.configs.remove(&(CONFIG_RESOURCE_TOPIC, name));
                }
            }
            USER_SCRAM_CREDENTIAL => {
                let name = r.string()?;
                let mechanism = r.i8()?;
                let credential = KraftScram {
                    mechanism,
                    salt: r.bytes()?,
                    stored_key: r.bytes()?,
                    server_key: r.bytes()?,
                    iterations: r.i32()?,
                };
                self.scram
                    .entry(name)
                    .or_default()
                    .insert(mechanism, credential);
            }
            REMOVE_USER_SCRAM_CREDENTIAL => {
                let name = r.string()?;
                let mechanism = r.i8()?;
                if let Some(m) = self.scram.get_mut(&name) {
                    m.remove(&mechanism);
                    if m.is_empty() {
                        self.scram.remove(&name);
                    }
                }
            }
            CLIENT_QUOTA => {
                let n = r.array_len()?;
                let mut entity = Vec::with_capacity(n.min(4));
                for _ in 0..n {
                    let entity_type = r.string()?;
                    let entity_name = r.nullable_string()?;
                    r.skip_tagged()?;
                    entity.push((entity_type, entity_name));
                }
                let key = r.string()?;
                let value = r.f64()?;
                let remove = r.i8()? != 0;
                let values = self.quotas.entry(entity.clone()).or_default();
                if remove {
                    values.remove(&key);
                    if values.is_empty() {
                        self.quotas.remove(&entity);
                    }
                } else {
                    values.insert(key, value);
                }
            }
            ACCESS_CONTROL_ENTRY => {
                let id = r.uuid()?;
                let acl = KraftAcl {
                    resource_type: r.i8()?,
                    resource_name: r.string()?,
                    pattern_type: r.i8()?,
                    principal: r.string()?,
                    host: r.string()?,
                    operation: r.i8()?,
                    permission: r.i8()?,
                };
                self.acls.insert(id, acl);
            }
            REMOVE_ACCESS_CONTROL_ENTRY => {
                let id = r.uuid()?;
                self.acls.remove(&id);
            }
            // Brokers, features, producer ids, delegation tokens, …: not a single broker's.
            _ => return Ok(()),
        }
        if kind != PARTITION {
            r.skip_tagged()?;
        }
        Ok(())
    }

    fn finish(mut self) -> KraftImage {
        let mut image = KraftImage::default();
        for (id, (name, partitions)) in self.topics {
            let configs = self
                .configs
                .remove(&(CONFIG_RESOURCE_TOPIC, name.clone()))
                .unwrap_or_default();
            image.topics.insert(
                name,
                KraftTopic {
                    id,
                    partitions,
                    configs,
                },
            );
        }
        for ((kind, resource), configs) in self.configs {
            if kind == CONFIG_RESOURCE_BROKER && !configs.is_empty() {
                image.broker_configs.insert(resource, configs);
            }
        }
        image.acls = self.acls.into_values().collect();
        image.scram = self.scram;
        image.quotas = self.quotas;
        image
    }
}

fn bad(path: &Path, what: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}

/// The flexible wire format's primitives, over one record's bytes.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err(format!("{n} bytes wanted, {} left", self.0.len()));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn uvarint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..35).step_by(7) {
            let b = self.take(1)?[0];
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("an unsigned varint longer than 5 bytes".into())
    }

    fn i8(&mut self) -> Result<i8, String> {
        Ok(self.take(1)?[0] as i8)
    }

    fn i32(&mut self) -> Result<i32, String> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn f64(&mut self) -> Result<f64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(f64::from_be_bytes(a))
    }

    fn uuid(&mut self) -> Result<uuid::Uuid, String> {
        let b = self.take(16)?;
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Ok(uuid::Uuid::from_bytes(a))
    }

    /// A compact length: the varint holds length + 1, 0 for null.
    fn compact_len(&mut self) -> Result<Option<usize>, String> {
        match self.uvarint()? {
            0 => Ok(None),
            n => usize::try_from(n - 1)
                .map(Some)
                .map_err(|_| "length out of range".into()),
        }
    }

    fn nullable_string(&mut self) -> Result<Option<String>, String> {
        match self.compact_len()? {
            None => Ok(None),
            Some(n) => String::from_utf8(self.take(n)?.to_vec())
                .map(Some)
                .map_err(|_| "a string that is not UTF-8".into()),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.nullable_string()?
            .ok_or_else(|| "a null where a string must be".into())
    }

    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        match self.compact_len()? {
            None => Err("null bytes where bytes must be".into()),
            Some(n) => Ok(self.take(n)?.to_vec()),
        }
    }

    fn array_len(&mut self) -> Result<usize, String> {
        self.compact_len()?
            .ok_or_else(|| "a null where an array must be".into())
    }

    fn skip_tagged(&mut self) -> Result<(), String> {
        let n = self.uvarint()?;
        for _ in 0..n {
            self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).map_err(|_| "tag size out of range")?;
            self.take(size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record value as Kafka frames it: frame version 1, type, version 0, then `body`.
    fn framed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![1, kind, 0];
        v.extend_from_slice(body);
        v
    }

    fn compact(s: &str) -> Vec<u8> {
        let mut v = vec![(s.len() + 1) as u8];
        v.extend_from_slice(s.as_bytes());
        v
    }

    #[test]
    fn records_build_the_image_kafka_would_serve() {
        let id = uuid::Uuid::from_u128(7);
        let mut b = Builder::default();
        let mut topic = compact("orders");
        topic.extend_from_slice(id.as_bytes());
        topic.push(0);
        b.apply(&framed(TOPIC as u8, &topic)).unwrap();
        for p in 0..3i32 {
            let mut part = p.to_be_bytes().to_vec();
            part.extend_from_slice(id.as_bytes());
            part.extend_from_slice(&[1, 1, 1, 1, 0xff, 0xff, 0xff, 0xff, 0]);
            b.apply(&framed(PARTITION as u8, &part)).unwrap();
        }
        let mut config = vec![CONFIG_RESOURCE_TOPIC as u8];
        config.extend(compact("orders"));
        config.extend(compact("cleanup.policy"));
        config.extend(compact("compact"));
        config.push(0);
        b.apply(&framed(CONFIG as u8, &config)).unwrap();
        let mut acl = uuid::Uuid::from_u128(9).as_bytes().to_vec();
        acl.push(2);
        acl.extend(compact("orders"));
        acl.push(3);
        acl.extend(compact("User:alice"));
        acl.extend(compact("*"));
        acl.extend_from_slice(&[3, 3, 0]);
        b.apply(&framed(ACCESS_CONTROL_ENTRY as u8, &acl)).unwrap();
        let image = b.finish();
        let t = &image.topics["orders"];
        assert_eq!((t.id, t.partitions), (id, 3));
        assert_eq!(t.configs["cleanup.policy"], "compact");
        assert_eq!(image.acls.len(), 1);
        assert_eq!(image.acls[0].principal, "User:alice");
        assert_eq!(image.acls[0].operation, 3);
    }

    #[test]
    fn a_newer_record_version_is_refused_not_guessed() {
        let mut b = Builder::default();
        let e = b.apply(&[1, TOPIC as u8, 1, 0]).unwrap_err();
        assert!(e.contains("newer than Weir reads"), "{e}");
        assert!(b.apply(&[2, TOPIC as u8, 0]).is_err());
        // A truncated record is an error, not a panic.
        assert!(b.apply(&framed(TOPIC as u8, &[9, b'x'])).is_err());
    }
}
