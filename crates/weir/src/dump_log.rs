//! `weir dump-log`: Weir's kafka-dump-log. Reads `.log`, `.index`, `.timeindex` and
//! `.txnindex` files
//! (Kafka's or Weir's) and prints one JSON object per batch, record or index entry. It
//! reads a segment as a stream of entries, so a damaged file is shown up to the damage:
//! a bad CRC is reported and reading goes on; a torn tail or a nonsensical length ends the
//! file with a line saying so. The exit status is non-zero only when a file cannot be read.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Map, Value};
use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;
use weir_kafka::topic::{TopicPartition, TRANSACTION_STATE_TOPIC};
use weir_log::checkpoint;
use weir_record::{ControlRecordType, EndTransactionMarker, EntryRecords, LogEntry, TimestampType};

use crate::json;

#[derive(clap::Args)]
pub struct Args {
    /// Also print every record, after the line of its batch.
    #[arg(long)]
    records: bool,
    /// `json` (JSON Lines, the default) or `text` (one `key: value` line per item).
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
    /// Largest size one compressed batch may inflate to.
    #[arg(long, default_value_t = MAX_DECOMPRESSED_BATCH_BYTES)]
    max_decompressed_bytes: usize,
    /// Decode records as `__transaction_state`'s (TransactionLogKey/Value), as Kafka's
    /// `--transaction-log-decoder` does; on by itself for files in a
    /// `__transaction_state-N` directory.
    #[arg(long)]
    transaction_log_decoder: bool,
    /// Segment files (`.log`), offset indexes (`.index`), time indexes (`.timeindex`),
    /// aborted-transaction indexes (`.txnindex`), offset and leader-epoch checkpoints, producer `.snapshot`s, `partition.metadata`,
    /// `meta.properties`; a
    /// file with any other name is read as log entries.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Json,
    Text,
}

pub fn run(args: Args) -> ExitCode {
    let stdout = io::stdout();
    let mut out = Printer {
        w: BufWriter::with_capacity(1 << 16, stdout.lock()),
        format: args.format,
    };
    let mut failed = false;
    for path in &args.files {
        let result = dump_file(path, &args, &mut out).and_then(|()| out.w.flush());
        match result {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return ExitCode::SUCCESS,
            Err(e) => {
                let _ = out.w.flush();
                eprintln!("weir dump-log: {}: {e}", path.display());
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

struct Printer<W: Write> {
    w: W,
    format: Format,
}

impl<W: Write> Printer<W> {
    fn emit(&mut self, v: Value) -> io::Result<()> {
        match self.format {
            Format::Json => {
                serde_json::to_writer(&mut self.w, &v)?;
            }
            Format::Text => {
                let Value::Object(map) = v else {
                    unreachable!("items are objects")
                };
                let mut first = true;
                for (k, v) in map {
                    if k == "kind" {
                        let kind = v.as_str().unwrap_or_default();
                        write!(self.w, "{}", if kind == "record" { "| " } else { "" })?;
                        continue;
                    }
                    if !first {
                        write!(self.w, " ")?;
                    }
                    first = false;
                    match v {
                        Value::String(s) if is_plain(&s) => write!(self.w, "{k}: {s}")?,
                        other => write!(self.w, "{k}: {other}")?,
                    }
                }
            }
        }
        self.w.write_all(b"\n")
    }
}

/// A string that reads unambiguously without quotes in the text format.
fn is_plain(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_alphanumeric() || "-_.:/()".contains(c))
}

/// What a file is, from its name; temporary suffixes (`.deleted`, `.cleaned`, `.swap`)
/// are looked through. Any other name is read as a file of log entries.
fn file_kind(path: &Path) -> (&'static str, &str) {
    let Some(mut name) = path.file_name().and_then(|n| n.to_str()) else {
        return ("log", "");
    };
    for suffix in [".deleted", ".cleaned", ".swap"] {
        name = name.strip_suffix(suffix).unwrap_or(name);
    }
    for (ext, kind) in [
        (".index", "index"),
        (".timeindex", "timeindex"),
        (".txnindex", "txnindex"),
    ] {
        if let Some(stem) = name.strip_suffix(ext) {
            return (kind, stem);
        }
    }
    match name {
        "recovery-point-offset-checkpoint"
        | "log-start-offset-checkpoint"
        | "cleaner-offset-checkpoint"
        | "replication-offset-checkpoint" => ("offset-checkpoint", name),
        "leader-epoch-checkpoint" => ("epoch-checkpoint", name),
        "partition.metadata" => ("partition-metadata", name),
        n if n.ends_with(".snapshot") => ("producer-snapshot", n),
        "meta.properties" => ("properties", name),
        _ => ("log", name),
    }
}

fn dump_file<W: Write>(path: &Path, args: &Args, out: &mut Printer<W>) -> io::Result<()> {
    let (kind, stem) = file_kind(path);
    let invalid = |e: io::Error| io::Error::new(io::ErrorKind::InvalidData, e);
    match kind {
        "log" => dump_segment(path, args, out),
        "offset-checkpoint" => {
            for (tp, offset) in checkpoint::read_offsets(path).map_err(invalid)? {
                out.emit(json!({"kind": "checkpoint", "topic": &*tp.topic, "partition": tp.partition, "offset": offset}))?;
            }
            Ok(())
        }
        "epoch-checkpoint" => {
            for (epoch, start) in checkpoint::read_epochs(path).map_err(invalid)? {
                out.emit(json!({"kind": "leader_epoch", "epoch": epoch, "start_offset": start}))?;
            }
            Ok(())
        }
        "producer-snapshot" => {
            for e in weir_log::producer_state::read_snapshot(path)? {
                let last = e.batches.back();
                out.emit(json!({
                    "kind": "producer_snapshot",
                    "producer_id": e.producer_id,
                    "producer_epoch": e.producer_epoch,
                    "last_sequence": last.map_or(-1, |b| b.last_seq),
                    "last_offset": last.map_or(-1, |b| b.last_offset),
                    "offset_delta": last.map_or(0, |b| b.offset_delta),
                    "timestamp": e.last_timestamp,
                    "coordinator_epoch": e.coordinator_epoch,
                    "current_txn_first_offset": e.current_txn_first_offset,
                }))?;
            }
            Ok(())
        }
        "partition-metadata" => {
            let id = checkpoint::read_partition_metadata(path).map_err(invalid)?;
            out.emit(json!({"kind": "partition_metadata", "topic_id": id.map(checkpoint::uuid_to_base64)}))
        }
        "txnindex" => dump_txn_index(path, out),
        "properties" => {
            for (k, v) in checkpoint::read_properties(path)? {
                out.emit(json!({"kind": "property", "key": k, "value": v}))?;
            }
            Ok(())
        }
        _ => {
            let base: i64 = stem.parse().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an index file's name must be its segment's base offset",
                )
            })?;
            dump_index(path, kind, base, out)
        }
    }
}

fn dump_index<W: Write>(
    path: &Path,
    kind: &str,
    base: i64,
    out: &mut Printer<W>,
) -> io::Result<()> {
    let bytes = std::fs::read(path)?;
    let entry_size = if kind == "index" { 8 } else { 12 };
    let chunks = bytes.chunks_exact(entry_size);
    let trailing = chunks.remainder().len();
    for e in chunks {
        // Index files are preallocated with zeros; an all-zero entry is the unused tail
        // (Kafka never indexes a segment's first batch, so (0, 0) is never a real entry).
        if e.iter().all(|&b| b == 0) {
            break;
        }
        let v = if kind == "index" {
            let rel = i32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let pos = i32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            json!({"kind": "index", "offset": base + rel as i64, "position": pos})
        } else {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&e[..8]);
            let rel = i32::from_be_bytes([e[8], e[9], e[10], e[11]]);
            json!({"kind": "timeindex", "timestamp": i64::from_be_bytes(ts), "offset": base + rel as i64})
        };
        out.emit(v)?;
    }
    if trailing != 0 {
        out.emit(json!({
            "kind": "corrupt",
            "position": bytes.len() - trailing,
            "bytes": trailing,
            "error": format!("file length is not a multiple of the {entry_size}-byte entry size"),
        }))?;
    }
    Ok(())
}

/// Kafka's aborted-transaction index: 34-byte entries, appended in marker order.
fn dump_txn_index<W: Write>(path: &Path, out: &mut Printer<W>) -> io::Result<()> {
    use weir_log::txn_index::{AbortedTxn, ENTRY_SIZE};
    let bytes = std::fs::read(path)?;
    let chunks = bytes.chunks_exact(ENTRY_SIZE);
    let trailing = chunks.remainder().len();
    for (i, e) in chunks.enumerate() {
        let entry: &[u8; ENTRY_SIZE] = e.try_into().expect("chunks of ENTRY_SIZE");
        match AbortedTxn::decode(entry) {
            Ok(t) => out.emit(json!({
                "kind": "aborted_txn",
                "producer_id": t.producer_id,
                "first_offset": t.first_offset,
                "last_offset": t.last_offset,
                "last_stable_offset": t.last_stable_offset,
            }))?,
            Err(err) => out.emit(json!({
                "kind": "corrupt",
                "position": i * ENTRY_SIZE,
                "bytes": ENTRY_SIZE,
                "error": err.to_string(),
            }))?,
        }
    }
    if trailing != 0 {
        out.emit(json!({
            "kind": "corrupt",
            "position": bytes.len() - trailing,
            "bytes": trailing,
            "error": format!("file length is not a multiple of the {ENTRY_SIZE}-byte entry size"),
        }))?;
    }
    Ok(())
}

/// The smallest value of the length field for each magic.
fn min_length(magic: i8) -> Option<i32> {
    match magic {
        0 => Some(14),
        1 => Some(22),
        2 => Some(49),
        _ => None,
    }
}

/// Whether `segment` is in a partition directory of `__transaction_state`
/// (`__transaction_state-<digits>`), whose records are decoded without being asked.
fn in_transaction_state_dir(segment: &Path) -> bool {
    segment
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().and_then(|d| d.file_name()).map(|n| n.to_owned()))
        .and_then(|n| TopicPartition::parse_dir_name(&n.to_string_lossy()))
        .is_some_and(|tp| &*tp.topic == TRANSACTION_STATE_TOPIC)
}

fn dump_segment<W: Write>(path: &Path, args: &Args, out: &mut Printer<W>) -> io::Result<()> {
    let txn_log = args.transaction_log_decoder || in_transaction_state_dir(path);
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut pos: u64 = 0;
    let mut buf: Vec<u8> = Vec::new();
    while pos < len {
        let remaining = len - pos;
        let end = |kind: &str, error: String| json!({"kind": kind, "position": pos, "bytes": remaining, "error": error});
        if remaining < 17 {
            out.emit(end(
                "torn_tail",
                "the file ends inside an entry header".into(),
            ))?;
            break;
        }
        buf.resize(17, 0);
        if !read_or_eof(&mut reader, &mut buf)? {
            out.emit(end(
                "torn_tail",
                "the file ends inside an entry header".into(),
            ))?;
            break;
        }
        let length = i32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]);
        let magic = buf[16] as i8;
        // An unknown magic (a damaged byte) still has a length to skip by, if it is sane.
        let min = min_length(magic).unwrap_or(14);
        if length < min {
            out.emit(end(
                "corrupt",
                format!("length {length} is below the minimum {min} for magic {magic}"),
            ))?;
            break;
        }
        let size = 12 + length as u64;
        if size > remaining {
            out.emit(end(
                "torn_tail",
                format!("the entry declares {size} bytes but only {remaining} remain"),
            ))?;
            break;
        }
        buf.resize(size as usize, 0);
        if !read_or_eof(&mut reader, &mut buf[17..])? {
            out.emit(end("torn_tail", "the file ended while being read".into()))?;
            break;
        }
        match LogEntry::parse(&buf) {
            Ok(entry) => dump_entry(pos, entry, args, txn_log, out)?,
            Err(e) => out.emit(json!({
                "kind": "batch",
                "position": pos,
                "last_offset": i64::from_be_bytes(buf[..8].try_into().unwrap_or_default()),
                "magic": magic,
                "crc_valid": raw_crc_valid(&buf),
                "size": size,
                "error": e.to_string(),
            }))?,
        }
        pos += size;
    }
    Ok(())
}

/// The CRC check of an entry whose fields could not be parsed, by its magic's rule
/// (CRC-32 from the magic on for v0/v1, CRC-32C from the attributes on for v2).
fn raw_crc_valid(entry: &[u8]) -> bool {
    let stored_at =
        |at: usize| u32::from_be_bytes([entry[at], entry[at + 1], entry[at + 2], entry[at + 3]]);
    match entry[16] {
        0 | 1 => stored_at(12) == weir_record::crc::crc32(&entry[16..]),
        2 if entry.len() >= 21 => stored_at(17) == weir_record::crc::crc32c(&entry[21..]),
        _ => false,
    }
}

/// Fills `buf`; false if the reader ended first.
fn read_or_eof(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    match r.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

fn compression_name(entry: &LogEntry<'_>) -> String {
    match entry.compression() {
        Ok(c) => c.name().to_string(),
        Err(e) => format!("invalid ({e})"),
    }
}

fn dump_entry<W: Write>(
    pos: u64,
    entry: LogEntry<'_>,
    args: &Args,
    txn_log: bool,
    out: &mut Printer<W>,
) -> io::Result<()> {
    let limit = args.max_decompressed_bytes;
    let mut line = Map::new();
    line.insert("kind".into(), "batch".into());
    line.insert("position".into(), pos.into());
    let records = entry.records(limit);
    match &entry {
        LogEntry::V2(b) => {
            line.insert("base_offset".into(), b.base_offset().into());
            line.insert("last_offset".into(), b.last_offset().into());
            line.insert("count".into(), b.records_count().into());
        }
        LogEntry::Legacy(m) => {
            // A legacy entry's base offset and count are only known by reading its records.
            let (first, count) = match &records {
                Ok(EntryRecords::Legacy(r)) => (r.iter().next().map(|r| r.offset), Some(r.len())),
                _ => (None, None),
            };
            line.insert("base_offset".into(), first.unwrap_or(m.offset()).into());
            line.insert("last_offset".into(), m.offset().into());
            line.insert("count".into(), count.map_or(Value::Null, Value::from));
        }
    }
    line.insert("magic".into(), entry.magic().into());
    line.insert("compression".into(), compression_name(&entry).into());
    line.insert("crc_valid".into(), entry.is_crc_valid().into());
    line.insert("size".into(), entry.size_in_bytes().into());
    let (is_control, tt) = match &entry {
        LogEntry::V2(b) => {
            line.insert("base_timestamp".into(), b.base_timestamp().into());
            line.insert("max_timestamp".into(), b.max_timestamp().into());
            line.insert("producer_id".into(), b.producer_id().into());
            line.insert("producer_epoch".into(), b.producer_epoch().into());
            line.insert("base_sequence".into(), b.base_sequence().into());
            line.insert("transactional".into(), b.is_transactional().into());
            line.insert("control".into(), b.is_control().into());
            line.insert(
                "partition_leader_epoch".into(),
                b.partition_leader_epoch().into(),
            );
            if let Some(h) = b.delete_horizon_ms() {
                line.insert("delete_horizon_ms".into(), h.into());
            }
            (b.is_control(), Some(b.timestamp_type()))
        }
        LogEntry::Legacy(m) => {
            let first_ts = match &records {
                Ok(EntryRecords::Legacy(r)) => r.iter().next().map(|r| r.timestamp),
                _ => None,
            };
            line.insert(
                "base_timestamp".into(),
                first_ts.unwrap_or(m.timestamp()).into(),
            );
            line.insert("max_timestamp".into(), m.timestamp().into());
            line.insert("producer_id".into(), (-1).into());
            line.insert("producer_epoch".into(), (-1).into());
            line.insert("base_sequence".into(), (-1).into());
            line.insert("transactional".into(), false.into());
            line.insert("control".into(), false.into());
            (false, (m.magic() > 0).then(|| m.timestamp_type()))
        }
    };
    if let Some(tt) = tt {
        line.insert("timestamp_type".into(), tt.name().into());
    }
    out.emit(Value::Object(line))?;
    if !args.records {
        return Ok(());
    }
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            return out
                .emit(json!({"kind": "error", "position": pos, "error": format!("records: {e}")}));
        }
    };
    for r in records.iter() {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                return out.emit(
                    json!({"kind": "error", "position": pos, "error": format!("records: {e}")}),
                );
            }
        };
        let mut rec = Map::new();
        rec.insert("kind".into(), "record".into());
        rec.insert("offset".into(), r.offset.into());
        rec.insert("timestamp".into(), r.timestamp.into());
        if tt == Some(TimestampType::LogAppendTime) {
            rec.insert("timestamp_type".into(), tt.map(|t| t.name()).into());
        }
        rec.insert("key".into(), json::bytes(r.key));
        rec.insert("value".into(), json::bytes(r.value));
        rec.insert("headers".into(), json::headers(r.headers));
        if txn_log && !is_control {
            rec.insert("transaction_log".into(), transaction_log(r.key, r.value));
        }
        if is_control {
            match ControlRecordType::parse_key(r.key) {
                Ok(t) => {
                    rec.insert("control_type".into(), t.name().into());
                    if let Ok(m) = EndTransactionMarker::parse(r.key, r.value) {
                        rec.insert("coordinator_epoch".into(), m.coordinator_epoch.into());
                    }
                }
                Err(e) => {
                    rec.insert("control_type".into(), format!("invalid ({e})").into());
                }
            }
        }
        out.emit(Value::Object(rec))?;
    }
    Ok(())
}

/// A `__transaction_state` record as its fields: the transactional id and what the
/// coordinator knew of it (null for a tombstone), or an error that says why not.
fn transaction_log(key: Option<&[u8]>, value: Option<&[u8]>) -> Value {
    let id = match key.map(weir_txn::records::decode_key) {
        Some(Ok(id)) => id,
        Some(Err(e)) => return json!({"error": format!("key: {e}")}),
        None => return json!({"error": "key: null"}),
    };
    let Some(value) = value else {
        return json!({"transactional_id": id, "value": Value::Null});
    };
    match weir_txn::records::decode_value(value) {
        Ok(v) => json!({
            "transactional_id": id,
            "producer_id": v.producer_id,
            "producer_epoch": v.producer_epoch,
            "transaction_timeout_ms": v.transaction_timeout_ms,
            "state": v.state.name(),
            "partitions": v.partitions.map(|topics| topics
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| format!("{t}-{p}")))
                .collect::<Vec<_>>()),
            "last_update_timestamp_ms": v.last_update_timestamp_ms,
            "start_timestamp_ms": v.start_timestamp_ms,
        }),
        Err(e) => json!({"transactional_id": id, "error": format!("value: {e}")}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transaction_state_partition_directories_turn_the_decoder_on() {
        let dir = tempfile::tempdir().unwrap();
        for (name, decoded) in [
            ("__transaction_state-7", true),
            ("__transaction_state-x", false),
            ("__transaction_state-", false),
            ("__transaction_state-backup-1", false),
            ("__transaction_states-1", false),
            ("orders-0", false),
        ] {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            let segment = d.join("00000000000000000000.log");
            std::fs::write(&segment, b"").unwrap();
            assert_eq!(in_transaction_state_dir(&segment), decoded, "{name}");
        }
    }

    #[test]
    fn transaction_log_records_are_shown_by_their_fields() {
        // TransactionLogKey v0 "eos": i16 version, i16 length, bytes.
        let key = [0, 0, 0, 3, b'e', b'o', b's'];
        // TransactionLogValue v0: producer 7, epoch 2, timeout 30000, PrepareCommit (2),
        // one topic "t" with partitions [0, 3], update 100, start 90.
        let mut value = vec![0, 0];
        value.extend_from_slice(&7i64.to_be_bytes());
        value.extend_from_slice(&2i16.to_be_bytes());
        value.extend_from_slice(&30000i32.to_be_bytes());
        value.push(2);
        value.extend_from_slice(&1i32.to_be_bytes());
        value.extend_from_slice(&[0, 1, b't']);
        value.extend_from_slice(&2i32.to_be_bytes());
        value.extend_from_slice(&0i32.to_be_bytes());
        value.extend_from_slice(&3i32.to_be_bytes());
        value.extend_from_slice(&100i64.to_be_bytes());
        value.extend_from_slice(&90i64.to_be_bytes());
        assert_eq!(
            transaction_log(Some(&key), Some(&value)),
            json!({"transactional_id": "eos", "producer_id": 7, "producer_epoch": 2,
                   "transaction_timeout_ms": 30000, "state": "PrepareCommit",
                   "partitions": ["t-0", "t-3"], "last_update_timestamp_ms": 100,
                   "start_timestamp_ms": 90})
        );
        assert_eq!(
            transaction_log(Some(&key), None),
            json!({"transactional_id": "eos", "value": null})
        );
        let cut = transaction_log(Some(&key), Some(&value[..12]));
        assert_eq!(cut["transactional_id"], "eos");
        assert!(
            cut["error"].as_str().unwrap().starts_with("value: "),
            "{cut}"
        );
        assert!(transaction_log(Some(&[0, 9]), None)["error"]
            .as_str()
            .unwrap()
            .starts_with("key: "));
    }
}
