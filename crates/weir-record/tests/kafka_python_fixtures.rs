//! Weir against bytes made by an implementation that is not ours: kafka-python 3.0.12's
//! record builders (fixtures/kafka-python/make_fixtures.py). Every fixture must decode to
//! exactly the records that went in; uncompressed v2 batches must re-encode to the same
//! bytes; and batches Weir compresses must decode in kafka-python.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use weir_record::{
    BatchBuilder, Compression, ControlRecordType, Header, LogEntries, LogEntry, RecordBatch,
    TimestampType,
};

/// How far a batch may inflate in these tests.
const LIMIT: usize = 64 * 1024 * 1024;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kafka-python")
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn bytes_json(b: Option<&[u8]>) -> Value {
    match b {
        None => Value::Null,
        Some(b) => serde_json::json!({ "hex": to_hex(b) }),
    }
}

fn opt_bytes(v: &Value) -> Option<Vec<u8>> {
    v.get("hex").map(|h| hex(h.as_str().unwrap()))
}

/// Every record of every entry in `bytes`, as the fixtures' JSON shows records.
fn decode_all(bytes: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in LogEntries::new(bytes) {
        let (_, entry) = entry.expect("fixture entry parses");
        entry.validate_crc().expect("fixture CRC is valid");
        let records = entry.records(LIMIT).expect("records decode");
        for r in records.iter() {
            let r = r.expect("record decodes");
            let headers: Vec<Value> = r
                .headers
                .iter()
                .map(|h| {
                    serde_json::json!([std::str::from_utf8(h.key).unwrap(), bytes_json(h.value)])
                })
                .collect();
            out.push(serde_json::json!({
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": bytes_json(r.key),
                "value": bytes_json(r.value),
                "headers": headers,
            }));
        }
    }
    out
}

fn load_fixtures() -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures_dir().join("fixtures.json")).unwrap();
    serde_json::from_str::<Value>(&text)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn every_fixture_decodes_exactly() {
    let fixtures = load_fixtures();
    assert!(fixtures.len() >= 20, "expected the full fixture set");
    for case in &fixtures {
        let name = case["name"].as_str().unwrap();
        let bytes = std::fs::read(fixtures_dir().join(case["file"].as_str().unwrap())).unwrap();
        assert_eq!(
            &decode_all(&bytes),
            case["records"].as_array().unwrap(),
            "records of {name}"
        );

        // Batch headers.
        let entries: Vec<_> = LogEntries::new(&bytes).map(|e| e.unwrap()).collect();
        let want = case["batches"].as_array().unwrap();
        assert_eq!(entries.len(), want.len(), "entries of {name}");
        for ((pos, entry), want) in entries.iter().zip(want) {
            assert_eq!(*pos as u64, want["position"].as_u64().unwrap(), "{name}");
            assert_eq!(
                entry.size_in_bytes() as u64,
                want["size"].as_u64().unwrap(),
                "{name}"
            );
            assert_eq!(entry.magic() as i64, want["magic"].as_i64().unwrap());
            assert_eq!(
                entry.compression().unwrap().name(),
                want["codec"].as_str().unwrap(),
                "{name}"
            );
            assert_eq!(
                entry.last_offset(),
                want["last_offset"].as_i64().unwrap(),
                "{name}"
            );
            match entry {
                LogEntry::V2(b) => {
                    assert_eq!(b.base_offset(), want["base_offset"].as_i64().unwrap());
                    assert_eq!(b.records_count() as i64, want["count"].as_i64().unwrap());
                    assert_eq!(b.producer_id(), want["producer_id"].as_i64().unwrap());
                    assert_eq!(
                        b.producer_epoch() as i64,
                        want["producer_epoch"].as_i64().unwrap()
                    );
                    assert_eq!(
                        b.base_sequence() as i64,
                        want["base_sequence"].as_i64().unwrap()
                    );
                    assert_eq!(
                        b.is_transactional(),
                        want["transactional"].as_bool().unwrap()
                    );
                    assert_eq!(b.is_control(), want["control"].as_bool().unwrap());
                    assert_eq!(b.base_timestamp(), want["base_timestamp"].as_i64().unwrap());
                    assert_eq!(b.max_timestamp(), want["max_timestamp"].as_i64().unwrap());
                    assert_eq!(
                        b.partition_leader_epoch() as i64,
                        want["partition_leader_epoch"].as_i64().unwrap()
                    );
                    let tt = if want["timestamp_type"] == "log_append" {
                        TimestampType::LogAppendTime
                    } else {
                        TimestampType::CreateTime
                    };
                    assert_eq!(b.timestamp_type(), tt, "{name}");
                    assert_eq!(b.crc() as u64, want["crc"].as_u64().unwrap());
                }
                LogEntry::Legacy(m) => {
                    assert_eq!(m.crc() as u64, want["crc"].as_u64().unwrap());
                    assert_eq!(
                        m.timestamp(),
                        want["max_timestamp"].as_i64().unwrap(),
                        "{name}"
                    );
                    let recs = m.records(LIMIT).unwrap();
                    assert_eq!(recs.len() as i64, want["count"].as_i64().unwrap(), "{name}");
                    let first = recs.iter().next().unwrap().offset;
                    assert_eq!(first, want["base_offset"].as_i64().unwrap(), "{name}");
                }
            }
        }
    }
}

#[test]
fn control_batches_decode_as_markers() {
    for (file, kind, epoch) in [
        ("v2-control-commit.bin", ControlRecordType::Commit, 5),
        ("v2-control-abort.bin", ControlRecordType::Abort, 7),
    ] {
        let bytes = std::fs::read(fixtures_dir().join(file)).unwrap();
        let batch = RecordBatch::parse(&bytes).unwrap();
        assert!(batch.is_control());
        let records = batch.records(LIMIT).unwrap();
        let r = records.iter().next().unwrap().unwrap();
        let marker = weir_record::EndTransactionMarker::parse(r.key, r.value).unwrap();
        assert_eq!(marker.kind, kind);
        assert_eq!(marker.coordinator_epoch, epoch);
    }
}

/// Builds, with Weir's builder, a batch holding the fixture's records and header fields.
fn rebuild(case: &Value, codec: Compression) -> Vec<u8> {
    let batch = &case["batches"][0];
    let records = case["records"].as_array().unwrap();
    let control = batch["control"].as_bool().unwrap();
    let mut b = BatchBuilder::new(codec, batch["base_offset"].as_i64().unwrap(), usize::MAX)
        .producer(
            batch["producer_id"].as_i64().unwrap(),
            batch["producer_epoch"].as_i64().unwrap() as i16,
            batch["base_sequence"].as_i64().unwrap() as i32,
        )
        .transactional(batch["transactional"].as_bool().unwrap())
        .control(control)
        .partition_leader_epoch(batch["partition_leader_epoch"].as_i64().unwrap() as i32);
    for r in records {
        let key = opt_bytes(&r["key"]);
        let value = opt_bytes(&r["value"]);
        let ts = r["timestamp"].as_i64().unwrap();
        if control {
            let kind = ControlRecordType::parse_key(key.as_deref()).unwrap();
            b.append_control(ts, kind, value.as_deref()).unwrap();
            continue;
        }
        let hv: Vec<(String, Option<Vec<u8>>)> = r["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| (h[0].as_str().unwrap().to_string(), opt_bytes(&h[1])))
            .collect();
        let headers: Vec<Header> = hv
            .iter()
            .map(|(k, v)| Header::new(k, v.as_deref()))
            .collect();
        let offset = r["offset"].as_i64().unwrap();
        b.append_with_offset(offset, ts, key.as_deref(), value.as_deref(), &headers)
            .unwrap();
    }
    b.build().unwrap().bytes
}

#[test]
fn uncompressed_v2_reencodes_to_the_same_bytes() {
    let mut checked = 0;
    for case in load_fixtures() {
        let name = case["name"].as_str().unwrap();
        let tt = &case["batches"][0]["timestamp_type"];
        // LogAppendTime fixtures hide the original record timestamps; skip re-encoding them.
        if case["magic"] != 2 || case["codec"] != "none" || tt == "log_append" {
            continue;
        }
        let want = std::fs::read(fixtures_dir().join(case["file"].as_str().unwrap())).unwrap();
        let got = rebuild(&case, Compression::None);
        assert_eq!(to_hex(&got), to_hex(&want), "bytes of {name}");
        checked += 1;
    }
    assert!(checked >= 5, "checked {checked} uncompressed v2 fixtures");
}

/// The Python interpreter with kafka-python installed (made by scripts/install-test-deps.sh).
fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("WEIR_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    if venv.exists() {
        return Some(venv);
    }
    if std::env::var("WEIR_SKIP_PYTHON_INTEROP").is_ok() {
        return None;
    }
    panic!(
        "kafka-python is needed for this test: run ./scripts/install-test-deps.sh \
         (or set WEIR_PYTHON, or WEIR_SKIP_PYTHON_INTEROP=1 to skip)"
    );
}

#[test]
fn kafka_python_reads_what_weir_compresses() {
    let Some(py) = python() else { return };
    let dir = std::env::temp_dir().join(format!("weir-record-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let reader =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/kafka_python_log.py");
    // Write every (fixture, codec) batch Weir builds, then read them all in one
    // kafka-python run.
    let mut expected = std::collections::BTreeMap::new();
    let mut files = Vec::new();
    for case in load_fixtures() {
        if case["magic"] != 2 || case["batches"][0]["timestamp_type"] == "log_append" {
            continue;
        }
        for codec in Compression::ALL {
            let bytes = rebuild(&case, codec);
            let file = dir.join(format!("{}-{codec}.bin", case["name"].as_str().unwrap()));
            std::fs::write(&file, &bytes).unwrap();
            expected.insert(file.display().to_string(), (codec, case["records"].clone()));
            files.push(file);
        }
    }
    let out = Command::new(&py)
        .arg(&reader)
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    let mut current = String::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        match v["kind"].as_str().unwrap() {
            "file" => {
                current = v["path"].as_str().unwrap().to_string();
                got.entry(current.clone()).or_default();
            }
            "batch" => {
                let (codec, _) = &expected[&current];
                assert_eq!(v["crc_valid"], true, "{current}");
                assert_eq!(v["codec"], codec.name(), "{current}");
            }
            "record" => {
                let mut r = v.as_object().unwrap().clone();
                r.remove("kind");
                got.get_mut(&current).unwrap().push(Value::Object(r));
            }
            other => panic!("kafka-python reported {other} in {current}: {line}"),
        }
    }
    assert_eq!(got.len(), expected.len());
    for (file, (_, records)) in &expected {
        assert_eq!(&Value::Array(got[file].clone()), records, "{file}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn mixed_segment_decodes_every_record_in_order() {
    let dir = fixtures_dir().join("mixed-segment");
    let bytes = std::fs::read(dir.join("00000000000000000000.log")).unwrap();
    let want: Vec<Value> = std::fs::read_to_string(dir.join("expected.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(decode_all(&bytes), want);
    let magics: std::collections::BTreeSet<i8> = LogEntries::new(&bytes)
        .map(|e| e.unwrap().1.magic())
        .collect();
    assert_eq!(magics.into_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
}

#[test]
fn legacy_sets_convert_to_v2_with_the_same_records() {
    for case in load_fixtures() {
        if case["magic"] == 2 {
            continue;
        }
        let bytes = std::fs::read(fixtures_dir().join(case["file"].as_str().unwrap())).unwrap();
        for codec in [Compression::None, Compression::Zstd] {
            let v2 = weir_record::legacy::convert_to_v2(&bytes, codec, LIMIT).unwrap();
            let batch = RecordBatch::parse(&v2).unwrap();
            batch.validate_crc().unwrap();
            assert_eq!(batch.as_bytes().len(), v2.len());
            assert_eq!(
                &decode_all(&v2),
                case["records"].as_array().unwrap(),
                "{}",
                case["name"]
            );
        }
    }
}
