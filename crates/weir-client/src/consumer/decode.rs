//! Turning one partition's fetched bytes into `ConsumerRecord`s, as Kafka's `CompletedFetch`
//! does: entries of any magic (v0/v1 message sets and v2 batches, every codec), records
//! below the fetch offset skipped (a batch may start before it), control batches and, under
//! read_committed, aborted transactions dropped, CRCs checked when `check.crcs` is on, and a
//! trailing batch cut short by the response's size limit left for the next fetch. Keys and
//! values of uncompressed batches are slices of the response buffer (no copy).
//! Pure: no I/O, no state beyond one call.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use weir_record::{ControlRecordType, LogEntries, LogEntry, Record};

use super::record::{ConsumerRecord, TimestampType};
use crate::error::{ClientError, Result};

/// How to read fetched data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecodeOptions {
    pub check_crcs: bool,
    pub read_committed: bool,
    /// Bound on one batch's decompressed size.
    pub max_decompressed: usize,
}

/// One partition's fetched data, read.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub records: Vec<ConsumerRecord>,
    /// Where the next fetch starts: after the last whole entry read, never below the fetch
    /// offset. Advances past control batches, aborted batches and empty (compacted) batches
    /// too, so the consumer never asks for the same bytes twice.
    pub next_offset: i64,
    /// Entries read whole (0 with non-empty data means the first entry was cut short).
    pub entries: usize,
    /// An error met after `records` (a bad CRC, a malformed batch): raised once the records
    /// before it have been handed out.
    pub error: Option<ClientError>,
    /// Bytes of record data handed out (keys, values, headers), for buffer accounting.
    pub bytes: usize,
}

/// An aborted transaction from the fetch response: (producer id, first offset).
pub(crate) type AbortedTxn = (i64, i64);

fn corrupt(topic: &str, partition: i32, offset: i64, what: impl std::fmt::Display) -> ClientError {
    ClientError::kafka(
        2, // CORRUPT_MESSAGE
        Some(format!(
            "the batch of {topic}-{partition} at offset {offset} is invalid ({what}); seek past \
             it to continue consuming"
        )),
    )
}

/// A `Bytes` for `s`, which points into `region`; `owner` holds the same bytes as `region`.
/// Slices share `owner`'s memory; anything else is copied.
fn share(owner: &Bytes, region: &[u8], s: &[u8]) -> Bytes {
    if s.is_empty() {
        return Bytes::new();
    }
    let base = region.as_ptr() as usize;
    let at = s.as_ptr() as usize;
    if owner.len() == region.len() && at >= base && at + s.len() <= base + region.len() {
        let start = at - base;
        owner.slice(start..start + s.len())
    } else {
        Bytes::copy_from_slice(s)
    }
}

struct Sink<'a> {
    topic: &'a Arc<str>,
    partition: i32,
    fetch_offset: i64,
    out: &'a mut Decoded,
}

impl Sink<'_> {
    fn push(
        &mut self,
        owner: &Bytes,
        region: &[u8],
        r: &Record<'_>,
        timestamp_type: TimestampType,
        leader_epoch: Option<i32>,
    ) {
        if r.offset < self.fetch_offset {
            return;
        }
        let key = r.key.map(|k| share(owner, region, k));
        let value = r.value.map(|v| share(owner, region, v));
        let mut size = key.as_ref().map_or(0, Bytes::len) + value.as_ref().map_or(0, Bytes::len);
        let headers: Vec<(String, Option<Bytes>)> = r
            .headers
            .iter()
            .map(|h| {
                size += h.key.len() + h.value.map_or(0, <[u8]>::len);
                (
                    String::from_utf8_lossy(h.key).into_owned(),
                    h.value.map(|v| share(owner, region, v)),
                )
            })
            .collect();
        self.out.bytes += size;
        self.out.records.push(ConsumerRecord {
            topic: self.topic.clone(),
            partition: self.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            timestamp_type,
            key,
            value,
            headers,
            leader_epoch,
        });
    }
}

/// Reads `data`, fetched from `fetch_offset`. `aborted` is the response's aborted
/// transactions list (read_committed only).
pub(crate) fn decode(
    topic: &Arc<str>,
    partition: i32,
    data: &Bytes,
    fetch_offset: i64,
    aborted: &[AbortedTxn],
    opts: &DecodeOptions,
) -> Decoded {
    let mut out = Decoded {
        next_offset: fetch_offset,
        ..Default::default()
    };
    let mut aborted: Vec<AbortedTxn> = aborted.to_vec();
    aborted.sort_by_key(|a| std::cmp::Reverse(a.1));
    let mut aborted_producers: HashSet<i64> = HashSet::new();
    let mut sink = Sink {
        topic,
        partition,
        fetch_offset,
        out: &mut out,
    };
    for entry in LogEntries::new(data) {
        let entry = match entry {
            Ok((_, e)) => e,
            // The response ends inside an entry: the broker cut it at its size limit.
            Err(e) if e.is_torn_tail() => break,
            Err(e) => {
                let at = sink.out.next_offset;
                sink.out.error = Some(corrupt(topic, partition, at, e.error));
                break;
            }
        };
        let last = entry.last_offset();
        if let Err(e) = read_entry(
            &mut sink,
            data,
            &entry,
            opts,
            &mut aborted,
            &mut aborted_producers,
        ) {
            sink.out.error = Some(e);
            break;
        }
        sink.out.entries += 1;
        sink.out.next_offset = sink.out.next_offset.max(last.saturating_add(1));
    }
    // After an error inside a batch, the records before it were kept: the next fetch starts
    // after them, at the bad record.
    if let Some(last) = out.records.last() {
        out.next_offset = out.next_offset.max(last.offset.saturating_add(1));
    }
    out
}

fn read_entry(
    sink: &mut Sink<'_>,
    data: &Bytes,
    entry: &LogEntry<'_>,
    opts: &DecodeOptions,
    aborted: &mut Vec<AbortedTxn>,
    aborted_producers: &mut HashSet<i64>,
) -> Result<()> {
    let (topic, partition) = (sink.topic.as_ref(), sink.partition);
    if entry.last_offset() < sink.fetch_offset {
        // Wholly before the fetch offset (the broker starts at the batch holding it).
        return Ok(());
    }
    match entry {
        LogEntry::V2(batch) => {
            let base = batch.base_offset();
            if opts.check_crcs {
                batch
                    .validate_crc()
                    .map_err(|e| corrupt(topic, partition, base, e))?;
            }
            if opts.read_committed && batch.has_producer_id() {
                // Transactions that began at or before this batch's end are now known.
                while aborted.last().is_some_and(|a| a.1 <= batch.last_offset()) {
                    if let Some((pid, _)) = aborted.pop() {
                        aborted_producers.insert(pid);
                    }
                }
                let pid = batch.producer_id();
                if batch.is_control() {
                    if is_abort_marker(batch, opts) {
                        aborted_producers.remove(&pid);
                    }
                } else if batch.is_transactional() && aborted_producers.contains(&pid) {
                    return Ok(());
                }
            }
            if batch.is_control() {
                return Ok(());
            }
            let records = batch
                .records(opts.max_decompressed)
                .map_err(|e| corrupt(topic, partition, base, e))?;
            let timestamp_type = batch.timestamp_type();
            let epoch = batch.partition_leader_epoch();
            let leader_epoch = (epoch >= 0).then_some(epoch);
            let region = records.bytes();
            // Uncompressed records point into the response; decompressed ones into the
            // batch's own buffer, copied once into shared memory.
            let owner = if batch.compression().ok() == Some(weir_record::Compression::None) {
                None
            } else {
                Some(Bytes::copy_from_slice(region))
            };
            for r in records.iter() {
                let r = r.map_err(|e| corrupt(topic, partition, base, e))?;
                match &owner {
                    Some(owned) => sink.push(owned, region, &r, timestamp_type, leader_epoch),
                    None => sink.push(data, data, &r, timestamp_type, leader_epoch),
                }
            }
        }
        LogEntry::Legacy(message) => {
            let at = message.offset();
            if opts.check_crcs {
                message
                    .validate_crc()
                    .map_err(|e| corrupt(topic, partition, at, e))?;
            }
            let timestamp_type = message.timestamp_type();
            let records = message
                .records(opts.max_decompressed)
                .map_err(|e| corrupt(topic, partition, at, e))?;
            for r in records.iter() {
                // Uncompressed messages point into the response; inner messages of a
                // compressed wrapper are copied.
                sink.push(data, data, &r, timestamp_type, None);
            }
        }
    }
    Ok(())
}

/// Whether a control batch holds an ABORT marker (its first record's key says so).
fn is_abort_marker(batch: &weir_record::RecordBatch<'_>, opts: &DecodeOptions) -> bool {
    let Ok(records) = batch.records(opts.max_decompressed) else {
        return false;
    };
    let first = records.iter().next();
    matches!(first, Some(Ok(r)) if matches!(
        ControlRecordType::parse_key(r.key),
        Ok(ControlRecordType::Abort)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_record::{BatchBuilder, Compression, EndTransactionMarker, Header};

    const OPTS: DecodeOptions = DecodeOptions {
        check_crcs: true,
        read_committed: false,
        max_decompressed: 1 << 20,
    };

    fn batch(codec: Compression, base: i64, n: i64) -> Vec<u8> {
        let mut b = BatchBuilder::new(codec, base, 1 << 20);
        for i in base..base + n {
            let v = format!("v{i}");
            b.append(
                1000 + i,
                Some(b"k"),
                Some(v.as_bytes()),
                &[Header::new("h", Some(b"x"))],
            )
            .unwrap();
        }
        b.build().unwrap().bytes
    }

    fn offsets(d: &Decoded) -> Vec<i64> {
        d.records.iter().map(|r| r.offset).collect()
    }

    fn topic() -> Arc<str> {
        Arc::from("t")
    }

    #[test]
    fn every_codec_skips_below_the_fetch_offset_and_shares_uncompressed_memory() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut data = batch(codec, 0, 5);
            data.extend(batch(codec, 5, 5));
            let data = Bytes::from(data);
            let d = decode(&topic(), 0, &data, 3, &[], &OPTS);
            assert_eq!(offsets(&d), (3..10).collect::<Vec<_>>(), "{codec:?}");
            assert_eq!(d.next_offset, 10);
            assert!(d.error.is_none());
            let r = &d.records[0];
            assert_eq!(r.value.as_deref(), Some(&b"v3"[..]));
            assert_eq!(r.timestamp, 1003);
            assert_eq!(r.timestamp_type, TimestampType::CreateTime);
            assert_eq!(r.headers, vec![("h".to_string(), Some(Bytes::from("x")))]);
            if codec == Compression::None {
                let v = r.value.as_ref().unwrap();
                let range = data.as_ptr() as usize..data.as_ptr() as usize + data.len();
                assert!(range.contains(&(v.as_ptr() as usize)), "no copy");
            }
        }
    }

    #[test]
    fn a_trailing_partial_batch_waits_for_the_next_fetch() {
        let mut data = batch(Compression::None, 0, 3);
        let second = batch(Compression::None, 3, 3);
        data.extend_from_slice(&second[..second.len() - 5]);
        let d = decode(&topic(), 0, &Bytes::from(data), 0, &[], &OPTS);
        assert_eq!(offsets(&d), vec![0, 1, 2]);
        assert_eq!(d.next_offset, 3);
        assert_eq!(d.entries, 1);
        assert!(d.error.is_none());
        // Only a partial batch: nothing, no error (the caller decides).
        let d = decode(
            &topic(),
            0,
            &Bytes::from(second[..20].to_vec()),
            3,
            &[],
            &OPTS,
        );
        assert!(d.records.is_empty() && d.entries == 0 && d.error.is_none());
    }

    #[test]
    fn a_bad_crc_is_an_error_after_the_good_records() {
        let mut data = batch(Compression::None, 0, 2);
        let mut bad = batch(Compression::None, 2, 2);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        data.extend(bad);
        let data = Bytes::from(data);
        let d = decode(&topic(), 0, &data, 0, &[], &OPTS);
        assert_eq!(offsets(&d), vec![0, 1]);
        assert_eq!(d.next_offset, 2);
        let e = d.error.unwrap();
        assert_eq!(e.code(), Some(2));
        assert!(e.to_string().contains("t-0 at offset 2"), "{e}");
        let lax = DecodeOptions {
            check_crcs: false,
            ..OPTS
        };
        assert_eq!(decode(&topic(), 0, &data, 0, &[], &lax).records.len(), 4);
    }

    #[test]
    fn control_batches_and_aborted_transactions_are_skipped() {
        let txn = |base: i64, pid: i64, v: &str| {
            let mut b = BatchBuilder::new(Compression::None, base, 1 << 20)
                .producer(pid, 0, 0)
                .transactional(true);
            b.append(1, None, Some(v.as_bytes()), &[]).unwrap();
            b.build().unwrap().bytes
        };
        let marker = |base: i64, pid: i64, kind: ControlRecordType| {
            let mut b = BatchBuilder::new(Compression::None, base, 1 << 20)
                .producer(pid, 0, -1)
                .transactional(true)
                .control(true);
            b.append_end_txn_marker(
                1,
                EndTransactionMarker {
                    kind,
                    coordinator_epoch: 0,
                },
            )
            .unwrap();
            b.build().unwrap().bytes
        };
        let mut data = Vec::new();
        data.extend(txn(0, 7, "aborted"));
        data.extend(txn(1, 8, "committed"));
        data.extend(marker(2, 7, ControlRecordType::Abort));
        data.extend(marker(3, 8, ControlRecordType::Commit));
        data.extend(txn(4, 7, "later"));
        let data = Bytes::from(data);
        let committed = DecodeOptions {
            read_committed: true,
            ..OPTS
        };
        let d = decode(&topic(), 0, &data, 0, &[(7, 0)], &committed);
        let values: Vec<_> = d.records.iter().map(|r| r.value.clone().unwrap()).collect();
        assert_eq!(values, vec![Bytes::from("committed"), Bytes::from("later")]);
        assert_eq!(d.next_offset, 5);
        // read_uncommitted sees every data record, never the markers.
        let d = decode(&topic(), 0, &data, 0, &[], &OPTS);
        assert_eq!(offsets(&d), vec![0, 1, 4]);
        // Only markers: nothing to return, but the position moves past them.
        let only = Bytes::from(marker(9, 8, ControlRecordType::Commit));
        let d = decode(&topic(), 0, &only, 9, &[], &OPTS);
        assert!(d.records.is_empty());
        assert_eq!(d.next_offset, 10);
    }

    /// A legacy entry: offset, size, crc (CRC-32 of the rest), magic, attributes,
    /// [timestamp], key, value.
    fn legacy(
        offset: i64,
        magic: i8,
        attributes: i8,
        ts: i64,
        key: &[u8],
        value: &[u8],
    ) -> Vec<u8> {
        let mut body = vec![magic as u8, attributes as u8];
        if magic == 1 {
            body.extend_from_slice(&ts.to_be_bytes());
        }
        body.extend_from_slice(&(key.len() as i32).to_be_bytes());
        body.extend_from_slice(key);
        body.extend_from_slice(&(value.len() as i32).to_be_bytes());
        body.extend_from_slice(value);
        let crc = weir_record::crc::crc32(&body);
        let mut out = offset.to_be_bytes().to_vec();
        out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        out.extend_from_slice(&crc.to_be_bytes());
        out.extend(body);
        out
    }

    #[test]
    fn legacy_message_sets_plain_and_compressed() {
        let mut data = legacy(0, 0, 0, 0, b"a", b"v0");
        data.extend(legacy(1, 1, 0, 55, b"b", b"v1"));
        // A gzip v1 wrapper of two inner messages (relative offsets 0 and 1) ending at 3.
        let mut inner = legacy(0, 1, 0, 60, b"c", b"v2");
        inner.extend(legacy(1, 1, 0, 61, b"d", b"v3"));
        let mut compressed = Vec::new();
        weir_record::compression::compress(Compression::Gzip.into(), &inner, &mut compressed)
            .unwrap();
        data.extend(legacy(3, 1, 1, 61, b"", &compressed));
        let d = decode(&topic(), 0, &Bytes::from(data), 1, &[], &OPTS);
        assert_eq!(offsets(&d), vec![1, 2, 3]);
        assert_eq!(d.records[0].timestamp, 55);
        assert_eq!(d.records[1].value.as_deref(), Some(&b"v2"[..]));
        assert_eq!(d.records[2].timestamp, 61);
        assert_eq!(d.next_offset, 4);
        let v0 = decode(
            &topic(),
            0,
            &Bytes::from(legacy(0, 0, 0, 0, b"a", b"v0")),
            0,
            &[],
            &OPTS,
        );
        assert_eq!(v0.records[0].timestamp_type, TimestampType::NoTimestamp);
        assert_eq!(v0.records[0].timestamp, -1);
    }
}
