//! `weir dump-log` as a user runs it: the real binary over segment files written by
//! kafka-python (an implementation that is not ours), damaged copies of them, and indexes.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use serde_json::{json, Value};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../weir-record/tests/fixtures/kafka-python")
        .join(rel)
}

fn dump(args: &[&str], file: &Path) -> (Vec<Value>, bool) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("dump-log")
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (lines, out.status.success())
}

/// The fixtures' `{"hex": ..}` form, in dump-log's form (string, or `{"base64": ..}`).
fn from_hex(v: &Value) -> Value {
    let Some(h) = v.get("hex").and_then(Value::as_str) else {
        return Value::Null;
    };
    let bytes: Vec<u8> = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect();
    match String::from_utf8(bytes.clone()) {
        Ok(s) => Value::String(s),
        Err(_) => json!({"base64": base64::engine::general_purpose::STANDARD.encode(bytes)}),
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weir-dump-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn prints_every_record_of_a_mixed_v0_v1_v2_segment_exactly() {
    let seg = fixture("mixed-segment/00000000000000000000.log");
    let (lines, ok) = dump(&["--records"], &seg);
    assert!(ok);
    let expected: Vec<Value> = std::fs::read_to_string(fixture("mixed-segment/expected.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let headers: Vec<Value> = v["headers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| json!([h[0].clone(), from_hex(&h[1])]))
                .collect();
            json!({"kind": "record", "offset": v["offset"], "timestamp": v["timestamp"],
                   "key": from_hex(&v["key"]), "value": from_hex(&v["value"]), "headers": headers})
        })
        .collect();
    let records: Vec<Value> = lines
        .iter()
        .filter(|l| l["kind"] == "record")
        .cloned()
        .collect();
    assert_eq!(records, expected);
    let batches: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "batch").collect();
    let mut seen = std::collections::BTreeSet::new();
    for b in &batches {
        assert_eq!(b["crc_valid"], true);
        seen.insert((
            b["magic"].as_i64().unwrap(),
            b["compression"].as_str().unwrap().to_string(),
        ));
    }
    for magic in 0..=2 {
        for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
            if magic < 2 && codec == "zstd" {
                continue;
            }
            assert!(
                seen.contains(&(magic, codec.to_string())),
                "magic {magic} {codec} missing"
            );
        }
    }
    // Offsets are contiguous from 0 and every batch line agrees with its records.
    let offsets: Vec<i64> = records
        .iter()
        .map(|r| r["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>());
}

#[test]
fn a_flipped_byte_under_any_crc_is_reported_and_reading_goes_on() {
    let seg = std::fs::read(fixture("mixed-segment/00000000000000000000.log")).unwrap();
    // (start of the CRC-covered bytes, end) for each entry.
    let mut ranges = Vec::new();
    let mut pos = 0;
    while pos < seg.len() {
        let len = i32::from_be_bytes(seg[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let from = if seg[pos + 16] == 2 { 21 } else { 16 };
        ranges.push((pos + from, pos + 12 + len));
        pos += 12 + len;
    }
    let longest = ranges.iter().map(|(a, b)| b - a).max().unwrap();
    let dir = temp_dir("flip");
    let file = dir.join("00000000000000000000.log");
    // Run k flips byte k of every entry's CRC range (where it has one), so each byte of
    // each entry is flipped in some run.
    for k in 0..longest {
        let mut damaged = seg.clone();
        let flipped: Vec<bool> = ranges
            .iter()
            .map(|&(a, b)| {
                if a + k < b {
                    damaged[a + k] ^= 0x5a;
                    true
                } else {
                    false
                }
            })
            .collect();
        std::fs::write(&file, &damaged).unwrap();
        let (lines, ok) = dump(&["--records"], &file);
        assert!(ok, "k={k}");
        let batches: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "batch").collect();
        assert_eq!(
            batches.len(),
            ranges.len(),
            "k={k}: every entry still shown"
        );
        for (b, &f) in batches.iter().zip(&flipped) {
            assert_eq!(b["crc_valid"], !f, "k={k}: {b}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_torn_tail_is_reported_at_every_cut() {
    let seg = std::fs::read(fixture("mixed-segment/00000000000000000000.log")).unwrap();
    let dir = temp_dir("torn");
    let file = dir.join("00000000000000000000.log");
    let mut boundaries = std::collections::BTreeSet::new();
    let mut pos = 0;
    while pos < seg.len() {
        boundaries.insert(pos);
        pos += 12 + i32::from_be_bytes(seg[pos + 8..pos + 12].try_into().unwrap()) as usize;
    }
    for cut in (0..seg.len()).step_by(7) {
        std::fs::write(&file, &seg[..cut]).unwrap();
        let (lines, ok) = dump(&[], &file);
        assert!(ok);
        let torn = lines.iter().filter(|l| l["kind"] == "torn_tail").count();
        if boundaries.contains(&cut) {
            assert_eq!(torn, 0, "cut at a boundary {cut}");
        } else {
            assert_eq!(torn, 1, "cut at {cut}");
            let last = lines.last().unwrap();
            assert_eq!(last["kind"], "torn_tail");
            let at = *boundaries.range(..cut).next_back().unwrap();
            assert_eq!(last["position"], at as u64);
            assert_eq!(last["bytes"], (cut - at) as u64);
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn index_files_show_absolute_offsets_and_skip_the_preallocated_tail() {
    let dir = temp_dir("index");
    let mut index = Vec::new();
    for (rel, pos) in [(3i32, 4100i32), (9, 8300)] {
        index.extend_from_slice(&rel.to_be_bytes());
        index.extend_from_slice(&pos.to_be_bytes());
    }
    index.resize(80, 0);
    let mut time = Vec::new();
    for (ts, rel) in [(1_700_000_000_100i64, 3i32), (1_700_000_000_900, 9)] {
        time.extend_from_slice(&ts.to_be_bytes());
        time.extend_from_slice(&rel.to_be_bytes());
    }
    time.resize(120, 0);
    let idx = dir.join("00000000000000001000.index");
    let tix = dir.join("00000000000000001000.timeindex");
    std::fs::write(&idx, &index).unwrap();
    std::fs::write(&tix, &time).unwrap();
    let (lines, ok) = dump(&[], &idx);
    assert!(ok);
    assert_eq!(
        lines,
        vec![
            json!({"kind": "index", "offset": 1003, "position": 4100}),
            json!({"kind": "index", "offset": 1009, "position": 8300}),
        ]
    );
    let (lines, ok) = dump(&[], &tix);
    assert!(ok);
    assert_eq!(
        lines,
        vec![
            json!({"kind": "timeindex", "timestamp": 1_700_000_000_100i64, "offset": 1003}),
            json!({"kind": "timeindex", "timestamp": 1_700_000_000_900i64, "offset": 1009}),
        ]
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_txnindex_shows_each_aborted_transaction_and_a_torn_tail() {
    let dir = temp_dir("txnindex");
    // Kafka's layout, written by hand: i16 version 0, then producer id, first offset,
    // last offset (the ABORT marker) and last stable offset, i64 each, big-endian.
    let mut bytes = Vec::new();
    for (pid, first, last, lso) in [(7i64, 1000i64, 1010i64, 1005i64), (9, 1005, 1020, 1021)] {
        bytes.extend_from_slice(&0i16.to_be_bytes());
        for v in [pid, first, last, lso] {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
    }
    bytes.extend_from_slice(&[0, 0, 1, 2, 3]);
    let path = dir.join("00000000000000001000.txnindex");
    std::fs::write(&path, &bytes).unwrap();
    let (lines, ok) = dump(&[], &path);
    assert!(ok);
    assert_eq!(
        lines,
        vec![
            json!({"kind": "aborted_txn", "producer_id": 7, "first_offset": 1000, "last_offset": 1010, "last_stable_offset": 1005}),
            json!({"kind": "aborted_txn", "producer_id": 9, "first_offset": 1005, "last_offset": 1020, "last_stable_offset": 1021}),
            json!({"kind": "corrupt", "position": 68, "bytes": 5, "error": "file length is not a multiple of the 34-byte entry size"}),
        ]
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn an_unreadable_file_fails_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["dump-log", "/nonexistent/00000000000000000000.log"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/00000000000000000000.log"));
}

#[test]
fn reads_every_file_the_storage_engine_writes() {
    use weir_kafka::TopicPartition;
    use weir_log::{AppendOrigin, LogConfig, LogManager, LogManagerConfig};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = LogManagerConfig::new(dir.path());
    cfg.default_config = std::sync::Arc::new(LogConfig {
        segment_bytes: 8192,
        index_interval_bytes: 512,
        ..LogConfig::default()
    });
    let (m, _) = LogManager::open(cfg, &Default::default()).unwrap();
    let tp = TopicPartition::new("dumped", 3);
    let mut appended = 0;
    {
        let log = m
            .get_or_create_log(&tp, uuid::Uuid::new_v4(), m.default_config().clone())
            .unwrap();
        let mut log = log.lock().unwrap();
        for i in 0..120 {
            let mut b =
                weir_record::BatchBuilder::new(weir_record::Compression::ALL[i % 5], 0, usize::MAX);
            for j in 0..4 {
                b.append(
                    1_700_000_000_000 + (i * 4 + j) as i64,
                    Some(b"k"),
                    Some(format!("v{i}-{j}").as_bytes()),
                    &[],
                )
                .unwrap();
            }
            log.append_as_leader(
                b.build().unwrap().bytes,
                0,
                1_700_000_000_000,
                AppendOrigin::Client,
            )
            .unwrap();
            appended += 4;
        }
    }
    m.shutdown().unwrap();
    drop(m);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.extend(
        std::fs::read_dir(dir.path().join("dumped-3"))
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    files.retain(|p| p.is_file() && !p.ends_with(".lock") && !p.ends_with(".kafka_cleanshutdown"));
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    let mut records = 0;
    for f in &files {
        let (lines, ok) = dump(&["--records"], f);
        assert!(ok, "{}", f.display());
        for l in &lines {
            let kind = l["kind"].as_str().unwrap().to_string();
            assert!(
                !["torn_tail", "corrupt", "error"].contains(&kind.as_str()),
                "{}: {l}",
                f.display()
            );
            if kind == "batch" {
                assert_eq!(l["crc_valid"], true);
            }
            if kind == "record" {
                records += 1;
            }
            *kinds.entry(kind).or_default() += 1;
        }
    }
    assert_eq!(records, appended);
    for k in [
        "batch",
        "record",
        "index",
        "timeindex",
        "checkpoint",
        "leader_epoch",
        "partition_metadata",
        "property",
    ] {
        assert!(kinds.contains_key(k), "no {k} line in {kinds:?}");
    }
}
