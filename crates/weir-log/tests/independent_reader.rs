//! The Done-when check of the storage engine, through tools that are not ours: a partition
//! written by PartitionLog (many segments, every codec, timestamps that go back and forth),
//! and the same partition after a crash with a torn tail and a lost index, read by
//! kafka-python's parser (tests/interop/check_partition.py): contiguous offsets across
//! segments, offset-index entries that point at the batches holding their offsets, and
//! monotonic time indexes.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use common::*;
use weir_kafka::TopicPartition;
use weir_log::{AppendOrigin, LoadParams, LogConfig, PartitionLog};
use weir_record::Compression;

fn check(pdir: &Path) -> Option<serde_json::Value> {
    let py = python()?;
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/check_partition.py");
    let out = Command::new(py).arg(script).arg(pdir).output().unwrap();
    assert!(
        out.status.success(),
        "check_partition.py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn kafka_python_agrees_with_what_the_engine_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("indep-0");
    let config = std::sync::Arc::new(LogConfig {
        segment_bytes: 16 * 1024,
        index_interval_bytes: 1024,
        retention_ms: -1,
        ..LogConfig::default()
    });
    let mut log = PartitionLog::create(
        &pdir,
        TopicPartition::new("indep", 0),
        uuid::Uuid::new_v4(),
        config.clone(),
        NOW,
    )
    .unwrap();
    let mut rng = fastrand::Rng::with_seed(3);
    for i in 0..600 {
        let ts = NOW + rng.i64(-5_000..60_000) + i * 100;
        log.append_as_leader(
            simple_batch(
                Compression::ALL[i as usize % 5],
                rng.usize(1..20),
                &format!("b{i}"),
                ts,
            ),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    }
    let records = read_all(&log);
    assert!(log.num_segments() > 5, "{} segments", log.num_segments());
    log.close(NOW).unwrap();
    drop(log);
    let Some(summary) = check(&pdir) else { return };
    assert_eq!(summary["records"].as_u64().unwrap() as usize, records.len());
    assert!(summary["index_entries"].as_u64().unwrap() > 50, "{summary}");
    assert!(
        summary["timeindex_entries"].as_u64().unwrap() > 10,
        "{summary}"
    );
    assert_eq!(kafka_python_records(&pdir).unwrap(), records);

    // A crash: a torn tail, a lost index; recovery; more appends; the check again.
    let params = LoadParams {
        recovery_point: None,
        log_start_offset: None,
        had_clean_shutdown: true,
        now_ms: NOW,
    };
    let (log, _) = PartitionLog::open(
        &pdir,
        TopicPartition::new("indep", 0),
        config.clone(),
        params,
    )
    .unwrap();
    let active = *log.segment_bases().last().unwrap();
    drop(log);
    let seg = pdir.join(format!("{active:020}.log"));
    let torn = simple_batch(Compression::Zstd, 9, "torn", NOW);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&seg)
        .unwrap()
        .write_all(&torn[..torn.len() - 7])
        .unwrap();
    std::fs::remove_file(pdir.join(format!("{active:020}.index"))).unwrap();
    let params = LoadParams {
        recovery_point: Some(0),
        log_start_offset: None,
        had_clean_shutdown: false,
        now_ms: NOW,
    };
    let (mut log, report) =
        PartitionLog::open(&pdir, TopicPartition::new("indep", 0), config, params).unwrap();
    assert!(report.truncated_bytes > 0);
    assert_eq!(read_all(&log), records);
    for i in 0..50 {
        log.append_as_leader(
            simple_batch(Compression::Gzip, 5, &format!("after{i}"), NOW + i),
            0,
            NOW,
            AppendOrigin::Client,
        )
        .unwrap();
    }
    log.close(NOW).unwrap();
    drop(log);
    let summary = check(&pdir).unwrap();
    assert_eq!(
        summary["records"].as_u64().unwrap() as usize,
        records.len() + 250
    );
}
