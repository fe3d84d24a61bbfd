//! Kafka's small state files, written atomically (to `<file>.tmp`, fsync, rename, fsync
//! the directory) and read strictly: offset checkpoints (`topic partition offset` lines),
//! the leader-epoch checkpoint (`epoch start_offset`), `partition.metadata`, and
//! `meta.properties`. A malformed file is an error that names the file and the line.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use weir_kafka::TopicPartition;

/// Writes `contents` to `path` so that a crash leaves either the old file or the new one.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = path.with_file_name(format!(
        "{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("checkpoint")
    ));
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(contents)?;
        crate::durable::sync_all(&f, &tmp)?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        // Makes the rename itself durable.
        crate::durable::sync_dir(dir)?;
    }
    Ok(())
}

fn bad(path: &Path, line: usize, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: line {}: {what}", path.display(), line + 1),
    )
}

/// Reads a checkpoint: version 0, a count, then `count` lines parsed by `entry`. An empty
/// file holds no entry, as Kafka reads it (Kafka itself creates `cleaner-offset-checkpoint`
/// empty), and an entry's fields may be apart by any whitespace, as Kafka splits them.
fn read_checkpoint<T>(path: &Path, mut entry: impl FnMut(&str) -> Option<T>) -> io::Result<Vec<T>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut lines = text.lines();
    match lines.next() {
        Some("0") => {}
        Some(v) => return Err(bad(path, 0, &format!("unsupported version '{v}'"))),
        None => return Ok(Vec::new()),
    }
    let count: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| bad(path, 1, "expected the entry count"))?;
    let mut out = Vec::with_capacity(count.min(1 << 20));
    for i in 0..count {
        let line = lines
            .next()
            .ok_or_else(|| bad(path, i + 2, "missing entry"))?;
        out.push(
            entry(line).ok_or_else(|| bad(path, i + 2, &format!("malformed entry '{line}'")))?,
        );
    }
    Ok(out)
}

/// An offset checkpoint (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
/// `cleaner-offset-checkpoint`): one offset per partition.
pub fn read_offsets(path: &Path) -> io::Result<BTreeMap<TopicPartition, i64>> {
    let entries = read_checkpoint(path, |line| {
        let mut parts = line.split_whitespace();
        let topic = parts.next()?;
        let partition: i32 = parts.next()?.parse().ok()?;
        let offset: i64 = parts.next()?.parse().ok()?;
        if parts.next().is_some() || topic.is_empty() {
            return None;
        }
        Some((TopicPartition::new(topic, partition), offset))
    })?;
    Ok(entries.into_iter().collect())
}

pub fn write_offsets(path: &Path, offsets: &BTreeMap<TopicPartition, i64>) -> io::Result<()> {
    let mut s = format!("0\n{}\n", offsets.len());
    for (tp, off) in offsets {
        s.push_str(&format!("{} {} {}\n", tp.topic, tp.partition, off));
    }
    write_atomically(path, s.as_bytes())
}

/// The leader-epoch checkpoint: (epoch, start offset) pairs.
pub fn read_epochs(path: &Path) -> io::Result<Vec<(i32, i64)>> {
    read_checkpoint(path, |line| {
        let mut parts = line.split_whitespace();
        let epoch: i32 = parts.next()?.parse().ok()?;
        let start: i64 = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some((epoch, start))
    })
}

pub fn write_epochs(path: &Path, epochs: &[(i32, i64)]) -> io::Result<()> {
    let mut s = format!("0\n{}\n", epochs.len());
    for (e, o) in epochs {
        s.push_str(&format!("{e} {o}\n"));
    }
    write_atomically(path, s.as_bytes())
}

/// A Java-style properties file (`meta.properties`): `key=value` lines, `#` comments.
pub fn read_properties(path: &Path) -> io::Result<BTreeMap<String, String>> {
    let text = fs::read_to_string(path)?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| bad(path, i, "expected key=value"))?;
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

pub fn write_properties(path: &Path, props: &BTreeMap<String, String>) -> io::Result<()> {
    let mut s = String::from("#\n#Written by Weir\n");
    for (k, v) in props {
        s.push_str(&format!("{k}={v}\n"));
    }
    write_atomically(path, s.as_bytes())
}

// Kafka's textual topic id is vocabulary every crate shares.
pub use weir_kafka::topic::{uuid_from_base64, uuid_to_base64};

/// `partition.metadata`: the topic id of the partition's topic.
pub fn read_partition_metadata(path: &Path) -> io::Result<Option<uuid::Uuid>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut id = None;
    for (i, line) in text.lines().enumerate() {
        match line.split_once(':') {
            Some(("version", v)) if v.trim() == "0" => {}
            Some(("topic_id", v)) => {
                id = Some(uuid_from_base64(v.trim()).ok_or_else(|| bad(path, i, "bad topic id"))?)
            }
            _ => return Err(bad(path, i, "unexpected line")),
        }
    }
    Ok(id)
}

pub fn write_partition_metadata(path: &Path, topic_id: uuid::Uuid) -> io::Result<()> {
    write_atomically(
        path,
        format!("version: 0\ntopic_id: {}", uuid_to_base64(topic_id)).as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_in_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recovery-point-offset-checkpoint");
        let mut m = BTreeMap::new();
        m.insert(TopicPartition::new("orders", 0), 42);
        m.insert(TopicPartition::new("my-topic-with-dashes", 11), 7);
        write_offsets(&path, &m).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "0\n2\nmy-topic-with-dashes 11 7\norders 0 42\n"
        );
        assert_eq!(read_offsets(&path).unwrap(), m);
        assert!(read_offsets(&dir.path().join("missing"))
            .unwrap()
            .is_empty());
        fs::write(&path, "0\n2\norders 0 42\n").unwrap();
        let err = read_offsets(&path).unwrap_err();
        assert!(err.to_string().contains("line 4"), "{err}");
    }

    /// Every form Kafka's CheckpointFile reads: an empty file (Kafka creates
    /// `cleaner-offset-checkpoint` so), and fields apart by runs of spaces or tabs.
    #[test]
    fn checkpoints_read_as_kafka_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cleaner-offset-checkpoint");
        fs::write(&path, "").unwrap();
        assert!(read_offsets(&path).unwrap().is_empty());
        fs::write(&path, "0\n1\norders  3\t17\n").unwrap();
        assert_eq!(
            read_offsets(&path).unwrap(),
            BTreeMap::from([(TopicPartition::new("orders", 3), 17)])
        );
        let epochs = dir.path().join("leader-epoch-checkpoint");
        fs::write(&epochs, "").unwrap();
        assert!(read_epochs(&epochs).unwrap().is_empty());
        fs::write(&path, "1\n0\n").unwrap();
        let err = read_offsets(&path).unwrap_err();
        assert!(err.to_string().contains("unsupported version '1'"), "{err}");
    }

    #[test]
    fn topic_ids_use_kafkas_base64() {
        // Kafka's Uuid.toString for the all-ones-in-each-byte pattern.
        let id = uuid::Uuid::from_bytes([0xff; 16]);
        assert_eq!(uuid_to_base64(id), "_____________________w");
        for _ in 0..100 {
            let id = uuid::Uuid::new_v4();
            let s = uuid_to_base64(id);
            assert_eq!(s.len(), 22);
            assert_eq!(uuid_from_base64(&s), Some(id));
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("partition.metadata");
        let id = uuid::Uuid::new_v4();
        write_partition_metadata(&p, id).unwrap();
        assert_eq!(read_partition_metadata(&p).unwrap(), Some(id));
    }
}
