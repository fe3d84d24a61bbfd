//! Helpers shared by weir-log's integration tests: producer-style batches, reading a
//! whole log back, and small configurations that make segments roll often.
#![allow(dead_code)]

use std::sync::Arc;

use weir_kafka::limits::MAX_DECOMPRESSED_BATCH_BYTES;
use weir_log::{LogConfig, PartitionLog};
use weir_record::{BatchBuilder, Compression, LogEntries};

/// A record as the tests see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// (timestamp, key, value) of a record to append.
pub type RecIn<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>);

/// A batch as a producer sends it (base offset 0).
pub fn batch(codec: Compression, records: &[RecIn<'_>]) -> Vec<u8> {
    let mut b = BatchBuilder::new(codec, 0, usize::MAX);
    for (ts, k, v) in records {
        b.append(*ts, *k, *v, &[]).unwrap();
    }
    b.build().unwrap().bytes
}

/// `n` records with values `prefix-i`, keys `k{i % keys}`, timestamps `ts0 + i`.
pub fn simple_batch(codec: Compression, n: usize, prefix: &str, ts0: i64) -> Vec<u8> {
    let vals: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
        .map(|i| {
            (
                format!("k{i}").into_bytes(),
                format!("{prefix}-{i}").into_bytes(),
            )
        })
        .collect();
    let recs: Vec<RecIn<'_>> = vals
        .iter()
        .enumerate()
        .map(|(i, (k, v))| (ts0 + i as i64, Some(k.as_slice()), Some(v.as_slice())))
        .collect();
    batch(codec, &recs)
}

/// Every record in `bytes` (whole entries only).
pub fn decode(bytes: &[u8]) -> Vec<Rec> {
    let mut out = Vec::new();
    for item in LogEntries::new(bytes) {
        let Ok((_, entry)) = item else { break };
        assert!(entry.is_crc_valid(), "a stored batch has a bad CRC");
        let records = entry.records(MAX_DECOMPRESSED_BATCH_BYTES).unwrap();
        for r in records.iter() {
            let r = r.unwrap();
            out.push(Rec {
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key.map(|k| k.to_vec()),
                value: r.value.map(|v| v.to_vec()),
            });
        }
    }
    out
}

/// The offset after the last whole entry in `bytes` (what a consumer moves past, even
/// when compaction left the entries empty).
pub fn next_offset_after(bytes: &[u8]) -> Option<i64> {
    LogEntries::new(bytes)
        .map_while(|e| e.ok())
        .last()
        .map(|(_, e)| e.last_offset() + 1)
}

/// Reads the whole log through `read`, as a consumer would: skipping records before the
/// requested offset in the first batch, and moving past empty batches.
pub fn read_all(log: &PartitionLog) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let data = log.read(offset, 64 * 1024, i64::MAX, true).unwrap();
        let Some(slice) = data.slice else { break };
        let bytes = slice.read_to_vec().unwrap();
        let recs: Vec<Rec> = decode(&bytes)
            .into_iter()
            .filter(|r| r.offset >= offset)
            .collect();
        let next = recs
            .last()
            .map(|r| r.offset + 1)
            .into_iter()
            .chain(next_offset_after(&bytes))
            .max();
        match next {
            Some(n) if n > offset => offset = n,
            _ => panic!(
                "a read at {offset} below the log end {} made no progress",
                log.log_end_offset()
            ),
        }
        out.extend(recs);
    }
    out
}

/// A configuration that rolls often and indexes densely.
pub fn small_config() -> Arc<LogConfig> {
    Arc::new(LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 256,
        segment_index_bytes: 1024,
        retention_ms: -1,
        file_delete_delay_ms: 0,
        ..LogConfig::default()
    })
}

pub const NOW: i64 = 1_700_000_000_000;

/// The Python interpreter with kafka-python (scripts/install-test-deps.sh makes it).
pub fn python() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("WEIR_PYTHON") {
        return Some(p.into());
    }
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    if venv.exists() {
        return Some(venv);
    }
    if std::env::var("WEIR_SKIP_PYTHON_INTEROP").is_ok() {
        return None;
    }
    panic!("kafka-python is needed: run ./scripts/install-test-deps.sh (or set WEIR_PYTHON)");
}

/// Records of the partition's `.log` files as kafka-python reads them (in file order),
/// failing the test if kafka-python finds a bad CRC or a torn entry.
pub fn kafka_python_records(pdir: &std::path::Path) -> Option<Vec<Rec>> {
    let py = python()?;
    let reader = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/interop/kafka_python_log.py");
    let mut logs: Vec<std::path::PathBuf> = std::fs::read_dir(pdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let out = std::process::Command::new(py)
        .arg(reader)
        .args(&logs)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hex = |v: &serde_json::Value| -> Option<Vec<u8>> {
        let h = v.get("hex")?.as_str()?;
        Some(
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
                .collect(),
        )
    };
    let mut recs = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        match v["kind"].as_str().unwrap() {
            "batch" => assert_eq!(v["crc_valid"], true, "{line}"),
            "record" => recs.push(Rec {
                offset: v["offset"].as_i64().unwrap(),
                timestamp: v["timestamp"].as_i64().unwrap(),
                key: hex(&v["key"]),
                value: hex(&v["value"]),
            }),
            "file" => {}
            other => panic!("kafka-python reported {other}: {line}"),
        }
    }
    Some(recs)
}
